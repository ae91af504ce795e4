"""The outer loop every eviction action shares (spec 4.1, 6.1, 6.2.6): pending jobs in queue and
job order, each given one solver attempt, skipping jobs not easier than one of the same shape
that already failed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from kai_cp.actions.allocate import within_queue_depth
from kai_cp.actions.victims import JobSolver, Policy, Solution
from kai_cp.jobs import ALIVE, GATED, JobInfo
from kai_cp.ordering import JobQueue
from kai_cp.session import Session
from kai_cp.state import ClusterState


class Budget:
    """Work the eviction actions may still do (simulated placements), shared by the actions of one
    cycle: a deterministic bound, so the same snapshot gives the same decisions. `deadline` (a
    `time.perf_counter()` instant) is the cycle's time limit as a guard behind it: a search's cost
    per unit of work varies several-fold between clusters and machines (7,000-50,000 units a second
    on the 2-core machines), so the work bound alone let a 1 s cycle run 3.8 s on a contended
    100-node cluster. Where the clock stops a search first (`clocked`), the decisions depend on the
    machine's speed, and the cycle says so."""

    def __init__(self, work: int, note: str = "the model searches further", deadline: float | None = None):
        self.left = work
        self.note = note      # what a preemptor left unsearched may still expect (its message)
        self.deadline = deadline
        self.clocked = False

    def resume(self, work: int, deadline: float | None, note: str) -> None:
        """More work, a new deadline and what a preemptor left unsearched may then expect, for a
        search resumed after this budget stopped it."""
        self.left += work
        self.deadline, self.note = deadline, note
        self.clocked = False

    def spend(self, amount: int) -> None:
        self.left -= amount
        if self.left < 0 or self._late():
            raise BudgetSpent

    def require(self, amount: int) -> None:
        """Raise as `spend(amount)` would where the amount alone is more than is left, without
        spending: an attempt whose first spend is known to exceed the bound stops before the work
        of finding out exactly how much it is (JobSolver.solve)."""
        if amount > self.left:
            raise BudgetSpent

    def spent(self) -> bool:
        """No work may start: the bound is used up or the deadline has passed."""
        return self.left <= 0 or self._late()

    def _late(self) -> bool:
        if not self.clocked and self.deadline is not None and time.perf_counter() > self.deadline:
            self.clocked = True
        return self.clocked

    def why(self) -> str:
        """Why a search stopped here, for the preemptor it stopped at (its pending message)."""
        if self.clocked:
            return "search stopped at the cycle's time limit (a longer --time-limit searches further)"
        return f"search stopped at its work budget ({self.note})"


class BudgetSpent(Exception):
    pass


@dataclass
class ActionOutcome:
    action: str
    solved: dict[str, Solution] = field(default_factory=dict)        # preemptor -> its victims
    failed: dict[str, str] = field(default_factory=dict)             # preemptor -> why no eviction helped
    attempts: int = 0
    skipped: int = 0
    budget_spent: bool = False                                       # stopped early (hint mode)


def signature(job: JobInfo) -> tuple:
    """Jobs of the same shape (6.2.6): per PodSet its topology constraints and, per pending pod,
    its scheduling constraints (selectors, affinity, tolerations: the predicate key; volumes, as
    the problem of its claims) and priority. All of it is the state's, so it is worked out once
    per job: every eviction action asks it at each of the job's attempts."""
    cached = job.__dict__.get("_signature")
    if cached is None:
        out = [repr(job.topology_constraint), job.priority]
        for name, ps in job.podsets.items():
            out.append((name, tuple(sorted({repr((t.predicate_key, t.volume_problem)) for t in ps.pending}))))
        cached = job.__dict__["_signature"] = tuple(out)
    return cached


def _requests(job: JobInfo, session: Session) -> list[tuple]:
    return sorted((t.request.pending_gpus(session.state.gpu_memory_divisor), t.request.cpu, t.request.memory)
                  for ps in job.podsets.values() for t in ps.pending if t.key not in session.placements)


def _le(a: tuple, b: tuple) -> bool:
    return all(x <= y for x, y in zip(a, b))


def easier(new: list[tuple], rep: list[tuple]) -> bool:
    """KAI's minimal-job comparison: fewer pending pods or a strictly smaller sorted request."""
    if not new or not rep:
        return False
    if len(rep) > len(new):
        return True
    for i in range(len(new)):
        if i >= len(rep):
            return False
        if _le(new[i], rep[i]):
            if _le(rep[i], new[i]):
                continue
            return True
    return False


