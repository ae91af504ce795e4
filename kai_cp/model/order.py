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

from kai_cp.model.base import ModelContext, kai_moved


BASE, BANDS = 8, 8   # every weight in [8, 15]: two extra jobs always outweigh one


class KaiOrder:
    name = "order"

    def contribute(self, ctx: ModelContext) -> None:
        started = kept_started(ctx)
        others = [j for j in ctx.greedy.order if j in ctx.starts and j not in started]
        for j in ctx.greedy.order:
            if j in started and j in ctx.starts:
                ctx.model.add(ctx.starts[j] == 1)
        n = len(others)
        scale = ctx.levels.scale
        weights = [scale * (BASE + (BANDS - 1) - (BANDS * rank) // max(n, 1)) for rank in range(n)]
        ctx.add_term(self.name, [ctx.starts[j] for j in others], weights)
        ctx.levels.added(sum(weights))


def kept_started(ctx: ModelContext) -> set[str]:
    """The jobs KAI's actions started that the model must start too. Where KAI moved victims
    (evicted and placed them again this cycle, which the model has no variables for), the jobs
    its eviction actions started may depend on a move: the victim kept running elsewhere, where
    evicting it would break a rule (bench/generate.py's 50-node clusters, seeds 11 and 12: the
    model was infeasible and every such cycle fell back). Those jobs are then worth a start
    like the others, and the cycle keeps KAI's decisions wherever they admit more
    (cycle.py `short_of_kai`)."""
    g = ctx.greedy
    if not kai_moved(g):
        return g.started_jobs
    by_actions = set().union(*(a.solved for a in g.actions.values()))
    return {j for j, o in g.outcomes.items() if o.started and j not in by_actions}
