"""KAI's placement of one fractional or GPU-memory task (spec 5.3-5.4 with 7.2 and 7.4), over all
nodes at once: the node by KAI's score (with gpusharingorder's +1000 for a node that already has
a shared GPU the task fits on), then the GPUs on it (an existing shared GPU, or idle whole GPUs
opened as new groups)."""

from __future__ import annotations

from collections import Counter
from typing import Iterator

import numpy as np

from kai_cp.fit import SHARING_ORDER_SCORE, Fitter, releasing_positions, rows_fit
from kai_cp.gpu_sharing import WHOLE, choose_devices, new_group_id, node_fits, releasing_needed
from kai_cp.jobs import TaskInfo


def device_spread(state) -> bool:
    """GPU choice on a node: gpuspread when configured, else gpupack (KAI's default); without
    either plugin named, follow the GPU node-placement strategy."""
    plugins = set(state.config.plugins or ())
    if "gpuspread" in plugins:
        return True
    if "gpupack" in plugins:
        return False
    return state.config.gpu_placement == "spread"


def _masks(fitter: Fitter, task: TaskInfo, sub: np.ndarray):
    """(fits, fits on idle, on a joinable shared GPU, CPU/memory/pods fit) per node of `sub`. The
    idle fit is exact on the fitting nodes, the only ones it is read on: idle >= free except where
    releasing_positions says, so idle is read there only."""
    s, t = fitter.session, fitter.state.table
    vec = t.vector(task)
    best_effort = task.request.best_effort
    base_free = np.ones(len(sub), dtype=bool) if best_effort else rows_fit(s.free, sub, vec)
    gpu_free, on_group = node_fits(task.request, s.shared, sub, s.free[:, 2].take(sub), s.free[:, 3].take(sub),
                                   fitter.synced)
    fits = base_free & gpu_free
    pos = releasing_positions(s, sub)
    if pos is None:
        pos = np.arange(len(sub))
    if not len(pos):
        return fits, fits, on_group, base_free
    rows = sub.take(pos)
    gpu_idle, _ = node_fits(task.request, s.shared, rows, s.idle[:, 2].take(rows), s.idle[:, 3].take(rows), fitter.synced)
    if not best_effort:
        gpu_idle &= rows_fit(s.idle, rows, vec)
    fits_idle = fits.copy()
    fits_idle[pos] &= gpu_idle
    return fits, fits_idle, on_group, base_free


def choose_shared(fitter: Fitter, task: TaskInfo, allowed: np.ndarray | None = None, extra: np.ndarray | None = None):
    """(node, groups, pipelined, new groups) for the task, or None when it fits nowhere; `allowed`
    and `extra` as in Fitter.choose (a topology node set and its scores)."""
    s, state = fitter.session, fitter.state
    sub = fitter.subset(task, state.table.vector(task))
    if allowed is not None:
        sub = fitter.within(allowed, sub)
    if len(sub) == 0:
        return None
    fits, fits_idle, on_group, _ = _masks(fitter, task, sub)
    if not fits.any():
        return None
    spread = device_spread(state)
    score = fitter._scores(task, sub, fits_idle, allowed)
    if extra is not None:
        score = score + extra[sub]
    if fitter.sharing_order:
        score = score + SHARING_ORDER_SCORE * on_group
    score = np.where(fits, score, -np.inf)
    for i in _best_first(score):
        if not fits[i]:
            break
        n = int(sub[i])
        idle_whole, free_whole = int(s.idle[n, 2]), int(s.free[n, 2])
        chosen = choose_devices(task.request, s.shared, n, idle_whole, free_whole, spread)
        if chosen is None:
            continue
        pipelined = releasing_needed(task.request, s.shared, n, chosen, idle_whole, bool(fits_idle[i]))
        name = state.nodes[n].name
        groups = tuple(new_group_id(name, task, k) if g is WHOLE else g for k, g in enumerate(chosen))
        return n, groups, pipelined, sum(1 for g in chosen if g is WHOLE)
    return None


def _best_first(score: np.ndarray) -> Iterator[int]:
    """Indices by score, highest first, ties in index order (a stable descending sort), sorted
    only past the first: the best node almost always has the GPUs, and the sort is of every
    fitting node (~10,000) per shared-GPU pod."""
    best = int(np.argmax(score))
    yield best
    for i in np.argsort(-score, kind="stable").tolist():
        if i != best:
            yield i


def place_shared(fitter: Fitter, task: TaskInfo, allowed: np.ndarray | None = None,
                 extra: np.ndarray | None = None) -> bool:
    choice = choose_shared(fitter, task, allowed, extra)
    if choice is None:
        return False
    n, groups, pipelined, new = choice
    fitter.session.place(task, n, pipelined, gpu_groups=groups, new_groups=new)
    return True


def shared_failure_reasons(fitter: Fitter, task: TaskInfo, allowed: np.ndarray | None = None) -> Counter:
    """KAI's per-node failure summary, plus nodes whose CPU and memory fit but whose GPUs do not."""
    counts = fitter.failure_reasons(task, allowed)
    sub = fitter.subset(task, fitter.state.table.vector(task))
    if allowed is not None:
        sub = fitter.within(allowed, sub)
    if len(sub):
        fits, _, _, base = _masks(fitter, task, sub)
        short = int((base & ~fits).sum())
        if short:
            counts["node(s) didn't have enough resources: GPUs"] += short
    return counts
