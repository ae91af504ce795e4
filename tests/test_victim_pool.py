"""The victim pool's arrays against its rules one job at a time (kai_cp/model/victim_pool.py).

Why: at 10,000 nodes the pool decides most of its 30,000 victim jobs as arrays (counts of running
pods, protection, surplus), and only the jobs greedy placed pods of or a queue may reclaim by
_Rules.decide; the model then gives a variable only to the units a candidate pair may evict
(Pool.justified). Both are second statements of rules written once in _Rules.decide and _legal,
so on generated clusters the pool built as arrays must equal the pool built one job at a time,
unit for unit, and justified() and freeable_under() must pick exactly the units _legal allows.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from clustergen import clusters, contended_clusters
from kai_cp.actions.pipeline import run_greedy
from kai_cp.loader import load_snapshot_dict
from kai_cp.model.candidates import build_classes
from kai_cp.model.victim_pool import Pool, Unit, _legal, _Rules, build_pool, may_reclaim, pending_keys, reach_for
from kai_cp.state import build_cluster_state
from test_cycle import Cluster

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "evictions"


def _fields(u: Unit) -> tuple:
    return (u.index, u.kind, u.queue, u.priority, [t.key for t in u.tasks],
            {n: {ps: [t.key for t in ts] for ps, ts in by_ps.items()} for n, by_ps in u.node_tasks.items()},
            u.vec.tolist(), u.centi, u.chunk, u.preempt, u.reclaim, u.reclaimers, u.whole, u.surplus, u.cost)


def _assert_same(a: Pool | None, b: Pool | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    assert [_fields(u) for u in a.units] == [_fields(u) for u in b.units]
    assert sorted(a.reach) == sorted(b.reach)
    for key, arr in a.reach.items():
        assert np.array_equal(arr, b.reach[key]), key
    assert np.array_equal(a.loses, b.loses) and a.reclaimers == b.reclaimers
    assert np.array_equal(a.kai, b.kai)
    assert sorted(zip(a.member_unit.tolist(), a.member_node.tolist())) \
        == sorted(zip(b.member_unit.tolist(), b.member_node.tolist()))


def _pools(doc: dict[str, Any]):
    state = build_cluster_state(load_snapshot_dict(doc))
    greedy = run_greedy(state, 0.0, bounded=True)
    classes = build_classes(state, greedy)
    keys = pending_keys(classes)
    return state, classes, build_pool(state, greedy, keys), build_pool(state, greedy, keys, one_by_one=True)


def _agree(doc: dict[str, Any], seed: int) -> None:
    state, classes, arrays, one_by_one = _pools(doc)
    _assert_same(arrays, one_by_one)
    if arrays is not None:
        _check_justified(state, classes, arrays, seed)


def _check_justified(state, classes, pool: Pool, seed: int) -> None:
    """justified() against _legal over every unit, for random candidate pairs."""
    if not classes or not len(pool):
        return
    rng = random.Random(seed)
    pairs = [(rng.randrange(len(state.nodes)), rng.choice(classes).job) for _ in range(rng.randint(1, 12))]
    node = np.array([n for n, _ in pairs], dtype=np.int64)
    # (and the units KAI's actions evicted from, whatever the pairs)
    want = [u.index for u in pool.units
            if pool.kai[u.index] or any(_legal(u, job, state) for n, job in pairs if n in u.node_tasks)]
    may = np.array([may_reclaim(state, job) for _, job in pairs], dtype=bool)
    assert [u.index for u in pool.justified(node, [job for _, job in pairs], may)] == want
    # freeable_under (a queue limit's room): what the job's legal victims inside the queue hold
    job = rng.choice(classes).job
    for q in state.queue_path(job.queue):
        mine = [u.index for u in pool.units
                if _legal(u, job, state) and any(a.name == q.name for a in state.queue_path(u.queue))]
        assert pool.freeable_under(state, job, q.name).tolist() == pool.loses[mine].sum(axis=0).tolist()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=contended_clusters(), seed=st.integers(0, 1 << 16))
def test_the_pools_arrays_agree_with_its_rules_on_contended_clusters(doc: dict[str, Any], seed: int) -> None:
    _agree(doc, seed)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=clusters(), seed=st.integers(0, 1 << 16))
def test_the_pools_arrays_agree_with_its_rules_with_shared_gpus(doc: dict[str, Any], seed: int) -> None:
    _agree(doc, seed)


def test_preempt_only_victims_are_decided_as_arrays(monkeypatch) -> None:
    """The arrays do decide: a pool of preempt-only victims calls the one-job rules for none of
    them, neither while it is built nor when its units are made."""
    c = Cluster().queue("q")
    for i in range(4):
        c.node(f"n{i}", gpus=8)
    for i in range(16):
        c.job(f"one{i}", "q", gpus=1, running_on=[f"n{i % 4}"])
    for i in range(4):
        c.job(f"gang{i}", "q", pods=2, gpus=2, running_on=[f"n{i}", f"n{(i + 1) % 4}"])
    c.job("urgent", "q", pods=2, gpus=8, priority_class="inference")
    state = build_cluster_state(load_snapshot_dict(c.doc()))
    greedy = run_greedy(state, 0.0, evictions=False)
    calls: list[str] = []
    real = _Rules.decide

    def counted(self, job):
        calls.append(job.name)
        return real(self, job)
    monkeypatch.setattr(_Rules, "decide", counted)
    keys = pending_keys(build_classes(state, greedy))
    pool = build_pool(state, greedy, keys)
    assert pool is not None and calls == []
    assert sorted(u.kind for u in pool.units) == ["job"] * 4 + ["pods"] * 4     # one pods unit per node
    assert calls == []
    _assert_same(pool, build_pool(state, greedy, keys, one_by_one=True))


def test_priorities_are_read_at_once_and_held_at_the_arrays_bound():
    """A corrupt PriorityClass value (beyond int64) must not overflow the victim arrays: every
    value is held at the bound, the order of all others kept, whichever way they are read."""
    from kai_cp.victim_pods import PRIORITY_BOUND, bounded, priorities
    for values in ([5, -3, 0], [5, 10 ** 30, -(10 ** 25), 7], [(1 << 62) + 1, -(1 << 63)], []):
        got = priorities(iter(values), len(values))
        assert got.dtype == np.int64 and got.tolist() == [bounded(v) for v in values]
        assert all(-PRIORITY_BOUND <= v <= PRIORITY_BOUND for v in got.tolist())


def test_a_job_protected_from_preempt_only_is_a_whole_unit_for_reclaim() -> None:
    """q00's run0 (2 of 2 pods running) is protected from preemption (q00's preemptMinRuntime),
    not from reclaim, and KAI reclaims it whole for q01's pend0. The pool dropped it (not whole
    for preempt, no pods above its minimum), so the model could not express KAI's reclaim and was
    infeasible. Now preempt leaves its unit and reclaim may take it whole."""
    import json
    from pathlib import Path
    path = Path(__file__).parent / "fixtures" / "evictions" / "hint_reclaim_of_a_job_protected_from_preempt_only.json"
    state = build_cluster_state(load_snapshot_dict(json.loads(path.read_text())))
    greedy = run_greedy(state, 1_750_000_000.0, bounded=True)
    assert {e.task.job for e in greedy.session.evictions.values() if e.action == "reclaim"} == {"run0"}
    rules = _Rules(state, greedy, pending_keys(build_classes(state, greedy)))
    kind, unit, _ = rules.decide(state.jobs["run0"])
    assert kind == "job" and unit.whole and not unit.preempt and unit.reclaimers == {"q01"}


def test_a_job_running_a_shared_gpu_pod_is_never_a_whole_unit() -> None:
    """The model has no victims on shared GPUs, so taking such a job "whole" evicted only its
    whole-GPU pods and left its shared-GPU pod running below the gang's minimum (random
    objectives over generated clusters: a workers PodSet left with 1 pod of 2). Such a job may
    lose only pods above a PodSet's minimum, by its rules one at a time and as arrays alike."""
    import clustergen as cg
    c = Cluster(config=cg.placement_config(actions="allocate, preempt"))
    c.node("n1", gpus=2).queue("q")
    c.job("victim", "q", pods=1, gpus=0, running_on=["n1"], priority_class="train",
          annotations={"gpu-fraction": "0.5"}, labels={"runai-gpu-group": "g1"})
    c.pods.append(cg.pod("victim-1", "victim", gpus=1, queue_name="q", phase="Running", node_name="n1", created=-3000))
    c.groups[-1]["spec"]["minMember"] = 2
    c.pods.append(cg.reservation_pod("reservation-n1", "n1", "g1"))
    c.job("high", "q", gpus=1, priority_class="inference")
    state, _, arrays, one_by_one = _pools(c.doc())
    victim = state.jobs["victim"]
    assert sorted((t.name, t.request.is_shared_gpu) for t in victim.tasks) == [("victim-0", True), ("victim-1", False)]
    assert "victim" in state.victims
    for pool in (arrays, one_by_one):
        assert pool is None or all(u.tasks[0].job != "victim" or not u.whole for u in pool.units)
    greedy = run_greedy(state, 0.0, bounded=True)
    rules = _Rules(state, greedy, pending_keys(build_classes(state, greedy)))
    assert rules.decide(victim) is None          # no pods above its minimum either
    _assert_same(arrays, one_by_one)


