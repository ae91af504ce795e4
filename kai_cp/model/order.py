"""KAI's order, the top objective level.

The greedy engine follows KAI's queue order (queue priority, fair-share saturation, ...) and
job order (priority, gang state, creation time). Every job it starts stays started here
(a constraint, so kai-cp never places fewer of the jobs KAI favours); the model may move their
pods to make room. Jobs greedy gave up on are worth a start each, more for earlier ones in
KAI's order: any additional job is worth more than all utilisation, and among the same number
of additional jobs the ones KAI ranks first are preferred (in eight bands of KAI's order, so
weights stay small: 8..15 times the level's scale).
"""

from __future__ import annotations

from kai_cp.model.base import ModelContext


BASE, BANDS = 8, 8   # every weight in [8, 15]: two extra jobs always outweigh one


class KaiOrder:
    name = "order"

    def contribute(self, ctx: ModelContext) -> None:
        started = ctx.greedy.started_jobs
        others = [j for j in ctx.greedy.order if j in ctx.starts and j not in started]
        for j in ctx.greedy.order:
            if j in started and j in ctx.starts:
                ctx.model.add(ctx.starts[j] == 1)
        n = len(others)
        scale = ctx.levels.scale
        weights = [scale * (BASE + (BANDS - 1) - (BANDS * rank) // max(n, 1)) for rank in range(n)]
        ctx.add_term(self.name, [ctx.starts[j] for j in others], weights)
        ctx.levels.added(sum(weights))
