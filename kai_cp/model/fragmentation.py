"""Fragmentation (soft preference, lowest level): among otherwise equal outcomes, place each pod
where it raises the cluster's GPU fragmentation least (kai_cp/fragmentation.py, FGD's measure
over the snapshot's own workload mix, plus the GPUs a node's CPU can no longer serve): one
coefficient per candidate pair. For a shared-GPU pod it is the rise at the device KAI's GPU
order would choose on that node, so within a node the GpuSharing concern's packing (or
spreading) stays KAI's, and fragmentation decides between nodes.

The weight is one unit per milli-GPU of expected fragmentation, so it outweighs keeping greedy's
node (20 per pod) and the placement score (0-10) whenever a choice strands a GPU fiftieth or
more; it never outweighs a higher level (an extra job or GPU placed this cycle).
"""

from __future__ import annotations

import numpy as np

from kai_cp.fragmentation import FULL
from kai_cp.model.base import ModelContext
from kai_cp.model.frag_rows import class_rows, frag_index

MAX_WEIGHT = 8 * FULL      # a pod cannot change fragmentation by more than a node's GPUs


class Fragmentation:
    name = "fragmentation"

    def contribute(self, ctx: ModelContext) -> None:
        state = ctx.state
        if len(ctx.pair_node) == 0:
            return
        idx = frag_index(state, ctx.free)
        if idx is None:
            return
        rows = class_rows(state, ctx.free, ctx.classes, ctx.greedy)
        variables, coeffs = [], []
        span = 0
        pairs_of: dict[int, list[int]] = {}
        for i, c in enumerate(ctx.pair_class.tolist()):
            pairs_of.setdefault(c, []).append(i)
        for c, pairs in pairs_of.items():
            req = ctx.classes[c].tasks[0].request
            if not req.needs_gpu and not idx.mix.cpu.any():
                continue
            delta = rows[c][ctx.pair_node[pairs]]
            finite = np.isfinite(delta)
            if not finite.any():
                continue
            # Only differences between a class's nodes matter (whether it is placed at all is
            # decided above this level): measured from its best node, most pairs get no term.
            best = delta[finite].min()
            worst = 0
            for i, v in zip(pairs, delta.tolist()):
                if not np.isfinite(v):
                    continue
                w = -int(round(min(v - best, MAX_WEIGHT)))
                if w:
                    variables.append(ctx.x[i])
                    coeffs.append(w)
                    worst = max(worst, abs(w))
            # A class places at most its size: its range is that many pods at its worst node.
            span += worst * min(ctx.classes[c].size, int(ctx.pair_ub[pairs].sum()))
        scale = ctx.levels.scale
        ctx.add_term(self.name, variables, [w * scale for w in coeffs])
        ctx.levels.added(span * scale)
