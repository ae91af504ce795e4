"""The queue rules eviction actions validate with (spec 3.6 preempt pre-check, 3.7 reclaim gates).

Pure functions of the cluster state and the session's queue allocations: the reclaim and
preempt actions ask them whether a job may try, and whether a candidate victim set is allowed.
They reproduce KAI's proportion plugin exactly, quirks included, because which victims KAI
accepts decides which pods a user loses; each quirk is named where it is implemented.

Vectors are ``{"cpu", "memory", "gpu"} -> Fraction`` in queue units (millicores, bytes,
devices); ``-1`` in a bound means unlimited (spec 3.1.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Mapping, Sequence

from kai_cp.fairshare import allocatable, saturation
from kai_cp.jobs import ACTIVE_ALLOCATED, JobInfo, TaskInfo, queue_gpu_of_accepted
from kai_cp.queues import RESOURCES, QueueInfo
from kai_cp.session import Session
from kai_cp.state import ClusterState

Vector = Mapping[str, Fraction]
UNLIMITED = -1


# -- vector helpers (spec 3.1.1) ----------------------------------------------------------
def _le(x: Fraction, y: Fraction) -> bool:
    """KAI's compareQuantities: -1 is +infinity on either side."""
    if x == UNLIMITED:
        return y == UNLIMITED
    return y == UNLIMITED or x <= y


def vector_le(a: Vector, b: Vector) -> bool:
    """``a <= b`` in every resource ("LessEqual"); "not <=" means one resource exceeds."""
    return all(_le(a[r], b[r]) for r in RESOURCES)


def _plus(a: Vector, b: Vector) -> dict[str, Fraction]:
    return {r: a[r] + b[r] for r in RESOURCES}


def _allocatable(q: QueueInfo) -> dict[str, Fraction]:
    return {r: allocatable(q.deserved[r], q.limit[r], q.fair_share[r]) for r in RESOURCES}


def accepted_vector(state: ClusterState, task: TaskInfo) -> dict[str, Fraction]:
    """What a running task counts for in its queue (accepted resources, spec 3.2.2)."""
    idx = state.table.index.get(task.node) if task.node is not None else None
    mem = state.nodes[idx].gpu_memory if idx is not None else None
    r = task.request
    return {"cpu": Fraction(r.cpu), "memory": Fraction(r.memory), "gpu": Fraction(queue_gpu_of_accepted(task, mem))}


def root_path(state: ClusterState, queue: str) -> list[QueueInfo]:
    """The queue's ancestors from the root down to the queue itself."""
    return list(reversed(state.queue_path(queue)))


def leveled_queues(state: ClusterState, reclaimer: str, victim: str) -> tuple[QueueInfo, QueueInfo]:
    """KAI's getLeveledQueues: the first differing queues on the root->leaf paths, i.e. the
    siblings under the lowest common ancestor; two different top-level queues are siblings
    under an implicit root. When one path is a prefix of the other (never the case for two
    distinct leaf queues) KAI returns the last common queue twice, and so does this."""
    pair: tuple[QueueInfo, QueueInfo] | None = None
    for a, b in zip(root_path(state, reclaimer), root_path(state, victim)):
        pair = (a, b)
        if a.name != b.name:
            break
    if pair is None:
        raise KeyError(f"queue {reclaimer!r} or {victim!r} is not in the queue tree")
    return pair


def moved_victims(session: Session, victims: list[tuple[JobInfo, list[TaskInfo]]]) -> set[str]:
    """Keys of victim tasks the simulation re-placed (active-allocated again, i.e. pipelined
    elsewhere): KAI recognises "not really reclaimed" victims by this status."""
    return {t.key for _, tasks in victims for t in tasks if session.status(t) in ACTIVE_ALLOCATED}


# -- gate 1 and the preempt pre-check -------------------------------------------------------
def can_reclaim(state: ClusterState, session: Session, job: JobInfo, req: Vector) -> bool:
    """Gate 1 (spec 3.7.1): a job may reclaim only while its leaf queue stays within its fair
    share with the request added, and a non-preemptible job also within the queue's quota.

    ``req``: init resources of the tasks to allocate, GPU-memory tasks counting memory over the
    cluster's divisor (``kai_cp.ordering.request_vector(tasks, state.gpu_memory_divisor)``)."""
    q = state.queues[job.queue]
    if not vector_le(_plus(session.allocated[q.name], req), q.fair_share):
        return False
    return job.preemptible or vector_le(_plus(session.allocated_np[q.name], req), q.deserved)


def preempt_quota_ok(state: ClusterState, session: Session, job: JobInfo, req: Vector) -> bool:
    """Preempt's pre-check (spec 3.6, third row): a non-preemptible preemptor must fit its
    queue's and every ancestor's non-preemptible quota; limits are not checked here (they
    apply per task during the simulation). Failing jobs are skipped silently by KAI.

    ``req``: the tasks to allocate with GPU-memory tasks counting 0 GPU, as in the allocation
    check (``request_vector(tasks, None)``)."""
    if job.preemptible:
        return True
    for q in state.queue_path(job.queue):
        used = session.allocated_np[q.name]
        for r in RESOURCES:
            d = q.deserved[r]
            if d != UNLIMITED and req[r] > 0 and d < used[r] + req[r]:
                return False
    return True


