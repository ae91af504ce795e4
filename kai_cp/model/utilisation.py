"""Utilisation: every placed pod counts, and every GPU it brings into use counts again (in
hundredths, so a shared pod counts its portion as KAI's queue accounting does), so that among
equally ordered outcomes the one that strands fewer GPUs wins."""

from __future__ import annotations

from ortools.sat.python import cp_model

from kai_cp.jobs import queue_gpu_of_accepted
from kai_cp.model.base import ModelContext, kai_moved
from kai_cp.model.objective import class_reach


class Utilisation:
    name = "utilisation"

    def contribute(self, ctx: ModelContext) -> None:
        if len(ctx.pair_node) == 0:
            return
        gpus = pair_centi_gpus(ctx)
        per_pod = [100 + g for g in gpus]
        greedy_gpus = sum(g * ctx.greedy_counts.get(i, 0) for i, g in enumerate(gpus))
        # Never strand more GPUs than greedy: extra gangs may not cost GPUs already placed. (Not
        # where KAI moved victims: its placements may rest on a move; cycle.py's short_of_kai
        # keeps KAI's decisions wherever they place more.)
        if not kai_moved(ctx.greedy):
            ctx.model.add(cp_model.LinearExpr.weighted_sum(ctx.x, gpus) >= greedy_gpus)
        scale = ctx.levels.scale
        ctx.add_term(self.name, ctx.x, [w * scale for w in per_pod])
        ctx.levels.added(class_reach(ctx.pair_class, ctx.pair_ub, ctx.classes, per_pod) * scale)


def pair_centi_gpus(ctx: ModelContext) -> list[int]:
    """Per candidate pair, GPUs one pod takes there in hundredths: whole GPUs x 100, a shared
    pod its portion on that node (rounded to hundredths, as queue accounting counts it)."""
    cached = ctx.extensions.get("centi-gpus")
    if cached is None:
        out = []
        for c, n in zip(ctx.pair_class.tolist(), ctx.pair_node.tolist()):
            cls = ctx.classes[c]
            r = cls.tasks[0].request
            if r.is_shared_gpu:
                out.append(int(queue_gpu_of_accepted(cls.tasks[0], ctx.state.nodes[n].gpu_memory) * 100))
            else:
                out.append(100 * int(cls.gpus))
        cached = ctx.extensions["centi-gpus"] = out
    return cached
