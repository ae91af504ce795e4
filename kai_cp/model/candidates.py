"""Aggregation and pruning before any variable exists.

Pending pods that are interchangeable (same job, PodSet, request, predicates) become one pod
class with a count variable per candidate node, instead of a Boolean per pod x node.
Candidates of a class are nodes that pass its static predicates and can hold at least one of
its pods; of those it keeps the nodes greedy used for it plus the best-ranked others (room left
after greedy first, then the placement preference) until they could hold a few times the
class. Classes that a queue limit or non-preemptible quota rules out entirely get none.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from kai_cp.capacity import exact_room, room
from kai_cp.gpu_sharing import SharedLedger, shared_bound
from kai_cp.actions.allocate import GreedyResult
from kai_cp.mig import types_of
from kai_cp.model.frag_rows import class_rows, walked
from kai_cp.model.base import PodClass, greedy_placements
from kai_cp.model.victim_pool import reach_for
from kai_cp.model.topology import allowed_nodes, grouping_level
from kai_cp.state import ClusterState

CAPACITY_MULTIPLE = 6       # candidates should be able to hold this many times the class
MIN_NODES_PER_CLASS = 4
NARROW_MULTIPLE = 1.5       # ... once the wide model would take over WIDE_SHARE of the pair budget
WIDE_SHARE = 0.5
PAIRS_PER_SECOND = 6_000    # variables the cycle can afford per second of time limit (measured, bench/)
_COL = {"cpu": 0, "memory": 1, "gpu": 2}


def modelled(task) -> bool:
    """Requests this model places: all of them (whole GPUs, CPU, memory, extended resources incl.
    MIG instances; the devices of shared-GPU pods are chosen by model/gpu_sharing.py)."""
    return True


def _ledger(state: ClusterState) -> SharedLedger:
    cached = state.__dict__.get("_shared_ledger0")
    if cached is None:
        cached = state.__dict__["_shared_ledger0"] = SharedLedger.of_state(state)
    return cached


def build_classes(state: ClusterState, greedy: GreedyResult) -> list[PodClass]:
    classes: list[PodClass] = []
    table = state.table
    for name in greedy.order:
        job = state.jobs[name]
        for ps in sorted(job.podsets.values(), key=lambda p: p.name):
            groups: dict[tuple, list] = {}
            for t in ps.pending:
                # a resource no node has, or claims that stop the pod (kai_cp/volumes.py): fits nowhere
                if modelled(t) and t.volume_problem is None and not table.missing_resources(t):
                    groups.setdefault((t.request, t.predicate_key, t.nominated_node), []).append(t)
            for tasks in groups.values():
                vec = table.vector(tasks[0])
                classes.append(PodClass(len(classes), job, ps.name, tasks, vec, int(tasks[0].request.gpus)))
    return classes


def greedy_class_nodes(greedy: GreedyResult, classes: list[PodClass]) -> dict[int, list[int]]:
    """Per class, the node of every pod greedy placed (one entry per pod)."""
    return {c: [n for n, _ in ps] for c, ps in greedy_placements(greedy, classes).items()}


def pair_counts(pair_class: np.ndarray, pair_node: np.ndarray, greedy_nodes: dict[int, list[int]]) -> dict[int, int]:
    """Pods greedy put on each candidate pair (pair index -> count)."""
    index = {cn: i for i, cn in enumerate(zip(pair_class.tolist(), pair_node.tolist()))}
    out: dict[int, int] = {}
    for c, nodes in greedy_nodes.items():
        for n in nodes:
            i = index.get((c, n))
            if i is not None:
                out[i] = out.get(i, 0) + 1
    return out


_NO_BOUND = np.iinfo(np.int64).max // 4        # the bound of a request of nothing


def _per_node_bound(free: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """Copies of the request each row of `free` holds; `vec` one request, or one per row."""
    if vec.ndim == 2:
        return np.where(vec > 0, free // np.maximum(vec, 1), _NO_BOUND).min(axis=1)
    need = vec > 0
    if not need.any():
        return np.full(free.shape[0], _NO_BOUND, dtype=np.int64)
    return (free[:, need] // vec[need]).min(axis=1)


def _blocked_by_queue(state: ClusterState, c: PodClass, pool=None) -> bool:
    """A queue on the class's path has no room at all for a resource the class requests, not
    even once every victim the class may evict inside it is gone (a queue at its limit preempting
    its own lower-priority work; model/quota.py then holds the exact room)."""
    freeable: dict[str, np.ndarray] = {}
    for q in state.queue_path(c.job.queue):
        for r, col in _COL.items():
            if c.vec[col] <= 0:
                continue
            if q.limit[r] != -1 and room(q.limit[r], q.allocated[r]) < c.vec[col]:
                if pool is None:
                    return True
                if q.name not in freeable:
                    freeable[q.name] = pool.freeable_under(state, c.job, q.name)
                if exact_room(q.limit[r], q.allocated[r]) + int(freeable[q.name][col]) < c.vec[col]:
                    return True
            if not c.job.preemptible and q.deserved[r] != -1 and room(q.deserved[r], q.allocated_np[r]) < c.vec[col]:
                return True
    return False


def _whole_domains(nodes: np.ndarray, ub: np.ndarray, grouping, size: int, multiple: float) -> np.ndarray:
    """Candidates of a topology-grouped class, a whole domain at a time: domains that can hold the
    class alone first, best fit (least room) first, until they could hold `target` pods; at least
    two domains, so the model has a choice greedy did not make (`multiple` x `size` pods)."""
    constraint, level = grouping
    count = constraint.tree.count(level)
    dom = constraint.tree.domain_of(level)[nodes]
    # Per-domain sums by bincount (exact: at most 1,000s of nodes x 2^20 < 2^53), the domains
    # present and the chosen ones' nodes by masks: np.add.at / np.unique / np.isin cost more.
    cap = np.bincount(dom, weights=np.minimum(ub, 1 << 20), minlength=count).astype(np.int64)
    doms = np.flatnonzero(np.bincount(dom, minlength=count))
    order = np.lexsort((doms, cap[doms], cap[doms] < size))
    doms = doms[order]
    cum = np.cumsum(cap[doms])
    n = max(2, int(np.searchsorted(cum, multiple * size)) + 1)
    chosen = np.zeros(count, dtype=bool)
    chosen[doms[:n]] = True
    return nodes[chosen[dom]]


def select_pairs(state: ClusterState, greedy: GreedyResult, classes: list[PodClass], budget: int | None = None,
                 greedy_nodes: dict[int, list[int]] | None = None, pool=None,
                 check: Callable[[], None] | None = None, fragmentation: bool = True
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates with wide neighbourhoods while the model stays small, narrow ones beyond.
    Measured on fragmented clusters (bench/bench_fragmentation.py, one solver worker): wide 6x
    instead of 3x places more GPUs than greedy in 14 instead of 13 of 20 200-node seeds and
    starts 1,277 instead of 1,270 gangs; on 1,000 nodes (narrow 1.5x) the outcome is the same,
    and a 3x narrow model or a doubled pair budget leaves the solver too little time on the
    oversubscribed 1,000-node benchmark (bench/bench_cycle.py). `check` is called per class: it
    raises when the cycle's time is up (a selection over 10,000 nodes takes about a second).
    `fragmentation=False` (the lean model, model/scope.py): nodes ranked without fragmentation
    rows, and without the fragmentation walk's nodes."""
    memo = _Memo(state, pool)
    args = (state, greedy, classes, budget, greedy_nodes)
    wide = _select(*args, CAPACITY_MULTIPLE, MIN_NODES_PER_CLASS, memo, check, fragmentation)
    if budget is None or len(wide[0]) <= WIDE_SHARE * budget:
        return wide
    return _select(*args, NARROW_MULTIPLE, 1, memo, check, fragmentation)