def test_a_job_gate_1_refuses_reaches_only_what_preempting_frees() -> None:
    """q01 holds no GPU of its 1-GPU fair share, so it reclaims (its jobs' candidates reach what
    reclaims free: 18 GPUs); but pend3 asks 2 GPUs a pod, and KAI's gate 1 (spec 3.7.1) refuses
    it any reclaim. Its candidates reach only what preempting frees (nothing here), its pairs
    justify no reclaim, and no reclaim unit is legal for it. (Reaching the reclaims' room, its
    pods were placed on nodes with no free GPU and no eviction: the validator's 'gpu placed 4 >
    free 0', found while gate 1 was added.)"""
    doc = json.loads((FIXTURES / "cpsat_gate_1_refuses_a_reclaimers_job.json").read_text())
    state, _, pool, _ = _pools(doc)
    pend3 = state.jobs["pend3"]
    assert "q01" in pool.reclaimed_by and not may_reclaim(state, pend3)
    assert int(pool.reach[("q01", pend3.priority)][:, 2].sum()) == 18
    assert reach_for(pool, pend3, state) is None
    assert not pool.legal(pend3, state).any()
    pairs = np.array([0], dtype=np.int64)
    assert pool.justified(pairs, [pend3], np.array([False])) == [u for u in pool.units if pool.kai[u.index]]
