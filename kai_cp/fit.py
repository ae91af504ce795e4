"""Where one task fits and which node KAI would pick (spec 5.3, 5.4), over all nodes at once.

Fit checks and scores are numpy expressions over the node table; the reasons a task fits
nowhere are computed only when it fails, and summarised the way KAI's fit errors are (10.1).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from kai_cp.jobs import TaskInfo
from kai_cp.session import Session
from kai_cp.state import ClusterState

_RESOURCE_REASON = {"gpu": "GPUs", "cpu": "CPU cores", "memory": "memory"}
NO_NODES_HEADER = "no nodes with enough resources were found"


def binpack_scores(free_col: np.ndarray, alloc_col: np.ndarray) -> np.ndarray:
    """nodeplacement binpack: 0..9, fuller nodes higher; min/max over nodes having the resource."""
    has = alloc_col > 0
    out = np.zeros(len(free_col), dtype=np.float64)
    if not has.any():
        return out
    lo, hi = free_col[has].min(), free_col[has].max()
    if hi == 0:
        return out
    if lo == hi:
        out[has] = 9.0
        return out
    out[has] = 9.0 * (1.0 - (free_col[has] - lo) / float(hi - lo))
    return out


def spread_scores(free_col: np.ndarray, capacity_col: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(capacity_col > 0, free_col / np.maximum(capacity_col, 1), 0.0)
    return s


class Fitter:
    """Vectorised fit and node choice for the tasks of one session."""

    def __init__(self, state: ClusterState, session: Session):
        self.state = state
        self.session = session
        t = state.table
        self.alloc = t.allocatable
        self.gpu_capacity = np.array([n.gpu_count or n.capacity.get("gpu", 0) for n in state.nodes], dtype=np.int64)
        self.cpu_only_node = (t.allocatable[:, 2] == 0)
        self.max_alloc = t.allocatable.max(axis=0) if len(state.nodes) else np.zeros(len(t.resources), dtype=np.int64)

    def pre_predicate_error(self, task: TaskInfo) -> str | None:
        """MaxNodePoolResources (5.3): a request larger than any single node's allocatable."""
        t = self.state.table
        pool = self.state.config.node_pool_name
        missing = t.missing_resources(task)
        if missing:
            return f"No node in the {pool} node-pool has {missing[0]} resources"
        vec = t.vector(task)
        for r, label, div, unit in (("gpu", "GPU", 1, "GPUs"), ("cpu", "CPU", 1000, "cores"), ("memory", "memory", 10 ** 9, "GB")):
            c = t.col[r]
            if vec[c] > 0 and len(self.state.nodes) and vec[c] > self.max_alloc[c]:
                if self.max_alloc[c] == 0:
                    return f"No node in the {pool} node-pool has {label} resources"
                return (f"The pod {task.key} requires {vec[c] / div:g} {unit}. Max {label} resources available in a "
                        f"single node in the {pool} node-pool is topped at {self.max_alloc[c] / div:g} {unit}")
        return None

    def candidates(self, task: TaskInfo, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(fits on idle+releasing and passes static predicates, fits on idle) masks."""
        s = self.session
        need = vec > 0
        static = self.state.predicates.mask(task.predicate_key)
        if task.request.best_effort:
            fits_idle = static.copy()
            return fits_idle, fits_idle
        free = s.idle[:, need] + s.releasing[:, need]
        fits = static & np.all(free >= vec[need], axis=1)
        fits_idle = fits & np.all(s.idle[:, need] >= vec[need], axis=1)
        return fits, fits_idle

    def scores(self, task: TaskInfo, fits_idle: np.ndarray) -> np.ndarray:
        s = self.session
        cfg = self.state.config
        needs_gpu = task.request.needs_gpu
        col = 2 if needs_gpu else 0
        free_col = s.idle[:, col] + s.releasing[:, col]
        placement = cfg.gpu_placement if needs_gpu else cfg.cpu_placement
        if placement == "spread":
            cap = self.gpu_capacity if needs_gpu else self.alloc[:, 0]
            score = spread_scores(free_col, cap)
        else:
            score = binpack_scores(free_col, self.alloc[:, col])
        score = score + 100.0 * fits_idle
        if not needs_gpu:
            score = score + 10.0 * self.cpu_only_node
        if task.nominated_node and task.nominated_node in self.state.table.index:
            score[self.state.table.index[task.nominated_node]] += 1_000_000.0
        return score

    def choose(self, task: TaskInfo) -> tuple[int | None, bool]:
        """KAI's node for this task: best total score among fitting nodes, ties by name. (node, pipelined)."""
        vec = self.state.table.vector(task)
        fits, fits_idle = self.candidates(task, vec)
        if not fits.any():
            return None, False
        score = self.scores(task, fits_idle)
        score = np.where(fits, score, -np.inf)
        i = int(np.argmax(score))
        return i, not bool(fits_idle[i])

    def still_best(self, task: TaskInfo, node: int, was_idle: bool) -> bool:
        """Fast path for the next identical task: the node just used stays KAI's choice while it
        still fits the same way, since filling it only raises its own binpack score."""
        if self.state.config.gpu_placement == "spread" or self.state.config.cpu_placement == "spread":
            return False
        if task.nominated_node:
            return False
        vec = self.state.table.vector(task)
        need = vec > 0
        s = self.session
        if not self.state.predicates.mask(task.predicate_key)[node]:
            return False
        if was_idle:
            return bool(np.all(s.idle[node, need] >= vec[need]))
        return False

    def failure_reasons(self, task: TaskInfo) -> Counter:
        """Per-node first failure, counted (the summary KAI prints for a task)."""
        s = self.session
        t = self.state.table
        vec = t.vector(task)
        short = (s.idle + s.releasing) < vec
        has_short = short.any(axis=1)
        first = short.argmax(axis=1)
        counts: Counter = Counter()
        for c, n in zip(*np.unique(first[has_short], return_counts=True)):
            name = t.resources[c]
            reason = ("node(s) pod number exceeded" if name == "pods"
                      else f"node(s) didn't have enough resources: {_RESOURCE_REASON.get(name, name)}")
            counts[reason] += int(n)
        codes, texts = self.state.predicates.reasons(task.predicate_key)
        rest = codes[~has_short]
        rest = rest[rest >= 0]
        for c, n in zip(*np.unique(rest, return_counts=True)):
            counts[texts[c]] += int(n)
        return counts


def summarize(counts: Counter, header: str = NO_NODES_HEADER) -> str:
    """`<header>: <n1> <reason1>. \\n<n2> <reason2>.` — reasons sorted as strings (10.1)."""
    if not counts:
        return header + "."
    parts = sorted(f"{n} {r}" for r, n in counts.items())
    return f"{header}: " + ". \n".join(parts) + "."
