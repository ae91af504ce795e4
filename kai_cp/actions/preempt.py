"""KAI's preempt action (spec 6.5): inside one queue, a pending job evicts preemptible jobs of
strictly lower priority. The preemptor may be non-preemptible if its queue's non-preemptible
quota allows it; queue limits apply through the per-task capacity check of the simulation."""

from __future__ import annotations

from kai_cp.actions.reclaim_rules import preempt_quota_ok
from kai_cp.actions.preemptors import ActionPass, pending_jobs
from kai_cp.actions.victims import Solution, Victim, changed_victim_counts, preemptible_running
from kai_cp.jobs import JobInfo, TaskInfo
from kai_cp.ordering import request_vector, tasks_to_allocate
from kai_cp.session import Session
from kai_cp.state import ClusterState

ACTION = "preempt"


def preempt_message(victim: TaskInfo, preemptor: JobInfo) -> str:
    return f"Pod {victim.key} was preempted by higher priority workload {preemptor.namespace}/{preemptor.name}"


class PreemptPolicy:
    action = ACTION
    moves_victims = False

    def __init__(self, state: ClusterState, session: Session, guard):
        self.state, self.session, self.guard = state, session, guard

    def eligible(self, job: JobInfo) -> str | None:
        req = request_vector(tasks_to_allocate(job, self.session), None)
        if preempt_quota_ok(self.state, self.session, job, req):
            return None
        return f"preempt: the non-preemptible job would take queue {self.state.queues[job.queue].label} over its quota"

    def victim_jobs(self, preemptor: JobInfo) -> list[Victim]:
        mine = self.guard.passing(preemptible_running(self.session).get(preemptor.queue, []), ACTION, preemptor.queue)
        return [v for v in mine if v.job.priority < preemptor.priority and v.job is not preemptor]

    def fewest_victims(self, preemptor: JobInfo) -> int:
        q = preemptor.queue      # (the preemptor's own priority is not below itself)
        return max(0, self.guard.snapshot_passing(q, ACTION, q, below=preemptor.priority)
                   - changed_victim_counts(self.session).get(q, 0))

    def message(self, victim: TaskInfo, preemptor: JobInfo) -> str:
        return preempt_message(victim, preemptor)

    def validate(self, preemptor: JobInfo, tasks: list[TaskInfo], solution: Solution) -> str | None:
        return self.guard.elastic_ok(solution.victims, ACTION, preemptor.queue)

    def failure(self, preemptor: JobInfo) -> str:
        return (f"preempt: evicting preemptible jobs of lower priority than {preemptor.priority} in queue "
                f"{self.state.queues[preemptor.queue].label} would not make room for it")


def preempt_pass(state: ClusterState, session: Session, guard) -> ActionPass:
    policy = PreemptPolicy(state, session, guard)
    return ActionPass(state, session, policy, policy.eligible, pending_jobs(state, session), per_queue_signatures=True)
