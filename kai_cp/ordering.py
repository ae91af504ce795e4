"""KAI's order of work: tasks to allocate (4.4), job order (4.2) and the hierarchical queue order (3.8).

The queue order reacts to what was placed earlier in the same action, so it is evaluated
against a live Session at every pop, as KAI re-orders its queue tree lazily after each pop.
"""

from __future__ import annotations

import heapq
from fractions import Fraction
from typing import Iterable

from kai_cp.fairshare import allocatable
from kai_cp.jobs import JobInfo, TaskInfo, elastic_state
from kai_cp.queues import RESOURCES, QueueInfo
from kai_cp.session import Session



def tasks_to_allocate(job: JobInfo, session: Session, real: bool = True) -> list[TaskInfo]:
    """Missing members of every unsatisfied PodSet, or one more pod once the gang is satisfied (4.4).
    In an eviction scenario's simulation (`real=False`) the pods evicted in this session are
    candidates too: that is how victims get re-placed."""
    def podset_key(ps):
        n = session.active_allocated(job, ps.name)
        below = n < ps.min_available
        return (0 if below else 1, Fraction(0) if below else Fraction(n, ps.min_available), ps.name)

    podsets = sorted(job.podsets.values(), key=podset_key)
    unsatisfied = [ps for ps in podsets if session.active_allocated(job, ps.name) < ps.min_available]
    limit = len(unsatisfied) if unsatisfied else 1
    out: list[TaskInfo] = []
    for ps in podsets:
        if limit == 0:
            break
        cands = [t for t in ps.pending if t.key not in session.placements]
        if not real and session.evictions:
            cands = sorted(cands + [t for t in ps.tasks if t.key in session.evictions and t.key not in session.placements],
                           key=lambda t: t.order_key)
        if not cands:
            continue
        n = session.active_allocated(job, ps.name)
        take = ps.min_available - n if n < ps.min_available else 1
        out += cands[:take]
        limit -= 1
    return out


def request_vector(tasks: Iterable[TaskInfo], divisor: int | None) -> dict[str, Fraction]:
    """Sum of requests; GPU-memory tasks count memory / `divisor` GPUs (init_resources, with the
    cluster's ClusterState.gpu_memory_divisor) or 0 when `divisor` is None (limit check, 3.6)."""
    cpu, memory, gpu = _request_sums(tasks, divisor)
    return {"cpu": Fraction(cpu), "memory": Fraction(memory), "gpu": Fraction(gpu)}


def request_floats(tasks: Iterable[TaskInfo], divisor: int | None) -> list[float]:
    """request_vector's values as floats in RESOURCES order (the queue order compares floats),
    without making Fractions of them first (the same floats: each sum is exact)."""
    return [float(v) for v in _request_sums(tasks, divisor)]


def _request_sums(tasks: Iterable[TaskInfo], divisor: int | None) -> tuple[int, int, int | Fraction]:
    cpu = memory = gpu = 0
    for t in tasks:
        r = t.request
        cpu += r.cpu
        memory += r.memory
        if r.kind != "GpuMemory":
            gpu += r.gpu_quota
        elif divisor is not None:
            gpu += r.pending_gpus(divisor)
    return cpu, memory, gpu


def job_order_key(job: JobInfo, session: Session) -> tuple:
    """Priority desc, elastic state (below < exactly < above), creation, name (4.2)."""
    below = above = False
    for ps in job.podsets.values():
        n = session.active_allocated(job, ps.name)
        below |= n < ps.min_available
        above |= n > ps.min_available
    return job.order_key_at(elastic_state(below, above))


# -- queue comparison helpers (3.1) -------------------------------------------------------
class QueueView:
    """A queue's fixed numbers for ordering, as floats (KAI compares shares in float64)."""

    __slots__ = ("q", "name", "priority", "created", "deserved", "fair", "share_base", "zero_alloc", "_last")

    def __init__(self, q: QueueInfo, total: dict[str, Fraction]):
        self.q, self.name, self.priority, self.created = q, q.name, q.priority, q.creation[0]
        self.deserved = [float(q.deserved[r]) for r in RESOURCES]
        self.fair = [float(q.fair_share[r]) for r in RESOURCES]
        base, zero = [], []
        for r in RESOURCES:
            a = allocatable(q.deserved[r], q.limit[r], q.fair_share[r])
            zero.append(a == 0)
            base.append(float(total[r] if a == -1 else a))
        self.share_base, self.zero_alloc = base, zero
        self._last: tuple = (None, 0.0, [])

    def dominant(self, alloc: list[float]) -> float:
        return max(self.shares(alloc))

    def shares(self, alloc: list[float]) -> list[float]:
        b0, b1, b2 = self.share_base
        return [alloc[0] * 1000 if b0 == 0 else alloc[0] / b0, alloc[1] * 1000 if b1 == 0 else alloc[1] / b1,
                alloc[2] * 1000 if b2 == 0 else alloc[2] / b2]

    def allocated_shares(self, alloc: list[float]) -> tuple[float, list[float]]:
        """(dominant share, share vector) of the queue's allocation, kept for the last allocation
        list seen: Session.allocated_floats gives one list per change of the queue's allocation,
        and a queue is ranked again for every new head job (an eviction simulation pops dozens of
        jobs per scenario while no allocation changes)."""
        last = self._last
        if last[0] is not alloc:
            shares = self.shares(alloc)
            last = self._last = (alloc, max(shares), shares)
        return last[1], last[2]


