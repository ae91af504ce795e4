"""pod_request: KAI's ResReq of a pod (spec 1.4 "Resource request of a pod"), and what the
request means end to end (fits, best effort)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from kai_cp.mig import legacy_mig
from kai_cp.records import GPU_GROUP_LABEL, gpu_groups_of
from kai_cp.resources import (MAX_CAPACITY, MIG_PREFIX, _SHARING_KEYS, PodRequest, _sharing_annotations, node_capacity, pod_request,
                              some_key_contains)
from models import Pod
from snapshot_builder import container, node, pod, podgroup, snapshot, solve_doc

GI = 1024 ** 3
MI = 1024 ** 2


def req(**kw):
    d = pod("p", "pg", **kw)
    p = Pod.model_validate(d, by_alias=True, by_name=False)
    return pod_request(p.spec, p.metadata.annotations or {})


# ----------------------------------------------------------------------- base resources


def test_single_container_units():
    r = req(cpu="1500m", memory="2Gi")
    assert (r.cpu, r.memory, r.gpus, r.kind) == (1500, 2 * GI, 0, "Regular")


def test_containers_are_summed():
    r = req(containers=[container("a", cpu="1", memory="1Gi"), container("b", cpu="250m", memory="512Mi")])
    assert r.cpu == 1250
    assert r.memory == GI + 512 * MI


def test_init_containers_are_maxed_not_summed():
    r = req(containers=[container("a", cpu="1", memory="4Gi")],
            init_containers=[container("i1", cpu="3", memory="1Gi"), container("i2", cpu="2", memory="2Gi")])
    assert r.cpu == 3000          # max(1, 3, 2), not 1+3+2
    assert r.memory == 4 * GI     # the containers' sum wins over every init container


def test_init_container_max_is_elementwise_per_resource():
    r = req(containers=[container("a", cpu="1"), container("b", cpu="1")],
            init_containers=[container("i", cpu="1500m", memory="3Gi")])
    assert r.cpu == 2000 and r.memory == 3 * GI


def _sidecar(name: str, **requests: str) -> dict:
    return {**container(name, **requests), "restartPolicy": "Always"}


def test_a_sidecar_adds_to_the_containers_for_the_pods_lifetime():
    """Kubernetes' PodRequests (what the kubelet admits by): a sidecar runs beside the
    containers, so it is summed with them, where KAI's plain max counted only 2 of 3 cores."""
    r = req(containers=[container("a", cpu="2", memory="1Gi")], init_containers=[_sidecar("mesh", cpu="1", memory="1Gi")])
    assert (r.cpu, r.memory) == (3000, 2 * GI)


def test_an_init_container_after_a_sidecar_runs_beside_it():
    r = req(containers=[container("a", cpu="1")],
            init_containers=[_sidecar("s1", cpu="500m"), container("setup", cpu="4"), _sidecar("s2", cpu="250m")])
    assert r.cpu == 4500      # setup's 4 beside s1 (s2 starts after it); the pod's lifetime: 1 + 0.5 + 0.25
    r = req(containers=[container("a", cpu="1")],
            init_containers=[container("setup", cpu="4"), _sidecar("s1", cpu="500m")])
    assert r.cpu == 4000      # setup ran before the sidecar started


def test_a_sidecar_with_a_gpu_counts_it_whole():
    r = req(containers=[container("a", cpu="1", **{"nvidia.com/gpu": "1"})],
            init_containers=[_sidecar("s", cpu="1", **{"nvidia.com/gpu": "1"})])
    assert r.gpus == 2


def test_two_pods_alike_but_for_a_sidecar_get_their_own_requests():
    """The request cache keys on the restart policy too (cached_pod_request)."""
    from kai_cp.resources import cached_pod_request
    plain = Pod.model_validate(pod("p", "pg", containers=[container("a", cpu="1")],
                                   init_containers=[container("i", cpu="1")]), by_alias=True, by_name=False)
    side = Pod.model_validate(pod("q", "pg", containers=[container("a", cpu="1")],
                                  init_containers=[_sidecar("i", cpu="1")]), by_alias=True, by_name=False)
    assert cached_pod_request(plain.spec, {}).cpu == 1000
    assert cached_pod_request(side.spec, {}).cpu == 2000


