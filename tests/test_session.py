"""The session's statement log (KAI's Statement): what a rollback must restore.

Why: the eviction actions simulate each scenario on the one session and roll it back when the
scenario fails (or their work budget runs out). A change a rollback does not undo outlives the
scenario that made it: pods allocate had bound stayed pipelined, waiting for resources nobody
was releasing, cycle after cycle (a 100-node bench/bench_cycle.py cluster under `simulate`)."""

from __future__ import annotations

from clustergen import node, pod, pod_group, queue, resource, snapshot
from kai_cp.loader import load_snapshot_dict
from kai_cp.session import Session
from kai_cp.state import build_cluster_state


def _state():
    q = queue("q", gpu=resource(-1, -1), cpu=resource(-1, -1), memory=resource(-1, -1))
    pods = [pod(f"j-{i}", "j", gpus=1, queue_name="q", created=-500 + i) for i in range(2)]
    return build_cluster_state(load_snapshot_dict(snapshot([node("n0", gpus=8)], [q], pods,
                                                           [pod_group("j", "q", min_member=2)])))


def test_rollback_binds_again_what_a_scenario_pipelined() -> None:
    state = _state()
    s = Session.open(state)
    job = state.jobs["j"]
    for t in job.tasks:
        s.place(t, 0, pipelined=False)              # bound by allocate, before the scenario
    cp = s.checkpoint()
    s.convert_to_pipelined(job)                     # a simulated scenario pipelines the job
    assert all(s.placements[t.key].pipelined for t in job.tasks)
    s.rollback(cp)                                  # the scenario fails
    assert not any(s.placements[t.key].pipelined for t in job.tasks)
    assert len(s.placements) == 2


def test_rollback_past_the_placements_removes_them_too() -> None:
    state = _state()
    s = Session.open(state)
    job = state.jobs["j"]
    cp = s.checkpoint()
    for t in job.tasks:
        s.place(t, 0, pipelined=False)
    s.convert_to_pipelined(job)
    s.rollback(cp)
    assert s.placements == {} and s.idle[0, 2] == 8
