"""Shared GPUs (spec 7.1-7.5): node accounting with reservation pods, KAI's choice of GPU in the
greedy engine, the CP-SAT concern, decisions and simulation, MIG node types, FGD's
fragmentation measure.

Why: most inference work asks for part of a GPU; a scheduler that counts a shared GPU twice
strands whole GPUs, and one that packs fractions badly strands the rest.
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from kai_cp.cycle import CycleSettings, run_cycle
from kai_cp.fragmentation import FragIndex, Mix, Devices, fragmentation, kai_slot_deltas
from kai_cp.loader import load_snapshot_dict
from kai_cp.simulate import simulate
from kai_cp.validate import violations
from snapshot_builder import bind_request, node, pod, podgroup, snapshot, solve_doc, state_of

M = 40000   # MiB per GPU of snapshot_builder's GPU nodes
FRACTION = "gpu-fraction"


def frac(name: str, group: str, f: str = "0.5", **kw) -> dict:
    ann = {FRACTION: f, **kw.pop("annotations", {})}
    return pod(name, group, annotations=ann, **kw)


def reservation(name: str, node_name: str, gpu_group: str) -> dict:
    p = pod(name, None, cpu=None, memory=None, gpu=1, namespace="kai-resource-reservation", phase="Running",
            node=node_name, labels={"app": "kai-resource-reservation", "runai-gpu-group": gpu_group},
            scheduler="default-scheduler")
    return p


def running_frac(name: str, group: str, node_name: str, gpu_group: str, f: str = "0.5") -> dict:
    return frac(name, group, f, phase="Running", node=node_name, labels={"runai-gpu-group": gpu_group})


def both_engines(doc: dict) -> dict[str, dict]:
    return {e: solve_doc(doc, engine=e) for e in ("greedy", "cp-sat")}


# ----------------------------------------------------------------------------- node accounting


def test_reservation_pod_does_not_count_its_gpu_twice():
    """A shared GPU with its reservation pod leaves the whole-GPU pool once (7.3): 3 of 4 GPUs
    stay idle, so a 3-GPU pod fits (kai-cp used to see 2)."""
    doc = snapshot([node("n", gpu=4)], podgroups=[podgroup("s"), podgroup("w")],
                   pods=[running_frac("s-0", "s", "n", "g1"), reservation("r1", "n", "g1"),
                         pod("w-0", "w", gpu=3)])
    st = state_of(doc)
    assert st.table.idle[0, 2] == 3
    assert st.nodes[0].gpu_groups["g1"].allocated == M // 2
    for engine, out in both_engines(doc).items():
        assert [b["pod"] for b in out["binds"]] == ["default/w-0"], engine


def test_releasing_shared_gpu_counts_as_one_releasing_gpu():
    doc = snapshot([node("n", gpu=2)], podgroups=[podgroup("s")],
                   pods=[frac("a", "s", phase="Running", node="n", labels={"runai-gpu-group": "g"}, deleting=True),
                         frac("b", "s", phase="Running", node="n", labels={"runai-gpu-group": "g"}, deleting=True)])
    st = state_of(doc)
    assert st.table.idle[0, 2] == 1 and st.table.releasing[0, 2] == 1


def test_bind_request_groups_count_for_a_binding_pod():
    br = bind_request("s-0", "n")
    br["spec"]["selectedGPUGroups"] = ["g7"]
    doc = snapshot([node("n", gpu=2)], podgroups=[podgroup("s")], pods=[frac("s-0", "s", f="0.75")],
                   bind_requests=[br])
    st = state_of(doc)
    assert st.nodes[0].gpu_groups["g7"].used == 30000
    assert st.table.idle[0, 2] == 1


@pytest.mark.parametrize("annotations, needle", [
    ({FRACTION: "1.5"}, "strictly between 0 and 1"),
    ({FRACTION: "0.5", "gpu-memory": "100"}, "cannot be combined"),
    ({"gpu-fraction-num-devices": "2"}, "num-devices"),
])
def test_invalid_request_leaves_the_job_pending_with_reason_and_warning(annotations, needle):
    doc = snapshot([node("n", gpu=2)], podgroups=[podgroup("bad"), podgroup("ok")],
                   pods=[pod("bad-0", "bad", annotations=annotations), frac("ok-0", "ok")])
    for engine, out in both_engines(doc).items():
        assert [b["pod"] for b in out["binds"]] == ["default/ok-0"], engine
        reasons = {u["podGroup"]: " ".join(u["reasons"]) for u in out["unschedulable"]}
        assert needle in reasons["bad"]
        assert any(needle in w["reason"] for w in out["warnings"])


# ----------------------------------------------------------------------------- KAI's GPU choice


def test_gpupack_joins_the_fullest_shared_gpu_that_fits():
    doc = snapshot([node("n", gpu=4)], podgroups=[podgroup("a"), podgroup("b"), podgroup("p")],
                   pods=[running_frac("a-0", "a", "n", "ga", f="0.25"), running_frac("b-0", "b", "n", "gb", f="0.5"),
                         frac("p-0", "p", f="0.5")])
    for engine, out in both_engines(doc).items():
        (b,) = out["binds"]
        assert b["gpuGroups"] == ["gb"] and b["gpuFraction"] == 0.5, engine


def test_gpuspread_opens_a_fresh_gpu_first():
    cfg = {"actions": "allocate", "tiers": [{"plugins": [{"name": "predicates"}, {"name": "proportion"},
                                                         {"name": "gpuspread"},
                                                         {"name": "nodeplacement", "arguments": {"gpu": "spread"}}]}]}
    doc = snapshot([node("n", gpu=4)], podgroups=[podgroup("b"), podgroup("p")], config=cfg,
                   pods=[running_frac("b-0", "b", "n", "gb", f="0.5"), frac("p-0", "p", f="0.25")])
    for engine, out in both_engines(doc).items():
        (b,) = out["binds"]
        assert b["gpuGroups"] != ["gb"] and len(b["gpuGroups"]) == 1, engine


def test_full_shared_gpu_is_not_joined_and_a_new_one_counts_whole():
    """Two 0.5 pods fill g; a third opens a new GPU, which then is not free for a whole-GPU pod."""
    doc = snapshot([node("n", gpu=2)], podgroups=[podgroup("a"), podgroup("p"), podgroup("w")],
                   pods=[running_frac("a-0", "a", "n", "g"), running_frac("a-1", "a", "n", "g"),
                         frac("p-0", "p", f="0.5"), pod("w-0", "w", gpu=1)])
    for engine, out in both_engines(doc).items():
        binds = {b["pod"]: b for b in out["binds"]}
        assert len(binds) == 1, engine          # one GPU left: either the fraction or the whole pod
        for b in binds.values():
            assert b["gpuGroups"] != ["g"]


def test_multi_device_fraction_gets_distinct_gpus():
    doc = snapshot([node("n", gpu=4)], podgroups=[podgroup("m")],
                   pods=[frac("m-0", "m", f="0.5", annotations={"gpu-fraction-num-devices": "3"})])
    for engine, out in both_engines(doc).items():
        (b,) = out["binds"]
        assert len(set(b["gpuGroups"])) == 3, engine


def test_gpu_memory_needs_the_memory_label():
    unlabelled = node("u", gpu=2)
    del unlabelled["metadata"]["labels"]["nvidia.com/gpu.memory"]
    doc = snapshot([unlabelled, node("l", gpu=2)], podgroups=[podgroup("m")],
                   pods=[pod("m-0", "m", annotations={"gpu-memory": "10000"})])
    for engine, out in both_engines(doc).items():
        assert [b["node"] for b in out["binds"]] == ["l"], engine
        assert out["binds"][0]["gpuFraction"] == 0.25


def test_gpu_memory_larger_than_a_device_fits_nowhere():
    doc = snapshot([node("n", gpu=2)], podgroups=[podgroup("m")],
                   pods=[pod("m-0", "m", annotations={"gpu-memory": str(M + 100)})])
    for engine, out in both_engines(doc).items():
        assert out["binds"] == [], engine


def test_fractional_gang_is_all_or_nothing():
    doc = snapshot([node("n", gpu=1)], podgroups=[podgroup("g", min_member=3)],
                   pods=[frac(f"g-{i}", "g", f="0.4") for i in range(3)])
    for engine, out in both_engines(doc).items():
        assert out["binds"] == [], engine       # 3 x 0.4 > one GPU


def test_queue_counts_fractions():
    from snapshot_builder import queue, resources
    doc = snapshot([node("n", gpu=4)], queues=[queue("q", gpu=resources(limit=1))],
                   podgroups=[podgroup(f"j{i}") for i in range(3)],
                   pods=[frac(f"j{i}-0", f"j{i}", f="0.5") for i in range(3)])
    for engine, out in both_engines(doc).items():
        assert len(out["binds"]) == 2, engine   # 0.5 + 0.5 reach the limit of 1 GPU


def test_gpu_memory_divisor_is_the_smallest_gpu_memory_of_the_gpu_nodes():
    """A pending GPU-memory pod counts memory / (the smallest per-GPU memory) GPUs, as KAI's
    ClusterInfo.MinNodeGPUMemory: 20,000 MiB on a cluster whose smallest GPU has 40,900 MiB
    (label 40960, floored to 100) is 20000/40900 GPUs, not the 200 GPUs a divisor of 100 gives.
    A GPU node without the label counts 100 (KAI's default GPU memory); CPU nodes do not count."""
    from fractions import Fraction
    pending = [pod("m-0", "m", annotations={"gpu-memory": "20000"})]
    big = node("big", gpu=8, labels={"nvidia.com/gpu.memory": "81559"})
    small = node("small", gpu=8, labels={"nvidia.com/gpu.memory": "40960"})
    st = state_of(snapshot([big, small, node("cpu", cpu="64")], podgroups=[podgroup("m")], pods=pending))
    assert st.gpu_memory_divisor == 40900
    assert st.queues["q"].request["gpu"] == Fraction(20000, 40900)
    bare = node("bare", gpu=8)
    del bare["metadata"]["labels"]["nvidia.com/gpu.memory"]
    st = state_of(snapshot([big, bare], podgroups=[podgroup("m")], pods=pending))
    assert st.gpu_memory_divisor == 100
    assert st.queues["q"].request["gpu"] == 200


def test_gpu_memory_head_job_keeps_its_queue_starved_by_the_cluster_divisor():
    """Queue order rule 2 (starved first) adds the head job's GPUs: queue `a` (quota 1 GPU) whose
    head job asks 20,000 MiB of a 40,000-MiB GPU asks half a GPU and stays starved, so it goes
    before the higher-priority queue `b` and takes the cluster's one GPU. Counting 200 GPUs
    (divisor 100) would put `a` behind `b` and leave it pending."""
    from snapshot_builder import queue, resources
    doc = snapshot([node("n", gpu=1)],
                   queues=[queue("a", gpu=resources(quota=1)), queue("b", gpu=resources(quota=0), priority=150)],
                   podgroups=[podgroup("m", queue="a"), podgroup("w", queue="b")],
                   pods=[pod("m-0", "m", annotations={"gpu-memory": "20000"}), pod("w-0", "w", gpu=1)])
    assert state_of(doc).gpu_memory_divisor == M
    out = solve_doc(doc, engine="greedy")
    assert [b["pod"] for b in out["binds"]] == ["default/m-0"]


def test_cpu_only_pod_goes_to_a_node_with_a_shared_gpu_when_gpus_are_packed():
    """KAI's gpusharingorder adds 1,000 to a node where the task fits on a shared GPU in use, and a
    task needing no GPU memory fits on any (5.4, quirk): a CPU-only pod goes to the shared-GPU
    node `a` although binpack prefers the fuller `b`. With GPUs spread the plugin is not there."""
    nodes = [node("a", cpu="16", gpu=4), node("b", cpu="16", gpu=4)]
    running = [running_frac("s-0", "s", "a", "g1"), reservation("r1", "a", "g1"),
               pod("w-0", "w", cpu="8", gpu=1, phase="Running", node="b")]
    doc = snapshot(nodes, podgroups=[podgroup("s"), podgroup("w"), podgroup("c")],
                   pods=running + [pod("c-0", "c", cpu="2", gpu=None)])
    out = solve_doc(doc, engine="greedy")
    assert [(b["pod"], b["node"]) for b in out["binds"]] == [("default/c-0", "a")]
    spread = copy.deepcopy(doc)
    spread["config"]["tiers"][0]["plugins"][-1]["arguments"]["gpu"] = "spread"
    out = solve_doc(spread, engine="greedy")
    assert [(b["pod"], b["node"]) for b in out["binds"]] == [("default/c-0", "b")]


# ----------------------------------------------------------------------------- MIG


def test_mig_fits_only_nodes_that_advertise_the_profile():
    mig = node("mig", gpu=0, extra={"nvidia.com/mig-1g.10gb": "2"},
               labels={"nvidia.com/mig.strategy": "mixed", "node-role.kubernetes.io/mig-enabled": "true"})
    plain = node("plain", gpu=2)
    ask = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "nvidia.com/mig-1g.10gb": "1"}}}
    other = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "nvidia.com/mig-2g.20gb": "1"}}}
    doc = snapshot([mig, plain], podgroups=[podgroup("a"), podgroup("b"), podgroup("w")],
                   pods=[pod("a-0", "a", containers=[ask]), pod("b-0", "b", containers=[other]),
                         pod("w-0", "w", gpu=1)])
    for engine, out in both_engines(doc).items():
        binds = {b["pod"]: b["node"] for b in out["binds"]}
        assert binds == {"default/a-0": "mig", "default/w-0": "plain"}, engine


