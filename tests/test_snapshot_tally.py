"""The snapshot's per-job facts counted in one pass at state build (`JobInfo.tally`), and the
stale-gang action deciding from them.

Why: every cycle reads the same facts of the snapshot's statuses (waiting pods, active counts,
the pods the eviction actions may take, which gangs are stale); found by separate scans of the
40,000 jobs and 100,000 pods of a 10,000-node cluster they were a fifth of its greedy cycle
(issue 9). The tallied values must equal their definitions on the pods, and the stale-gang
action, which now looks only at the jobs stale or annotated in the snapshot plus those the
cycle changed, must decide exactly what a check of every job decides.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clustergen as cg
from kai_cp.actions.pipeline import run_greedy
from kai_cp.actions.stale_gangs import run_stale_gang_eviction
from kai_cp.jobs import ACTIVE_ALLOCATED, ACTIVE_USED, GATED, PENDING, SUCCEEDED, JobInfo
from kai_cp.loader import load_snapshot_dict
from kai_cp.session import Session
from kai_cp.state import STALE_ANNOTATION, build_cluster_state
from snapshot_builder import node, pod, podgroup, snapshot, state_of

NOW = float(cg.BASE_EPOCH)
SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def stale_by_definition(job: JobInfo, session: Session) -> bool:
    """KAI's IsStale over every pod of the job, with the session's statuses."""
    if any(t.status == SUCCEEDED for t in job.tasks):
        return False
    counts = [sum(1 for t in ps.tasks if session.status(t) in ACTIVE_USED) for ps in job.podsets.values()]
    return sum(counts) > 0 and any(c < ps.min_available for c, ps in zip(counts, job.podsets.values()))


@st.composite
def annotated_clusters(draw, docs: st.SearchStrategy) -> dict[str, Any]:
    """Generated clusters whose PodGroups may carry the stale-gang annotation: a past time, the
    cycle's own time or an unreadable value."""
    doc = copy.deepcopy(draw(docs))
    for pg in _pod_groups(doc):
        value = draw(st.sampled_from([None, None, "2026-01-01T11:59:00Z", "2020-01-01T00:00:00Z", "garbage"]))
        if value is not None:
            pg["metadata"].setdefault("annotations", {})[STALE_ANNOTATION] = value
    return doc


def _pod_groups(doc: dict[str, Any]) -> list[dict]:
    raw = doc.get("rawObjects", doc)
    return raw.get("podGroups", [])


def annotated(job: JobInfo) -> bool:
    return STALE_ANNOTATION in (job.pod_group.metadata.annotations or {})


def check_tally(doc: dict[str, Any]) -> None:
    state = build_cluster_state(load_snapshot_dict(doc))
    index = state.table.index
    empty = Session.open(state)
    for job in state.jobs.values():
        assert job.waiting == [t for t in job.tasks if t.status in (PENDING, GATED)]
        assert job.succeeded == any(t.status == SUCCEEDED for t in job.tasks)
        assert job.stale_in_snapshot == stale_by_definition(job, empty)
        assert job.stale_annotated == annotated(job)
        for ps in job.podsets.values():
            assert ps.active_allocated == sum(1 for t in ps.tasks if t.status in ACTIVE_ALLOCATED)
            assert ps.active_used == sum(1 for t in ps.tasks if t.status in ACTIVE_USED)
            assert ps.on_nodes(index) == [t for t in ps.tasks if t.status in ACTIVE_ALLOCATED and t.node in index]
    assert state.stale_watch == [j for j in state.jobs.values() if stale_by_definition(j, empty) or annotated(j)]
    assert state.waiting_jobs == [j for j in state.jobs.values() if j.waiting]


@SETTINGS
@given(doc=annotated_clusters(cg.clusters()))
def test_tallied_facts_equal_their_definitions(doc: dict[str, Any]) -> None:
    check_tally(doc)


@SETTINGS
@given(doc=annotated_clusters(cg.contended_clusters(max_nodes=6)))
def test_tallied_facts_equal_their_definitions_on_contended_clusters(doc: dict[str, Any]) -> None:
    check_tally(doc)


def check_stale_action(doc: dict[str, Any]) -> None:
    state = build_cluster_state(load_snapshot_dict(doc))
    g = run_greedy(state, NOW)          # the session KAI's actions leave: placements and evictions
    verdicts = {j.name: stale_by_definition(j, g.session) for j in state.jobs.values()}
    expected = sorted((j.namespace, j.name, verdicts[j.name]) for j in state.jobs.values()
                      if verdicts[j.name] or annotated(j))
    out = run_stale_gang_eviction(state, g.session, NOW)
    assert sorted((d.namespace, d.job, d.stale_since is not None) for d in out.jobs.values()) == expected


@SETTINGS
@given(doc=annotated_clusters(cg.contended_clusters(max_nodes=6)))
def test_stale_gang_eviction_looks_at_every_job_it_must(doc: dict[str, Any]) -> None:
    check_stale_action(doc)


@SETTINGS
@given(doc=annotated_clusters(cg.clusters()))
def test_stale_gang_eviction_looks_at_every_job_it_must_on_varied_clusters(doc: dict[str, Any]) -> None:
    check_stale_action(doc)


def test_a_gang_stale_in_the_snapshot_that_the_cycle_makes_whole_is_not_stale() -> None:
    """The snapshot's count says stale (1 of 2 pods active); the cycle places the pending pod:
    the action counts the cycle's statuses for a job the cycle changed, and removes the
    annotation."""
    pg = podgroup("g", min_member=2)
    pg["metadata"]["annotations"] = {STALE_ANNOTATION: "2026-01-01T11:59:30Z"}
    doc = snapshot([node("n1", gpu=4)], podgroups=[pg],
                   pods=[pod("g-0", "g", gpu=1, phase="Running", node="n1"), pod("g-1", "g", gpu=1)])
    state = state_of(doc)
    assert [j.name for j in state.stale_watch] == ["g"] and state.jobs["g"].stale_in_snapshot
    g = run_greedy(state, NOW)
    assert "default/g-1" in g.session.placements
    out = run_stale_gang_eviction(state, g.session, NOW)
    assert out.jobs["g"].stale_since is None and out.jobs["g"].write


def test_pods_on_nodes_outside_the_snapshot_are_no_victims() -> None:
    doc = snapshot([node("n1", gpu=4)], podgroups=[podgroup("g", min_member=1)],
                   pods=[pod("g-0", "g", gpu=1, phase="Running", node="n1"),
                         pod("g-1", "g", gpu=1, phase="Running", node="gone")])
    state = state_of(doc)
    ps = state.jobs["g"].podsets["default"]
    assert [t.name for t in ps.on_nodes(state.table.index)] == ["g-0"]
    assert ps.active_allocated == 2


def test_schedulable_jobs_is_the_callers_list() -> None:
    doc = snapshot([node("n1", gpu=4)], podgroups=[podgroup("a"), podgroup("b")],
                   pods=[pod("a-0", "a", gpu=1), pod("b-0", "b", gpu=1)])
    state = state_of(doc)
    first = state.schedulable_jobs()
    assert [j.name for j in first] == ["a", "b"]
    first.clear()
    assert [j.name for j in state.schedulable_jobs()] == ["a", "b"]
