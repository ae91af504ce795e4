"""Where one task fits and which node KAI would pick (spec 5.3, 5.4), over all nodes at once.

Fit checks and scores are numpy expressions over the node table; the reasons a task fits
nowhere are computed only when it fails, and summarised the way KAI's fit errors are (10.1).
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np

from kai_cp.jobs import TaskInfo
from kai_cp.mig import types_of
from kai_cp.nodes import GPU_COL
from kai_cp.pod_affinity import preferred_scores
from kai_cp.session import Session
from kai_cp.state import ClusterState
from kai_cp.volumes import PLUGIN as VOLUME_PLUGIN

_RESOURCE_REASON = {"gpu": "GPUs", "cpu": "CPU cores", "memory": "memory"}
NO_NODES_HEADER = "no nodes with enough resources were found"
SHARING_ORDER_SCORE = 1000.0       # gpusharingorder (5.4)
# Fitter.choose finds a whole-GPU task's node among those with the fewest free GPUs where that is
# KAI's order (Fitter._least_free_decides); False: it scores every fitting node (tests compare).
LEAST_FREE = True


def binpack_scores(free_col: np.ndarray, alloc_col: np.ndarray) -> np.ndarray:
    """nodeplacement binpack: 0..9, fuller nodes higher; min/max over nodes having the resource."""
    has = alloc_col > 0
    if not has.any():
        return np.zeros(len(free_col), dtype=np.float64)
    return binpack_between(free_col, has, free_col[has].min(), free_col[has].max())


def binpack_between(free_col: np.ndarray, has: np.ndarray, lo, hi) -> np.ndarray:
    """Binpack scores of some nodes given the min/max free capacity over all nodes offered (5.4)."""
    if hi <= 0:
        return np.zeros(len(free_col), dtype=np.float64)
    if lo == hi:
        return np.where(has, 9.0, 0.0)
    # every node computed, those without the resource zeroed (a masked gather and scatter cost more)
    return np.where(has, 9.0 * (1.0 - (free_col - lo) / float(hi - lo)), 0.0)


def rows_fit(arr: np.ndarray, rows: np.ndarray | None, vec: np.ndarray) -> np.ndarray:
    """`np.all(arr[rows][:, vec > 0] >= vec[vec > 0], axis=1)`, a needed column at a time: at
    10,000 nodes copying whole rows out of the table was most of a fit check's time."""
    out = None
    for c in np.flatnonzero(vec > 0):
        # a column first, then its rows: a 1-D gather, twice as fast as arr[rows, c] on the
        # session's column-major arrays
        col = arr[:, c] if rows is None else arr[:, c].take(rows)
        out = col >= vec[c] if out is None else np.logical_and(out, col >= vec[c], out=out)
    if out is None:
        return np.ones(arr.shape[0] if rows is None else len(rows), dtype=bool)
    return out


_NONE = np.empty(0, dtype=np.intp)
_NONE.flags.writeable = False


def releasing_positions(session: Session, sub: np.ndarray) -> np.ndarray | None:
    """Positions in `sub` (ascending) of the nodes that may have releasing capacity, None when
    they are many (read every node then). On every other node idle >= free, so what fits its free
    capacity fits its idle: fit checks read idle on these positions only (none, in a cluster
    without terminating pods before its first eviction: that second pass over every node was ~10%
    of a 10,000-node allocate)."""
    if not session.releasing_nodes:
        return _NONE
    rel = session.releasing_rows()
    if 4 * len(rel) >= len(sub):
        return None
    pos = np.searchsorted(sub, rel)
    pos = pos[pos < len(sub)]
    return pos[sub.take(pos) == rel[:len(pos)]] if len(pos) else pos