# ----------------------------------------------------------------------------- decisions, simulate


def test_simulate_runs_the_pod_in_its_group_and_the_group_becomes_a_shared_device():
    doc = snapshot([node("n", gpu=1)], podgroups=[podgroup("a"), podgroup("b"), podgroup("c")],
                   pods=[frac("a-0", "a", f="0.5"), frac("b-0", "b", f="0.5", created=10),
                         frac("c-0", "c", f="0.5", created=20)])
    loaded = load_snapshot_dict(copy.deepcopy(doc))
    result, final = simulate(loaded, 2, CycleSettings(engine="greedy"))
    pods = {p["name"]: p for p in result["pods"]}
    assert pods["a-0"]["status"] == pods["b-0"]["status"] == "Running"
    assert pods["a-0"]["gpuGroups"] == pods["b-0"]["gpuGroups"] and len(pods["a-0"]["gpuGroups"]) == 1
    assert pods["c-0"]["status"] == "Pending"          # the one GPU is full
    from kai_cp.state import build_cluster_state
    st = build_cluster_state(load_snapshot_dict(final))
    (grp,) = st.nodes[0].gpu_groups.values()
    assert grp.allocated == M and st.table.idle[0, 2] == 0


def test_new_group_ids_are_deterministic_and_unique():
    doc = snapshot([node("n", gpu=4)], podgroups=[podgroup(f"j{i}") for i in range(4)],
                   pods=[frac(f"j{i}-0", f"j{i}", f="0.75") for i in range(4)])
    first = solve_doc(doc, "cp-sat")
    again = solve_doc(doc, "cp-sat")
    assert first["binds"] == again["binds"]
    groups = [g for b in first["binds"] for g in b["gpuGroups"]]
    assert len(groups) == 4 == len(set(groups))


