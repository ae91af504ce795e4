"""The eviction search stops an attempt the work bound cannot pay before listing its victims.

Why: an attempt's first gang step spends one unit per victim job, so where even the fewest
victims the policy can have (`fewest_victims`, counted from the state's columns) are more than
the bound has left, the attempt stops as it would have after listing them (a 10,000-node
reclaim listed 28,000 victims, 0.25 s, only to stop). The count must never exceed the list, and
the search must decide exactly what it decides without the shortcut.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from clustergen import contended_clusters
from kai_cp.actions.consolidation import ConsolidationPolicy
from kai_cp.actions.pipeline import EvictionSearch, RuntimeGuard, run_greedy
from kai_cp.actions.preempt import PreemptPolicy
from kai_cp.actions.preemptors import Budget, pending_jobs
from kai_cp.actions.reclaim import ReclaimPolicy
from kai_cp.actions.victims import changed_victim_counts
from kai_cp.loader import load_snapshot, load_snapshot_dict
from kai_cp.session import Session
from kai_cp.state import ClusterState, build_cluster_state

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = sorted((ROOT / "examples").glob("*.zip"))
# protection over (a day after the snapshots' starts) and still on (before them)
CLOCKS = (1_750_000_000.0, 1.0e9)


def _bounds_hold(state: ClusterState, session: Session, now: float, exact: bool) -> int:
    """fewest_victims <= len(victim_jobs) for every pending job; equal where `exact` (a session
    that changed no victim job). Returns how many preemptors were checked with victims."""
    guard = RuntimeGuard(state, session, now)
    checked = 0
    for policy in (ReclaimPolicy(state, session, guard), PreemptPolicy(state, session, guard)):
        for job in pending_jobs(state, session):
            listed = len(policy.victim_jobs(job))
            fewest = policy.fewest_victims(job)
            assert 0 <= fewest <= listed, (policy.action, job.name, fewest, listed)
            if exact:
                assert fewest == listed, (policy.action, job.name, fewest, listed)
            checked += listed > 0
    return checked


def _check_bounds(state: ClusterState) -> int:
    checked = 0
    for now in CLOCKS:
        checked += _bounds_hold(state, Session.open(state), now, exact=True)
        greedy = run_greedy(state, now)          # placements and evictions changed some victim jobs
        checked += _bounds_hold(state, greedy.session, now, exact=not changed_victim_counts(greedy.session))
    return checked


@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.name)
def test_the_fewest_victims_never_exceed_the_list(path: Path) -> None:
    assert _check_bounds(build_cluster_state(load_snapshot(path))) > 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contended_clusters())
def test_the_fewest_victims_never_exceed_the_list_on_contended_clusters(doc: dict) -> None:
    _check_bounds(build_cluster_state(load_snapshot_dict(doc, "generated.json")))


def _search(state: ClusterState, now: float, work: int) -> tuple:
    session = run_greedy(state, now, evictions=False).session
    budget = Budget(work)
    outcomes = EvictionSearch(state, session, now).run(budget)
    return (budget.left, sorted((k, e.action, e.for_job, e.message) for k, e in session.evictions.items()),
            sorted((k, p.node, p.pipelined) for k, p in session.placements.items()),
            {a: (sorted(o.solved), sorted(o.failed.items()), o.attempts, o.skipped, o.budget_spent)
             for a, o in outcomes.items()})


def _same_without_shortcut(state: ClusterState, monkeypatch: pytest.MonkeyPatch, works: tuple[int, ...]) -> int:
    """Returns how many searches the shortcut stopped early."""
    stopped = 0
    for now in CLOCKS:
        for work in works:
            with_it = _search(state, now, work)
            with monkeypatch.context() as m:
                for policy in (ReclaimPolicy, PreemptPolicy, ConsolidationPolicy):
                    m.setattr(policy, "fewest_victims", lambda self, preemptor: 0)
                without = _search(state, now, work)
            assert with_it == without
            stopped += any(o[4] for o in with_it[3].values())
    return stopped


@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.name)
def test_the_search_decides_the_same_without_the_shortcut(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # bounds below and around the victim lists' lengths, so some attempts stop on them
    assert _same_without_shortcut(build_cluster_state(load_snapshot(path)), monkeypatch, (5, 40, 300, 3000)) > 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(contended_clusters())
def test_the_search_decides_the_same_without_the_shortcut_on_contended_clusters(
        monkeypatch: pytest.MonkeyPatch, doc: dict) -> None:
    _same_without_shortcut(build_cluster_state(load_snapshot_dict(doc, "generated.json")), monkeypatch, (1, 3, 8, 30))
