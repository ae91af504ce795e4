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

from kai_cp.fragmentation import FULL, FragIndex, devices_of, kai_slot_deltas, workload_mix
from kai_cp.gpu_sharing_place import device_spread
from kai_cp.gpu_sharing import SharedLedger, task_memory
from kai_cp.model.base import ModelContext

MAX_WEIGHT = 8 * FULL      # a pod cannot change fragmentation by more than a node's GPUs


def frag_index(state, free: np.ndarray) -> FragIndex | None:
    """The cycle-start index, built once per state."""
    key = "_frag_index"
    if key in state.__dict__:
        return state.__dict__[key]
    mix = workload_mix(state)
    idx = None
    if mix is not None:
        idx = FragIndex(mix, devices_of(state, free, SharedLedger.open(state.nodes)))
    state.__dict__[key] = idx
    return idx


def _need(idx: FragIndex, state, request) -> np.ndarray:
    cap = np.array([n.gpu_memory for n in state.nodes], dtype=np.int64)
    mem = np.array([task_memory(request, int(c)) for c in cap], dtype=np.int64) if request.kind == "GpuMemory" \
        else (request.gpu_portion.numerator * cap) // request.gpu_portion.denominator
    return -(-mem * FULL // np.maximum(cap, 1))


def _key(request) -> tuple:
    return (request.kind, request.gpu_portion, request.gpu_memory)


def class_deltas(state, free: np.ndarray, request) -> np.ndarray | None:
    """Rise in fragmentation per node (best device for a shared-GPU pod), or None without a mix.
    Computed once per distinct request per cycle (candidates and this concern both ask; classes
    of many jobs share requests)."""
    idx = frag_index(state, free)
    if idx is None:
        return None
    memo = state.__dict__.setdefault("_frag_deltas", {})
    out = memo.get(request)
    if out is None:
        if request.is_shared_gpu:
            need = _need(idx, state, request)
            table = idx.fraction(need, request.cpu, request.memory, _key(request))
            out = kai_slot_deltas(idx, table, need, device_spread(state))
        else:
            out = idx.whole(int(request.gpus), request.cpu, request.memory)
        memo[request] = out
    return out


class Fragmentation:
    name = "fragmentation"

    def contribute(self, ctx: ModelContext) -> None:
        state = ctx.state
        if len(ctx.pair_node) == 0:
            return
        idx = frag_index(state, ctx.free)
        if idx is None:
            return
        variables, coeffs = [], []
        span = 0
        pairs_of: dict[int, list[int]] = {}
        for i, c in enumerate(ctx.pair_class.tolist()):
            pairs_of.setdefault(c, []).append(i)
        for c, pairs in pairs_of.items():
            req = ctx.classes[c].tasks[0].request
            if not req.needs_gpu and not idx.mix.cpu.any():
                continue
            delta = class_deltas(state, ctx.free, req)[ctx.pair_node[pairs]]
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
