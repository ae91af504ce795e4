"""KAI's reclaim action (spec 6.4): a job of a queue below its fair share evicts preemptible jobs
of other queues, within the fairness gates (3.7) and min-runtime protection (6.7)."""

from __future__ import annotations

from fractions import Fraction

from kai_cp import capacity
from kai_cp.actions.preemptors import ActionPass, pending_jobs
from kai_cp.actions.reclaim_rules import ReclaimValidator, can_reclaim, leveled_queues
from kai_cp.actions.victims import Solution, Victim, changed_victim_counts, preemptible_running
from kai_cp.jobs import JobInfo, TaskInfo
from kai_cp.ordering import request_vector, tasks_to_allocate
from kai_cp.queues import QueueInfo
from kai_cp.session import Session
from kai_cp.state import ClusterState

ACTION = "reclaim"


def _vector_text(v: dict[str, Fraction]) -> str:
    return (f"GPU: {capacity.human(v['gpu'], 'gpu')}, CPU: {capacity.human(v['cpu'], 'cpu')} (cores), "
            f"memory: {capacity.human(v['memory'], 'memory')} (GB)")


def queue_line(q: QueueInfo, allocated: dict[str, Fraction]) -> str:
    """10.4: `<queue> uses <allocated> with a quota of <deserved>, fair-share of <fairShare> and
    queue priority of <priority>.`"""
    return (f"{q.label} uses {_vector_text(allocated)} with a quota of {_vector_text(q.deserved)}, "
            f"fair-share of {_vector_text(q.fair_share)} and queue priority of {q.priority}.")


def reclaim_message(state: ClusterState, session: Session, victim: TaskInfo, preemptor: JobInfo,
                    lines: dict | None = None) -> str:
    """6.1 / 10.4: the victim's and the reclaimer's queues (at the level where they differ).
    `lines` caches the queue lines for a batch of messages written at one moment."""
    key = (preemptor.queue, state.jobs[victim.job].queue)
    text = lines.get(key) if lines is not None else None
    if text is None:
        mine, theirs = leveled_queues(state, *key)
        text = f"{queue_line(theirs, session.allocated[theirs.name])}\n{queue_line(mine, session.allocated[mine.name])}"
        if lines is not None:
            lines[key] = text
    return f"Pod {victim.key} was preempted by workload {preemptor.namespace}/{preemptor.name}.\n{text}"


class ReclaimPolicy:
    action = ACTION
    moves_victims = False

    def __init__(self, state: ClusterState, session: Session, guard):
        self.state, self.session, self.guard = state, session, guard
        self.validator: ReclaimValidator | None = None
        self.last_rejection: str | None = None

    def eligible(self, job: JobInfo) -> str | None:
        tasks = tasks_to_allocate(job, self.session)
        if not can_reclaim(self.state, self.session, job, request_vector(tasks, self.state.gpu_memory_divisor)):
            q = self.state.queues[job.queue]
            return (f"reclaim: queue {q.label} would go over its fair share "
                    f"({_vector_text(q.fair_share)}) with this job")
        self.validator = ReclaimValidator(self.state, self.session, job)   # queue state frozen now
        self.last_rejection = None
        return None

    def victim_jobs(self, preemptor: JobInfo) -> list[Victim]:
        return [v for q, vs in preemptible_running(self.session).items() if q != preemptor.queue and q in self.state.queues
                for v in self.guard.passing(vs, ACTION, preemptor.queue)]

    def fewest_victims(self, preemptor: JobInfo) -> int:
        changed = changed_victim_counts(self.session)
        return sum(max(0, self.guard.snapshot_passing(q, ACTION, preemptor.queue) - changed.get(q, 0))
                   for q in self.state.victim_jobs if q != preemptor.queue and q in self.state.queues)

    def message(self, victim: TaskInfo, preemptor: JobInfo) -> str:
        return reclaim_message(self.state, self.session, victim, preemptor)

    def validate(self, preemptor: JobInfo, tasks: list[TaskInfo], solution: Solution) -> str | None:
        by_job: dict[str, list[TaskInfo]] = {}
        for t in solution.victims:
            by_job.setdefault(t.job, []).append(t)
        victims = [(self.state.jobs[j], ts) for j, ts in by_job.items()]
        why = self.validator.check(victims, {t.key for t in solution.moved}, request_vector(tasks, self.state.gpu_memory_divisor))
        why = why or self.guard.elastic_ok(solution.victims, ACTION, preemptor.queue)
        if why is not None:
            self.last_rejection = why
        return why

    def failure(self, preemptor: JobInfo) -> str:
        if self.last_rejection:
            return f"reclaim: {self.last_rejection}"
        return ("reclaim: evicting preemptible jobs of other queues would not make room for it "
                "within their fair shares")


def reclaim_pass(state: ClusterState, session: Session, guard) -> ActionPass:
    policy = ReclaimPolicy(state, session, guard)
    return ActionPass(state, session, policy, policy.eligible, pending_jobs(state, session), per_queue_signatures=True)
