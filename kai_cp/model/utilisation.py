"""Utilisation: every placed pod counts, and every GPU it brings into use counts again, so that
among equally ordered outcomes the one that strands fewer GPUs wins."""

from __future__ import annotations

from kai_cp.model.base import ModelContext


class Utilisation:
    name = "utilisation"

    def contribute(self, ctx: ModelContext) -> None:
        if len(ctx.pair_node) == 0:
            return
        per_pod = [1 + ctx.classes[c].gpus for c in ctx.pair_class.tolist()]
        scale = ctx.levels.scale
        ctx.add_term(self.name, ctx.x, [w * scale for w in per_pod])
        ctx.levels.added(sum(c.size * (1 + c.gpus) for c in ctx.classes) * scale)