def idle_fits(session: Session, sub: np.ndarray, fits: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """`fits & rows_fit(session.idle, sub, vec)` for `sub` ascending and `fits` its free-capacity
    fit, idle read where releasing_positions says."""
    pos = releasing_positions(session, sub)
    if pos is None:
        return fits & rows_fit(session.idle, sub, vec)
    if not len(pos):
        return fits
    out = fits.copy()
    out[pos] &= rows_fit(session.idle, sub.take(pos), vec)
    return out


def spread_scores(free_col: np.ndarray, capacity_col: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(capacity_col > 0, free_col / np.maximum(capacity_col, 1), 0.0)
    return s


class _NodeArrays(NamedTuple):
    """The node table's fixed arrays a Fitter reads (read-only: every Fitter of a state shares them)."""
    alloc: np.ndarray               # allocatable, column-major like the session's arrays (rows_fit)
    gpu_capacity: np.ndarray
    cpu_only_node: np.ndarray
    max_alloc: np.ndarray
    has: dict[int, np.ndarray]      # column -> nodes having the resource (CPU, GPU)
    synced: np.ndarray
    # no node's free GPUs exceed its allocatable ones (nor ever will: freeing gives back what was
    # used), so every node a GPU task fits on has GPUs: binpack's score counts it (_least_free)
    gpu_bounded: bool


def _node_arrays(state: ClusterState) -> _NodeArrays:
    """Once per state: each action makes a Fitter, and these were per-node lists over 10,000
    nodes each time."""
    cached = state.__dict__.get("_fit_arrays")
    if cached is None:
        t = state.table
        cached = state.__dict__["_fit_arrays"] = _NodeArrays(
            alloc=np.asfortranarray(t.allocatable),
            gpu_capacity=np.array([n.gpu_count or n.capacity.get("gpu", 0) for n in state.nodes], dtype=np.int64),
            cpu_only_node=t.allocatable[:, 2] == 0,
            max_alloc=t.allocatable.max(axis=0) if len(state.nodes) else np.zeros(len(t.resources), dtype=np.int64),
            has={col: np.nonzero(t.allocatable[:, col] > 0)[0] for col in (0, 2)},
            synced=np.array([n.gpu_memory_synced for n in state.nodes], dtype=bool),
            gpu_bounded=bool((t.free[:, GPU_COL] <= t.allocatable[:, GPU_COL]).all()))
        for a in (*cached[:4], *cached.has.values(), cached.synced):
            if a.base is None:          # made here (not a view of the table's)
                a.flags.writeable = False
    return cached


def _subset_key(task: TaskInfo, vec: np.ndarray) -> tuple:
    """Tasks of one key share the nodes their static predicates admit (Fitter.subset)."""
    return (vec.tobytes(), task.predicate_key, task.request.best_effort, task.request.kind)


class Fitter:
    """Vectorised fit and node choice for the tasks of one session.

    Each kind of task (request, predicates) only ever looks at the nodes that passed its static
    predicates and could hold it at the start of the cycle: in the allocate action free capacity
    only shrinks, so no other node can become a fit.
    """

    def __init__(self, state: ClusterState, session: Session, growing: bool = False):
        self.state = state
        self.session = session
        # Eviction actions free capacity as they go: no node may be ruled out by the snapshot's
        # free capacity, only by its static predicates.
        self.growing = growing
        self.nominated_bonus = True     # KAI's nominatednode score; off while kai-cp serves nominated jobs first
        arrays = _node_arrays(state)
        self.alloc, self.gpu_capacity, self.cpu_only_node = arrays.alloc, arrays.gpu_capacity, arrays.cpu_only_node
        self.max_alloc, self.has, self.synced = arrays.max_alloc, arrays.has, arrays.synced
        self.gpu_bounded = arrays.gpu_bounded
        self._subsets: dict[tuple, np.ndarray] = {}
        self._pruned = False                          # a subset lost nodes since forget_pruned
        # the node set `within` last narrowed to: (its mask, its nodes, node list id -> (list, narrowed))
        self._within_memo: tuple = (None, None, {})
        self._pre_ok: dict[int, object] = {}         # id(request) -> request, for requests that pass
        self.pod_affinity_scoring = "podaffinity" in state.config.plugins    # off in KAI's default config
        self.types = types_of(state)
        # gpusharingorder (5.4): KAI's operator registers it exactly when GPUs are placed binpack.
        self.sharing_order = state.config.gpu_placement != "spread"

    def pre_predicate_error(self, task: TaskInfo) -> str | None:
        """The first failing pre-predicate (5.3) as "<name>: <error>": VolumeBinding (the pod's
        claims, found at state build: kai_cp/volumes.py), then MaxNodePoolResources (a request
        larger than any single node's allocatable). The latter reads only the request and the
        fixed node table, so a request that passes passes for every pod sharing it (requests
        are shared objects; every pod placed asks)."""
        if task.volume_problem is not None:
            return f"{VOLUME_PLUGIN}: {task.volume_problem}"
        r = task.request
        if self._pre_ok.get(id(r)) is r:
            return None
        error = self._pre_predicate_error(task)
        if error is None:
            self._pre_ok[id(r)] = r
            return None
        return f"MaxNodePoolResources: {error}"

    def _pre_predicate_error(self, task: TaskInfo) -> str | None:
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

    def subset(self, task: TaskInfo, vec: np.ndarray) -> np.ndarray:
        best_effort = task.request.best_effort
        key = _subset_key(task, vec)
        sub = self._subsets.get(key)
        if sub is None:
            ok = self.state.predicates.mask(task.predicate_key) & self.types.mask(task.request)
            if not best_effort and not self.growing:
                ok = ok & rows_fit(self.state.table.free, None, vec)
            sub = self._subsets[key] = np.nonzero(ok)[0]
        return sub

    def fitting_nodes(self, task: TaskInfo) -> np.ndarray:
        """The nodes `choose` could return for this task now, whatever the node set offered
        (static predicates, and free capacity unless best effort)."""
        vec = self.state.table.vector(task)
        sub = self.subset(task, vec)
        return sub if task.request.best_effort else sub[rows_fit(self.session.free, sub, vec)]

    def choose(self, task: TaskInfo, allowed: np.ndarray | None = None,
               extra: np.ndarray | None = None) -> tuple[int | None, bool]:
        """KAI's node for this task: best total score among fitting nodes, ties by name. (node, pipelined).

        `allowed` narrows the nodes to a topology domain (8.3) and `extra` adds per-node scores (8.4)."""
        s = self.session
        vec = self.state.table.vector(task)
        sub = self.subset(task, vec)
        if allowed is not None:
            sub = self.within(allowed, sub)
        if len(sub) == 0:
            return None, False
        if allowed is None and extra is None and self._least_free_decides(task, vec):
            return self._least_free(task, vec, sub)
        if task.request.best_effort:
            fits = np.ones(len(sub), dtype=bool)
            fits_idle = fits
        else:
            fits = rows_fit(s.free, sub, vec)
            if allowed is None:
                self._prune(task, vec, sub, fits)
            if not fits.any():
                return None, False
            fits_idle = idle_fits(s, sub, fits, vec)
        score = self._scores(task, sub, fits_idle, allowed)
        if self.pod_affinity_scoring:
            pref = preferred_scores(self.state.predicates.pod_index, task)
            if pref is not None:
                score = score + 1000.0 * pref[sub]      # podaffinity plugin: 100,000 x the 0..1 score
        if extra is not None:
            score = score + extra[sub]
        score = np.where(fits, score, -np.inf)
        i = int(np.argmax(score))
        return int(sub[i]), not bool(fits_idle[i])

    def _least_free_decides(self, task: TaskInfo, vec: np.ndarray) -> bool:
        """Whether KAI's score for this task orders the fitting nodes by free GPUs alone: a
        whole-GPU task placed binpack, every fitting node fitting on idle (no node has releasing
        capacity), no nominated node and no pod-affinity score. Its score is then 100 plus the
        binpack score, strictly decreasing in the node's free GPUs (9 * (1 - (free - lo) / (hi -
        lo)), distinct for distinct GPU counts), so the best node is the fitting one with the
        fewest free GPUs, ties by name: found from the few nodes with the fewest, not by scoring
        the thousands that fit (~60% of a single pod's choice at 10,000 nodes)."""
        r = task.request
        return (LEAST_FREE and vec[GPU_COL] > 0 and r.needs_gpu and not r.best_effort and not task.nominated_node
                and not self.session.releasing_nodes and not self.pod_affinity_scoring
                and self.state.config.gpu_placement != "spread" and self.gpu_bounded)

    def _least_free(self, task: TaskInfo, vec: np.ndarray, sub: np.ndarray) -> tuple[int | None, bool]:
        s = self.session
        free_gpu = s.free[:, GPU_COL].take(sub)
        ok = free_gpu >= vec[GPU_COL]
        self._prune(task, vec, sub, ok)     # short of GPUs now: never a fit again in this action
        cand = np.flatnonzero(ok)
        if not len(cand):
            return None, False
        others = vec.copy()
        others[GPU_COL] = 0
        counts = free_gpu.take(cand)
        while len(cand):
            fewest = counts == counts.min()
            nodes = sub.take(cand[fewest])         # ascending: the first that fits is KAI's
            fits = rows_fit(s.free, nodes, others)
            if fits.any():
                return int(nodes[int(np.argmax(fits))]), False
            cand, counts = cand[~fewest], counts[~fewest]
        return None, False

    def _scores(self, task: TaskInfo, sub: np.ndarray, fits_idle: np.ndarray,
                allowed: np.ndarray | None = None) -> np.ndarray:
        s = self.session
        cfg = self.state.config
        needs_gpu = task.request.needs_gpu
        col = 2 if needs_gpu else 0
        free_col = s.free[:, col].take(sub)
        has = self.alloc[:, col].take(sub) > 0
        if cfg.gpu_placement == "spread" if needs_gpu else cfg.cpu_placement == "spread":
            cap = self.gpu_capacity[sub] if needs_gpu else self.alloc[:, 0].take(sub)
            score = spread_scores(free_col, cap)
        else:
            # binpack: min/max over every node that has the resource (spec 5.4), not only the fitting ones
            every = self.has[col]
            if allowed is not None:
                every = self.within(allowed, every)     # min/max over the node set offered (5.4)
            score = np.zeros(len(sub), dtype=np.float64)
            if len(every):
                column = s.free[:, col].take(every)
                score = binpack_between(free_col, has, column.min(), column.max())
        score = score + 100.0 * fits_idle
        if not needs_gpu:
            score = score + 10.0 * self.cpu_only_node[sub]
            if self.sharing_order:
                score = score + SHARING_ORDER_SCORE * self.on_shared_gpu(sub)
        if task.nominated_node and self.nominated_bonus and task.nominated_node in self.state.table.index:
            score[sub == self.state.table.index[task.nominated_node]] += 1_000_000.0
        return score

    def within(self, allowed: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """`nodes[allowed[nodes]]`, kept per offered node set while its mask is read-only (a
        topology node set's): each task of a gang is placed in the same set, and each narrowed the
        same lists of thousands of nodes to the set's few."""
        if allowed.flags.writeable:
            return nodes[allowed[nodes]]
        memo = self._memo(allowed)
        hit = memo[2].get(id(nodes))
        if hit is None or hit[0] is not nodes:     # (the memo holds `nodes`: its id stays its own)
            idx = memo[1]
            if 4 * len(idx) < len(nodes):
                # a domain's few nodes looked up in the (ascending, distinct) list, not the list's
                # thousands gathered from the mask: the same nodes, in the same order
                pos = np.searchsorted(nodes, idx)
                pos = pos[pos < len(nodes)]
                narrowed = nodes.take(pos)
                narrowed = narrowed[narrowed == idx[:len(pos)]] if len(pos) else narrowed
            else:
                narrowed = nodes[allowed[nodes]]
            hit = memo[2][id(nodes)] = (nodes, narrowed)
        return hit[1]

    def _memo(self, allowed: np.ndarray) -> tuple:
        memo = self._within_memo
        if memo[0] is not allowed:
            memo = self._within_memo = (allowed, np.flatnonzero(allowed), {})
        return memo

    def set_nodes(self, allowed: np.ndarray) -> np.ndarray:
        """`np.flatnonzero(allowed)`, kept with `within`'s memo for a read-only (node set's) mask."""
        return self._memo(allowed)[1] if not allowed.flags.writeable else np.flatnonzero(allowed)

    def on_shared_gpu(self, sub: np.ndarray) -> np.ndarray:
        """Nodes with a shared GPU that a task needing no GPU memory "fits on" (7.2's fits_on_group
        with a zero need: in use and not entirely releasing). KAI's gpusharingorder scores these
        +1000 for CPU-only tasks too (5.4, quirk), which pulls CPU work onto shared-GPU nodes."""
        shared = self.session.shared
        return shared.best[sub] >= 0 if shared is not None else np.zeros(len(sub), dtype=bool)

    def _prune(self, task: TaskInfo, vec: np.ndarray, sub: np.ndarray, fits: np.ndarray) -> None:
        """Free capacity only shrinks in this action, except what the current attempt may roll
        back: nodes of the task's subset that fit nothing now (and were not touched by it) are
        dropped from it for good."""
        if self.growing or fits.all():
            return
        s = self.session
        keep = fits if not s.touched else fits | np.isin(sub, np.fromiter(s.touched, dtype=np.int64))
        if not keep.all():
            self._subsets[_subset_key(task, vec)] = sub[keep]
            self._pruned = True

    def forget_pruned(self) -> None:
        """Capacity grew outside a rollback (room held for a nominated job given back): the nodes
        `_prune` dropped may fit again, so each task's subset is made afresh when next asked for
        (where none was dropped they are all still whole: many nominated jobs give room back)."""
        if self._pruned:
            self._subsets.clear()
            self._pruned = False

    def walker(self, task: TaskInfo) -> "NodeWalker | None":
        """KAI's node order for a run of identical tasks, computed once (binpack only)."""
        cfg = self.state.config
        if cfg.gpu_placement == "spread" or cfg.cpu_placement == "spread" or task.nominated_node:
            return None
        if self.pod_affinity_scoring and preferred_scores(self.state.predicates.pod_index, task) is not None:
            return None                  # scores other than binpack: rank afresh per task
        s = self.session
        vec = self.state.table.vector(task)
        sub = self.subset(task, vec)
        if task.request.best_effort:
            fits = np.ones(len(sub), dtype=bool)
            fits_idle = fits
        else:
            fits = rows_fit(s.free, sub, vec)
            fits_idle = idle_fits(s, sub, fits, vec)
            self._prune(task, vec, sub, fits)
        sub, fits_idle = sub[fits], fits_idle[fits]
        # Same order as sorting by KAI's total score: +100 fitting on idle, +10 CPU-only task on a
        # CPU-only node, then binpack, which is strictly decreasing in free capacity; ties by name.
        needs_gpu = task.request.needs_gpu
        col = 2 if needs_gpu else 0
        cpu_only = self.cpu_only_node[sub] if not needs_gpu else np.zeros(len(sub), dtype=bool)
        # gpusharingorder's +1000 for a CPU-only task on a node with a joinable shared GPU (5.4's
        # quirk) is constant while the walk places CPU-only tasks: they never change shared GPUs.
        on_shared = (self.on_shared_gpu(sub) if not needs_gpu and self.sharing_order
                     else np.zeros(len(sub), dtype=bool))
        return NodeWalker(self.session, sub, fits_idle, _walk_keys(sub, s.free[:, col].take(sub), cpu_only,
                                                                    fits_idle, on_shared), vec, task.request.best_effort)

    def failure_reasons(self, task: TaskInfo, allowed: np.ndarray | None = None) -> Counter:
        """Per-node first failure, counted (the summary KAI prints for a task), over `allowed` nodes."""
        idx = self.set_nodes(allowed) if allowed is not None else None
        return self.reason_counts(task, self.session.free, idx, idx)

    def reason_counts(self, task: TaskInfo, free: np.ndarray, rows: np.ndarray | None,
                      idx: np.ndarray | None) -> Counter:
        """failure_reasons over the nodes `idx` (None: all), whose free capacity is `free[rows]`."""
        t = self.state.table
        vec = t.vector(task)
        first = first_short(free, rows, vec)
        has_short = first < len(t.resources)
        counts: Counter = Counter()
        # bincount, not np.unique: the same counts in the same (ascending) order, without a sort
        for c, n in _counted(first[has_short], len(t.resources)):
            name = t.resources[c]
            reason = ("node(s) pod number exceeded" if name == "pods"
                      else f"node(s) didn't have enough resources: {_RESOURCE_REASON.get(name, name)}")
            counts[reason] += n
        codes, texts = self.state.predicates.reasons(task.predicate_key)
        rest = (codes if idx is None else codes[idx])[~has_short]
        for c, n in _counted(rest[rest >= 0], len(texts)):
            counts[texts[c]] += n
        return counts


class PendingReasons:
    """Fit errors of a task over a node set, worked out only when read: a topology gang tries its
    domains in turn and each it fails in leaves a message, but only the messages of jobs still
    pending after the cycle are ever read (the summaries were a tenth of a 10,000-node allocate,
    most of them for gangs a later domain took). Keeps the nodes' free capacity as it was."""

    __slots__ = ("fitter", "task", "idx", "free")

    def __init__(self, fitter: Fitter, task: TaskInfo, allowed: np.ndarray):
        self.fitter, self.task = fitter, task
        self.idx = fitter.set_nodes(allowed)
        self.free = fitter.session.free[self.idx]

    def text(self) -> str:
        return summarize(self.fitter.reason_counts(self.task, self.free, None, self.idx))


# A row-wise gather and argmax for the few nodes of a topology domain; a column at a time, one
# bit per column, for many nodes (row-wise took ~0.2-0.4 ms at 10,000 nodes, a fifth of that so).
_ROWWISE_BELOW = 256
# The lowest set bit of each byte; 8 (no bit) for 0.
_LOWEST_BIT = np.array([(v & -v).bit_length() - 1 if v else 8 for v in range(256)], dtype=np.intp)


def first_short(free: np.ndarray, idx: np.ndarray | None, vec: np.ndarray) -> np.ndarray:
    """Per node (`idx`, or every node), the first column whose free capacity is below the request,
    len(vec) where none is."""
    r = len(vec)
    if r > 8 or (idx is not None and len(idx) < _ROWWISE_BELOW):
        short = (free if idx is None else free[idx]) < vec
        first = short.argmax(axis=1)
        first[~short.any(axis=1)] = r
        return first
    bits = np.zeros(free.shape[0] if idx is None else len(idx), dtype=np.uint8)
    for c in range(r):
        col = free[:, c] if idx is None else free[:, c].take(idx)
        bits |= (col < vec[c]).view(np.uint8) << c
    first = _LOWEST_BIT.take(bits)
    first[first == 8] = r
    return first


def _counted(values: np.ndarray, size: int) -> list[tuple[int, int]]:
    """(value, count) of the non-negative ints below `size`, ascending, counts > 0."""
    counts = np.bincount(values, minlength=size)
    present = np.flatnonzero(counts)
    return list(zip(present.tolist(), counts[present].tolist()))


def summarize(counts: Counter, header: str = NO_NODES_HEADER) -> str:
    """`<header>: <n1> <reason1>. \\n<n2> <reason2>.` — reasons sorted as strings (10.1)."""
    if not counts:
        return header + "."
    parts = sorted(f"{n} {r}" for r, n in counts.items())
    return f"{header}: " + ". \n".join(parts) + "."


# A walk places a run of identical tasks, each on the first node of the order that still fits it,
# so it reads only the head: the first HEAD nodes are sorted (O(n) to select), the rest only when
# the walk gets there. A run visits at most one node per task (a walk is never longer than a
# gang, 64 pods in bench_scale's mix), where a full sort of the ~2,000-5,000 fitting nodes of a
# 10,000-node cluster was a tenth of its allocate action.
HEAD = 64
_FREE_BITS, _POS_BITS = 40, 20


def _walk_keys(sub: np.ndarray, free: np.ndarray, cpu_only: np.ndarray, fits_idle: np.ndarray,
               on_shared: np.ndarray) -> np.ndarray | tuple:
    """KAI's node order as one int64 per node: joinable shared GPU, fitting on idle resources,
    CPU-only node, least free capacity, then node index (`sub` is ascending). The lexsort's keys
    instead where a value does not fit its bits."""
    n = len(sub)
    if n and (free.dtype.kind != "i" or n >= 1 << _POS_BITS or free.min() < 0 or free.max() >= 1 << _FREE_BITS):
        return (sub, free, ~cpu_only, ~fits_idle, ~on_shared)
    key = (free.astype(np.int64) << _POS_BITS) | np.arange(n)
    # each flag's bit above the free capacity, where it tells nodes apart (one every node shares
    # orders nothing: a GPU task's CPU-only and shared-GPU flags, fitting on idle without releasing)
    for flag, bit in ((on_shared, 2), (fits_idle, 1), (cpu_only, 0)):
        if flag.any() and not flag.all():
            key |= (~flag).astype(np.int64) << (_FREE_BITS + _POS_BITS + bit)
    return key


class NodeWalker:
    """Walks KAI's node order for identical tasks placed one after another.

    With binpack, filling the chosen node only raises its own score and leaves the others'
    relative order unchanged (the score is monotone in free capacity and the other nodes do not
    change), so the order computed for the first task stays KAI's order for the next ones: the
    head node is used while it still fits on idle resources, and a node that no longer fits at
    all never will again in this action. When the head only fits thanks to releasing resources
    its score drops below the idle-fitting nodes, so the walker reports itself stale and the
    caller recomputes the order.
    """

    def __init__(self, session: Session, sub: np.ndarray, fits_idle: np.ndarray, keys: np.ndarray | tuple,
                 vec: np.ndarray, best_effort: bool):
        self.session, self.vec, self.best_effort = session, vec, best_effort
        self._sub, self._fits_idle, self._keys = sub, fits_idle, keys
        if isinstance(keys, tuple):                   # keys too wide for one integer: sort them all
            self._rest = np.empty(0, dtype=np.int64)
            self._take(np.lexsort(keys))
        elif len(sub) > HEAD:
            head = np.argpartition(keys, HEAD - 1)
            self._rest = head[HEAD:]
            self._take(head[:HEAD][np.argsort(keys[head[:HEAD]])])
        else:
            self._rest = np.empty(0, dtype=np.int64)
            self._take(np.argsort(keys))
        self.need = vec > 0
        self.pos = 0
        self.stale = False

    def _take(self, order: np.ndarray) -> None:
        """Set the walk's sorted nodes to these positions of the fitting nodes."""
        self.order, self.idle0 = self._sub[order], self._fits_idle[order]

    def _extend(self) -> bool:
        """Sort the nodes past the head once the walk reaches them; False when there are none."""
        if not len(self._rest):
            return False
        rest = self._rest[np.argsort(self._keys[self._rest])]
        self._rest = np.empty(0, dtype=np.int64)
        self.order = np.concatenate([self.order, self._sub[rest]])
        self.idle0 = np.concatenate([self.idle0, self._fits_idle[rest]])
        return True

    def next(self, task: TaskInfo) -> tuple[int | None, bool]:
        s = self.session
        need, vec = self.need, self.vec[self.need]
        while self.pos < len(self.order) or self._extend():
            n = int(self.order[self.pos])
            if self.best_effort:
                return n, False
            fits = bool(np.all(s.free[n, need] >= vec))
            if not fits:
                self.pos += 1
                continue
            fits_idle = n not in s.releasing_nodes or bool(np.all(s.idle[n, need] >= vec))
            if self.idle0[self.pos] and not fits_idle:
                self.stale = True        # re-rank: this node now only fits with releasing capacity
                return None, False
            return n, not fits_idle
        return None, False
