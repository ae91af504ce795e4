"""A queue never loses a pod of priority p to its own preemptors in a cycle in which it gains new
work of priority <= p that KAI's actions would not have placed.

KAI serves a queue's jobs in priority order: the work its allocate starts and the preemptors its
eviction actions serve. The model may also place jobs KAI leaves pending, on capacity KAI's
order gives another job, and then evict to make room for that job. When the victim is of the
same queue as such an extra job and not less important, the queue trades a pod for work that
should have waited behind it: next cycle the recreated victim is placed the same way and the
evictions go round (tests/fixtures/evictions/cpsat_preempt_loop_idle_to_later_job.json: run4,
priority 50, placed on the idle GPUs KAI gives pend2 while run2, priority 50, is preempted for
pend2; then the recreated run2 takes them back and run4 is preempted).

Only victims no other queue may reclaim count: a reclaim frees capacity for another queue, and
the victim queue's extra work placed elsewhere in the same cycle is packing, not a trade
(small-s2-full: reclaiming platform-02's train-000084 for train-000232 while platform-02's
pending jobs take idle GPUs elsewhere; bench/differential_full.py, 180.75 GPUs bound and
pipelined against KAI's 177.75, 172.75 when reclaim victims counted too). Jobs greedy placed
anything for are exempt, so greedy's decisions stay a solution (the hint). Per queue and
priority p of its extra jobs: one indicator "a unit of this queue with priority >= p loses
pods", which forbids every extra job of the queue with priority <= p.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from kai_cp.model.base import ModelContext
from kai_cp.model.linear_rows import add_zero_unless


class NoPriorityInversion:
    name = "no-priority-inversion"

    def contribute(self, ctx: ModelContext) -> None:
        units = ctx.extensions.get("eviction-units")
        if not units:
            return
        extra: dict[str, dict[str, list[int]]] = {}          # queue -> job -> its pairs
        for name, pairs in ctx.extra_pairs().items():
            extra.setdefault(ctx.state.jobs[name].queue, {})[name] = pairs
        if not extra:
            return
        losing: dict[str, list[tuple[int, list]]] = {}     # queue -> (priority, eviction vars)
        for u, plan in units:
            if u.queue in extra and u.preempt and not u.reclaim:
                losing.setdefault(u.queue, []).append((u.priority, [v for _, v, _ in plan]))
        m = ctx.model
        for q, jobs in extra.items():
            victims = losing.get(q)
            if not victims:
                continue
            by_priority: dict[int, list[str]] = {}
            for name in jobs:
                by_priority.setdefault(ctx.state.jobs[name].priority, []).append(name)
            for p, names in sorted(by_priority.items()):
                evs = [v for up, vs in victims if up >= p for v in vs]
                if not evs:
                    continue
                e = m.new_bool_var("")
                add_zero_unless(m, [v.index for v in evs], e.index)
                pairs = [i for n in sorted(names) for i in jobs[n]]
                m.add(cp_model.LinearExpr.sum([ctx.x[i] for i in pairs]) == 0).only_enforce_if(e)
                ctx.derive_hint(lambda e=e, evs=evs: ctx.hint(e, 1 if any(ctx.hinted(v) for v in evs) else 0))
                ctx.keep_pending(names)