def _le(a: float, b: float) -> bool:
    """a <= b with -1 meaning +infinity on either side (3.1.1)."""
    if b == -1:
        return True
    if a == -1:
        return False
    return a <= b


def queue_key(v: QueueView, a: list[float], req: list[float], shift: list[float] | None = None) -> tuple:
    """Rules 1-6 of the queue order (3.8) as one sortable key: each rule reads only its own
    queue, so a queue's key is computed once per change of its allocation or head job and two
    queues compare as tuples. `a` allocated, `req` the head job's init resources, `shift`
    (victim ordering) replaces `req` in rule 5 only."""
    over = v.fair[0] < a[0] and v.fair[1] < a[1] and v.fair[2] < a[2]          # 1. over-utilised last
    starved = _le(a[0] + req[0], v.deserved[0]) and _le(a[1] + req[1], v.deserved[1]) \
        and _le(a[2] + req[2], v.deserved[2])                                     # 2. starved first
    z = v.zero_alloc
    zero = (z[0] and a[0] + req[0] > 0) or (z[1] and a[1] + req[1] > 0) or (z[2] and a[2] + req[2] > 0)  # 4.
    s = shift or req
    return (over, not starved, -v.priority, zero,                                 # 3. priority
            v.dominant([a[0] + s[0], a[1] + s[1], a[2] + s[2]]),                  # 5. with the head job
            v.allocated_shares(a)[0])                                             # 6. allocated only


def shares_less(lv: list[float], lcreated, rv: list[float], rcreated) -> bool:
    """Rules 7-8, for queues equal in every keyed rule: the weaker allocatable share vector
    (`QueueView.shares`), then creation (l only if strictly older: equal timestamps favour r)."""
    le = lv[0] <= rv[0] and lv[1] <= rv[1] and lv[2] <= rv[2]
    ge = rv[0] <= lv[0] and rv[1] <= lv[1] and rv[2] <= lv[2]
    if le and not ge:
        return True
    if ge and not le:
        return False
    return lcreated < rcreated


def queue_rank(v: QueueView, a: list[float], req: list[float], shift: list[float] | None = None) -> tuple:
    """What the queue order compares of one queue: (rules 1-6 key, share vector, creation)."""
    return queue_key(v, a, req, shift), v.allocated_shares(a)[1], v.created


def rank_less(l: tuple, r: tuple) -> bool:
    """True when the queue ranked `l` goes before the one ranked `r` (queue_rank)."""
    if l[0] != r[0]:
        return l[0] < r[0]
    return shares_less(l[1], l[2], r[1], r[2])


def queue_less(l: QueueView, la: list[float], lreq: list[float],
               r: QueueView, ra: list[float], rreq: list[float],
               lshift: list[float] | None = None, rshift: list[float] | None = None) -> bool:
    """True when queue l goes before r; `*a` allocated, `*req` the head job's init resources (3.8).
    `*shift` replaces `*req` in rule 5 only: victim ordering compares dominant shares net of the
    victims taken (and no pending job elsewhere)."""
    return rank_less(queue_rank(l, la, lreq, lshift), queue_rank(r, ra, rreq, rshift))


def queue_tree(state) -> tuple[dict[str, QueueView], dict[str, list[str]], list[str]]:
    """The queue tree as the job and victim queues walk it: views, children and roots, each in
    creation order. Built once per cluster state (quotas, limits, fair shares and the total do not
    change within a cycle; the eviction search builds a job queue per simulated scenario)."""
    cached = state.__dict__.get("_queue_tree")
    if cached is not None:
        return cached
    views = {q.name: QueueView(q, state.total) for q in state.queues.values()}
    children = {q.name: sorted(q.children, key=lambda c: state.queues[c].creation) for q in state.queues.values()}
    roots = sorted((q.name for q in state.queues.values() if q.parent is None), key=lambda n: state.queues[n].creation)
    state.__dict__["_queue_tree"] = (views, children, roots)
    return views, children, roots


