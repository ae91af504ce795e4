"""Node resources: what is placed on a node fits its idle plus releasing capacity, per resource
(CPU, memory, whole GPUs, pod slots, extended resources). Constraints are only written where
the candidates could actually exceed the node."""

from __future__ import annotations

import numpy as np

from kai_cp.model.base import ModelContext
from kai_cp.model.linear_rows import add_le_rows


class NodeCapacity:
    name = "node-capacity"

    def contribute(self, ctx: ModelContext) -> None:
        if len(ctx.pair_node) == 0:
            return
        vecs = np.stack([c.vec for c in ctx.classes])[ctx.pair_class]        # pairs x resources
        pair_node = np.asarray(ctx.pair_node, dtype=np.int64)
        n_nodes, width = ctx.free.shape
        freed = ctx.extensions.get("freed", {})
        # Rows where the candidates could exceed the node: a single pair is bounded by its own
        # upper bound unless evictions add capacity there. Node then resource order.
        load = np.zeros((n_nodes, width), dtype=np.int64)
        np.add.at(load, pair_node, vecs * ctx.pair_ub[:, None])
        count = np.bincount(pair_node, minlength=n_nodes)
        checked = count >= 2
        checked[[n for n in freed if count[n] > 0]] = True
        checked[pair_node[ctx.extensions.get("raised-pairs", [])]] = True     # bounds above capacity
        needed = checked[:, None] & (load > ctx.free)
        row_node, row_col = np.nonzero(needed)
        row_of = np.full((n_nodes, width), -1, dtype=np.int64)
        row_of[row_node, row_col] = np.arange(len(row_node))
        # Each row: the pairs on the node that use the resource, less what evictions free there
        # (model/evictions.py freed_terms); written in bulk (linear_rows), as cp_model writes
        # `weighted_sum(...) <= free`.
        pair, col = np.nonzero((vecs > 0) & needed[pair_node])
        x_index = np.array([v.index for v in ctx.x], dtype=np.int64)
        rows, variables, coefficients = [row_of[pair_node[pair], col]], [x_index[pair]], [vecs[pair, col]]
        entries = [(n, v.index, vec) for n, terms in freed.items() if count[n] > 0 for v, vec in terms]
        if entries:
            f_node = np.array([n for n, _, _ in entries], dtype=np.int64)
            f_var = np.array([i for _, i, _ in entries], dtype=np.int64)
            f_vec = np.array([vec for _, _, vec in entries], dtype=np.int64).reshape(-1, width)
            entry, col = np.nonzero((f_vec != 0) & needed[f_node])
            rows.append(row_of[f_node[entry], col])
            variables.append(f_var[entry])
            coefficients.append(-f_vec[entry, col])
        add_le_rows(ctx.model, np.concatenate(rows), np.concatenate(variables), np.concatenate(coefficients),
                    ctx.free[row_node, row_col])
