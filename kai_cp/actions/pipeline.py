"""KAI's eviction actions in the order the configuration lists them (spec 2.1, 2.5), run on the
session the allocation left: consolidation, reclaim, preempt (stale gangs last)."""

from __future__ import annotations

from kai_cp.actions import min_runtime
from kai_cp.actions.consolidation import run_consolidation
from kai_cp.actions.preempt import run_preempt
from kai_cp.actions.preemptors import ActionOutcome
from kai_cp.actions.reclaim import run_reclaim
from kai_cp.jobs import JobInfo, TaskInfo
from kai_cp.session import Session
from kai_cp.state import ClusterState

EVICTING = ("consolidation", "reclaim", "preempt")


class RuntimeGuard:
    """Minimum-runtime protection (6.7) as the actions ask for it, at the cycle's clock."""

    def __init__(self, state: ClusterState, session: Session, now: float):
        self.state, self.session, self.now = state, session, now

    def may_lose(self, job: JobInfo, action: str, preemptor_queue: str) -> bool:
        return min_runtime.filter_victim(self.state, job, action, preemptor_queue, self.now)

    def elastic_ok(self, victims: list[TaskInfo], action: str, preemptor_queue: str) -> str | None:
        by_job: dict[str, list[TaskInfo]] = {}
        for t in victims:
            by_job.setdefault(t.job, []).append(t)
        for name, tasks in by_job.items():
            job = self.state.jobs[name]
            if not min_runtime.elastic_ok(self.state, job, tasks, action, preemptor_queue, self.now):
                return f"job {job.label} is within its minimum runtime and may only lose pods above its minimum"
        return None


def run_evictions(state: ClusterState, session: Session, now: float) -> dict[str, ActionOutcome]:
    guard = RuntimeGuard(state, session, now)
    out: dict[str, ActionOutcome] = {}
    for action in state.config.actions:
        if action == "consolidation":
            out[action] = run_consolidation(state, session)
        elif action == "reclaim":
            out[action] = run_reclaim(state, session, guard)
        elif action == "preempt":
            out[action] = run_preempt(state, session, guard)
    return out
