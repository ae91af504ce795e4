"""The lowest objective level: where nothing else tells two placements apart, keep greedy's
node. Equal-score ties then resolve the way KAI's node order resolves them (by node name),
and consecutive cycles do not shuffle pods between equally good nodes."""

from __future__ import annotations

from kai_cp.model.base import ModelContext


WEIGHT = 20     # per pod; above any placement-score difference (0..10), below a pipelining penalty


class KeepGreedyNodes:
    name = "stability"

    def contribute(self, ctx: ModelContext) -> None:
        pair_index = {cn: i for i, cn in enumerate(zip(ctx.pair_class.tolist(), ctx.pair_node.tolist()))}
        by_task = {t.key: c.index for c in ctx.classes for t in c.tasks}
        used: dict[int, int] = {}
        for key, p in ctx.greedy.session.placements.items():
            c = by_task.get(key)
            if c is not None and (c, p.node) in pair_index:
                i = pair_index[(c, p.node)]
                used[i] = used.get(i, 0) + 1
        pairs = sorted(used)
        ctx.greedy_counts = used
        ctx.add_term(self.name, [ctx.x[i] for i in pairs], [WEIGHT * ctx.levels.scale] * len(pairs))
        ctx.levels.added(sum(int(ctx.pair_ub[i]) for i in pairs) * WEIGHT * ctx.levels.scale)
