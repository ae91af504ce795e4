"""KAI's stale-gang eviction action (spec 6.6, 2.7, 10.2): a running gang that fell below its
minimum (a pod failed or was deleted) holds its resources without being able to make progress;
after a grace period its remaining pods are evicted so the whole gang can start again.

It runs last in KAI's cycle, on the session the other actions leave: pods placed or pipelined
this cycle count as active, pods evicted this cycle count too (they are Releasing, which KAI
counts as active-used until they are gone, spec 16). When a job has been stale since its
PodGroup's `kai.scheduler/stale-podgroup-timestamp` for at least the grace period, every
Allocated, Pipelined, Binding, Bound or Running pod of it is evicted at once, with KAI's message.

The time a job became stale is persisted in that annotation (read at state build into
`JobInfo.stale_since`): the outcome says, per job, what to write or remove, and the StaleJob
event text. Unlike KAI (a quirk of its status updater, spec 10.2) the annotation is also written
for a job that is not ready and has pending pods, so the grace period still spans cycles for it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from kai_cp.errors import ObjectWarning
from kai_cp.jobs import ACTIVE_ALLOCATED, ACTIVE_USED, DEFAULT_PODSET, JobInfo, TaskInfo
from kai_cp.session import Session
from kai_cp.state import STALE_ANNOTATION, ClusterState
from models.duration import duration_seconds

ACTION = "stalegangeviction"


def rfc3339(ts: float) -> str:
    """KAI's annotation format: RFC 3339 in UTC, whole seconds (Go's time.RFC3339)."""
    return datetime.fromtimestamp(math.floor(ts), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class StaleJob:
    """What stale-gang eviction decided for one job whose staleness annotation changes, that is
    marked stale, or that lost pods."""
    job: str                              # PodGroup name
    namespace: str
    stale_since: float | None             # the value to persist; None: not stale (annotation removed)
    annotation: str | None                # its RFC 3339 text
    write: bool                           # the PodGroup annotation must be set (True) or removed
    event: str | None                     # StaleJob event text (KAI emits it for jobs marked stale)
    evicted: tuple[str, ...] = ()         # running pods evicted
    withdrawn: tuple[str, ...] = ()       # pods placed earlier in this cycle, placement undone


@dataclass
class StaleOutcome:
    now: float
    jobs: dict[str, StaleJob] = field(default_factory=dict)     # job name -> decision
    deadline: float | None = None         # earliest end of a running grace period: a cycle is due then
    # found while deciding, reported with the cycle's decisions; never added to the state, which
    # the in-cluster loop and simulate keep deciding from
    warnings: list[ObjectWarning] = field(default_factory=list)

    def annotations(self) -> list[dict]:
        """PodGroup annotation writes: set (value) or remove (value null)."""
        return [{"podGroup": j.job, "namespace": j.namespace, "annotation": STALE_ANNOTATION,
                 "value": j.annotation}
                for j in sorted(self.jobs.values(), key=lambda j: (j.namespace, j.job)) if j.write]

    def stale_jobs(self) -> list[dict]:
        return [{"podGroup": j.job, "namespace": j.namespace, "staleSince": j.annotation, "event": j.event,
                 "evicted": list(j.evicted), "withdrawn": list(j.withdrawn)}
                for j in sorted(self.jobs.values(), key=lambda j: (j.namespace, j.job)) if j.stale_since is not None]

    def to_json(self) -> dict:
        return {"podGroupAnnotations": self.annotations(), "staleJobs": self.stale_jobs()}


def outcome_json(outcome: StaleOutcome | None) -> dict:
    """The cycle's decisions keys for stale gangs (empty lists when the action did not run)."""
    return outcome.to_json() if outcome is not None else {"podGroupAnnotations": [], "staleJobs": []}


def eviction_message(job: JobInfo, task: TaskInfo) -> str:
    """KAI's GetGangEvictionMessage: the plain form for a job with only the default sub-group."""
    ps = job.podsets[task.podset]
    if len(job.podsets) == 1 and DEFAULT_PODSET in job.podsets:
        return (f"Workload doesn't meet the minimum required number of pods ({ps.min_available}), "
                f"evicting remaining pod: {task.namespace}/{task.name}")
    return (f"Workload doesn't meet the minimum required number of pods ({ps.min_available}) in sub-group "
            f"{ps.name}, evicting remaining pod: {task.namespace}/{task.name}")


