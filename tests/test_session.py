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


def _two_nodes():
    q = queue("q", gpu=resource(-1, -1), cpu=resource(-1, -1), memory=resource(-1, -1))
    pods = [pod("j-0", "j", gpus=1, queue_name="q", created=-500)]
    return build_cluster_state(load_snapshot_dict(snapshot([node("n0", gpus=8), node("n1", gpus=8)], [q], pods,
                                                           [pod_group("j", "q", min_member=1)])))


def test_other_decisions_after_a_rollback_have_another_version() -> None:
    """What is derived from the decisions (Session.decisions_derived, and the caches keyed on
    `version`) must not outlive them: a rollback followed by as many other decisions left the
    log as long as before, and the value derived from the first decisions was read for the
    second (the version was the log's length)."""
    state = _two_nodes()
    s = Session.open(state)
    task = state.jobs["j"].tasks[0]
    cp = s.checkpoint()
    s.place(task, 0, pipelined=False)
    first = s.version
    assert s.decisions_derived("where", lambda: "n0") == "n0"
    s.rollback(cp)
    s.place(task, 1, pipelined=False)                # another decision, the log as long as before
    assert s.version != first
    assert s.decisions_derived("where", lambda: "n1") == "n1"


def test_a_rollback_to_a_checkpoint_gives_its_version_back() -> None:
    """The same decisions keep what was derived from them: a scenario that fails and rolls back
    leaves the session's version (and its derived values) as they were where it started."""
    state = _two_nodes()
    s = Session.open(state)
    task = state.jobs["j"].tasks[0]
    s.place(task, 0, pipelined=False)
    before = s.version
    calls = []
    s.decisions_derived("what", lambda: calls.append(1))
    cp = s.checkpoint()
    s.convert_to_pipelined(state.jobs["j"])
    assert s.version != before
    s.rollback(cp)
    assert s.version == before
    s.decisions_derived("what", lambda: calls.append(1))
    assert calls == [1]
