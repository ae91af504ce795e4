"""KAI's order of work: tasks to allocate (4.4), job order (4.2) and the hierarchical queue order (3.8).

The queue order reacts to what was placed earlier in the same action, so it is evaluated
against a live Session at every pop, as KAI re-orders its queue tree lazily after each pop.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Iterable

from kai_cp.jobs import JobInfo, TaskInfo
from kai_cp.queues import RESOURCES, QueueInfo
from kai_cp.session import Session

INF = float("inf")


def tasks_to_allocate(job: JobInfo, session: Session) -> list[TaskInfo]:
    """Missing members of every unsatisfied PodSet, or one more pod once the gang is satisfied (4.4)."""
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
        if not cands:
            continue
        n = session.active_allocated(job, ps.name)
        take = ps.min_available - n if n < ps.min_available else 1
        out += cands[:take]
        limit -= 1
    return out


def request_vector(tasks: Iterable[TaskInfo], gpu_memory_as_gpus: bool = True) -> dict[str, Fraction]:
    """Sum of requests; GPU-memory tasks count M/100 GPUs (init_resources) or 0 (limit check, 3.6)."""
    v = {r: Fraction(0) for r in RESOURCES}
    for t in tasks:
        v["cpu"] += t.request.cpu
        v["memory"] += t.request.memory
        if t.request.kind != "GpuMemory" or gpu_memory_as_gpus:
            v["gpu"] += t.request.gpu_quota
    return v


def job_order_key(job: JobInfo, session: Session) -> tuple:
    """Priority desc, elastic state (below < exactly < above), creation, name (4.2)."""
    below = above = False
    for ps in job.podsets.values():
        n = session.active_allocated(job, ps.name)
        below |= n < ps.min_available
        above |= n > ps.min_available
    return (-job.priority, 0 if below else (2 if above else 1), job.creation, job.name)


# -- queue comparison helpers (3.1) -------------------------------------------------------
def allocatable(q: QueueInfo, r: str) -> Fraction:
    d, m, f = q.deserved[r], q.limit[r], q.fair_share[r]
    if d == -1:
        return m
    if m != -1:
        return min(m, max(d, f))
    return max(d, f)


def _le(a: Fraction, b: Fraction) -> bool:
    """a <= b with -1 meaning +infinity on either side (3.1.1)."""
    if b == -1:
        return True
    if a == -1:
        return False
    return a <= b


def dominant_share(q: QueueInfo, alloc: dict[str, Fraction], total: dict[str, Fraction]) -> Fraction | float:
    best: Fraction | float = Fraction(0)
    for r in RESOURCES:
        a = allocatable(q, r)
        if a == -1:
            a = total[r]
        if a == 0:
            s = alloc[r] * 1000
        else:
            s = alloc[r] / a
        best = max(best, s)
    return best


def _share_vector(q: QueueInfo, alloc: dict[str, Fraction], total: dict[str, Fraction]) -> list:
    out = []
    for r in RESOURCES:
        a = allocatable(q, r)
        if a == -1:
            a = total[r]
        out.append(alloc[r] * 1000 if a == 0 else alloc[r] / a)
    return out


def queue_less(l: QueueInfo, lj: JobInfo, r: QueueInfo, rj: JobInfo, session: Session,
               init: Callable[[JobInfo], dict[str, Fraction]]) -> bool:
    """True when queue l (with best job lj) goes before r (with best job rj) — rules 1-8 of 3.8."""
    la, ra = session.allocated[l.name], session.allocated[r.name]
    total = session.state.total
    # 1. over-utilised in all three resources goes last
    l_over = all(l.fair_share[x] < la[x] for x in RESOURCES)
    r_over = all(r.fair_share[x] < ra[x] for x in RESOURCES)
    if l_over != r_over:
        return r_over
    lreq, rreq = init(lj), init(rj)
    # 2. starved first
    l_starved = all(_le(la[x] + lreq[x], l.deserved[x]) for x in RESOURCES)
    r_starved = all(_le(ra[x] + rreq[x], r.deserved[x]) for x in RESOURCES)
    if l_starved != r_starved:
        return l_starved
    # 3. queue priority
    if l.priority != r.priority:
        return l.priority > r.priority
    # 4. zero-share violation goes last
    l_zero = any(allocatable(l, x) == 0 and la[x] + lreq[x] > 0 for x in RESOURCES)
    r_zero = any(allocatable(r, x) == 0 and ra[x] + rreq[x] > 0 for x in RESOURCES)
    if l_zero != r_zero:
        return r_zero
    # 5. dominant share including the head job
    ld = dominant_share(l, {x: la[x] + lreq[x] for x in RESOURCES}, total)
    rd = dominant_share(r, {x: ra[x] + rreq[x] for x in RESOURCES}, total)
    if ld != rd:
        return ld < rd
    # 6. dominant share of what is allocated
    ld, rd = dominant_share(l, la, total), dominant_share(r, ra, total)
    if ld != rd:
        return ld < rd
    # 7. the weaker allocatable share vector
    lv, rv = _share_vector(l, la, total), _share_vector(r, ra, total)
    if all(a <= b for a, b in zip(lv, rv)) and any(a < b for a, b in zip(lv, rv)):
        return True
    if all(b <= a for a, b in zip(lv, rv)) and any(b < a for a, b in zip(lv, rv)):
        return False
    # 8. creation time: l only if strictly older (equal timestamps favour r)
    return l.creation[0] < r.creation[0]


class JobQueue:
    """KAI's JobsOrderByQueues for the allocate action: pop the next job across the queue tree."""

    def __init__(self, session: Session, jobs: Iterable[JobInfo]):
        self.session = session
        self.by_queue: dict[str, list[JobInfo]] = {}
        for j in jobs:
            self.by_queue.setdefault(j.queue, []).append(j)
        self._init_cache: dict[str, tuple[int, dict[str, Fraction]]] = {}

    def push(self, job: JobInfo) -> None:
        self.by_queue.setdefault(job.queue, []).append(job)

    def __bool__(self) -> bool:
        return any(self.by_queue.values())

    def init_resources(self, job: JobInfo) -> dict[str, Fraction]:
        return request_vector(tasks_to_allocate(job, self.session))

    def _best_job(self, leaf: str) -> JobInfo | None:
        jobs = self.by_queue.get(leaf)
        if not jobs:
            return None
        return min(jobs, key=lambda j: job_order_key(j, self.session))

    def _best(self, queue: str) -> JobInfo | None:
        q = self.session.state.queues[queue]
        if q.is_leaf:
            return self._best_job(queue)
        return self._pick([self.session.state.queues[c] for c in q.children])

    def _pick(self, candidates: list[QueueInfo]) -> JobInfo | None:
        best_q, best_j = None, None
        init_cache: dict[str, dict[str, Fraction]] = {}

        def init(job: JobInfo) -> dict[str, Fraction]:
            if job.name not in init_cache:
                init_cache[job.name] = self.init_resources(job)
            return init_cache[job.name]

        for q in candidates:
            j = self._best(q.name)
            if j is None:
                continue
            if best_q is None or queue_less(q, j, best_q, best_j, self.session, init):
                best_q, best_j = q, j
        return best_j

    def pop(self) -> JobInfo | None:
        roots = [q for q in self.session.state.queues.values() if q.parent is None]
        roots.sort(key=lambda q: q.creation)
        job = self._pick(roots)
        if job is not None:
            self.by_queue[job.queue].remove(job)
        return job