class _Memo:
    """What candidate selection would otherwise recompute for each class and again in the narrow
    pass: classes of one job, request and queue share their answers (a shared-GPU class's bound
    was computed twice per class and pass, a third of the selection on GPU-sharing clusters)."""

    def __init__(self, state: ClusterState, pool) -> None:
        self.state = state
        self.pool = pool
        self.ranked: dict[tuple, tuple] = {}    # key -> ranked nodes, their bounds, cumulative, raw bounds
        self.shared: dict[object, np.ndarray] = {}       # request -> shared_bound
        self.blocked: dict[tuple, bool] = {}              # (queue, priority, preemptible, request vector) -> blocked
        self.domains: dict[tuple, np.ndarray] = {}        # _whole_domains per (key, grouping, size, multiple)
        self.classes: dict[int, tuple] = {}               # class -> (blocked, allowed, reach, key, grouping)
        self.podsets: dict[tuple[str, str], tuple] = {}   # (job, podset) -> (allowed nodes, grouping level)
        self.bounds: dict[tuple, np.ndarray] = {}         # (capacity, request vector) -> _per_node_bound
        self.reach_rows: dict[int, np.ndarray] = {}       # id(reach) -> the nodes where it frees something

    def bound(self, which: object, free: Callable[[], np.ndarray], vec: np.ndarray) -> np.ndarray:
        """_per_node_bound of the capacity `free()` gives (the cycle start's, what greedy leaves,
        or the cycle start's with what a queue's victims free, named by `which`) per request
        vector: a few dozen vectors among hundreds of rankings at 10,000 nodes. Read-only."""
        key = (which, vec.tobytes())
        hit = self.bounds.get(key)
        if hit is None:
            hit = self.bounds[key] = _per_node_bound(free(), vec)
        return hit

    def reach_bound(self, free0: np.ndarray, reach: np.ndarray, vec: np.ndarray) -> np.ndarray:
        """`bound` of the cycle start's capacity with what a queue's victims free (`reach`, the
        pool's, kept), computed only on the nodes where they free something (a third of them at
        10,000 nodes): elsewhere it is the cycle start's bound."""
        key = (id(reach), vec.tobytes())
        hit = self.bounds.get(key)
        if hit is None:
            rows = self.reach_rows.get(id(reach))
            if rows is None:
                rows = self.reach_rows[id(reach)] = np.flatnonzero(reach.any(axis=1))
            hit = self.bound("start", lambda: free0, vec).copy()
            hit[rows] = _per_node_bound(free0[rows] + reach[rows], vec)
            self.bounds[key] = hit
        return hit

    def shared_bound(self, request) -> np.ndarray:
        hit = self.shared.get(request)
        if hit is None:
            hit = self.shared[request] = shared_bound(request, _ledger(self.state), self.state.table.free)
        return hit

    def of_class(self, c: PodClass) -> tuple:
        hit = self.classes.get(c.index)
        if hit is not None:
            return hit
        state = self.state
        bkey = (c.job.queue, c.job.priority, c.job.preemptible, c.vec.tobytes())
        blocked = self.blocked.get(bkey)
        if blocked is None:
            blocked = self.blocked[bkey] = _blocked_by_queue(state, c, self.pool)
        if blocked:
            hit = self.classes[c.index] = (True, None, None, None, None)
            return hit
        request = c.tasks[0].request
        scoped = self.podsets.get((c.job.name, c.podset))
        if scoped is None:
            scoped = self.podsets[(c.job.name, c.podset)] = (allowed_nodes(state, c.job, c.podset),
                                                             grouping_level(c.job, c.podset))
        allowed, grouping = scoped
        reach = reach_for(self.pool, c.job, state) if not request.is_shared_gpu else None
        queue_key = (c.job.queue, c.job.priority)
        key = (c.vec.tobytes(), c.tasks[0].predicate_key, request.best_effort, request.kind,
               request.gpu_portion, request.gpu_memory, request.devices,
               None if allowed is None else allowed.tobytes(),
               None if reach is None else queue_key + (reach is self.pool.reach.get(queue_key),))
        hit = self.classes[c.index] = (False, allowed, reach, key, grouping)
        return hit


