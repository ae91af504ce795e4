"""Placement preference, the lowest objective level: binpack (fuller nodes first, KAI's
default) or spread (emptier nodes first), per the snapshot's nodeplacement arguments, scored
0..10 per pod on the resource KAI scores (GPUs for GPU pods, CPU otherwise), spec 5.4, plus
0..30 for a pod's preferred pod affinity and anti-affinity towards pods already running."""

from __future__ import annotations

import numpy as np

from kai_cp.fit import binpack_scores, spread_scores
from kai_cp.model.base import ModelContext
from kai_cp.model.objective import class_reach
from kai_cp.pod_affinity import preferred_scores


class Placement:
    name = "placement"

    def contribute(self, ctx: ModelContext) -> None:
        if len(ctx.pair_node) == 0:
            return
        state, cfg = ctx.state, ctx.state.config
        alloc = state.table.allocatable
        gpu_cap = np.array([n.gpu_count or n.capacity.get("gpu", 0) for n in state.nodes], dtype=np.int64)
        scores = {}
        for col, mode in ((2, cfg.gpu_placement), (0, cfg.cpu_placement)):
            if mode == "spread":
                s = spread_scores(ctx.free[:, col], gpu_cap if col == 2 else alloc[:, 0]) * 10
            else:
                s = binpack_scores(ctx.free[:, col], alloc[:, col]) * 10 / 9
            scores[col] = np.rint(s).astype(np.int64)
        gpu_pair = np.array([ctx.classes[c].gpus > 0 for c in ctx.pair_class.tolist()], dtype=bool)
        coeff = np.where(gpu_pair, scores[2][ctx.pair_node], scores[0][ctx.pair_node])
        # Preferred pod (anti-)affinity, Kubernetes' 0..100 score as up to 30 more per pod: a user's
        # explicit preference outweighs keeping greedy's node (20) and binpack (<= 10).
        for c in ctx.classes:
            pref = preferred_scores(state.predicates.pod_index, c.tasks[0])
            if pref is not None:
                sel = ctx.pair_class == c.index
                coeff[sel] += np.rint(pref[ctx.pair_node[sel]] * 0.3).astype(np.int64)
        nz = np.nonzero(coeff > 0)[0]
        ctx.add_term(self.name, [ctx.x[i] for i in nz], (coeff[nz] * ctx.levels.scale).tolist())
        ctx.levels.added(class_reach(ctx.pair_class, ctx.pair_ub, ctx.classes, coeff) * ctx.levels.scale)
