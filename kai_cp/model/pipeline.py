"""Pipelining: a pod may be placed on resources still being released (it then waits, and the
job is pipelined rather than bound, spec 5.6). Using releasing capacity on a node is allowed
but costs, so the model binds on idle resources whenever it can, as KAI's node order does."""

from __future__ import annotations

import numpy as np

from kai_cp.arrays import distinct
from kai_cp.model.base import ModelContext
from kai_cp.model.evictions import freed_max
from kai_cp.model.linear_rows import INT64_MAX, INT64_MIN, UNBOUNDED, add_rows


PENALTY = 30    # per node that has to wait for releasing resources


def _hint_waits(ctx: ModelContext, vecs: np.ndarray, pair_node: np.ndarray) -> None:
    """A node waits (b) where the hinted pods need more than its idle capacity."""
    counts = np.array([ctx.hinted(x) for x in ctx.x], dtype=np.int64)
    used = np.zeros_like(ctx.idle, dtype=np.int64)
    np.add.at(used, pair_node, vecs * counts[:, None])
    over = (used > ctx.idle).any(axis=1)
    for n, b in ctx.extensions.get("pipeline-b", {}).items():
        ctx.hint(b, 1 if over[n] else 0)


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
        nodes = [n for n in distinct(ctx.pair_node) if (releasing[n] > 0).any()]
        uses, weights = [], []
        waits = np.full(len(ctx.state.nodes), -1, dtype=np.int64)      # node -> its b's variable index
        for n in nodes:
            b = ctx.model.new_bool_var(f"pipeline[{n}]")
            ctx.extensions.setdefault("pipeline-b", {})[int(n)] = b
            waits[n] = b.index
            uses.append(b)
            weights.append(-PENALTY * ctx.levels.scale)
        # Per node with b and resource it releases, in node then resource order: the pods placed
        # there use idle capacity, or releasing capacity too when b. Written in bulk (linear_rows)
        # in the form cp_model gives `weighted_sum(x) <= idle + releasing * b`: a sum of one term
        # is an affine expression, written `c * x - releasing * b <= idle`; a longer sum defers to
        # the right side's `>=`, written `releasing * b - weighted_sum(x) >= -idle`.
        pair_node = np.asarray(ctx.pair_node, dtype=np.int64)
        pair, col = np.nonzero((vecs > 0) & (releasing[pair_node] > 0))
        width = releasing.shape[1]
        keys = pair_node[pair] * width + col
        rows = distinct(keys)
        row_node, row_col = rows // width, rows % width
        x_row = np.searchsorted(rows, keys)
        sign = np.where(np.bincount(x_row, minlength=len(rows)) == 1, 1, -1)      # per row: le or ge form
        idle = ctx.idle[row_node, row_col].astype(np.int64)
        x_index = np.array([v.index for v in ctx.x], dtype=np.int64)
        # Rows the pods' bounds alone satisfy (every candidate pod there fits the idle capacity)
        # are left out; the node's b then only costs, so the solver leaves it at 0.
        var_ub = np.full(len(ctx.model.proto.variables), UNBOUNDED, dtype=np.int64)
        var_ub[x_index] = ctx.pair_ub
        var_ub[waits[nodes]] = 1
        add_rows(ctx.model,
                 np.concatenate([x_row, np.arange(len(rows))]),
                 np.concatenate([x_index[pair], waits[row_node]]),
                 np.concatenate([sign[x_row] * vecs[pair, col], -sign * releasing[row_node, row_col]]),
                 np.where(sign == 1, INT64_MIN, -idle), np.where(sign == 1, idle, INT64_MAX), var_ub=var_ub)
        ctx.derive_hint(lambda: _hint_waits(ctx, vecs, pair_node))
        ctx.add_term(self.name, uses, weights)
        ctx.levels.added(len(uses) * PENALTY * ctx.levels.scale)   # its range, so higher levels dominate it
