"""KAI's allocate action, literally (spec 5.1-5.6): the greedy engine.

It is the CP-SAT model's hint, the fallback when the solver has nothing better in time, and,
with `--engine greedy`, the engine itself. It also records, per job, why it could not be
placed, which the cycle uses to explain pending jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kai_cp import capacity
from kai_cp.fit import Fitter, PendingReasons, summarize
from kai_cp.gpu_sharing import largest_portion
from kai_cp.gpu_sharing_place import place_shared, shared_failure_reasons
from kai_cp.jobs import BINDING, BOUND, DEFAULT_PODSET, PENDING, RUNNING, JobInfo, TaskInfo
from kai_cp.pod_affinity import carries_anti_affinity, in_cycle_exclusion
from kai_cp.ordering import JobQueue, job_order_key, request_vector, tasks_to_allocate
from kai_cp.session import Session
from kai_cp.state import ClusterState
from kai_cp.topology import Scope
from kai_cp.topology_fit import candidate_sets, topology_message

_BOUND_LIKE = frozenset({BINDING, BOUND, RUNNING})


@dataclass
class JobOutcome:
    job: str
    rank: int                                   # position of the job's first pop (KAI's order)
    attempts: int = 0
    started: bool = False                       # at least one attempt committed
    errors: list[tuple[str, "str | Message"]] = field(default_factory=list)   # (reason, message)


class Message:
    """A message finished when read (`str()`): its start now, its fit errors later (PendingReasons)."""

    __slots__ = ("_head", "_reasons", "_text")

    def __init__(self, head: str, reasons: PendingReasons):
        self._head, self._reasons, self._text = head, reasons, None

    def __str__(self) -> str:
        if self._text is None:
            self._text, self._reasons = self._head + self._reasons.text(), None
        return self._text

    # the text's value: equal to the same message as a str, or as another Message
    def __eq__(self, other: object) -> bool:
        return str(self) == str(other) if isinstance(other, (str, Message)) else NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return repr(str(self))

    def __contains__(self, part: str) -> bool:
        return part in str(self)


@dataclass
class GreedyResult:
    session: Session
    order: list[str]
    outcomes: dict[str, JobOutcome]
    actions: dict = field(default_factory=dict)     # eviction action -> ActionOutcome (actions/preemptors.py)
    now: float = 0.0                                # the cycle's clock, for min-runtime protection
    allocate_seconds: float = 0.0                   # allocate's own time (run_greedy), the actions' after it
    search: Any = None                              # the actions' EvictionSearch (actions/pipeline.py), to resume
    # allocate's decisions alone, kept (Session.fork) before the eviction actions ran: the CP-SAT
    # model's hint where the actions' moves are no variables of the model (run_greedy, bounded)
    alone: "GreedyResult | None" = None

    @property
    def search_clocked(self) -> bool:
        """The cycle's clock, not the work bound, stopped the actions' (last) search."""
        budget = getattr(self.search, "budget", None)
        return budget is not None and budget.clocked

    @property
    def started_jobs(self) -> set[str]:
        """Jobs KAI's actions serve this cycle: allocated, or pipelined by an eviction action."""
        out = {j for j, o in self.outcomes.items() if o.started}
        for a in self.actions.values():
            out |= set(a.solved)
        return out


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
    def __init__(self, state: ClusterState, session: Session, growing: bool = False):
        self.state = state
        self.session = session
        self.fitter = Fitter(state, session, growing)
        self._failed: dict[tuple, tuple] = {}       # job shape -> (session version, how it failed)
        self._failure: tuple | None = None
        self._explain = True                          # work out why a task fits nowhere (attempt_tasks)
        self._task_checks = True                      # the per-task queue check can fail (_attempt_tasks)
        # In-cycle anti-affinity involves the pods this cycle places: pending ones (of the jobs
        # with waiting pods, not a scan of every pod per action), and in an eviction action's
        # simulations (`growing`) the victims it moves too (two moved victims wanting one host
        # port went to one node).
        # (`anti_carriers` covers every pod of ours, pending ones too: without one no scan of
        # the 10,000 pending pods, twice more per eviction search)
        self.anti = state.anti_carriers and (growing or any(
            carries_anti_affinity(t) for j in state.waiting_jobs for t in j.waiting if t.status == PENDING))

    def capacity_returned(self) -> None:
        """Capacity held off nodes was given back (the room nominated to a job, at its turn):
        what was learned while it was held, that a node fits nothing (Fitter.forget_pruned) or that
        a job of some shape fails, no longer holds. A node dropped then stayed out for good, and a
        preemptor whose gang needed the room it had held found one node short (node-0 of
        tests/fixtures/evictions/greedy_preempt_loop_for_pend2.json, held for pend2 while run4 was
        tried), so the victims' recreated pods were bound on its other nodes and preempted again."""
        self.fitter.forget_pruned()
        self._failed.clear()

    def _in_cycle_mask(self, task: TaskInfo, mask: np.ndarray | None) -> np.ndarray | None:
        """Narrow the nodes by anti-affinity with pods placed earlier in this cycle (both directions)."""
        if not self.anti:
            return mask
        carrier = carries_anti_affinity(task)
        placed = [(p.task, p.node) for p in self.session.placements.values() if carrier or carries_anti_affinity(p.task)]
        bad = in_cycle_exclusion(self.state.predicates.pod_index, task, placed) if placed else None
        if bad is None:
            return mask
        return ~bad if mask is None else mask & ~bad

    def _task_capacity_error(self, job: JobInfo, task: TaskInfo) -> str | None:
        """Per-task queue check (first predicate): GPU counted as one device's portion (quirk 15)."""
        r = task.request
        gpu = 1 if r.gpus > 0 else (r.gpu_quota if r.kind != "GpuMemory" else largest_portion(r, self.state))
        req = {"cpu": r.cpu, "memory": r.memory, "gpu": gpu}     # ints: exact, and no Fractions per task
        fail = capacity.check(job, req, self.state.queue_path(job.queue), self.session.allocated, self.session.allocated_np)
        if fail is None:
            return None
        return f"node does not have enough capacity. Reason: {fail.reason}, Details: {fail.message}"

    def attempt(self, job: JobInfo, outcome: JobOutcome) -> bool:
        tasks = tasks_to_allocate(job, self.session)
        if not tasks:
            return False
        return self.attempt_tasks(job, tasks, outcome)

    def attempt_tasks(self, job: JobInfo, tasks: list[TaskInfo], outcome: JobOutcome,
                      mask: np.ndarray | None = None, pipeline_only: bool = False, explain: bool = True) -> bool:
        """One allocation attempt of these tasks as a gang (5.2); `mask` = the nodes it may use
        (an eviction scenario's feasible nodes), `pipeline_only`: every placement is pipelined
        (eviction actions never bind, 6.2.4). `explain=False`: the caller drops the outcome's
        errors (an eviction scenario's simulation), so why a task fits nowhere is not worked out
        (per-node failure reasons were a third of a 10,000-node eviction search)."""
        self._explain = explain
        try:
            return self._attempt_tasks(job, tasks, outcome, mask, pipeline_only)
        finally:
            self._explain = True

    def _attempt_tasks(self, job: JobInfo, tasks: list[TaskInfo], outcome: JobOutcome,
                       mask: np.ndarray | None, pipeline_only: bool) -> bool:
        s = self.session
        req = request_vector(tasks, None)
        fail = capacity.check(job, req, self.state.queue_path(job.queue), s.allocated, s.allocated_np)
        if fail is not None:
            outcome.errors.append((fail.reason, fail.message))
            return False
        # The job's check bounds its tasks' own: a task counts (here, and once placed) no more
        # than in the job's request, except a GPU-memory task (0 in the job's request, its portion
        # per task), so only then can a task's check fail (it was ~7% of a 10,000-node cycle).
        self._task_checks = any(t.request.kind == "GpuMemory" for t in tasks)
        shape = None
        if mask is None and job.scope is None and not self.anti and not pipeline_only:
            shape = self._shape(job, tasks)
            hit = self._failed.get(shape)
            if hit is not None and hit[0] == s.version:
                # Nothing changed since a job of the same shape failed: it fails the same way.
                i, placed_before, error, key = hit[1:]
                task = tasks[i]
                outcome.errors.append(("PodSchedulingErrors", gang_message(
                    job, task, placed_before, s, error.replace(key, task.key))))
                return False
        cp = s.checkpoint()
        self._failure = None
        placed = (self._place_tasks(job, tasks, outcome, mask) if job.scope is None
                  else self._place_scope(job, job.scope, tasks, mask, None, outcome))
        if not placed:
            s.rollback(cp)
            if shape is not None and self._failure is not None:
                self._failed[shape] = (s.version,) + self._failure
            return False
        if pipeline_only or should_pipeline(job, s):
            # An eviction action's preemptor waits for its victims, but the pods allocate bound on
            # their nominated nodes (previous cycle's evictions) keep their binding.
            s.convert_to_pipelined(job, keep_nominated=pipeline_only)
        return True

    def _shape(self, job: JobInfo, tasks: list[TaskInfo]) -> tuple:
        """What an attempt's outcome depends on, besides the session: queue, preemptibility, the
        tasks' requests and constraints (their claims' problems too) and the job's gang state."""
        s = self.session
        return (job.queue, job.preemptible, len(job.podsets), DEFAULT_PODSET in job.podsets, self.fitter.nominated_bonus,
                tuple((ps.name, ps.min_available, s.active_allocated(job, ps.name)) for ps in job.podsets.values()),
                tuple((t.request, t.predicate_key, t.nominated_node, t.podset, t.volume_problem) for t in tasks))

    def _place_tasks(self, job: JobInfo, tasks: list[TaskInfo], outcome: JobOutcome,
                     mask: np.ndarray | None = None, scores: np.ndarray | None = None) -> bool:
        """Place tasks in order, stopping at the first that fits nowhere (its gang message recorded)."""
        last: tuple | None = None
        placed_in_podset: dict[str, int] = {}
        keys = [_walk_key(t) for t in tasks]
        for i, task in enumerate(tasks):
            # a walk of KAI's node order pays for a run of identical pods; one pod is ranked alone
            error = self._place(job, task, keys[i], i + 1 < len(tasks) and keys[i + 1] == keys[i], last, mask, scores)
            if isinstance(error, str):
                if self._explain:
                    self._failure = (i, placed_in_podset.get(task.podset, 0), error, task.key)
                    msg = gang_message(job, task, placed_in_podset.get(task.podset, 0), self.session, error)
                    outcome.errors.append(("PodSchedulingErrors", msg))
                return False
            if isinstance(error, PendingReasons):       # in a topology node set: read if the job stays pending
                head = gang_message(job, task, placed_in_podset.get(task.podset, 0), self.session, "")
                outcome.errors.append(("PodSchedulingErrors", Message(head, error)))
                return False
            last = error
            placed_in_podset[task.podset] = placed_in_podset.get(task.podset, 0) + 1
        return True

    def _place_scope(self, job: JobInfo, scope: Scope, tasks: list[TaskInfo], mask: np.ndarray | None,
                     scores: np.ndarray | None, outcome: JobOutcome) -> bool:
        """KAI's place_subgroup_set (5.2): try the scope's candidate node sets (8.3) in order; in each,
        child sub-group sets first (by name), then PodSets, each narrowing the nodes further."""
        mine = [t for t in tasks if t.podset in scope.podsets]
        if not mine:
            return True
        s = self.session
        reachable = None if self._explain else self._reachable(mine)
        if reachable is not None and not all(len(n) > 0 if mask is None else mask.take(n).any() for n in reachable):
            return False         # a task fits on none of the offered nodes: no node set would do
        sets, why = candidate_sets(self.state, s, job, scope, mine,
                                   mask if mask is not None else np.ones(len(self.state.nodes), dtype=bool),
                                   lambda task, allowed: self.fitter.choose(task, allowed, scores)[0])
        if why is not None:
            outcome.errors.append(("PodSchedulingErrors", topology_message(job, scope, why)))
            return False
        first = {t.podset: i for i, t in reversed(list(enumerate(mine)))}
        children = sorted((c for c in scope.children if not c.is_podset), key=lambda c: c.name) + \
            sorted((c for c in scope.children if c.is_podset), key=lambda c: first.get(c.name, len(mine)))
        for node_set in sets:
            if reachable is not None and not all(node_set.mask.take(nodes).any() for nodes in reachable):
                continue         # a task of the scope fits on none of the set's nodes: the attempt fails
            cp = s.checkpoint()
            node_scores = node_set.scores if node_set.scores is not None else scores
            if scope.is_podset:
                ok = self._place_tasks(job, mine, outcome, node_set.mask, node_scores)
            else:
                ok = all(self._place_scope(job, child, mine, node_set.mask, node_scores, outcome) for child in children)
            if ok:
                return True
            s.rollback(cp)
        return False

    def _reachable(self, tasks: list[TaskInfo]) -> list[np.ndarray]:
        """Per kind of (whole-GPU or CPU) task of a scope, the nodes it fits on now. Free capacity
        only shrinks while an attempt places pods, so a node set holding none of a kind's nodes
        fails whatever is tried in it: an eviction scenario skips it rather than trying it (a
        topology gang's scenario tried ~40 domains, most of a 10,000-node consolidation). Only
        without explanations: a tried set leaves its failure message. Shared-GPU tasks are left
        to the attempt (their fit is per device)."""
        kinds = {(t.request, t.predicate_key): t for t in tasks if not t.request.is_shared_gpu}
        return [self.fitter.fitting_nodes(t) for t in kinds.values()]

    def _place(self, job: JobInfo, task: TaskInfo, key: tuple, run: bool, last: tuple | None,
               mask: np.ndarray | None, scores: np.ndarray | None):
        """Place one task; returns (class key, walker) on success or the task's fit-error text
        (PendingReasons inside a node set: the text when read).
        Inside a topology node set (`mask`) nodes are ranked afresh per task, with the set's scores.
        `key`: the task's _walk_key; `run`: the next task is identical, so a walker is made for
        both (else one is ranked alone, `Fitter.choose`: the same node, a quarter of a walker's
        cost at 10,000 nodes)."""
        pre = self.fitter.pre_predicate_error(task)
        if pre is not None:
            return f"Scheduling conditions were not met for pod {task.key}:\n{pre}."
        cap_err = self._task_capacity_error(job, task) if self._task_checks else None
        if cap_err is not None:
            return summarize({cap_err: len(self.state.nodes)})
        mask = self._in_cycle_mask(task, mask)
        if task.request.is_shared_gpu:      # KAI's fractional allocation (7.4)
            return None if place_shared(self.fitter, task, mask, scores) else \
                self._fits_nowhere(shared_failure_reasons, task, mask)
        if mask is not None:
            node, pipelined = self.fitter.choose(task, mask, scores)
            if node is None:
                return PendingReasons(self.fitter, task, mask) if self._explain else ""
            self.session.place(task, node, pipelined)
            return (None, None)
        walker = last[1] if last is not None and last[0] == key else None
        if walker is None and run:
            walker = self.fitter.walker(task)
        node, pipelined = walker.next(task) if walker is not None else self.fitter.choose(task)
        if node is None and walker is not None and walker.stale:
            node, pipelined = self.fitter.choose(task)
            walker = None
        if node is None:
            return self._fits_nowhere(Fitter.failure_reasons, task, None)
        self.session.place(task, node, pipelined)
        return (key, walker)

    def _fits_nowhere(self, reasons, task: TaskInfo, mask: np.ndarray | None) -> str:
        """The fit-error text of a task that fits on no node (10.1), only when it is wanted."""
        return summarize(reasons(self.fitter, task, mask)) if self._explain else ""


