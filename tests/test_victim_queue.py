"""The eviction actions' victim lists and victim queue, against their plain definitions.

Why: at 10,000 nodes the victims of every preemptible job (~31,000) are derived once per state
from the snapshot (tasks and order key), a job the cycle left alone keeps that victim, and
consolidation's capped queue keeps per leaf only the victims that could pop. Each shortcut must
give what a scan of every job's tasks and a full victim queue give, or decisions change."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from clustergen import contended_clusters
from kai_cp.actions import victims as vm
from kai_cp.actions.allocate import run_allocate
from kai_cp.actions.pipeline import run_greedy
from kai_cp.jobs import ACTIVE_ALLOCATED
from kai_cp.loader import load_snapshot, load_snapshot_dict
from kai_cp.session import Session
from kai_cp.state import ClusterState, build_cluster_state

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = sorted((ROOT / "examples").glob("*.zip")) + sorted((ROOT / "tests" / "fixtures" / "evictions").glob("*.json"))
NOW = 1_750_000_000.0


def scanned(session: Session) -> dict[str, list[tuple[str, list[str], tuple]]]:
    """Per queue, each preemptible job's active tasks by a scan of all its tasks, with the order key
    victim_order_key gives a fresh victim of them. A job with an active task off the cycle's nodes
    (another shard's) is none."""
    index, out = session.state.table.index, {}
    for j in session.state.jobs.values():
        if not j.preemptible or any(t.status in ACTIVE_ALLOCATED and t.node not in index for t in j.tasks):
            continue
        tasks = sorted((t for t in j.tasks if t.node in index and t.status in ACTIVE_ALLOCATED
                        and (t.key in session.evictions) == (t.key in session.placements)), key=lambda t: t.order_key)
        if tasks:
            out.setdefault(j.queue, []).append((j.name, [t.key for t in tasks], vm.victim_order_key(vm.Victim(j, tasks))))
    return out


def listed(session: Session) -> dict[str, list[tuple[str, list[str], tuple]]]:
    return {q: [(v.job.name, [t.key for t in v.tasks], v.order_key) for v in vs]
            for q, vs in vm.preemptible_running(session).items()}


def check(state: ClusterState) -> None:
    fresh = Session.open(state)
    assert listed(fresh) == scanned(fresh)
    greedy = run_greedy(state, NOW, bounded=True)         # placements, and evictions where there are any
    assert listed(greedy.session) == scanned(greedy.session)
    for session in (fresh, greedy.session):
        by_queue = vm.preemptible_running(session)
        flat = [v for vs in by_queue.values() for v in vs]
        for pops in sorted({1, 2, 5, 18, len(flat)}):
            full = vm.VictimQueue(session, flat)
            want = [full.pop() for _ in range(pops)]
            for given_as in (flat, by_queue):
                capped = vm.VictimQueue(session, given_as, pops)
                assert [capped.pop() for _ in range(pops)] == want


@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.name)
def test_victims_and_capped_queue_equal_their_definitions(path: Path) -> None:
    check(build_cluster_state(load_snapshot(path)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contended_clusters())
def test_victims_and_capped_queue_equal_their_definitions_on_contended_clusters(doc: dict) -> None:
    check(build_cluster_state(load_snapshot_dict(doc, "generated.json")))


def test_a_changed_job_is_listed_with_what_it_has_left() -> None:
    """A job the session evicted a pod of offers its other pods only, with their order key."""
    path = ROOT / "examples" / "showcase-cluster.zip"
    state = build_cluster_state(load_snapshot(path))
    session = run_allocate(state).session
    victim = next(v for vs in vm.preemptible_running(session).values() for v in vs if len(v.tasks) > 1)
    session.evict(victim.tasks[0], "preempt", None, "")
    after = {v.job.name: v for vs in vm.preemptible_running(session).values() for v in vs}[victim.job.name]
    assert after.tasks == victim.tasks[1:]
    assert after.order_key == vm.victim_order_key(vm.Victim(victim.job, victim.tasks[1:]))
    assert listed(session) == scanned(session)


class _Unmemoised(vm.VictimQueue):
    """The victim queue walking the whole tree at every pop, as before its picks were kept."""

    def pop(self):
        self._heads.clear()
        self._picks.clear()
        return super().pop()


def _pops_with_takes_and_pushes(state: ClusterState) -> int:
    """Pops as _solve_partial makes them (a pod taken from each popped victim, the rest pushed
    back), with the session changed and restored between some pops: the queue keeping its picks
    must pop what the one walking the tree every time pops."""
    session = run_greedy(state, NOW, bounded=True).session
    flat = [v for vs in vm.preemptible_running(session).values() for v in vs]
    kept, walked = vm.VictimQueue(session, flat), _Unmemoised(session, flat)
    pops = 0
    while pops < 300:
        v, w = kept.pop(), walked.pop()
        assert (v and (v.job.name, [t.key for t in v.tasks])) == (w and (w.job.name, [t.key for t in w.tasks]))
        if v is None:
            break
        pops += 1
        for q in (kept, walked):
            q.took(v.tasks[-1:])
            if len(v.tasks) > 1:
                q.push(vm.Victim(v.job, v.tasks[:-1]))
            if pops % 5 == 0:          # a take from another queue's victim than the one popped
                q.took(flat[pops % len(flat)].tasks[:1])
        if pops % 7 == 0:
            # a pod evicted between pops (the queues' allocations change), then kept by a rollback
            cp = session.checkpoint()
            session.evict(v.tasks[0], "reclaim", None, "")
            assert (kept.pop() or v).job.name == (walked.pop() or v).job.name
            session.rollback(cp)
    return pops


@pytest.mark.parametrize("path", SNAPSHOTS[:3], ids=lambda p: p.name)
def test_the_queue_keeping_its_picks_pops_as_one_walking_the_tree(path: Path) -> None:
    assert _pops_with_takes_and_pushes(build_cluster_state(load_snapshot(path))) > 10


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contended_clusters())
def test_the_queue_keeping_its_picks_pops_as_one_walking_the_tree_on_contended_clusters(doc: dict) -> None:
    _pops_with_takes_and_pushes(build_cluster_state(load_snapshot_dict(doc, "generated.json")))