class Representatives:
    """The smallest failed job per signature, per queue (reclaim, preempt) or global (consolidation)."""

    def __init__(self, per_queue: bool):
        self.per_queue = per_queue
        self.reps: dict[tuple, list[tuple]] = {}

    def _key(self, job: JobInfo) -> tuple:
        return (job.queue if self.per_queue else None, signature(job))

    def skip(self, job: JobInfo, session: Session) -> bool:
        rep = self.reps.get(self._key(job))
        return rep is not None and not easier(_requests(job, session), rep)

    def failed(self, job: JobInfo, session: Session) -> None:
        k = self._key(job)
        new = _requests(job, session)
        rep = self.reps.get(k)
        if rep is None or (new and rep and len(new) <= len(rep) and all(_le(a, b) for a, b in zip(new, rep))):
            self.reps[k] = new


class ActionPass:
    """One eviction action's pass over its preemptors (pending jobs in queue and job order, each
    given one solver attempt), resumable: a pass its budget stopped goes on from the preemptor it
    stopped at, with the session as that left it (the stopped attempt is rolled back and its work
    given back to the budget), so a pass stopped and resumed decides what one pass with the
    larger bound decides. The CP-SAT cycle resumes KAI's search where it falls back to it
    (cycle.py), so its fallback searched as far as the greedy engine's cycle would have."""

    def __init__(self, state: ClusterState, session: Session, policy: Policy,
                 eligible: Callable[[JobInfo], str | None], jobs: list[JobInfo], per_queue_signatures: bool):
        self.state, self.session, self.policy, self.eligible = state, session, policy, eligible
        self.out = ActionOutcome(policy.action)
        self.jobs = within_queue_depth(jobs, state.config.queue_depth_per_action.get(policy.action), session)
        self.queue: JobQueue | None = None
        self.solver: JobSolver | None = None
        self.reps = Representatives(per_queue_signatures)
        self.stopped_at: JobInfo | None = None      # the preemptor whose attempt the budget stopped
        self.done = not self.jobs

    def run(self, budget: Budget | None = None) -> ActionOutcome:
        out = self.out
        if self.done:
            return out
        if budget is not None and budget.spent():
            out.budget_spent = True
            return out
        out.budget_spent = False
        if self.queue is None:
            self.solver = JobSolver(self.state, self.session, self.policy, budget)
            self.queue = JobQueue(self.session, self.jobs)
        self.solver.budget = budget
        state, session, queue, reps, policy = self.state, self.session, self.queue, self.reps, self.policy
        while True:
            if self.stopped_at is not None:
                job, self.stopped_at = self.stopped_at, None
                out.failed.pop(job.name, None)
                out.attempts -= 1
            else:
                job = queue.pop() if queue else None
                if job is None:
                    break
                if state.config.use_scheduling_signatures and reps.skip(job, session):
                    out.skipped += 1
                    continue
                why = self.eligible(job) if ready_in_session(job, session) else (
                    f"{policy.action}: the gang's running pods were evicted earlier in this cycle; its pending pods "
                    "alone are below its minimum")
                if why is not None:
                    out.failed[job.name] = why
                    continue
            out.attempts += 1
            before = budget.left if budget is not None else 0
            try:
                solution = self.solver.solve(job)
            except BudgetSpent:
                budget.left = before        # the attempt is rolled back: resumed, it runs again whole
                self.stopped_at = job
                out.budget_spent = True
                out.failed[job.name] = f"{policy.action}: {budget.why()}"
                return out
            if solution is None:
                out.failed[job.name] = policy.failure(job)
                reps.failed(job, session)
                continue
            out.solved[job.name] = solution
        self.done = True
        return out


def pending_jobs(state: ClusterState, session: Session) -> list[JobInfo]:
    """4.1: ready jobs with a pending pod not yet placed in this cycle, in an existing leaf queue.
    Readiness (4.5) as the action sees it: a pod an earlier action of this cycle evicted is
    Releasing, no longer alive, so a gang that lost its running pods to it is not ready and its
    pending pods are no preemptor (they alone would run below the gang's minimum)."""
    return [j for j in state.schedulable_jobs()
            if any(t.key not in session.placements for ps in j.podsets.values() for t in ps.pending)
            and ready_in_session(j, session)]


def ready_in_session(job: JobInfo, session: Session) -> bool:
    if not session.evictions:
        return True
    for ps in job.podsets.values():
        gone = sum(1 for t in ps.tasks if t.key in session.evictions and t.key not in session.placements)
        if gone and ps.count(ALIVE) - ps.count(frozenset({GATED})) - gone < ps.min_available:
            return False
    return True

