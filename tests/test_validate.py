"""kai_cp/validate.py, the independent check the cycle runs on the model's decisions: each rule
caught on decisions that break it, and decisions that keep them all pass.

Why: the cycle falls back to KAI's decisions when the model's break a rule (kai_cp/cycle.py), so a
rule the validator misses is a bad bind in-cluster, and one it invents costs the model's answer.
The decisions are built by hand on a Session (no engine), so each case breaks exactly one rule.
"""

from __future__ import annotations

from fractions import Fraction

import clustergen as cg
from kai_cp.loader import load_snapshot_dict
from kai_cp.session import Session
from kai_cp.state import build_cluster_state
from kai_cp.validate import violations


def _state():
    nodes = [cg.node("n1", gpus=2), cg.node("n2", gpus=2, labels={"pool": "b"})]
    queues = [cg.queue("dept"), cg.queue("q", "dept", gpu=cg.resource(1, 3, 1)),
              cg.queue("r", "dept", gpu=cg.resource(-1, -1, 1))]
    pods = [cg.pod(f"g-{i}", "g", gpus=1, queue_name="q") for i in range(2)]
    pods += [cg.pod(f"f-{i}", f"f{i}", queue_name="q", annotations={"gpu-fraction": "0.75"}) for i in range(2)]
    pods += [cg.pod("np-0", "np", gpus=2, queue_name="q")]
    pods += [cg.pod("sel-0", "sel", gpus=1, queue_name="r", node_selector={"pool": "b"})]
    pods += [cg.pod(f"h-{i}", "h", gpus=0, queue_name="r", annotations={"gpu-fraction": "0.5"}) for i in range(3)]
    groups = [cg.pod_group("g", "q", min_member=2), cg.pod_group("f0", "q"), cg.pod_group("f1", "q"),
              cg.pod_group("np", "q", priority_class="build"), cg.pod_group("sel", "r"),
              cg.pod_group("h", "r", min_member=1)]
    return build_cluster_state(load_snapshot_dict(cg.snapshot(nodes, queues, pods, groups)))


def _decide(placements: list[tuple[str, str, tuple[str, ...]]]) -> list[str]:
    state = _state()
    s = Session.open(state)
    tasks = {t.key: t for j in state.jobs.values() for t in j.tasks}
    opened: set[str] = set()
    for key, node, groups in placements:
        new = [g for g in groups if g.startswith("new") and g not in opened]
        opened.update(new)
        s.place(tasks[f"default/{key}"], state.table.index[node], False, gpu_groups=groups, new_groups=len(new))
    return violations(state, s)


def test_decisions_that_keep_every_rule_pass() -> None:
    assert _decide([("g-0", "n1", ()), ("g-1", "n1", ()), ("sel-0", "n2", ()),
                    ("h-0", "n2", ("new-a",)), ("h-1", "n2", ("new-a",))]) == []


def test_each_rule_is_caught() -> None:
    def caught(placements, text: str) -> None:
        found = _decide(placements)
        assert any(text in v for v in found), (text, found)

    caught([("g-0", "n1", ()), ("g-1", "n1", ()), ("sel-0", "n1", ())], "fails its predicates")
    caught([("g-0", "n2", ()), ("g-1", "n2", ()), ("sel-0", "n2", ())], "placed 3 > free 2")
    caught([("g-0", "n1", ())], "1 pods < minMember 2")
    caught([("f-0", "n1", ("new-a",)), ("f-1", "n1", ("new-a",))], "MiB")             # 1.5 GPUs on one device
    caught([("f-0", "n1", ("new-a",)), ("f-1", "n2", ("new-a",))], "on two nodes")
    caught([("g-0", "n1", ()), ("g-1", "n1", ()), ("f-0", "n1", ("new-a",))], "new shared GPUs")
    caught([("np-0", "n1", ())], "non-preemptible gpu 2 over quota 1")


def test_queue_limits_count_fractions_exactly_at_every_level() -> None:
    """q's limit is 3 GPUs: two whole GPUs and two 0.75 fractions are 3.5; one fraction less is
    2.75, within it. The per-queue sums carry fractions exactly (no float rounding)."""
    over = _decide([("g-0", "n1", ()), ("g-1", "n1", ()), ("f-0", "n2", ("new-a",)), ("f-1", "n2", ("new-b",))])
    assert [v for v in over if "over limit" in v] == [f"queue q: gpu {Fraction(7, 2)} over limit 3"]
    assert _decide([("g-0", "n1", ()), ("g-1", "n1", ()), ("f-0", "n2", ("new-a",))]) == []