def stale_event(job: JobInfo, session: Session) -> str:
    """KAI's StaleJob event text (recordStaleJobEvent), counted at the end of the cycle."""
    active_total = min_total = 0
    extra = ""
    for ps in job.podsets.values():
        active = sum(1 for t in ps.tasks if session.status(t) in ACTIVE_USED)
        active_total += active
        min_total += ps.min_available
        if active < ps.min_available and ps.name != DEFAULT_PODSET:
            extra += f", subGroup {ps.name} minMember is {ps.min_available} and {active} pods are active"
    return f"Job is stale. {active_total} pods are active, minMember is {min_total}" + extra


def is_stale(job: JobInfo, session: Session) -> bool:
    """KAI's IsStale on the session's statuses: no pod succeeded, some pod active-used, and some
    PodSet below its minimum of active-used pods."""
    if job.name not in session.job_version:
        return job.stale_in_snapshot     # a job this cycle left alone: counted at state build
    if job.succeeded:
        return False
    status = session.status
    total, below = 0, False
    for ps in job.podsets.values():
        active = sum(1 for t in ps.tasks if status(t) in ACTIVE_USED)
        total += active
        below = below or active < ps.min_available
    return total > 0 and below


def grace_seconds(job: JobInfo, state: ClusterState, warnings: list[ObjectWarning]) -> float:
    """The PodGroup's `spec.stalenessGracePeriod` (newer KAI) when set and valid, else the global
    `globalDefaultStalenessGracePeriod`; negative means never evict. An invalid value adds to
    `warnings`."""
    spec = job.pod_group.spec if job.pod_group is not None else None
    # an extra of the model, a declared field of the view: both read by the JSON name
    raw = getattr(spec, "stalenessGracePeriod", None) if spec is not None else None
    if raw is None:
        return state.config.stale_grace_period_seconds
    try:
        return float(duration_seconds(raw))
    except ValueError:
        warnings.append(ObjectWarning(f"PodGroup/{job.namespace}/{job.name}", "spec.stalenessGracePeriod",
                                      f"{raw!r} is not a duration (e.g. 30s, -1s); the global grace period applies"))
        return state.config.stale_grace_period_seconds


def run_stale_gang_eviction(state: ClusterState, session: Session, now: float) -> StaleOutcome:
    """Evict the remaining pods of gangs stale for at least their grace period (spec 6.6)."""
    out = StaleOutcome(now)
    # Only stale jobs and jobs carrying the annotation have anything to decide: those of the
    # snapshot (found at state build) and those this cycle changed, not every job of the cluster.
    jobs = {j.name: j for j in state.stale_watch}
    for name in session.job_version:
        if name in state.jobs:
            jobs.setdefault(name, state.jobs[name])
    checked = [(job, is_stale(job, session)) for job in jobs.values()]
    for job, stale in sorted(((j, s) for j, s in checked if s or j.stale_annotated),
                             key=lambda js: (js[0].namespace, js[0].name)):
        if not stale:       # annotated but recovered (or an unparseable value): the annotation goes
            out.jobs[job.name] = StaleJob(job.name, job.namespace, None, None, True, None)
            continue
        since = job.stale_since if job.stale_since is not None else now
        marked = job.stale_since is not None          # KAI marks a job stale when it read the annotation
        evicted: list[str] = []
        withdrawn: list[str] = []
        grace = grace_seconds(job, state, out.warnings)
        if grace >= 0 and now - since < grace:
            out.deadline = since + grace if out.deadline is None else min(out.deadline, since + grace)
        elif grace >= 0:
            marked = True
            for task in sorted(job.tasks, key=lambda t: t.key):
                if session.status(task) not in ACTIVE_ALLOCATED:
                    continue
                if task.key in session.placements:
                    session.unplace(task)                 # placed earlier this cycle: never bound
                    withdrawn.append(task.key)
                elif task.node in state.table.index:
                    session.evict(task, ACTION, None, eviction_message(job, task))
                    evicted.append(task.key)
                else:
                    out.warnings.append(ObjectWarning(
                        f"Pod/{task.key}", "spec.nodeName",
                        f"runs on node {task.node!r} outside this cycle's nodes; stale-gang eviction skips it"))
        out.jobs[job.name] = StaleJob(job.name, job.namespace, since, rfc3339(since), job.stale_since is None,
                                      stale_event(job, session) if marked else None, tuple(evicted), tuple(withdrawn))
    return out


def run_after_actions(state: ClusterState, session: Session, now: float | None) -> StaleOutcome | None:
    """The cycle's last step: stale-gang eviction on the session the cycle returns, when the
    configuration lists the action (KAI leaves the annotations alone otherwise)."""
    if ACTION not in state.config.actions:
        return None
    return run_stale_gang_eviction(state, session, time.time() if now is None else now)
