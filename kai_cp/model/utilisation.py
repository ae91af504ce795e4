"""Utilisation: every placed pod counts, and every GPU it brings into use counts again, so that
among equally ordered outcomes the one that strands fewer GPUs wins."""

from __future__ import annotations

from ortools.sat.python import cp_model

from kai_cp.model.base import ModelContext


class Utilisation:
    name = "utilisation"

    def contribute(self, ctx: ModelContext) -> None:
        if len(ctx.pair_node) == 0:
            return
        per_pod = [1 + ctx.classes[c].gpus for c in ctx.pair_class.tolist()]
        gpus = [ctx.classes[c].gpus for c in ctx.pair_class.tolist()]
        greedy_gpus = sum(g * ctx.greedy_counts.get(i, 0) for i, g in enumerate(gpus))
        # Never strand more GPUs than greedy: extra gangs may not cost GPUs already placed.
        ctx.model.add(cp_model.LinearExpr.weighted_sum(ctx.x, gpus) >= greedy_gpus)
        scale = ctx.levels.scale
        ctx.add_term(self.name, ctx.x, [w * scale for w in per_pod])
        ctx.levels.added(sum(c.size * (1 + c.gpus) for c in ctx.classes) * scale)
