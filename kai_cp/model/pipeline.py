"""Pipelining: a pod may be placed on resources still being released (it then waits, and the
job is pipelined rather than bound, spec 5.6). Using releasing capacity on a node is allowed
but costs, so the model binds on idle resources whenever it can, as KAI's node order does."""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.model.base import ModelContext
from kai_cp.model.evictions import freed_max


PENALTY = 30    # per node that has to wait for releasing resources


class Pipelining:
    name = "pipeline"

    def contribute(self, ctx: ModelContext) -> None:
        if len(ctx.pair_node) == 0:
            return
        releasing = ctx.free - ctx.idle
        extra = freed_max(ctx)             # what evictions may free is released capacity too
        if extra is not None:
            releasing = releasing + extra
        vecs = np.stack([c.vec for c in ctx.classes])[ctx.pair_class]
        nodes = [n for n in np.unique(ctx.pair_node) if (releasing[n] > 0).any()]
        uses, weights = [], []
        session = ctx.greedy.session
        order = np.argsort(ctx.pair_node, kind="stable")
        bounds = np.searchsorted(ctx.pair_node[order], np.arange(len(ctx.state.nodes) + 1))
        piped = {p.node for p in session.placements.values() if p.pipelined}
        for n in nodes:
            idx = order[bounds[n]:bounds[n + 1]]
            b = ctx.model.new_bool_var(f"pipeline[{n}]")
            ctx.extensions.setdefault("pipeline-b", {})[int(n)] = b
            for r in np.nonzero(releasing[n] > 0)[0]:
                coeffs = vecs[idx, r]
                nz = coeffs > 0
                if not nz.any():
                    continue
                expr = cp_model.LinearExpr.weighted_sum([ctx.x[i] for i in idx[nz]], coeffs[nz].tolist())
                ctx.model.add(expr <= int(ctx.idle[n, r]) + int(releasing[n, r]) * b)
            ctx.hint(b, 1 if n in piped else 0)
            uses.append(b)
            weights.append(-PENALTY * ctx.levels.scale)
        ctx.add_term(self.name, uses, weights)
        ctx.levels.added(len(uses) * PENALTY * ctx.levels.scale)   # its range, so higher levels dominate it
