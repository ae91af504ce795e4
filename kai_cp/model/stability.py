"""The lowest objective level: where nothing else tells two placements apart, keep greedy's
node. Equal-score ties then resolve the way KAI's node order resolves them (by node name),
and consecutive cycles do not shuffle pods between equally good nodes."""

from __future__ import annotations

from kai_cp.model.base import ModelContext
from kai_cp.model.objective import class_reach


WEIGHT = 20     # per pod; above any placement-score difference (0..10), below a pipelining penalty


class KeepGreedyNodes:
    name = "stability"

    def contribute(self, ctx: ModelContext) -> None:
        used = ctx.greedy_counts
        pairs = sorted(used)
        ctx.add_term(self.name, [ctx.x[i] for i in pairs], [WEIGHT * ctx.levels.scale] * len(pairs))
        ctx.levels.added(class_reach(ctx.pair_class[pairs], ctx.pair_ub[pairs], ctx.classes, [WEIGHT] * len(pairs))
                         * ctx.levels.scale)
