"""KAI's consolidation action (spec 6.3): make room for a pending preemptible job by moving
running preemptible pods elsewhere (bin packing). A solution is valid only if every victim is
re-placed: nothing is really evicted."""

from __future__ import annotations

from kai_cp.actions.preemptors import ActionOutcome, pending_jobs, run_action
from kai_cp.actions.victims import Solution, Victim, active_tasks
from kai_cp.jobs import JobInfo, TaskInfo
from kai_cp.ordering import tasks_to_allocate
from kai_cp.session import Session
from kai_cp.state import ClusterState

ACTION = "consolidation"


class ConsolidationPolicy:
    action = ACTION

    def __init__(self, state: ClusterState, session: Session):
        self.state, self.session = state, session
        self.max_jobs = state.config.max_consolidation_preemptees

    def eligible(self, job: JobInfo) -> str | None:
        if not job.preemptible:
            return "consolidation: only preemptible jobs are placed by moving others"
        # Pre-check: enough idle + releasing whole GPUs in the cluster for the step (6.1).
        need = sum(t.request.gpus for t in tasks_to_allocate(job, self.session) if not t.request.is_shared_gpu)
        if need > int(self.session.free[:, 2].sum()):
            return (f"consolidation: the cluster has {int(self.session.free[:, 2].sum())} free GPUs and the job "
                    f"needs {need}; moving pods cannot make room")
        return None

    def victim_jobs(self, preemptor: JobInfo) -> list[Victim]:
        out = []
        for j in self.state.jobs.values():
            if not j.preemptible or j is preemptor:
                continue
            tasks = active_tasks(j, self.session)
            if tasks:
                out.append(Victim(j, tasks))
        if self.max_jobs >= 0:
            out = out[:self.max_jobs + 1]     # KAI accepts while counter <= max (quirk: max + 1 jobs)
        return out

    def message(self, victim: TaskInfo, preemptor: JobInfo) -> str:
        return (f"Pod {victim.key} was preempted and rescheduled due to bin packing (resource consolidation) "
                f"procedure")

    def validate(self, preemptor: JobInfo, tasks: list[TaskInfo], solution: Solution) -> str | None:
        if solution.evicted:
            return f"consolidation would really evict {solution.evicted[0].key}"
        return None

    def failure(self, preemptor: JobInfo) -> str:
        return "consolidation: no set of running preemptible pods could be moved elsewhere to make room for it"


def enabled(state: ClusterState) -> bool:
    cfg = state.config
    return cfg.max_consolidation_preemptees != 0 and cfg.gpu_placement != "spread" and cfg.cpu_placement != "spread"


def run_consolidation(state: ClusterState, session: Session, budget=None) -> ActionOutcome:
    policy = ConsolidationPolicy(state, session)
    if not enabled(state):
        return ActionOutcome(ACTION)
    return run_action(state, session, policy, policy.eligible,
                      [j for j in pending_jobs(state, session) if j.preemptible], per_queue_signatures=False, budget=budget)