_ORDER = ("order",)


class JobQueue:
    """KAI's JobsOrderByQueues for the allocate action: pop the next job across the queue tree.

    Leaves keep a heap of jobs keyed when pushed (a job's key only changes through its own
    placements, i.e. between its pop and re-push). The best job of each subtree is cached and
    recomputed along the path of the last push or pop, and when the subtree's allocation
    changed: comparing two siblings reads only their own allocation and head jobs, and a
    placement anywhere below a queue changes that queue's allocation too (an eviction scenario
    re-places victims popped long before).
    """

    def __init__(self, session: Session, jobs: Iterable[JobInfo], real: bool = True):
        self.session = session
        self.real = real
        self.views, self.children, self.roots = queue_tree(session.state)
        self.heaps: dict[str, list] = {}
        self._init: dict[str, list[float]] = {}
        # queue -> (its best job, its allocation's change count when worked out)
        self._best: dict[str, tuple[JobInfo | None, int]] = {}
        # queue -> (queue_rank, allocation's change count) against its current best job
        self._key: dict[str, tuple[tuple, int]] = {}
        self._seq = 0
        # Heaps built at once (the eviction search builds a queue of every pending job per
        # simulated scenario): the same pop order as pushing them one by one, keys being unique.
        derived, versions = session.derived, session.job_version
        for j in jobs:
            self._seq += 1
            # job_derived inlined (a queue per simulated scenario keys ~200 jobs, most unchanged)
            hit = derived.get((_ORDER, j.name))
            key = hit[1] if hit is not None and hit[0] == versions.get(j.name, 0) else self._order_key(j)
            self.heaps.setdefault(j.queue, []).append((key, self._seq, j))
        for heap in self.heaps.values():
            heapq.heapify(heap)

    def _order_key(self, job: JobInfo) -> tuple:
        return self.session.job_derived(_ORDER, job.name, lambda: job_order_key(job, self.session))

    def push(self, job: JobInfo) -> None:
        self._seq += 1
        heapq.heappush(self.heaps.setdefault(job.queue, []), (self._order_key(job), self._seq, job))
        self._init.pop(job.name, None)
        self._invalidate(job.queue)

    def _invalidate(self, queue: str) -> None:
        for q in self.session.state.queue_path(queue):
            self._best.pop(q.name, None)
            self._key.pop(q.name, None)

    def __bool__(self) -> bool:
        return any(self.heaps.values())

    def init_resources(self, job: JobInfo) -> list[float]:
        v = self._init.get(job.name)
        if v is None:
            s = self.session

            v = self._init[job.name] = s.job_derived(("init", self.real), job.name, lambda: request_floats(
                tasks_to_allocate(job, s, self.real), s.state.gpu_memory_divisor))
        return v

    def best(self, queue: str) -> JobInfo | None:
        version = self.session.alloc_version.get(queue, 0)
        hit = self._best.get(queue)
        if hit is not None and hit[1] == version:
            return hit[0]
        children = self.children[queue]
        if not children:
            heap = self.heaps.get(queue)
            job = heap[0][2] if heap else None
        else:
            job = self._pick(children)
        self._best[queue] = (job, version)
        return job

    def _pick(self, candidates: list[str]) -> JobInfo | None:
        """The best head job among sibling queues. A queue's rank is kept until its head job
        changes (push/pop on its path) or its allocation does (read afresh at every pick)."""
        best_j = best_rank = None
        best, keys, versions = self.best, self._key, self.session.alloc_version
        for name in candidates:
            j = best(name)
            if j is None:
                continue
            cached = keys.get(name)
            # (Session.allocated_floats's change count, read directly: this runs for every
            # sibling at every pop)
            if cached is None or cached[1] != versions.get(name, 0):
                version, a = self.session.allocated_floats(name)
                cached = keys[name] = (queue_rank(self.views[name], a, self.init_resources(j)), version)
            if best_rank is None or rank_less(cached[0], best_rank):
                best_j, best_rank = j, cached[0]
        return best_j

    def pop(self) -> JobInfo | None:
        job = self._pick(self.roots)
        if job is not None:
            heapq.heappop(self.heaps[job.queue])
            self._init.pop(job.name, None)
            self._invalidate(job.queue)
        return job