# -- gates 2 and 3 ----------------------------------------------------------------------------
@dataclass
class _Ledger:
    """Queue amounts after the chunks taken so far (KAI's remaining-resources map) and the
    resources each queue lost something of (its "involved" resources)."""
    frozen: dict[str, dict[str, Fraction]]
    remaining: dict[str, dict[str, Fraction]] = field(default_factory=dict)
    involved: dict[str, set[str]] = field(default_factory=dict)

    def of(self, queue: str) -> dict[str, Fraction]:
        rem = self.remaining.get(queue)
        if rem is None:
            rem = self.remaining[queue] = dict(self.frozen[queue])
        return rem

    def take(self, path: Sequence[QueueInfo], chunk: Vector) -> None:
        for q in path:
            rem = self.of(q.name)
            for r in RESOURCES:
                rem[r] -= chunk[r]
            self.involved.setdefault(q.name, set()).update(r for r in RESOURCES if chunk[r] > 0)


class ReclaimValidator:
    """Gates 2 and 3 of reclaim (spec 3.7.2, 3.7.3) for one reclaimer's attempt.

    Built when the attempt starts: KAI evaluates every scenario of the attempt against the
    queue allocations of that moment, not against the virtual evictions the scenario itself
    made, so the allocations are copied here and never read from the session again."""

    def __init__(self, state: ClusterState, session: Session, job: JobInfo) -> None:
        self.state = state
        self.job = job
        self.allocated = {q: dict(v) for q, v in session.allocated.items()}
        self.allocated_np = {q: dict(v) for q, v in session.allocated_np.items()}
        self.multiplier = state.config.reclaimer_saturation_multiplier
        self.ignore_moved = state.config.allow_consolidating_reclaim

    # chunks ---------------------------------------------------------------------------
    def chunks(self, victim: JobInfo, tasks: list[TaskInfo], moved: set[str]) -> list[dict[str, Fraction]]:
        """The victim job's reclaimed amounts: per PodSet the first ``minAvailable`` victim
        tasks (in list order) form, over all PodSets, one core chunk; every further task is an
        elastic chunk of its own. Elastic chunks come first, the core chunk last. The split is
        made before moved tasks are dropped (with allowConsolidatingReclaim), as in KAI, so a
        moved task still takes its core place; chunks left empty are not chunks."""
        by_podset: dict[str, list[TaskInfo]] = {}
        for t in tasks:
            by_podset.setdefault(t.podset, []).append(t)
        core: list[TaskInfo] = []
        elastic: list[TaskInfo] = []
        for name, ps in victim.podsets.items():      # KAI: map order; the job's PodSet order here
            picked = by_podset.get(name, [])
            core += picked[:ps.min_available]
            elastic += picked[ps.min_available:]
        out = [c for c in (self._amount([t], moved) for t in elastic) if c is not None]
        core_amount = self._amount(core, moved)
        return out + ([core_amount] if core_amount is not None else [])

    def _amount(self, tasks: list[TaskInfo], moved: set[str]) -> dict[str, Fraction] | None:
        counted = [t for t in tasks if not (self.ignore_moved and t.key in moved)]
        if not counted:
            return None
        total = {r: Fraction(0) for r in RESOURCES}
        for t in counted:
            total = _plus(total, accepted_vector(self.state, t))
        return total

    # the check --------------------------------------------------------------------------
    def check(self, victims: list[tuple[JobInfo, list[TaskInfo]]], moved: set[str], req: Vector) -> str | None:
        """None when the victim set passes gates 2 and 3, else why not (naming the queue).

        ``victims``: victim jobs with their victim tasks (evicted and moved); ``moved``: keys
        of victim tasks the simulation re-placed on another node; ``req``: init resources of
        the preemptor tasks placed in this scenario. Victim queues are judged in the order
        their first victim appears (KAI: map order)."""
        by_queue: dict[str, list[dict[str, Fraction]]] = {}
        for job, tasks in victims:
            amounts = self.chunks(job, tasks, moved)
            if amounts:
                by_queue.setdefault(job.queue, []).extend(amounts)
        ledger = _Ledger(self.allocated)
        return self._gate2(by_queue, req, ledger) or self._gate3(req, ledger)

    def _gate2(self, by_queue: dict[str, list[dict[str, Fraction]]], req: Vector, ledger: _Ledger) -> str | None:
        """Every chunk must come from a queue that may lose it, judged at the level where the
        reclaimer's and the victim's branches meet; the test is made before the chunk is
        taken, so the last chunk may take the victim queue below its share (quirk)."""
        floors: dict[str, QueueInfo] = {}
        for victim_queue, amounts in by_queue.items():
            mine, theirs = leveled_queues(self.state, self.job.queue, victim_queue)
            path = self.state.queue_path(victim_queue)
            for chunk in amounts:
                reason = self._may_lose(mine, theirs, ledger.of(theirs.name), req)
                if reason:
                    return reason
                ledger.take(path, chunk)
            if quota_floor_applies(self.state, mine, theirs):
                floors[theirs.name] = theirs
        for name, q in floors.items():
            quota = q.deserved["gpu"]
            if self.allocated[name]["gpu"] >= quota > ledger.of(name)["gpu"]:
                return f"reclaim would take queue {q.label} below its GPU quota while it waits to place pods"
        return None

    def _may_lose(self, mine: QueueInfo, theirs: QueueInfo, rem: Vector, req: Vector) -> str | None:
        """Fair-share reclaim (victim above its allocatable share in some resource) or quota
        reclaim (reclaimer's level within quota with the request, victim above its quota)."""
        if not vector_le(rem, _allocatable(theirs)):
            return None
        within_quota = vector_le(_plus(self.allocated[mine.name], req), mine.deserved)
        if within_quota and not vector_le(rem, theirs.deserved):
            return None
        if within_quota:
            return f"reclaim would take queue {theirs.label} below its fair share and its quota"
        return (f"reclaim would take queue {theirs.label} below its fair share "
                f"(queue {mine.label} would exceed its quota, so it may not reclaim quota)")

    def _gate3(self, req: Vector, ledger: _Ledger) -> str | None:
        """At every level of the reclaimer's path, the reclaimer must stay within its fair
        share or strictly poorer (saturation x multiplier) than each sibling that lost
        resources; a non-preemptible reclaimer must also stay within each level's quota."""
        asked = {r for r in RESOURCES if req[r] > 0}
        for level in self.state.queue_path(self.job.queue):
            mine = _plus(ledger.remaining.get(level.name, self.allocated[level.name]), req)
            for name in ledger.remaining:
                sibling = self.state.queues[name]
                if sibling.parent != level.parent or sibling.name == level.name:
                    continue
                resources = ledger.involved.get(name, set()) | asked
                reason = self._poorer(level, mine, sibling, ledger.remaining[name], resources)
                if reason:
                    return reason
            if not self.job.preemptible and not vector_le(_plus(self.allocated_np[level.name], req), level.deserved):
                return f"non-preemptible workload would take queue {level.label} over its quota"
        return None

    def _poorer(self, level: QueueInfo, mine: Vector, sibling: QueueInfo, theirs: Vector,
                resources: set[str]) -> str | None:
        for r in RESOURCES:
            if r not in resources:
                continue
            fs_mine, fs_theirs = level.fair_share[r], sibling.fair_share[r]
            if fs_mine == UNLIMITED and fs_theirs == UNLIMITED:
                continue
            a, b = saturation(mine[r], fs_mine), saturation(theirs[r], fs_theirs)
            if a > 1 and fs_theirs > 0 and a * self.multiplier >= b:
                return (f"queue {level.label} would no longer be poorer than queue {sibling.label} in {r} "
                        f"(saturation {_fmt(a)}{'' if self.multiplier == 1 else f' x {_fmt(self.multiplier)}'}"
                        f" vs {_fmt(b)})")
        return None