# Up to this many candidates a ranking is sorted whole at once: asking block by block costs more
# in Python than the sort saves (1,000-node benchmark: the selection 107 -> 126 ms).
SORT_ALL_NODES = 2048


class _Ranking:
    """A class's candidate nodes in rank order: nodes that fit without evicting first, then by
    room left after greedy, by the placement preference (`prim`), by node. Sorted only as far as
    a class reads it (a few dozen nodes of thousands at 10,000 nodes, where sorting them all for
    each of ~400 rankings was an eighth of the selection): each flag's nodes are a block of the
    order, and the nodes at most the m-th smallest preference of a block are a prefix of it."""

    def __init__(self, nodes: np.ndarray, flag: np.ndarray, prim: np.ndarray, ub: np.ndarray) -> None:
        self.nodes, self.flag, self.prim = nodes, flag, prim
        self.cap = np.minimum(ub, 1 << 20)
        self.ub = ub
        self._blocks: list[np.ndarray] | None = None
        self._totals: list[int] = []
        self._sorted: dict[int, tuple[np.ndarray, np.ndarray]] = {}   # block -> its ranked head, room
        self._all: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def blocks(self) -> list[np.ndarray]:
        if self._blocks is None:
            self._blocks = [np.flatnonzero(self.flag == f) for f in range(4)]
            self._totals = [int(self.cap[block].sum()) for block in self._blocks]
        return self._blocks

    def _sort(self, b: int) -> np.ndarray:
        """Block b's positions, all ranked (kept with their cumulative room)."""
        hit = self._sorted.get(b)
        block = self.blocks()[b]
        if hit is None or len(hit[0]) < len(block):
            ranked = block[np.argsort(self.prim[block], kind="stable")]
            hit = self._sorted[b] = (ranked, np.cumsum(self.cap[ranked]))
        return hit[0]

    def full(self) -> tuple[np.ndarray, np.ndarray]:
        """Every node ranked, and their bounds."""
        if len(self.nodes) <= SORT_ALL_NODES:
            ranked, order, _ = self._whole()
            return ranked, self.ub[order]
        order = np.concatenate([self._sort(b) for b in range(4)])
        return self.nodes[order], self.ub[order]

    def _whole(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every node ranked in one sort: nodes, their positions, cumulative room."""
        if self._all is None:
            order = np.lexsort((self.prim, self.flag))
            self._all = (self.nodes[order], order, np.cumsum(self.cap[order]))
        return self._all

    def prefix(self, target: float, min_nodes: int) -> np.ndarray:
        """The first max(min_nodes, k) ranked nodes, k the fewest whose room (bounds capped at
        2^20) reaches `target`: all of them when none do."""
        if len(self.nodes) <= SORT_ALL_NODES:      # few: one sort, then each ask a search
            ranked, _, cum = self._whole()
            return ranked[:max(min_nodes, int(np.searchsorted(cum, target)) + 1)]
        taken: list[np.ndarray] = []
        room, count, reached = 0, 0, False
        for b, block in enumerate(self.blocks()):
            if not len(block):
                continue
            if reached:                               # only nodes to make up min_nodes are left
                if count >= min_nodes:
                    break
                part = self._head(b, None, min_nodes - count)
            elif room + self._totals[b] < target:
                part = self._sort(b)
                room += self._totals[b]
            else:
                part = self._head(b, target - room, min_nodes - count)
                reached = True
            taken.append(part)
            count += len(part)
        return self.nodes[np.concatenate(taken)] if taken else self.nodes[:0]

    def _head(self, b: int, target: float | None, min_nodes: int) -> np.ndarray:
        """The first ranked positions of block b: at least min_nodes (or all), and with `target`
        until their room reaches it (the block's does). A sorted head is kept for later asks and
        grown fourfold when one needs more."""
        block = self.blocks()[b]
        while True:
            hit = self._sorted.get(b)
            if hit is not None:
                ranked, cum = hit
                k = max(min_nodes, 0 if target is None else int(np.searchsorted(cum, target)) + 1)
                if k <= len(ranked) or len(ranked) == len(block):
                    return ranked[:k]
                m = 4 * len(ranked)
            else:
                m = max(min_nodes, 16)
            if 2 * m >= len(block):                   # most of it: sort it all
                self._sort(b)
                continue
            p = self.prim[block]
            v = np.partition(p, m - 1)[m - 1]
            low = block[p <= v]                       # a prefix of the block's order (ties: node order)
            low = low[np.argsort(self.prim[low], kind="stable")]
            self._sorted[b] = (low, np.cumsum(self.cap[low]))


def _select(state: ClusterState, greedy: GreedyResult, classes: list[PodClass], budget: int | None,
            greedy_nodes: dict[int, list[int]] | None, multiple: float, min_nodes: int, memo: _Memo,
            check: Callable[[], None] | None = None, fragmentation: bool = True
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class index, node index, upper bound) per candidate pair.

    Classes of jobs greedy started come first (they must stay placeable), then the others in
    KAI's order, until `budget` pairs are used; past the budget a started class keeps only the
    nodes greedy used for it and the others keep greedy's outcome (not placed). A class that may
    evict (model/evictions.py) counts what its legal victims free, ranked after nodes that fit
    without evicting.
    """
    table = state.table
    free0 = table.free
    s = greedy.session
    free_after = s.idle + s.releasing
    if greedy_nodes is None:
        greedy_nodes = greedy_class_nodes(greedy, classes)

    cls_out, node_out, ub_out = [], [], []
    rows = class_rows(state, free0, classes, greedy, check) if fragmentation else None
    walk = walked(state) if fragmentation else {}
    started = greedy.started_jobs
    used = 0

    deferred: list[tuple[int, PodClass, np.ndarray, np.ndarray | None]] = []   # (slot, class, nodes, reach)

    def own(c: PodClass, reach: np.ndarray | None) -> None:
        """Greedy's nodes as the class's pairs (and the fragmentation walk's)."""
        nonlocal used
        nodes = greedy_nodes.get(c.index)
        if nodes and not walk.get(c.index) and not c.tasks[0].request.best_effort:
            # Greedy's nodes alone: their count is known now, their bounds are worked out for
            # every such class at once below (per class they were ~40% of a lean model's
            # selection at 10,000 nodes, where most classes are past the pair budget).
            chosen, sel_ub = np.array(sorted(set(nodes)), dtype=np.int64), None
            deferred.append((len(ub_out), c, chosen, reach))
        else:
            chosen, sel_ub = _own_pairs(state, c, nodes, walk.get(c.index), reach, memo)
        used += len(chosen)
        cls_out.append(np.full(len(chosen), c.index, dtype=np.int64))
        node_out.append(chosen)
        ub_out.append(sel_ub)

    for c in sorted(classes, key=lambda c: (c.job.name not in started, c.index)):
        if c.job.name not in started and budget is not None and used >= budget:
            break
        if check is not None:
            check()
        blocked, allowed, reach, key, grouping = memo.of_class(c)
        # Where KAI's actions placed a class the rules below leave no node (the room came from
        # evictions that are not its own legal victims': another preemptor's, or moved victims),
        # greedy's nodes stay its pairs, so KAI's decisions remain a solution; without them a job
        # KAI started had no pair and the model, which keeps KAI's started jobs, was infeasible.
        if blocked:
            own(c, reach)
            continue
        best_effort = c.tasks[0].request.best_effort
        if budget is not None and used >= budget:
            own(c, reach)
            continue
        frag = rows[c.index] if rows is not None else None
        key = (key, id(frag))           # later classes see what earlier ones took (model/frag_rows.py)
        cached = memo.ranked.get(key)
        if cached is None:
            static = state.predicates.mask(c.tasks[0].predicate_key) & types_of(state).mask(c.tasks[0].request)
            if allowed is not None:
                static = static & allowed
            # Pods of the class each node holds alone (with what its legal victims free); kept
            # whole, as the selected pairs' bounds read it too.
            raw = None if best_effort else memo.bound("start", lambda: free0, c.vec) if reach is None \
                else memo.reach_bound(free0, reach, c.vec)
            ub = raw if not best_effort else np.full(len(state.nodes), 1 << 40)
            if c.tasks[0].request.is_shared_gpu:
                ub = np.minimum(ub, memo.shared_bound(c.tasks[0].request))
            nodes = np.nonzero(static & (ub > 0))[0]
            col = 2 if c.gpus > 0 else 0
            spread = (state.config.gpu_placement if c.gpus else state.config.cpu_placement) == "spread"
            prim = -free0[nodes, col] if spread else free0[nodes, col]
            if frag is not None:      # least fragmentation first (model/frag_rows.py)
                prim = np.where(np.isfinite(frag[nodes]), frag[nodes], 1e18)
            after = memo.bound("after", lambda: free_after, c.vec)[nodes] if not best_effort else ub[nodes]
            if best_effort:
                without = ub[nodes]
            else:           # raw is the bound on free0 itself when no victims add to it
                without = raw[nodes] if reach is None else memo.bound("start", lambda: free0, c.vec)[nodes]
            cached = memo.ranked[key] = (_Ranking(nodes, 2 * (without <= 0) + (after <= 0), prim, ub[nodes]), raw)
        ranking, raw = cached
        if len(ranking.nodes) == 0:
            own(c, reach)
            continue
        if grouping is None:
            chosen = ranking.prefix(multiple * c.size, min_nodes)
        else:
            dkey = (key, id(grouping[0]), grouping[1], c.size, multiple)
            chosen = memo.domains.get(dkey)
            if chosen is None:
                chosen = memo.domains[dkey] = _whole_domains(*ranking.full(), grouping, c.size, multiple)
        g = greedy_nodes.get(c.index)
        if g:
            # np.setdiff1d(np.unique(g), chosen), on sets: a few nodes each, and numpy's
            # set operations cost more than the sets do at this size.
            extra = np.array(sorted(set(g).difference(chosen.tolist())), dtype=np.int64)
            chosen = np.concatenate([chosen, extra])
        walk_nodes = walk.get(c.index) if len(chosen) and raw is not None else None
        if walk_nodes:      # where the fragmentation walk put the class (model/walk_hint.py)
            extra = sorted({n for n, _ in walk_nodes if raw[n] > 0}.difference(chosen.tolist()))
            if extra:
                chosen = np.concatenate([chosen, np.array(extra, dtype=np.int64)])
        sel_ub = np.minimum(raw[chosen] if not best_effort else np.full(len(chosen), c.size), c.size)
        if c.tasks[0].request.is_shared_gpu:
            sel_ub = np.minimum(sel_ub, memo.shared_bound(c.tasks[0].request)[chosen])
        used += len(chosen)
        cls_out.append(np.full(len(chosen), c.index, dtype=np.int64))
        node_out.append(chosen.astype(np.int64))
        ub_out.append(sel_ub.astype(np.int64))
    if deferred:
        for (slot, _, _, _), ub in zip(deferred, _own_bounds(state, deferred, memo)):
            ub_out[slot] = ub
    if not cls_out:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    return np.concatenate(cls_out), np.concatenate(node_out), np.concatenate(ub_out)


def _own_bounds(state: ClusterState, owned: list[tuple[int, PodClass, np.ndarray, np.ndarray | None]],
                memo: _Memo) -> list[np.ndarray]:
    """_own_pairs' bounds for classes on greedy's nodes alone, all at once: per pair the pods of
    its class the node holds (with what the class's legal victims free there), at most the
    class's size, and what its shared GPUs allow; the same integers as per class."""
    counts = np.array([len(nodes) for _, _, nodes, _ in owned], dtype=np.int64)
    nodes = np.concatenate([n for _, _, n, _ in owned])
    free = state.table.free[nodes]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    for (_, _, n, reach), at in zip(owned, starts.tolist()):
        if reach is not None:
            free[at:at + len(n)] += reach[n]
    bound = _per_node_bound(free, np.repeat(np.stack([c.vec for _, c, _, _ in owned]), counts, axis=0))
    bound = np.minimum(bound, np.repeat(np.array([c.size for _, c, _, _ in owned], dtype=np.int64), counts))
    out = []
    for (_, c, n, _), at in zip(owned, starts.tolist()):
        ub = bound[at:at + len(n)]
        if c.tasks[0].request.is_shared_gpu:
            ub = np.minimum(ub, memo.shared_bound(c.tasks[0].request)[n])
        out.append(ub.astype(np.int64))
    return out


def _own_pairs(state: ClusterState, c: PodClass, greedy_nodes: list[int] | None, walk_nodes: list | None,
               reach: np.ndarray | None, memo: _Memo) -> tuple[np.ndarray, np.ndarray]:
    """A class past the pair budget: greedy's nodes and the fragmentation walk's (where the class
    fits), with their bounds, computed on those nodes alone (the class's ranking over every node,
    never read past the budget, was most of the selection at 10,000 nodes, where the budget is
    spent by a tenth of the classes)."""
    if not greedy_nodes:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    request = c.tasks[0].request
    own = np.array(sorted(set(greedy_nodes)), dtype=np.int64)
    if request.best_effort:      # no bound of its own, and no walk nodes (as within the budget)
        chosen, sel_ub = own, np.full(len(own), c.size, dtype=np.int64)
    else:
        walk = sorted({n for n, _ in walk_nodes or ()}.difference(own.tolist()))
        chosen = np.concatenate([own, np.array(walk, dtype=np.int64)])
        free = state.table.free[chosen]
        raw = _per_node_bound(free if reach is None else free + reach[chosen], c.vec)
        keep = (np.arange(len(chosen)) < len(own)) | (raw > 0)      # the walk's nodes where the class fits
        chosen, sel_ub = chosen[keep], np.minimum(raw[keep], c.size)
    if request.is_shared_gpu:
        sel_ub = np.minimum(sel_ub, memo.shared_bound(request)[chosen])
    return chosen, sel_ub.astype(np.int64)