def test_a_sidecar_decides_fit_end_to_end_from_a_snapshot_file(tmp_path):
    """Through the lean views `kai-cp solve` reads (podview) as through the models."""
    from kai_cp.cli import main
    import json
    doc = snapshot([node("n1", cpu="2")], None, [podgroup("j"), podgroup("k")],
                   [pod("a", "j", cpu="1500m", init_containers=[_sidecar("s", cpu="1")]),
                    pod("b", "k", cpu="1500m", init_containers=[container("i", cpu="1")])])
    f = tmp_path / "snap.json"
    f.write_text(json.dumps(doc))
    out = tmp_path / "out.json"
    assert main(["solve", str(f), "-o", str(out), "--engine", "greedy"]) == 0
    got = json.loads(out.read_text())
    assert [b["pod"] for b in got["binds"]] == ["default/b"]
    assert [u["podGroup"] for u in got["unschedulable"]] == ["j"]


def test_overhead_is_added_after_the_init_max():
    r = req(containers=[container("a", cpu="1", memory="1Gi")],
            init_containers=[container("i", cpu="2")],
            overhead={"cpu": "250m", "memory": "64Mi"})
    assert r.cpu == 2250
    assert r.memory == GI + 64 * MI


def test_limits_are_ignored():
    c = {"name": "a", "image": "x", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "8", "memory": "8Gi"}}}
    r = req(containers=[c])
    assert r.cpu == 1000 and r.memory == 0


def test_whole_gpus_nvidia_and_amd():
    assert req(gpu=2).gpus == 2
    assert req(gpu=2).gpu_quota == 2
    r = req(containers=[container("a", **{"amd.com/gpu": "3"})])
    assert r.gpus == 3 and r.kind == "Regular"


def test_extended_resources_are_milli_units():
    r = req(containers=[container("a", cpu="1", **{"example.com/foo": "2"})])
    assert r.scalar("example.com/foo") == 2000


def test_mig_request_counts_g_times_k_gpus():
    r = req(containers=[container("a", **{"nvidia.com/mig-1g.5gb": "2"})])
    assert r.kind == "MigInstance"
    assert r.gpu_quota == 2
    r = req(containers=[container("a", **{"nvidia.com/mig-3g.20gb": "1"})])
    assert r.gpu_quota == 3