def _walk_key(task: TaskInfo) -> tuple:
    """Tasks with the same key are placed by one walk of KAI's node order (fit.NodeWalker)."""
    return (task.request, task.predicate_key, task.nominated_node)


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


def nominated_jobs(state: ClusterState, jobs: list[JobInfo]) -> list[JobInfo]:
    """Jobs with a pending pod nominated to an existing node: pipelined by the previous cycle
    (kai-cp writes `status.nominatedNodeName` on the pods it pipelines, as kube-scheduler does on
    a preemptor's)."""
    index = state.table.index
    return [j for j in jobs if any(t.nominated_node in index for ps in j.podsets.values() for t in ps.pending)]


def nominated_tasks(state: ClusterState, job: JobInfo, session: Session) -> list[TaskInfo]:
    """The job's nominated pending pods, when they alone keep every PodSet at its minimum (else
    none: the job is served in KAI's order with the rest of its pods)."""
    index = state.table.index
    out = []
    for ps in job.podsets.values():
        mine = [t for t in ps.pending if t.nominated_node in index and t.key not in session.placements]
        if session.active_allocated(job, ps.name) + len(mine) < ps.min_available:
            return []
        out += mine
    return out


def _hold(session: Session, tasks: list[TaskInfo]) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Take each pod's request off its nominated node's capacity (idle first, then releasing),
    where it still fits; what was taken, to give back with `_unhold`."""
    held = []
    index, table = session.state.table.index, session.state.table
    for t in tasks:
        n = index[t.nominated_node]
        vec = table.vector(t)
        from_idle = np.minimum(vec, np.maximum(session.idle[n], 0))
        from_rel = np.minimum(vec - from_idle, np.maximum(session.releasing[n], 0))
        if (from_idle + from_rel < vec).any():
            continue
        session.take(n, from_idle, from_rel)
        held.append((n, from_idle, from_rel))
    return held


def _unhold(alloc: Allocator, held: list[tuple[int, np.ndarray, np.ndarray]]) -> None:
    """Give back what `_hold` took, and tell the allocator its capacity grew (capacity_returned)."""
    for n, from_idle, from_rel in held:
        alloc.session.give_back(n, from_idle, from_rel)
    if held:
        alloc.capacity_returned()


def run_allocate(state: ClusterState, session: Session | None = None) -> GreedyResult:
    """KAI's allocate action over all schedulable jobs, in KAI's queue and job order.

    One departure from KAI: the jobs pipelined by the previous cycle get one attempt first, in
    KAI's order among themselves, for their nominated pods only (so they do not take what is
    nominated to another job; the room nominated to the ones still to be served is held for them
    meanwhile), and then queue as usual. KAI re-decides a pipelined job from
    scratch, so the capacity its evictions freed can go to a job its queue order now puts first,
    often the recreated victims, which the next reclaim evicts again (the loop of
    tests/fixtures/evictions/greedy_reclaim_loop.json); kube-scheduler serves a nominated
    preemptor before lower-priority pods the same way. Its nodes are KAI's node order's
    choice (the nominatednode score left out), so KAI's own choice of which pod goes where is kept
    (reclaim_test__040), or else the nominated nodes, where the gang fitted last cycle."""
    session = session or Session.open(state)
    if not state.config.may_allocate:
        return GreedyResult(session, [], {})
    alloc = Allocator(state, session)
    jobs = within_queue_depth(state.schedulable_jobs(), state.config.queue_depth_per_action.get("allocate"), session)
    outcomes: dict[str, JobOutcome] = {}
    order: list[str] = []
    nominated = nominated_jobs(state, jobs)
    # What is nominated to a job stays its room until its turn: a job placed on KAI's node order
    # took the room the previous cycle's evictions made for another, whose gang then no longer
    # fitted, and the recreated victim got its GPUs back
    # (tests/fixtures/evictions/cpsat_nominated_jobs_crowd_each_other.json).
    held = {j.name: _hold(session, nominated_tasks(state, j, session)) for j in nominated}
    first = JobQueue(session, nominated)
    try:
        while first:
            job = first.pop()
            if job is None:
                break
            _unhold(alloc, held.pop(job.name, []))
            tasks = nominated_tasks(state, job, session)
            if not tasks:
                continue
            out = outcomes[job.name] = JobOutcome(job.name, rank=len(order))
            order.append(job.name)
            out.attempts += 1
            # KAI's node order first (the nominatednode score left out); where that does not fit
            # the gang, the nodes the previous cycle found for it.
            alloc.fitter.nominated_bonus = False
            try:
                out.started = alloc.attempt_tasks(job, tasks, out)
            finally:
                alloc.fitter.nominated_bonus = True
            if not out.started:
                out.errors.clear()
                out.started = alloc.attempt_tasks(job, tasks, out)
    finally:
        for rest in held.values():
            _unhold(alloc, rest)
    # A nominated job that failed its attempt is done, as any job whose attempt fails (4.2).
    queue = JobQueue(session, [j for j in jobs if j.name not in outcomes or (outcomes[j.name].started and any(
        t.key not in session.placements for t in j.tasks if t.status == PENDING))])
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