# ----------------------------------------------------------------------------- cp-sat vs greedy


def test_cpsat_packs_fractions_where_greedy_strands_a_gpu():
    """KAI puts 0.5 on the fullest shared GPU it fits (0.5 used: full), then 0.5 more can't pair;
    the model pairs them so that a whole GPU stays free for the 1-GPU pod."""
    doc = snapshot([node("n", gpu=2)], podgroups=[podgroup("a"), podgroup("p"), podgroup("q"), podgroup("w")],
                   pods=[running_frac("a-0", "a", "n", "g", f="0.3"),
                         frac("p-0", "p", f="0.7", created=1), frac("q-0", "q", f="0.6", created=2),
                         frac("r-0", "q", f="0.4", created=3), pod("w-0", "w", gpu=1, created=4)])
    res = {e: run_cycle(state_of(doc), CycleSettings(engine=e)) for e in ("greedy", "cp-sat")}
    for e, r in res.items():
        assert violations(r.state, r.session) == [], e

    def gpus(r):
        return sum(float(p.task.request.gpu_quota) for p in r.session.placements.values())
    assert gpus(res["cp-sat"]) >= gpus(res["greedy"])


# ----------------------------------------------------------------------------- fragmentation


def _random_mix(rng: random.Random, nodes: int, kinds: int | None = None) -> Mix:
    k = kinds or rng.randint(1, 5)
    frac_ = np.array([rng.random() < 0.6 for _ in range(k)])
    milli = np.array([rng.choice([250, 300, 500, 700, 810]) if f else 1000 for f in frac_])
    count = np.array([1 if f else rng.choice([1, 2, 4, 8]) for f in frac_])
    w = np.array([rng.random() + 0.01 for _ in range(k)])
    return Mix(cpu=np.array([rng.choice([0, 2000, 8000]) for _ in range(k)]), memory=np.zeros(k, dtype=np.int64),
               milli=milli, count=count, fraction=frac_, weight=w / w.sum(),
               allowed=np.array([[rng.random() < 0.9 for _ in range(nodes)] for _ in range(k)]))