def test_node_capacity_units():
    cap = node_capacity({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4", "pods": "110", "example.com/foo": "3"})
    assert cap["cpu"] == 8000
    assert cap["memory"] == 32 * GI
    assert cap["nvidia.com/gpu"] == 4
    assert cap["pods"] == 110
    assert cap["example.com/foo"] == 3000


# ----------------------------------------------------------------------- GPU annotations


def test_gpu_fraction_annotation():
    r = req(cpu="1", annotations={"gpu-fraction": "0.5"})
    assert r.kind == "Fraction"
    assert r.devices == 1 and r.gpu_portion == Fraction(1, 2) and r.gpus == 0
    assert r.gpu_quota == Fraction(1, 2)


def test_gpu_fraction_with_a_whole_gpu_request_is_a_problem():
    # KAI's scheduler lets the annotation win; its admission webhook rejects the pod (spec 7.1).
    r = req(gpu=1, annotations={"gpu-fraction": "0.25"})
    assert r.kind == "Fraction" and r.gpus == 0 and r.gpu_quota == Fraction(1, 4)
    assert any("whole-GPU" in p for p in r.problems)


def test_gpu_fraction_is_rounded_to_two_decimals_for_gpus():
    assert req(annotations={"gpu-fraction": "0.333"}).gpu_quota == Fraction(33, 100)


@pytest.mark.parametrize("bad", ["0", "1", "1.5", "-0.5", "abc"])
def test_gpu_fraction_out_of_range_is_not_a_fraction(bad):
    r = req(annotations={"gpu-fraction": bad})
    assert r.kind == "Regular"
    assert r.problems


def test_gpu_memory_annotation():
    r = req(annotations={"gpu-memory": "2000"})
    assert r.kind == "GpuMemory"
    assert r.devices == 1 and r.gpu_memory == 2000 and r.gpu_portion == 0 and r.gpus == 0
    # demand in queue math: count * M / MinNodeGPUMemory (the smallest per-GPU memory of the
    # cluster; 100 without GPU memory labels, as in KAI's tests and spec 2.2)
    assert r.gpu_quota == 20 and r.pending_gpus(100) == 20
    assert r.pending_gpus(40000) == Fraction(2000, 40000)


def test_gpu_fraction_with_gpu_memory_is_a_problem():
    r = req(annotations={"gpu-fraction": "0.5", "gpu-memory": "2000"})
    assert r.kind == "Fraction" and r.gpu_memory == 0 and r.gpu_portion == Fraction(1, 2)
    assert any("cannot be combined" in p for p in r.problems)


@pytest.mark.parametrize("annotations, needle", [
    ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"}, "num-devices"),
    ({"gpu-memory": "0"}, "gpu-memory"),
    ({"mps": "true"}, "mps"),
    ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "nope"}, "names no container"),
])
def test_webhook_rules_are_problems(annotations, needle):
    assert any(needle in p for p in req(annotations=annotations).problems)


def test_valid_fraction_has_no_problem():
    assert not req(annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "main"}).problems


def test_num_devices_with_fraction_and_memory():
    r = req(annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "3"})
    assert r.devices == 3 and r.gpu_quota == Fraction(3, 2)
    r = req(annotations={"gpu-memory": "1000", "gpu-fraction-num-devices": "2"})
    assert r.devices == 2 and r.gpu_memory == 1000


def test_num_devices_alone_is_a_problem():
    r = req(gpu=1, annotations={"gpu-fraction-num-devices": "3"})
    assert r.kind == "Regular" and r.gpus == 1 and r.gpu_quota == 1
    assert any("num-devices" in p for p in r.problems)


# ----------------------------------------------------------------------- best effort


@pytest.mark.parametrize("kw,expected", [
    (dict(cpu=None, memory=None), True),
    (dict(cpu="5m", memory="9Mi"), True),
    (dict(cpu="10m", memory=None), False),
    (dict(cpu=None, memory="10Mi"), False),
    (dict(cpu="1m", memory=None, gpu=1), False),
    (dict(cpu=None, memory=None, annotations={"gpu-memory": "100"}), False),
    (dict(cpu=None, memory=None, annotations={"gpu-fraction": "0.5"}), False),
    (dict(containers=[container("a", **{"example.com/foo": "9m"})]), True),
    (dict(containers=[container("a", **{"example.com/foo": "1"})]), False),
    (dict(containers=[container("a", **{"ephemeral-storage": "1Gi"})]), False),
])
def test_best_effort(kw, expected):
    assert req(**kw).best_effort is expected


def test_best_effort_pod_fits_a_full_node():
    """A best-effort pod fits everywhere (spec 1.4), even on a node whose CPU is all used."""
    doc = snapshot([node("n1", cpu="1", memory="1Gi")], None,
                   [podgroup("run"), podgroup("be")],
                   [pod("r", "run", cpu="1", memory="1Gi", phase="Running", node="n1"),
                    pod("b", "be", cpu=None, memory=None)])
    out = solve_doc(doc)
    assert [b["pod"] for b in out["binds"]] == ["default/b"]


