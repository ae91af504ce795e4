"""KAI's allocate action, literally (spec 5.1-5.6): the greedy engine.

It is the CP-SAT model's hint, the fallback when the solver has nothing better in time, and,
with `--engine greedy`, the engine itself. It also records, per job, why it could not be
placed, which the cycle uses to explain pending jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from kai_cp import capacity
from kai_cp.fit import Fitter, summarize
from kai_cp.gpu_sharing import largest_portion
from kai_cp.gpu_sharing_place import place_shared, shared_failure_reasons
from kai_cp.jobs import BINDING, BOUND, DEFAULT_PODSET, PENDING, RUNNING, JobInfo, TaskInfo
from kai_cp.ordering import JobQueue, job_order_key, request_vector, tasks_to_allocate
from kai_cp.session import Session
from kai_cp.state import ClusterState

_BOUND_LIKE = frozenset({BINDING, BOUND, RUNNING})


@dataclass
class JobOutcome:
    job: str
    rank: int                                   # position of the job's first pop (KAI's order)
    attempts: int = 0
    started: bool = False                       # at least one attempt committed
    errors: list[tuple[str, str]] = field(default_factory=list)   # (reason, message)


@dataclass
class GreedyResult:
    session: Session
    order: list[str]
    outcomes: dict[str, JobOutcome]

    @property
    def started_jobs(self) -> set[str]:
        return {j for j, o in self.outcomes.items() if o.started}


def should_pipeline(job: JobInfo, session: Session) -> bool:
    """5.6: a PodSet below its minimum of really-allocated pods that needed releasing resources."""
    for ps in job.podsets.values():
        any_pipelined = False
        allocated = 0
        for t in ps.tasks:
            p = session.placements.get(t.key)
            if p is not None:
                any_pipelined |= p.pipelined
                allocated += not p.pipelined
            elif t.status in _BOUND_LIKE:
                allocated += 1
        if any_pipelined and allocated < ps.min_available:
            return True
    return False


def gang_message(job: JobInfo, task: TaskInfo, placed_in_podset: int, session: Session, task_errors: str) -> str:
    ps = job.podsets[task.podset]
    active = session.active_allocated(job, ps.name)
    if not job.is_gang or active >= ps.min_available:
        return f"Resources were not found for pod {task.key} due to: {task_errors}"
    if len(job.podsets) == 1 and DEFAULT_PODSET in job.podsets:
        return (f"Resources were found for {placed_in_podset} pods while {ps.min_available} are required for gang "
                f"scheduling. Additional pods cannot be scheduled due to: {task_errors}")
    return (f"Resources were found for {placed_in_podset} pods from all sub-groups while sub-group {ps.name} requires "
            f"{ps.min_available} pods for gang scheduling. Additional pods cannot be scheduled in this sub-group "
            f"due to: {task_errors}")


class Allocator:
    def __init__(self, state: ClusterState, session: Session):
        self.state = state
        self.session = session
        self.fitter = Fitter(state, session)

    def _task_capacity_error(self, job: JobInfo, task: TaskInfo) -> str | None:
        """Per-task queue check (first predicate): GPU counted as one device's portion (quirk 15)."""
        r = task.request
        gpu = Fraction(1) if r.gpus > 0 else (r.gpu_quota if r.kind != "GpuMemory" else largest_portion(r, self.state))
        req = {"cpu": Fraction(r.cpu), "memory": Fraction(r.memory), "gpu": gpu}
        fail = capacity.check(job, req, self.state.queue_path(job.queue), self.session.allocated, self.session.allocated_np)
        if fail is None:
            return None
        return f"node does not have enough capacity. Reason: {fail.reason}, Details: {fail.message}"

    def attempt(self, job: JobInfo, outcome: JobOutcome) -> bool:
        s = self.session
        tasks = tasks_to_allocate(job, s)
        if not tasks:
            return False
        req = request_vector(tasks, gpu_memory_as_gpus=False)
        fail = capacity.check(job, req, self.state.queue_path(job.queue), s.allocated, s.allocated_np)
        if fail is not None:
            outcome.errors.append((fail.reason, fail.message))
            return False
        cp = s.checkpoint()
        last: tuple | None = None
        placed_in_podset: dict[str, int] = {}
        for task in tasks:
            error = self._place(job, task, last)
            if isinstance(error, str):
                msg = gang_message(job, task, placed_in_podset.get(task.podset, 0), s, error)
                outcome.errors.append(("PodSchedulingErrors", msg))
                s.rollback(cp)
                return False
            last = error
            placed_in_podset[task.podset] = placed_in_podset.get(task.podset, 0) + 1
        if should_pipeline(job, s):
            s.convert_to_pipelined(job)
        return True

    def _place(self, job: JobInfo, task: TaskInfo, last: tuple | None):
        """Place one task; returns (class key, node, idle) on success or the task's fit-error text."""
        pre = self.fitter.pre_predicate_error(task)
        if pre is not None:
            return f"Scheduling conditions were not met for pod {task.key}:\nMaxNodePoolResources: {pre}."
        cap_err = self._task_capacity_error(job, task)
        if cap_err is not None:
            return summarize({cap_err: len(self.state.nodes)})
        if task.request.is_shared_gpu:      # KAI's fractional allocation (7.4)
            return None if place_shared(self.fitter, task) else summarize(shared_failure_reasons(self.fitter, task))
        key = (task.request, task.predicate_key, task.nominated_node)
        walker = last[1] if last is not None and last[0] == key else None
        if walker is None:
            walker = self.fitter.walker(task)
        node, pipelined = walker.next(task) if walker is not None else self.fitter.choose(task)
        if node is None and walker is not None and walker.stale:
            node, pipelined = self.fitter.choose(task)
            walker = None
        if node is None:
            return summarize(self.fitter.failure_reasons(task))
        self.session.place(task, node, pipelined)
        return (key, walker)


def within_queue_depth(jobs: list[JobInfo], depth: int | None, session: Session) -> list[JobInfo]:
    """`queueDepthPerAction` (spec 2.3): only the first `depth` jobs of each leaf queue, in job
    order, are considered by the action. KAI drops whatever sits at heap index N (not always the
    worst job); kai-cp keeps the true top N."""
    if depth is None or depth < 0:
        return jobs
    by_queue: dict[str, list[JobInfo]] = {}
    for j in jobs:
        by_queue.setdefault(j.queue, []).append(j)
    kept = {j.name for js in by_queue.values() for j in sorted(js, key=lambda j: job_order_key(j, session))[:depth]}
    return [j for j in jobs if j.name in kept]


def run_allocate(state: ClusterState, session: Session | None = None) -> GreedyResult:
    """KAI's allocate action over all schedulable jobs, in KAI's queue and job order."""
    session = session or Session.open(state)
    if not state.config.may_allocate:
        return GreedyResult(session, [], {})
    alloc = Allocator(state, session)
    jobs = within_queue_depth(state.schedulable_jobs(), state.config.queue_depth_per_action.get("allocate"), session)
    queue = JobQueue(session, jobs)
    outcomes: dict[str, JobOutcome] = {}
    order: list[str] = []
    while queue:
        job = queue.pop()
        if job is None:
            break
        out = outcomes.get(job.name)
        if out is None:
            out = outcomes[job.name] = JobOutcome(job.name, rank=len(order))
            order.append(job.name)
        out.attempts += 1
        if alloc.attempt(job, out):
            out.started = True
            if any(t.key not in session.placements for t in job.tasks if t.status == PENDING):
                queue.push(job)
    return GreedyResult(session, order, outcomes)