def _random_nodes(rng: random.Random, n: int, width: int, free: list[int], cpus: list[int]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Devices (milli-GPU free per slot, -1 where none), CPU and memory of n random nodes."""
    dev = np.full((n, width), -1, dtype=np.int64)
    for i in range(n):
        for s in range(rng.randint(1, width)):
            dev[i, s] = rng.choice(free)
    cpu = np.array([rng.choice(cpus) for _ in range(n)], dtype=np.int64)
    mem = np.array([rng.choice([10 ** 9, 10 ** 12]) for _ in range(n)], dtype=np.int64)
    return dev, cpu, mem


def per_device(idx: FragIndex, need: np.ndarray, cpu: int, memory: int) -> np.ndarray:
    """The rise for a fraction on each device slot of each node (inf where the slot cannot take it)."""
    n, width = idx.d.shape
    return np.stack([idx.fraction_at(need, cpu, memory, np.full(n, s)) for s in range(width)], axis=1)


def test_stranding_counts_gpus_left_without_cpu():
    """A node with 4 free GPUs and 32 cores, at 10 cores per GPU, can use 3.2 GPUs; a 12-core
    CPU-only pod there leaves 2 usable: 1.2 GPUs more stranded. A node with 100 cores: none."""
    mix = Mix(cpu=np.array([10_000]), memory=np.array([0]), milli=np.array([1000]), count=np.array([1]),
              fraction=np.array([False]), weight=np.array([1.0]), allowed=np.ones((1, 2), dtype=bool))
    dev = np.array([[1000] * 4, [1000] * 4])
    idx = FragIndex(mix, Devices(dev, np.array([32_000, 100_000]), np.array([10 ** 12] * 2), [[None] * 4] * 2))
    assert idx.stranding(0, 12_000).tolist() == pytest.approx([1200.0, 0.0])


def test_stranding_is_off_when_the_pods_ask_more_cpu_per_gpu_than_the_nodes_have():
    """Two nodes of 16 cores and 2 GPUs (8 cores per GPU). Pods asking 6 cores per GPU leave CPU to
    keep for idle GPUs: the stranding term counts the GPUs a 12-core CPU-only pod leaves without
    CPU. Running CPU-only pods that bring the ask to 8 cores per GPU or more leave none: the term
    is off. Pods holding under a quarter of the GPUs are too few to judge by."""
    from kai_cp.fragmentation import cpu_bound
    from kai_cp.model.frag_rows import frag_index

    def state(cpu_only_cores: int, gpus: int = 2):
        cores = str(8 * gpus)
        nodes = [node("a", cpu=cores, memory="64Gi", gpu=gpus), node("b", cpu=cores, memory="64Gi", gpu=gpus)]
        pods = [pod(f"g-{i}", f"g{i}", cpu="6", gpu=1) for i in range(2)]
        groups = [podgroup(f"g{i}") for i in range(2)]
        if cpu_only_cores:
            pods.append(pod("c-0", "c", cpu=str(cpu_only_cores), gpu=None, phase="Running", node="b"))
            groups.append(podgroup("c"))
        return state_of(snapshot(nodes, podgroups=groups, pods=pods))

    loose, tight = state(0), state(4)
    assert not cpu_bound(loose) and cpu_bound(tight)        # 12 / 2 = 6 and 16 / 2 = 8 cores per GPU
    assert cpu_bound(state(4, gpus=4))                      # 2 of 8 GPUs asked for: judged
    assert not cpu_bound(state(4, gpus=5))                  # 2 of 10: too few to judge
    for st, strands in ((loose, True), (tight, False)):
        free = np.asarray(st.table.free)
        idx = frag_index(st, free)
        assert idx.strand is strands
        stranded = idx.stranding(0, 12_000)
        if strands:
            assert stranded[0] > 0                           # 4 cores left for 2 idle GPUs at 6 per GPU
        else:
            assert stranded.tolist() == [0.0, 0.0]


def test_scarcity_keeps_flexible_pods_off_nodes_restricted_kinds_need():
    """Half the mix may only run on node 0's model: node 0 is under more pressure than node 1;
    with no restricted kind, no node is."""
    dev = np.array([[1000] * 2, [1000] * 2])
    devs = Devices(dev, np.array([10 ** 6] * 2), np.array([10 ** 12] * 2), [[None] * 2] * 2)

    def mix(allowed):
        return Mix(cpu=np.zeros(2, dtype=np.int64), memory=np.zeros(2, dtype=np.int64), milli=np.array([1000, 1000]),
                   count=np.array([1, 1]), fraction=np.array([False, False]), weight=np.array([0.5, 0.5]),
                   allowed=np.array(allowed, dtype=bool))
    s = FragIndex(mix([[True, True], [True, False]]), devs).scarcity()
    assert s[0] > 0 > s[1]
    assert FragIndex(mix([[True, True], [True, True]]), devs).scarcity().tolist() == pytest.approx([0.0, 0.0])


def test_kai_slot_deltas_read_the_device_kai_gives_the_pod():
    """The rise measured on one device per node only (the one KAI's GPU order picks: the fullest
    shared GPU the pod fits on with binpack, the emptiest with spread, the first on ties) equals
    the full per-device table read at that device, whatever other requests were measured on the
    same index before (its per-request parts are kept)."""
    rng = random.Random(11)
    for _ in range(30):
        n, width = rng.randint(1, 6), 6
        dev, cpu, mem = _random_nodes(rng, n, width, [0, 100, 190, 300, 500, 700, 1000, 1000], [0, 4000, 16000])
        mix = _random_mix(rng, n)
        mix.memory = np.array([rng.choice([0, 5 * 10 ** 8]) for _ in mix.memory], dtype=np.int64)
        idx = FragIndex(mix, Devices(dev, cpu, mem, [[None] * width for _ in range(n)]))
        for _ in range(4):
            need = np.array([rng.choice([100, 250, 500, 1000]) for _ in range(n)], dtype=np.int64)
            pod_cpu, pod_mem, spread = rng.choice([0, 1000, 8000]), rng.choice([0, 10 ** 9]), rng.random() < 0.5
            table = per_device(idx, need, pod_cpu, pod_mem)
            got = kai_slot_deltas(idx, need, pod_cpu, pod_mem, spread, key=tuple(need.tolist()))
            for i in range(n):
                ok = [s for s in range(width) if dev[i, s] >= need[i]]
                if not ok:
                    assert got[i] == np.inf
                    continue
                best = (max if spread else min)(dev[i, s] for s in ok)
                slot = next(s for s in ok if dev[i, s] == best)
                assert got[i] == table[i, slot]
                after = dev.copy()
                after[i, slot] -= need[i]
                assert got[i] == pytest.approx(fragmentation(idx.mix, after, cpu - pod_cpu, mem - pod_mem)[i]
                                               - idx.before[i] + idx.stranding(need, pod_cpu)[i]
                                               + need[i] * idx.scarcity()[i])
            k = rng.randint(1, 3)
            w = idx.whole(k, pod_cpu, pod_mem)
            for i in range(n):
                full = [s for s in range(width) if dev[i, s] == 1000]
                if len(full) >= k:
                    after = dev.copy()
                    after[i, full[:k]] = 0
                    assert w[i] == pytest.approx(fragmentation(idx.mix, after, cpu - pod_cpu, mem - pod_mem)[i]
                                                 - idx.before[i] + idx.stranding(1000 * k, pod_cpu)[i]
                                                 + 1000 * k * idx.scarcity()[i])


def test_fragmentation_closed_form_matches_the_definition():
    rng = random.Random(7)
    for _ in range(30):
        n = rng.randint(1, 6)
        width = 8
        dev = np.full((n, width), -1, dtype=np.int64)
        for i in range(n):
            for s in range(rng.randint(1, width)):
                dev[i, s] = rng.choice([0, 100, 190, 300, 500, 700, 1000, 1000])
        cpu = np.array([rng.choice([0, 4000, 16000]) for _ in range(n)], dtype=np.int64)
        mem = np.full(n, 10 ** 12, dtype=np.int64)
        mix = _random_mix(rng, n)
        idx = FragIndex(mix, Devices(dev, cpu, mem, [[None] * width for _ in range(n)]))
        assert np.allclose(idx.before, fragmentation(mix, dev, cpu, mem))
        # one fraction on each slot
        need = np.full(n, rng.choice([100, 250, 500]), dtype=np.int64)
        table = per_device(idx, need, 1000, 0)
        for i in range(n):
            for s in range(width):
                if dev[i, s] < need[i]:
                    assert table[i, s] == np.inf
                    continue
                after = dev.copy()
                after[i, s] -= need[i]
                expect = fragmentation(mix, after, cpu - 1000, mem)[i] - idx.before[i] + idx.stranding(need, 1000)[i] \
                    + need[i] * idx.scarcity()[i]
                assert table[i, s] == pytest.approx(expect)
        # whole GPUs
        k = rng.randint(1, 3)
        w = idx.whole(k, 2000, 0)
        for i in range(n):
            full = [s for s in range(width) if dev[i, s] == 1000]
            if len(full) < k:
                assert w[i] == np.inf
                continue
            after = dev.copy()
            after[i, full[:k]] = 0
            assert w[i] == pytest.approx(fragmentation(mix, after, cpu - 2000, mem)[i] - idx.before[i]
                                         + idx.stranding(1000 * k, 2000)[i] + 1000 * k * idx.scarcity()[i])


def test_equal_nodes_are_measured_once_bit_for_bit(monkeypatch):
    """Past SHARED_ROWS nodes the index measures each distinct node row once (devices,
    predicates, and how many kinds' CPU and memory still fit) and copies the figure to the
    others: every figure must be bit for bit the direct measure's, for whole GPUs, CPU-only pods,
    fractions on KAI's device and on every slot, and the cycle-start figures themselves."""
    import kai_cp.fragmentation as fragmentation
    rng = random.Random(11)
    for _ in range(6):
        width, kinds = 8, rng.choice([5, 17, 64])
        templates = _random_nodes(rng, rng.randint(3, 12), width, [0, 100, 190, 500, 1000, 1000], [0])[0]
        n = rng.randint(600, 900)
        dev = templates[[rng.randrange(len(templates)) for _ in range(n)]]
        cpu = np.array([rng.choice([0, 3000, 8000, 16000, 16001, 64000]) for _ in range(n)], dtype=np.int64)
        mem = np.array([rng.choice([10 ** 9, 3 * 10 ** 9, 10 ** 12]) for _ in range(n)], dtype=np.int64)
        mix = _random_mix(rng, n, kinds)
        mix.memory = np.array([rng.choice([0, 5 * 10 ** 8, 2 * 10 ** 9]) for _ in range(kinds)], dtype=np.int64)
        mix.allowed[:, n // 2:] = mix.allowed[:, :1]             # half the nodes alike
        slots = np.array([rng.randrange(width) for _ in range(n)])      # any device, node by node
        need = np.array([rng.choice([100, 250, 500]) for _ in range(n)], dtype=np.int64)
        requests = [(k, rng.choice([0, 1000, 8000]), rng.choice([0, 10 ** 9])) for k in (0, 1, 2, 4)]

        def figures(shared_rows: int) -> list[np.ndarray]:
            monkeypatch.setattr(fragmentation, "SHARED_ROWS", shared_rows)
            idx = FragIndex(mix, Devices(dev.copy(), cpu, mem, [[None] * width for _ in range(n)]))
            out = [idx.before] + [idx.whole(k, c, m) for k, c, m in requests]
            out.append(kai_slot_deltas(idx, need, 1000, 0, False))
            out.append(kai_slot_deltas(idx, need, 2000, 10 ** 9, True))
            out.append(idx.fraction_at(need, 1000, 10 ** 9, slots))
            return out + [per_device(idx, need, 4000, 0)]

        direct, shared = figures(10 ** 9), figures(0)
        assert len(direct) == len(shared)
        for a, b in zip(direct, shared):
            assert np.array_equal(a, b)


def test_groups_number_equal_values_and_rows_alike():
    from kai_cp.arrays import groups, row_groups
    rng = np.random.default_rng(3)
    for n in (0, 1, 50, 1000):
        key = rng.integers(0, 7, n)
        first, inverse = groups(key)
        assert np.array_equal(key[first][inverse], key)
        assert len(first) == len(set(key.tolist())) and np.all(np.diff(key[first]) > 0)
        rows = rng.integers(-1, 2, (n, 3))
        ids = row_groups(rows)
        pairs = {(tuple(r), int(i)) for r, i in zip(rows.tolist(), ids.tolist())}
        assert len({r for r, _ in pairs}) == len(pairs) == len({i for _, i in pairs})


def test_a_nodes_fragmentation_figures_do_not_depend_on_the_other_nodes():
    """The walk re-measures the nodes it changed in an index of their own (model/frag_rows.py),
    whole-GPU pods are measured only where they fit, and identical nodes must rank alike: so each
    node's figures must be bit for bit what the whole index gives it. (A matrix product's sum
    for a row depended on the row's position among the others.)"""
    rng = random.Random(5)
    for _ in range(20):
        n, width = rng.randint(9, 40), 8
        dev, cpu, mem = _random_nodes(rng, n, width, [0, 100, 190, 300, 500, 700, 1000, 1000, 1000],
                                      [0, 4000, 16000, 64000])
        dev[n - 1], cpu[n - 1], mem[n - 1] = dev[0], cpu[0], mem[0]          # a twin of node 0, last
        mix = _random_mix(rng, n, rng.choice([None, 17, 64]))          # (64: MAX_KINDS)
        mix.allowed[:, n - 1] = mix.allowed[:, 0]
        idx = FragIndex(mix, Devices(dev, cpu, mem, [[None] * width for _ in range(n)]))
        requests = [(k, rng.choice([0, 1000, 8000]), rng.choice([0, 10 ** 9])) for k in (0, 1, 2, 4)]
        need = np.full(n, rng.choice([100, 250, 500]), dtype=np.int64)
        rows = {k: idx.whole(k, c, m) for k, c, m in requests}
        frac = kai_slot_deltas(idx, need, 1000, 0, False)
        for i in range(n):
            one = Mix(mix.cpu, mix.memory, mix.milli, mix.count, mix.fraction, mix.weight, mix.allowed[:, [i]])
            alone = FragIndex(one, Devices(dev[[i]], cpu[[i]], mem[[i]], [[None] * width]))
            alone.__dict__["_scarcity"] = idx.scarcity()[[i]]
            assert alone.before[0] == idx.before[i]
            for k, c, m in requests:
                assert alone.whole(k, c, m)[0] == rows[k][i]
            assert kai_slot_deltas(alone, need[[i]], 1000, 0, False)[0] == frac[i]
        assert idx.before[0] == idx.before[n - 1]
        assert all(rows[k][0] == rows[k][n - 1] for k in rows)


def _shared_bound_one_node_at_a_time(request, ledger, free: np.ndarray) -> np.ndarray:
    """The bound read node by node, device by device (as shared_bound was written before it read
    all devices at once): a node whose GPUs cannot take the pod's memory (or, for a GPU-memory
    request, whose memory label is missing) holds none; others hold what their idle whole GPUs
    and each shared GPU's room take, a multi-device pod at most one per distinct device."""
    from kai_cp.gpu_sharing import task_memory_vector

    mem_of = task_memory_vector(request, ledger.capacity)
    out = []
    for n in range(len(ledger.capacity)):
        cap, mem, whole = int(ledger.capacity[n]), int(mem_of[n]), max(int(free[n, 2]), 0)
        if not 0 < mem <= cap or (request.kind == "GpuMemory" and not ledger.synced[n]):
            out.append(0)
            continue
        devices = ledger.groups(n).values()
        held = whole * (cap // mem) + sum(max(d.free(cap), 0) // mem for d in devices)
        if request.devices > 1:
            held = min(held // request.devices, whole + len(devices))
        out.append(held)
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_shared_bound_counts_every_device_as_one_node_at_a_time_did(seed: int) -> None:
    """The per-node bound of shared-GPU pods reads every node's shared devices at once (issue 9:
    a third of the lean model's candidate selection at 10,000 nodes went to the per-node loop):
    equal to the loop on random ledgers (joinable, full, entirely releasing and pipelined-only
    devices; memory labels missing), for fraction, GPU-memory and multi-device requests, before
    and after the ledger is written to."""
    from fractions import Fraction

    from kai_cp.gpu_sharing import Device, SharedLedger, shared_bound
    from kai_cp.resources import PodRequest

    rng = random.Random(seed)
    n = rng.randint(1, 40)
    capacity = np.array([rng.choice([0, 16_000, 40_000, 81_920]) for _ in range(n)], dtype=np.int64)
    base = []
    for i in range(n):
        groups = {}
        for g in range(rng.randint(0, 4) if capacity[i] else 0):
            allocated = rng.randint(0, int(capacity[i]))
            releasing = rng.choice([0, allocated, rng.randint(0, allocated)])
            used = rng.choice([0, allocated, allocated + rng.randint(0, 1000)])
            groups[f"g{i}-{g}"] = Device(used, allocated, releasing, rng.randint(0, 3))
        base.append(groups)
    best = np.array([max((d.free(int(capacity[i])) for d in base[i].values()), default=-1) for i in range(n)],
                    dtype=np.int64)
    ledger = SharedLedger(capacity, base, best, np.array([rng.random() < 0.8 for _ in range(n)]))
    free = np.array([[rng.randint(-2, 8) for _ in range(4)] for _ in range(n)], dtype=np.int64)
    requests = [PodRequest(kind="Fraction", gpu_portion=Fraction(rng.randint(1, 99), 100), devices=rng.choice([0, 1, 2, 3])),
                PodRequest(kind="GpuMemory", gpu_memory=rng.choice([1_000, 5_000, 20_000, 90_000]),
                           devices=rng.choice([0, 1, 2])),
                PodRequest(kind="Fraction", gpu_portion=Fraction(1, 2))]
    for request in requests:
        assert np.array_equal(shared_bound(request, ledger, free), _shared_bound_one_node_at_a_time(request, ledger, free))
    written = [i for i in range(n) if base[i]]
    if written:                 # a write (a placement this cycle) is read at once too
        i = rng.choice(written)
        ledger.apply(i, (next(iter(base[i])),), 500, False, 1)
        for request in requests:
            assert np.array_equal(shared_bound(request, ledger, free),
                                  _shared_bound_one_node_at_a_time(request, ledger, free))


def test_sessions_of_one_state_share_the_snapshots_devices_and_never_each_others_writes():
    """Every session's ledger reads the state's shared GPUs once (SharedLedger.of_state); a
    placement writes a copy of its node's devices, so a second session of the same state (the
    model's decoding after KAI's allocate) starts from the snapshot's devices, not the first
    session's."""
    from kai_cp.session import Session

    doc = snapshot([node("n", gpu=4)], podgroups=[podgroup("s"), podgroup("f")],
                   pods=[running_frac("s-0", "s", "n", "g1"), reservation("r1", "n", "g1"),
                         frac("f-0", "f", f="0.25")])
    st = state_of(doc)
    first, second = Session.open(st), Session.open(st)
    assert first.shared.base is second.shared.base
    before = (st.nodes[0].gpu_groups["g1"].allocated, int(second.shared.best[0]))
    task = st.jobs["f"].podsets["default"].tasks[0] if "default" in st.jobs["f"].podsets else \
        next(iter(st.jobs["f"].podsets.values())).tasks[0]
    first.place(task, 0, pipelined=False, gpu_groups=("g1",))
    assert first.shared.groups(0)["g1"].allocated == before[0] + M // 4
    assert second.shared.groups(0)["g1"].allocated == before[0] and int(second.shared.best[0]) == before[1]
    assert Session.open(st).shared.groups(0)["g1"].allocated == before[0]
    assert int(first.shared.best[0]) == before[1] - M // 4