def test_request_sum_decides_fit_end_to_end():
    """Two 1-CPU containers do not fit a 1.5-CPU node; one 1-CPU container does."""
    doc = snapshot([node("n1", cpu="1500m")], None, [podgroup("two"), podgroup("one")],
                   [pod("a", "two", containers=[container("x", cpu="1"), container("y", cpu="1")]),
                    pod("b", "one", cpu="1")])
    out = solve_doc(doc)
    assert [b["pod"] for b in out["binds"]] == ["default/b"]
    assert [u["podGroup"] for u in out["unschedulable"]] == ["two"]


def test_init_container_decides_fit_end_to_end():
    doc = snapshot([node("n1", cpu="2")], None, [podgroup("j")],
                   [pod("a", "j", cpu="1", init_containers=[container("i", cpu="3")])])
    out = solve_doc(doc)
    assert out["binds"] == []
    assert [u["podGroup"] for u in out["unschedulable"]] == ["j"]


def test_tiny_gpu_fraction_is_best_effort():
    """Spec 1.4: best effort when ... GPUs <= 0.01 and not a GPU-memory request; a 0.01
    fraction is 0.01 GPUs."""
    assert req(cpu=None, memory=None, annotations={"gpu-fraction": "0.01"}).best_effort is True


def test_negative_request_is_a_problem_and_counts_as_zero():
    """The API server refuses negative requests; one that got through (CLI fuzz: nvidia.com/gpu
    -4,573,409,460) made capacity grow as the pod was placed and ended in a MemoryError."""
    r = req(gpu=-3)
    assert any("negative resource request (nvidia.com/gpu)" in p for p in r.problems)
    assert r.gpus == 0


def test_negative_request_leaves_its_job_pending_and_the_node_whole():
    doc = snapshot([node("n1", gpu=2)], None, [podgroup("bad"), podgroup("good")],
                   [pod("a", "bad", gpu=-4), pod("b", "good", gpu=2)])
    out = solve_doc(doc)
    assert [b["pod"] for b in out["binds"]] == ["default/b"]
    assert [u["podGroup"] for u in out["unschedulable"]] == ["bad"]
    assert any(w["field"] == "spec.containers.resources.requests" and "negative" in w["reason"]
               for w in out["warnings"])


