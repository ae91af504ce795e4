"""Aggregation and pruning before any variable exists.

Pending pods that are interchangeable (same job, PodSet, request, predicates) become one pod
class with a count variable per candidate node, instead of a Boolean per pod x node. Candidate
nodes are those that pass the static predicates and can hold at least one pod of the class;
when a class has many, it keeps the nodes greedy used plus the best-ranked ones (those with
room left after greedy first, then the fullest that fit) until they could hold a multiple of
the class's pods, under a global budget of variables.
"""

from __future__ import annotations

import numpy as np

from kai_cp.greedy import GreedyResult
from kai_cp.model.base import PodClass
from kai_cp.state import ClusterState

MAX_PAIRS = 60_000          # global budget of (class, node) count variables
MIN_NODES_PER_CLASS = 16
CAPACITY_MULTIPLE = 3       # candidates should be able to hold this many times the class


def modelled(task) -> bool:
    """Requests this model places: whole GPUs, CPU, memory, extended resources."""
    return not task.request.is_shared_gpu and task.request.kind != "MigInstance"


def build_classes(state: ClusterState, greedy: GreedyResult) -> list[PodClass]:
    classes: list[PodClass] = []
    table = state.table
    for name in greedy.order:
        job = state.jobs[name]
        for ps in sorted(job.podsets.values(), key=lambda p: p.name):
            groups: dict[tuple, list] = {}
            for t in ps.pending:
                if modelled(t):
                    groups.setdefault((t.request, t.predicate_key, t.nominated_node), []).append(t)
            for tasks in groups.values():
                vec = table.vector(tasks[0])
                classes.append(PodClass(len(classes), job, ps.name, tasks, vec, int(tasks[0].request.gpus)))
    return classes


def _per_node_bound(free: np.ndarray, vec: np.ndarray, size: int) -> np.ndarray:
    need = vec > 0
    if not need.any():
        return np.full(free.shape[0], size, dtype=np.int64)
    per = free[:, need] // vec[need]
    return np.minimum(per.min(axis=1), size)


def select_pairs(state: ClusterState, greedy: GreedyResult, classes: list[PodClass],
                 max_pairs: int = MAX_PAIRS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class index, node index, upper bound) per candidate pair."""
    table = state.table
    free0 = table.free
    s = greedy.session
    free_after = s.idle + s.releasing
    greedy_nodes: dict[int, set[int]] = {}
    by_task = {t.key: c.index for c in classes for t in c.tasks}
    for key, p in s.placements.items():
        if key in by_task:
            greedy_nodes.setdefault(by_task[key], set()).add(p.node)

    per_class: list[tuple[np.ndarray, np.ndarray]] = []
    for c in classes:
        static = state.predicates.mask(c.tasks[0].predicate_key)
        ub = _per_node_bound(free0, c.vec, c.size)
        if c.tasks[0].request.best_effort:
            ub = np.full(len(state.nodes), c.size, dtype=np.int64)
        ok = static & (ub > 0)
        nodes = np.nonzero(ok)[0]
        per_class.append((nodes, ub[nodes]))

    total = sum(len(n) for n, _ in per_class)
    multiple = CAPACITY_MULTIPLE
    cls_out, node_out, ub_out = [], [], []
    for c, (nodes, ub) in zip(classes, per_class):
        if total > max_pairs and len(nodes) > MIN_NODES_PER_CLASS:
            col = 2 if c.gpus > 0 else 0
            after_ub = _per_node_bound(free_after[nodes], c.vec, c.size)
            spread = state.config.gpu_placement == "spread" if c.gpus else state.config.cpu_placement == "spread"
            prim = free0[nodes, col] if not spread else -free0[nodes, col]
            order = np.lexsort((nodes, prim, after_ub == 0))
            cum = np.cumsum(ub[order])
            k = int(np.searchsorted(cum, multiple * c.size)) + 1
            budget_share = max(MIN_NODES_PER_CLASS, int(max_pairs * len(nodes) / total))
            k = max(MIN_NODES_PER_CLASS, min(k, budget_share))
            keep = set(order[:k].tolist())
            g = greedy_nodes.get(c.index, set())
            keep |= {i for i, n in enumerate(nodes) if n in g}
            sel = np.array(sorted(keep), dtype=np.int64)
            nodes, ub = nodes[sel], ub[sel]
        cls_out.append(np.full(len(nodes), c.index, dtype=np.int64))
        node_out.append(nodes)
        ub_out.append(ub)
    if not cls_out:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    return np.concatenate(cls_out), np.concatenate(node_out), np.concatenate(ub_out)
