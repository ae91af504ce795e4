"""Why each job is left pending, in words a cluster user can act on (spec 10.1-10.2)."""

from __future__ import annotations

from kai_cp.actions.allocate import GreedyResult
from kai_cp.jobs import ALIVE, GATED, JobInfo
from kai_cp.session import Session
from kai_cp.state import ClusterState


def not_ready_message(job: JobInfo) -> str:
    parts = []
    for ps in job.podsets.values():
        alive = ps.count(ALIVE)
        gated = ps.count(frozenset({GATED}))
        if alive - gated < ps.min_available:
            if len(job.podsets) == 1:
                parts.append(f"Job is not ready for scheduling. Waiting for {ps.min_available} pods, currently "
                             f"{alive} exist, {gated} are gated")
            else:
                parts.append(f"Job is not ready for scheduling. Waiting for {ps.min_available} pods for SubGroup "
                             f"{ps.name}, currently {alive} exist, {gated} are gated")
    return "; ".join(parts)


def unschedulable(state: ClusterState, greedy: GreedyResult, session: Session, engine: str) -> list[dict]:
    out: list[dict] = []
    # the jobs with waiting pods (listed at state build) or notes: sorting every job of a big
    # cluster to skip most of them cost more than the rest of the report
    jobs = state.waiting_jobs + [j for j in state.jobs.values() if j.notes and not j.waiting]
    for job in sorted(jobs, key=lambda j: j.name):
        left = [t for t in job.waiting if t.key not in session.placements]
        if not left and not job.notes:
            continue
        reasons: list[str] = list(job.problems)
        if not reasons and left:
            reasons += _pending_reasons(state, greedy, session, job, engine)
        reasons += job.notes
        out.append({"podGroup": job.name, "reasons": reasons or ["Unable to schedule podgroup"]})
    for group, msgs in sorted(state.orphan_groups.items()):
        out.append({"podGroup": group, "reasons": list(msgs)})
    return out


def _pending_reasons(state: ClusterState, greedy: GreedyResult, session: Session, job: JobInfo, engine: str) -> list[str]:
    if not state.config.may_allocate:
        return ["the snapshot's config.actions does not include allocate, so no pod is placed this cycle"]
    if not job.is_ready():
        return [not_ready_message(job)]
    outcome = greedy.outcomes.get(job.name)
    if outcome is None:
        depth = state.config.queue_depth_per_action.get("allocate")
        if depth is not None:
            return [f"not considered this cycle: queueDepthPerAction allows the first {depth} jobs of queue "
                    f"'{job.queue}' in job order"]
        return ["the job was not considered for allocation this cycle"]
    started = any(t.key in session.placements for t in job.tasks)
    reasons = [str(msg) for _, msg in outcome.errors]
    if started and not reasons:
        reasons = ["elastic pods beyond the gang minimum were not placed: the capacity went to jobs ahead in "
                   "KAI's order or to placing more gangs"]
    if not reasons:
        reasons = ["Unable to schedule podgroup"]
    # Why no eviction helped (6.1): each eviction action's last word on the job.
    for action, out in greedy.actions.items():
        why = out.failed.get(job.name)
        if why and not started:
            reasons.append(why)
    if engine == "cp-sat" and not started:
        reasons.append("the CP-SAT model could not place it either without displacing jobs ahead of it in "
                       "KAI's order or breaking a node, queue, gang or eviction rule")
    # Collapse repeats, keep order.
    seen: dict[str, int] = {}
    for r in reasons:
        seen[r] = seen.get(r, 0) + 1
    return [r if n == 1 else f"{n} {r}" for r, n in seen.items()]