def test_a_node_already_past_its_capacity_takes_only_pods_that_do_not_ask_for_it() -> None:
    """n1 runs 3 CPUs on 2 allocatable (a corrupt or shrunk allocatable): a pod asking no CPU may
    still go there, as the engines' fit allows; one asking for CPU breaks the node's capacity. (The
    CLI's fuzzing of snapshot values found the check flagging the first: 'cpu placed 0 > free -1000'.)"""
    nodes = [cg.node("n1", gpus=2, cpu_m=2000)]
    pods = [cg.pod("busy-0", "busy", cpu_m=3000, queue_name="q", phase="Running", node_name="n1"),
            cg.pod("nocpu-0", "nocpu", cpu_m=0, mem_b=0, gpus=1, queue_name="q"),
            cg.pod("cpu-0", "cpu", cpu_m=500, gpus=1, queue_name="q")]
    groups = [cg.pod_group(g, "q") for g in ("busy", "nocpu", "cpu")]
    state = build_cluster_state(load_snapshot_dict(cg.snapshot(nodes, [cg.queue("q")], pods, groups)))
    tasks = {t.key: t for j in state.jobs.values() for t in j.tasks}

    def check(key: str) -> list[str]:
        s = Session.open(state)
        s.place(tasks[key], 0, False)
        return violations(state, s)
    assert check("default/nocpu-0") == []
    assert check("default/cpu-0") == ["node n1: cpu placed 500 > free -1000"]


def _running_state(queues: list[dict], pods: list[dict], groups: list[dict], gpus: int = 8):
    state = build_cluster_state(load_snapshot_dict(cg.snapshot([cg.node("n1", gpus=gpus)], queues, pods, groups)))
    return state, {t.key: t for j in state.jobs.values() for t in j.tasks}


def test_min_runtime_protection_is_checked_at_the_cycles_clock() -> None:
    """q protects its jobs from preemption for an hour after they start. v (one pod) started 10
    minutes ago: it may lose no pod; e (3 pods, minMember 2, elastic) may lose its surplus pod
    but not a second. An hour later neither is protected; without a clock nothing is checked."""
    q = cg.queue("q")
    q["spec"]["preemptMinRuntime"] = "1h"
    started = {"kai.scheduler/last-start-timestamp": cg.ts(-600)}
    pods = [cg.pod("v-0", "v", gpus=1, phase="Running", node_name="n1", queue_name="q")]
    pods += [cg.pod(f"e-{i}", "e", gpus=1, phase="Running", node_name="n1", queue_name="q") for i in range(3)]
    pods += [cg.pod("p-0", "p", gpus=8, queue_name="q")]
    groups = [cg.pod_group("v", "q"), cg.pod_group("e", "q", min_member=2),
              cg.pod_group("p", "q", priority_class="inference")]
    for g in groups[:2]:
        g["metadata"]["annotations"] = dict(started)
    state, tasks = _running_state([q], pods, groups)
    now = state.jobs["v"].last_start + 600

    def check(victims: list[str], at: float | None) -> list[str]:
        s = Session.open(state)
        for k in victims:
            s.evict(tasks[f"default/{k}"], "preempt", "p", "m")
        return [v for v in violations(state, s, at) if "min-runtime" in v]

    assert check(["v-0"], now) == ["job v: within its preempt min-runtime (3600 s) and not elastic, "
                                   "yet lost 1 pod(s) to preempt for p"]
    assert check(["e-0"], now) == []
    assert check(["e-0", "e-1"], now) == ["job e podset default: within its preempt min-runtime, p took 2 of 3 "
                                          "active pods, fewer than minMember 2 left"]
    assert check(["v-0", "e-0", "e-1"], now + 3600) == []
    assert check(["v-0"], None) == []


def test_reclaim_takes_only_from_a_queue_above_what_it_may_keep() -> None:
    """a holds 3 GPUs on a quota of 2 and b, within its quota, reclaims for p (spec 3.7.2): a chunk
    taken while a is above its quota is allowed, so one of a's 1-GPU jobs may go, and a second
    only if the first was taken before it, which leaves a at 2, its quota: taking two breaks the
    gate in any order. A victim moved to another place this cycle is not taken at all."""
    queues = [cg.queue("a", gpu=cg.resource(2)), cg.queue("b", gpu=cg.resource(2))]
    pods = [cg.pod(f"a{i}-0", f"a{i}", gpus=1, phase="Running", node_name="n1", queue_name="a") for i in range(3)]
    pods += [cg.pod("p-0", "p", gpus=2, queue_name="b")]
    groups = [cg.pod_group(f"a{i}", "a") for i in range(3)] + [cg.pod_group("p", "b")]
    state, tasks = _running_state(queues, pods, groups, gpus=3)

    def check(victims: list[str], moved: str | None = None) -> list[str]:
        s = Session.open(state)
        for k in victims:
            s.evict(tasks[f"default/{k}"], "reclaim", "p", "m")
        if moved:
            s.place(tasks[f"default/{moved}"], 0, pipelined=True)
        return [v for v in violations(state, s) if v.startswith("reclaim for")]

    assert check(["a0-0"]) == []
    assert check(["a0-0", "a1-0"]) == ["reclaim for p took from queue a, which held at most cpu 2000, "
                                       "memory 2147483648, gpu 2 before its last chunk and may lose nothing "
                                       "at or below cpu unlimited, memory unlimited, gpu 2"]
    assert check(["a0-0", "a1-0"], moved="a1-0") == []