def quota_floor_applies(state: ClusterState, reclaimer_level: QueueInfo, victim_level: QueueInfo) -> bool:
    """A reclaim may not take the victim's level below its GPU quota (kai-cp's rule, not KAI's)
    when that level waits to place pods and the reclaimer's level already holds its own quota.
    KAI tests each chunk before taking it (3.7.2), so its last chunk may cross the victim's
    quota; the victim then reclaims back within its quota from the reclaimer, above its quota,
    and the two take turns every few cycles (tests/fixtures/evictions/
    kai_reclaim_below_quota_loop.json). A level with nothing waiting takes nothing back, nor
    may anyone reclaim within quota from a reclaimer that stays within its own: KAI's reclaim
    scenarios cross quotas only so, and those reclaims stay."""
    quota, mine_quota = victim_level.deserved["gpu"], reclaimer_level.deserved["gpu"]
    return (quota != UNLIMITED and mine_quota != UNLIMITED and reclaimer_level.allocated["gpu"] >= mine_quota
            and victim_level.name in waiting_levels(state))


def waiting_levels(state: ClusterState) -> frozenset[str]:
    """Queues (every level) with a job of pending pods in their subtree, once per state (from the
    jobs with waiting pods: every job was a tenth of the model's eviction rows at 1,000 nodes)."""
    cached = state.__dict__.get("_waiting_levels")
    if cached is None:
        out: set[str] = set()
        for j in state.waiting_jobs:
            if j.queue in state.queues and j.has_pending():
                out.update(q.name for q in state.queue_path(j.queue))
        cached = state.__dict__["_waiting_levels"] = frozenset(out)
    return cached


def _fmt(x: Fraction | float) -> str:
    return f"{float(x):.3g}"
