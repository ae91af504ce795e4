"""Node resources: what is placed on a node fits its idle plus releasing capacity, per resource
(CPU, memory, whole GPUs, pod slots, extended resources). Constraints are only written where
the candidates could actually exceed the node."""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.model.base import ModelContext
from kai_cp.model.evictions import freed_terms


class NodeCapacity:
    name = "node-capacity"

    def contribute(self, ctx: ModelContext) -> None:
        if len(ctx.pair_node) == 0:
            return
        vecs = np.stack([c.vec for c in ctx.classes])[ctx.pair_class]        # pairs x resources
        worst = vecs * ctx.pair_ub[:, None]
        n_nodes = len(ctx.state.nodes)
        order = np.argsort(ctx.pair_node, kind="stable")
        bounds = np.searchsorted(ctx.pair_node[order], np.arange(n_nodes + 1))
        freed = ctx.extensions.get("freed", {})
        for n in np.unique(ctx.pair_node):
            idx = order[bounds[n]:bounds[n + 1]]
            if len(idx) < 2 and n not in freed:
                continue                      # a single pair is bounded by its own upper bound
            load = worst[idx].sum(axis=0)
            for r in np.nonzero(load > ctx.free[n])[0]:
                coeffs = vecs[idx, r]
                nz = coeffs > 0
                fv, fc = freed_terms(ctx, int(n), int(r))     # evictions add capacity (model/evictions.py)
                ctx.model.add(cp_model.LinearExpr.weighted_sum([ctx.x[i] for i in idx[nz]] + fv,
                                                               coeffs[nz].tolist() + [-c for c in fc])
                              <= int(ctx.free[n, r]))