def test_a_request_beyond_any_nodes_capacity_is_a_problem_and_is_capped():
    """9.2e15 cores is a quantity the API server keeps (2^63 - 1 millicores at most), but no node
    has it: in millicores it overflowed the int64 node vectors (CLI fuzz: an internal error
    and no decisions for anyone). Capped at MAX_CAPACITY, as no node has more."""
    r = req(cpu="9223372036854776", memory="7Ei")
    assert any("beyond any node's capacity (cpu, memory)" in p for p in r.problems)
    assert (r.cpu, r.memory) == (MAX_CAPACITY, MAX_CAPACITY)
    assert not req(cpu=str(MAX_CAPACITY // 1000), memory=str(MAX_CAPACITY)).problems
    r = req(annotations={"gpu-memory": "99999999999999999999999"})      # MiB per device
    assert r.gpu_memory == MAX_CAPACITY and any("beyond any node's capacity" in p for p in r.problems)


@pytest.mark.parametrize("text, portion", [("0.9999999999999999999999", None), ("1e-300", None),
                                            ("0.3333333333333333333333", Fraction(1, 3)), ("0.125", Fraction(1, 8))])
def test_a_gpu_fraction_finer_than_a_billionth_is_read_to_a_billionth(text: str, portion: Fraction | None):
    """KAI reads the annotation as a float (0.9999999999999999999999 is 1 there, refused); read
    exactly, such a portion's denominator times a device's memory overflowed int64."""
    r = req(annotations={"gpu-fraction": text})
    if portion is None:
        assert r.problems and r.gpu_portion == 0
    else:
        assert not r.problems and r.gpu_portion == portion and r.kind == "Fraction"


def test_a_request_beyond_any_nodes_capacity_leaves_its_job_pending_and_a_running_one_fills_its_node():
    """Pending: the job waits with the reason and a warning, the others are scheduled. Running
    (already bound, say by another scheduler): its node counts as full for that resource (the
    good pod's binpack choice would be it otherwise), the job's report says why, the cycle goes
    on."""
    doc = snapshot([node("n1", cpu="8", memory="64Gi"), node("n2", cpu="8", memory="64Gi")], None,
                   [podgroup("bad"), podgroup("good"), podgroup("hog")],
                   [pod("a", "bad", cpu="9223372036854776"), pod("b", "good", cpu="2"),
                    pod("h", "hog", memory="7Ei", phase="Running", node="n1")])
    out = solve_doc(doc)
    assert [(b["pod"], b["node"]) for b in out["binds"]] == [("default/b", "n2")]
    why = {u["podGroup"]: u["reasons"] for u in out["unschedulable"]}
    assert set(why) == {"bad", "hog"}
    assert "beyond any node's capacity (cpu)" in why["bad"][0] and "(memory)" in why["hog"][0]
    assert [w["object"] for w in out["warnings"] if w["field"] == "spec.containers.resources.requests"] == \
        ["Pod/default/a"]
    doc["rawObjects"]["pods"][2]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1Gi"
    assert [b["node"] for b in solve_doc(doc)["binds"]] == ["n1"]


def test_request_hash_is_kept_and_left_out_of_pickles():
    """A request's hash is the compared fields' (what dataclass would give: sets of requests keep
    their order), computed once and kept; a pickle carries no hash, as a string's hash differs
    from one process to the next."""
    import dataclasses
    import pickle

    r = PodRequest(cpu=500, memory=1 << 30, kind="Fraction", gpu_portion=Fraction(1, 2), devices=2, problems=("p",))
    compared = tuple(getattr(r, f.name) for f in dataclasses.fields(r) if f.compare)
    assert hash(r) == hash(compared)
    assert r.__dict__["_hash"] == hash(compared)
    same = PodRequest(cpu=500, memory=1 << 30, kind="Fraction", gpu_portion=Fraction(1, 2), devices=2)
    assert same == r and hash(same) == hash(r) and len({r, same}) == 1
    data = pickle.dumps(r)
    assert b"_hash" not in data
    back = pickle.loads(data)
    assert back == r and "_hash" not in back.__dict__ and hash(back) == hash(r)


# ------------------------------------------------------- key scans of labels and annotations

_KEY_PARTS = st.sampled_from(["runai-gpu-group", "runai-gpu-group/", "x-runai-gpu-group", "nvidia.com/mig-",
                              "nvidia.com/mig-1g.10gb", "gpu-fraction", "gpu-memory", "app", "/", "a", ""])
_KEYS = st.lists(_KEY_PARTS, min_size=1, max_size=3).map("".join)


@settings(max_examples=300, deadline=None)
@given(labels=st.dictionaries(_KEYS, st.text(max_size=3), max_size=6))
def test_key_scans_with_their_prefilter_read_what_a_scan_of_every_key_reads(labels):
    """The per-pod scans skip a mapping whose joined keys lack the prefix (kai_cp/resources.py
    some_key_contains): the GPU groups, legacy MIG and the sharing annotations of a pod are
    what testing every key gives."""
    assert gpu_groups_of(labels) == tuple(sorted({v for k, v in labels.items()
                                                  if k == GPU_GROUP_LABEL or k.startswith(GPU_GROUP_LABEL + "/")}))
    assert legacy_mig(labels) == any(k.startswith(MIG_PREFIX) for k in labels)
    assert _sharing_annotations(labels) == tuple(sorted(
        (k, v) for k, v in labels.items() if k in _SHARING_KEYS or k.startswith(MIG_PREFIX)))


def test_key_scan_of_a_mapping_with_a_key_that_is_not_text():
    assert some_key_contains({1: "a", "nvidia.com/mig-1g": "b"}, "nvidia.com/mig-")
    assert not some_key_contains({1: "a"}, "nvidia.com/mig-")
    assert not some_key_contains(None, "x") and not some_key_contains({}, "x")
