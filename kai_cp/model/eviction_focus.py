"""While the cycle evicts, it starts no job that no eviction is for.

KAI's eviction actions run after allocate: the jobs allocate could not start stay pending unless
an eviction is made for them, and the capacity allocate left idle goes to the jobs allocate
served. The model decides both at once and could start a job KAI gave up on (a job of a queue
over its share, or of lower priority) on capacity KAI's order gives an earlier job, then evict
for that earlier job: next cycle the recreated victim is bound back onto the freed capacity and
the eviction repeats (tests/fixtures/evictions/cpsat_reclaim_loop.json, cpsat_preempt_loop.json).
So when any pod is evicted, a job greedy did not start may start only if it may itself be a
preemptor (a higher-priority job of a victim's queue) or belongs to a queue that may reclaim.
"""

from __future__ import annotations

from kai_cp.model.base import ModelContext
from kai_cp.model.linear_rows import add_zero_unless


class EvictionFocus:
    name = "eviction-focus"

    def contribute(self, ctx: ModelContext) -> None:
        found = ctx.extensions.get("eviction-beneficiaries")
        if not found or not found[0]:
            return
        evict_vars, preemptors, reclaimers = found
        started = ctx.greedy.started_jobs
        others = [j for j in ctx.starts if j not in started and j not in preemptors
                  and ctx.state.jobs[j].queue not in reclaimers]
        if not others:
            return
        m = ctx.model
        evicting = m.new_bool_var("evicting")
        add_zero_unless(m, [v.index for v in evict_vars], evicting.index)
        for j in others:
            m.add_implication(evicting, ~ctx.starts[j])
        ctx.derive_hint(lambda: ctx.hint(evicting, 1 if any(ctx.hinted(v) for v in evict_vars) else 0))
        ctx.keep_pending(others)
