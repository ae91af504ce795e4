"""Minimum-runtime protection of victims (KAI's `minruntime` plugin, spec 6.7).

A job that (re)started recently is protected from preempt / reclaim for a while, so that a
busy cluster does not evict jobs before they get useful work done. Protected non-elastic jobs
are not victims at all; protected elastic jobs may only lose the pods above their minimum.

``now`` is always a parameter (the cycle's clock), so one cycle decides with one time and
tests and offline runs are reproducible.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Iterable, Literal

from kai_cp.jobs import ACTIVE_USED, JobInfo, TaskInfo, is_elastic
from kai_cp.queues import QueueInfo
from kai_cp.session import Session
from kai_cp.state import ClusterState

Action = Literal["preempt", "reclaim"]


def _first_set(path: Iterable[QueueInfo], attr: str) -> Fraction | None:
    for q in path:
        value = getattr(q, attr)
        if value is not None:
            return value
    return None


def preempt_min_runtime(state: ClusterState, victim_queue: str) -> Fraction:
    """The victim's queue `preemptMinRuntime`, else the nearest ancestor's, else the default."""
    found = _first_set(state.queue_path(victim_queue), "preempt_min_runtime")
    return state.config.default_preempt_min_runtime if found is None else found


def reclaim_min_runtime(state: ClusterState, victim_queue: str, reclaimer_queue: str) -> Fraction:
    """`reclaimMinRuntime` resolved with the configured method (`lca` by default).

    `queue`: the same walk as for preempt, starting at the victim's queue. `lca`: the value
    belongs to the branch the reclaimer is taking from, so the walk starts one level below the
    lowest common ancestor on the victim's side; reclaimers from another top-level queue see
    the victim's top-level queue's value (KAI's implicit shadow root)."""
    default = state.config.default_reclaim_min_runtime
    if victim_queue not in state.queues or reclaimer_queue not in state.queues:
        return default                        # KAI logs and uses the default
    victim_path = state.queue_path(victim_queue)
    if state.config.reclaim_resolve_method == "queue":
        found = _first_set(victim_path, "reclaim_min_runtime")
        return default if found is None else found
    theirs = list(reversed(victim_path))      # root -> leaf
    mine = list(reversed(state.queue_path(reclaimer_queue)))
    if theirs[0].name != mine[0].name:
        top = theirs[0].reclaim_min_runtime
        return default if top is None else top
    lca = 0
    for i in range(min(len(mine), len(theirs))):
        if mine[i].name != theirs[i].name:
            break
        lca = i
    start = lca + 1 if lca + 1 < len(theirs) else lca
    found = _first_set(reversed(theirs[:start + 1]), "reclaim_min_runtime")
    return default if found is None else found


def protected(state: ClusterState, victim_job: JobInfo, action: Action, reclaimer_queue: str, now: float) -> bool:
    """Whether the victim ran for less than its min-runtime: ``now < lastStart + minRuntime``.
    Jobs without a last start are never protected, nor is anything when the minruntime plugin
    is not configured."""
    if victim_job.last_start is None or not state.config.min_runtime_enabled:
        return False
    return now < victim_job.last_start + min_runtime_seconds(state, action, victim_job.queue, reclaimer_queue)


def min_runtime_seconds(state: ClusterState, action: Action, victim_queue: str, reclaimer_queue: str) -> float:
    """The min-runtime protecting a job of `victim_queue` against `action` by `reclaimer_queue`
    (ignored for preempt), cached on the state."""
    cache = state.__dict__.get("_min_runtime")     # per (action, victim queue, reclaimer queue)
    if cache is None:
        cache = state.__dict__["_min_runtime"] = {}
    key = (action, victim_queue, reclaimer_queue if action == "reclaim" else None)
    runtime = cache.get(key)
    if runtime is None:
        if action == "preempt":
            runtime = preempt_min_runtime(state, victim_queue)
        elif action == "reclaim":
            runtime = reclaim_min_runtime(state, victim_queue, reclaimer_queue)
        else:
            raise ValueError(f"min-runtime applies to preempt and reclaim, not {action!r}")
        runtime = cache[key] = float(runtime)
    return runtime


def reclaimers_passed(state: ClusterState, victim_job: JobInfo, reclaimers: frozenset, now: float) -> tuple[frozenset, int]:
    """The `reclaimers` whose reclaim this job's min-runtime allows (filter_victim for each, at
    once), and a key for that set among the job queue's (-1: all of them). A non-elastic job
    passes a reclaimer when `now >= lastStart + runtime`, monotone in the runtime: with the
    reclaimers sorted by runtime (cached per victim queue and reclaimer set) the set is a prefix."""
    if victim_job.last_start is None or not state.config.min_runtime_enabled or is_elastic(victim_job):
        return reclaimers, -1
    cache = state.__dict__.setdefault("_reclaim_prefixes", {})
    key = (victim_job.queue, reclaimers)
    entry = cache.get(key)
    if entry is None:
        pairs = sorted((min_runtime_seconds(state, "reclaim", victim_job.queue, r), r) for r in reclaimers)
        entry = cache[key] = ([p[0] for p in pairs], [p[1] for p in pairs], {})
    runtimes, names, prefixes = entry
    lo, hi = 0, len(runtimes)
    while lo < hi:                         # the first reclaimer that still protects the job
        mid = (lo + hi) // 2
        if now < victim_job.last_start + runtimes[mid]:
            hi = mid
        else:
            lo = mid + 1
    got = prefixes.get(lo)
    if got is None:
        got = prefixes[lo] = frozenset(names[:lo])
    return got, lo


def filter_victim(state: ClusterState, victim_job: JobInfo, action: Action, reclaimer_queue: str, now: float) -> bool:
    """True when the job may be a victim: protected non-elastic jobs are left out; elastic
    jobs always pass, their protection is enforced per scenario by :func:`elastic_ok`."""
    return is_elastic(victim_job) or not protected(state, victim_job, action, reclaimer_queue, now)


def elastic_ok(state: ClusterState, victim_job: JobInfo, victim_tasks: list[TaskInfo], action: Action,
               reclaimer_queue: str, now: float, session: Session | None = None) -> bool:
    """A protected elastic victim must keep at least ``minAvailable`` active pods in every
    PodSet after losing ``victim_tasks`` (KAI: ``minAvailable > active_used - victims``
    rejects the scenario). Active pods are counted with the session's statuses when given
    (an evicted pod is Releasing, still active; a pod placed this cycle counts), else with
    the snapshot's."""
    if not is_elastic(victim_job) or not protected(state, victim_job, action, reclaimer_queue, now):
        return True
    losing: dict[str | None, int] = {}
    for t in victim_tasks:
        losing[t.podset] = losing.get(t.podset, 0) + 1
    for name, ps in victim_job.podsets.items():
        active = sum(1 for t in ps.tasks if (session.status(t) if session else t.status) in ACTIVE_USED)
        if ps.min_available > active - losing.get(name, 0):
            return False
    return True
