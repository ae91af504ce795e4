"""Consolidation's victims from the last of each queue only (kai_cp.actions.victims.victim_heads).

Consolidation considers the first maxNumberConsolidationPreemptees + 1 victims in victim order,
which only ever come from the last jobs in job order of each leaf queue. victim_heads finds
those from the snapshot's per-queue columns (ClusterState.victim_jobs) and the jobs the cycle
changed, without making every victim of the cluster; what consolidation then considers must be
exactly what listing every victim (preemptible_running) and queueing them gives.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustergen import clusters, contended_clusters
from kai_cp.actions.allocate import run_allocate
from kai_cp.actions.consolidation import ConsolidationPolicy
from kai_cp.actions.victims import Victim, VictimQueue, _last_in_job_order, preemptible_running, victim_order_key
from kai_cp.jobs import ACTIVE_ALLOCATED
from kai_cp.session import Session
from snapshot_builder import state_of


def every_victim_way(session: Session, max_jobs: int) -> list[tuple]:
    """What ConsolidationPolicy.victim_jobs gave before victim_heads: every victim listed."""
    by_queue = preemptible_running(session)
    out = [v for vs in by_queue.values() for v in vs]
    if max_jobs >= 0 and len(out) > max_jobs + 1:
        pops = min(len(out), max_jobs + 2)
        vq = VictimQueue(session, by_queue, pops)
        out = [v for v in (vq.pop() for _ in range(pops)) if v is not None]
    return [(v.job.name, [t.key for t in v.tasks], v.order_key) for v in out]


def check(doc: dict[str, Any], max_jobs: int, allocate: bool, data=None) -> None:
    state = state_of(doc)
    session = run_allocate(state).session if allocate else Session.open(state)
    if data is not None:
        # evictions of this cycle, some of them moved elsewhere: the jobs they touch are victims
        # made again from the session, the rest the snapshot's
        running = sorted((t for j in state.jobs.values() if j.preemptible for t in j.tasks
                          if t.node in state.table.index and t.status in ACTIVE_ALLOCATED),
                         key=lambda t: t.key)
        if running:
            for t in data.draw(st.lists(st.sampled_from(running), max_size=4, unique_by=lambda t: t.key), label="evict"):
                session.evict(t, "consolidation", None, "")
                if data.draw(st.booleans(), label="moved"):
                    session.place(t, data.draw(st.integers(0, len(state.nodes) - 1), label="to"), pipelined=True)
    policy = ConsolidationPolicy(state, session)
    policy.max_jobs = max_jobs
    preemptor = SimpleNamespace()           # no job is the preemptor: the whole list is compared
    got = [(v.job.name, [t.key for t in v.tasks], v.order_key) for v in policy.victim_jobs(preemptor)]
    want = every_victim_way(session, max_jobs)
    assert got == (want[:max_jobs + 1] if max_jobs >= 0 else want)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=contended_clusters(max_nodes=6, max_running=14), max_jobs=st.integers(-1, 5), allocate=st.booleans(),
       data=st.data())
def test_consolidation_considers_what_listing_every_victim_gives(doc: dict[str, Any], max_jobs: int,
                                                                 allocate: bool, data) -> None:
    check(doc, max_jobs, allocate, data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=clusters(max_jobs=12), max_jobs=st.integers(0, 3))
def test_consolidation_considers_what_listing_every_victim_gives_after_allocate(doc: dict[str, Any],
                                                                                max_jobs: int) -> None:
    check(doc, max_jobs, True)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 12))
def test_the_last_jobs_by_numbers_hold_the_last_by_job_order(seed: int, k: int) -> None:
    """Many ties in priority, elastic state and creation: the names decide among them."""
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    jobs = {}
    cols = SimpleNamespace(jobs=[], priority=[], elastic=[], creation=[])
    for i in range(n):
        name = f"j{rng.randint(0, 999):03d}-{i}"
        prio, elastic, created = rng.choice([50, 100]), rng.randint(0, 2), float(rng.randint(0, 3))
        jobs[name] = SimpleNamespace(name=name, key=(-prio, elastic, created, name))
        cols.jobs.append(name)
        cols.priority.append(prio)
        cols.elastic.append(elastic)
        cols.creation.append(created)
    state = SimpleNamespace(jobs=jobs, victim_jobs={"q": cols})
    last = _last_in_job_order(state, "q", k)
    assert _last_in_job_order(state, "q", k) == last      # again, from the kept order
    want = sorted((j.key for j in jobs.values()), reverse=True)[:k]
    assert sorted((j.key for j in last), reverse=True)[:k] == want


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=contended_clusters(max_nodes=6, max_running=14))
def test_each_jobs_victim_key_is_the_job_order_of_its_pods_on_nodes(doc: dict[str, Any]) -> None:
    """JobInfo.victim_key (from the state build's tally) against victim_order_key of the victim
    the job's active-allocated pods on the cycle's nodes make, or None without such pods or when
    the job is not preemptible; ClusterState.victims and victim_jobs list exactly those jobs."""
    state = state_of(doc)
    index = state.table.index
    victims = []
    for job in state.jobs.values():
        tasks = [t for t in job.tasks if t.status in ACTIVE_ALLOCATED and t.node in index]
        if job.preemptible and tasks:
            victims.append(job.name)
            assert job.victim_key == victim_order_key(Victim(job, tasks))
        else:
            assert job.victim_key is None
    assert state.victims == victims
    assert sorted(n for cols in state.victim_jobs.values() for n in cols.jobs) == sorted(victims)
    for queue, cols in state.victim_jobs.items():
        for name, prio, elastic, created in zip(cols.jobs, cols.priority, cols.elastic, cols.creation):
            job = state.jobs[name]
            assert job.queue == queue and (-prio, elastic, created, name) == job.victim_key