def test_a_reclaimer_stays_within_its_queues_fair_share() -> None:
    """b's fair share is its quota, 2 GPUs (a holds the other 2 of its own quota and 2 more): p2,
    asking 2 GPUs, may reclaim; p3, asking 3, may not (spec 3.7.1), whatever it is given. And a
    non-preemptible reclaimer must also fit b's quota: npc asks 3 CPUs on a quota of 2."""
    queues = [cg.queue("a", gpu=cg.resource(2)), cg.queue("b", gpu=cg.resource(2), cpu=cg.resource(2000, -1))]
    pods = [cg.pod(f"a{i}-0", f"a{i}", gpus=1, cpu_m=100, phase="Running", node_name="n1", queue_name="a")
            for i in range(4)]
    pods += [cg.pod("p2-0", "p2", gpus=2, cpu_m=100, queue_name="b"),
             cg.pod("p3-0", "p3", gpus=3, cpu_m=100, queue_name="b"),
             cg.pod("npc-0", "npc", gpus=1, cpu_m=3000, queue_name="b")]
    groups = [cg.pod_group(f"a{i}", "a") for i in range(4)]
    groups += [cg.pod_group("p2", "b"), cg.pod_group("p3", "b"), cg.pod_group("npc", "b", priority_class="build")]
    state, tasks = _running_state(queues, pods, groups, gpus=4)
    assert state.queues["b"].fair_share["gpu"] == 2

    def check(pre: str, victims: list[str]) -> list[str]:
        s = Session.open(state)
        for k in victims:
            s.evict(tasks[f"default/{k}"], "reclaim", pre, "m")
        return [v for v in violations(state, s) if v.startswith(f"reclaim for {pre}:")]

    assert check("p2", ["a0-0", "a1-0"]) == []
    assert check("p3", ["a0-0", "a1-0", "a2-0"]) == ["reclaim for p3: queue b would hold at least gpu 3 with it, "
                                                     "over its fair share 2"]
    assert check("npc", ["a0-0"]) == ["reclaim for npc: queue b would hold at least cpu 3000 with it, "
                                      "over its non-preemptible quota 2000"]


def _memory_state(running_gpus: int):
    """A queue limited to 2 GPUs, holding `running_gpus`, with a pending gang of a 2-GPU pod and
    a 20,000 MiB GPU-memory pod (0.25 of an 81,920 MiB device)."""
    nodes = [cg.node("n1", gpus=8)]
    queues = [cg.queue("dept"), cg.queue("q", "dept", gpu=cg.resource(-1, 2, 1))]
    pods = [cg.pod(f"run-{i}", "run", gpus=1, queue_name="q", phase="Running", node_name="n1")
            for i in range(running_gpus)]
    pods += [cg.pod("gang-0", "gang", gpus=2, queue_name="q", subgroup="workers"),
             cg.pod("gang-1", "gang", queue_name="q", subgroup="ps", annotations={"gpu-memory": "20000"})]
    groups = [cg.pod_group("run", "q", min_member=max(1, running_gpus)),
              cg.pod_group("gang", "q", min_member=2, sub_groups=[{"name": "workers", "minMember": 1},
                                                                  {"name": "ps", "minMember": 1}])]
    return build_cluster_state(load_snapshot_dict(cg.snapshot(nodes, queues, pods, groups)))


def test_a_gang_with_a_gpu_memory_pod_may_end_past_its_limit_by_that_pod():
    """KAI's checks count a GPU-memory pod as no GPU for the job and a whole-GPU pod as one GPU
    per task (spec 3.6): the gang ends at 2.25 GPUs in a queue limited to 2, as greedy places it.
    A GPU-memory pod beside a queue already at its limit is refused by the per-task check."""
    from kai_cp.actions.allocate import run_allocate
    state = _memory_state(0)
    greedy = run_allocate(state)
    assert sorted(greedy.session.placements) == ["default/gang-0", "default/gang-1"]
    assert violations(state, greedy.session) == []
    state = _memory_state(2)
    s = Session.open(state)
    task = next(t for t in state.tasks if t.key == "default/gang-1")
    s.place(task, 0, pipelined=False, gpu_groups=("grp-new",))
    broken = violations(state, s)
    assert any("GPU-memory pod of 1/4 GPU placed beside at least 2 over limit 2" in b for b in broken), broken
