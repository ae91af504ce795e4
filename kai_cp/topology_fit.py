"""KAI's topology plugin for the greedy engine (spec 8.3, 8.4): candidate domains of a scope,
most packed first at the lowest acceptable level, and the preferred-level node scores.

Everything is computed from the session's free capacity with per-domain sums over numpy
arrays; a scope is tried on each returned node set in turn by the allocator (5.2).
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

import numpy as np

from kai_cp.jobs import JobInfo, TaskInfo
from kai_cp.nodes import GPU_COL
from kai_cp.session import Session
from kai_cp.state import ClusterState
from kai_cp.topology import ROOT, Constraint, Scope, TopologyTree, pinned_domains

MISSING_RESOURCE_RATIO = 1000.0


class NodeSet:
    """One candidate domain: `mask` (bool per node), `domain` (its id, for messages) and `scores`
    (preferred-level node scores, 8.4; None without a preference)."""

    __slots__ = ("mask", "domain", "scores")

    def __init__(self, mask: np.ndarray, domain: str, scores: np.ndarray | None, fixed: bool = False):
        """`fixed`: the mask is the set's own, made read-only (the Fitter then keeps its node lists
        narrowed to it while the set is tried)."""
        if fixed:
            mask.flags.writeable = False
        self.mask, self.domain, self.scores = mask, domain, scores


def _domain_sums(tree: TopologyTree, level: int, values: np.ndarray) -> np.ndarray:
    """Per-domain sums of per-node integer values (zero on nodes outside the view), exact: one
    `reduceat` over the tree's member nodes grouped by domain (cached per tree and level)."""
    nodes, starts = _runs(tree, level)
    if not len(nodes):
        return np.zeros((tree.count(level),) + values.shape[1:], dtype=np.int64)
    return np.add.reduceat(values[nodes], starts, axis=0)


def _parent_sums(tree: TopologyTree, level: int, child: np.ndarray) -> np.ndarray:
    """Sums at `level` from the sums one level down: each domain is the union of its children,
    so a domain's sum is its children's (exact integers, in any order), from a few hundred
    rows rather than every node."""
    if not len(child):
        return np.zeros((tree.count(level),) + child.shape[1:], dtype=np.int64)
    order, starts = _child_runs(tree, level + 1)
    return np.add.reduceat(child[order], starts, axis=0)


def _runs(tree: TopologyTree, level: int) -> tuple[np.ndarray, np.ndarray]:
    """The member nodes ordered by their domain at a level, and where each domain's run starts
    (every domain has a member node). Once per tree and level."""
    cache = tree.__dict__.setdefault("_runs", {})
    out = cache.get(level)
    if out is None:
        dom = tree.domain_of(level)
        nodes = np.flatnonzero(dom >= 0)
        nodes = nodes[np.argsort(dom[nodes], kind="stable")]
        out = cache[level] = (nodes, np.searchsorted(dom[nodes], np.arange(tree.count(level))))
    return out


def _child_runs(tree: TopologyTree, level: int) -> tuple[np.ndarray, np.ndarray]:
    """A level's domains ordered by their parent one level up (the root above level 0), and
    where each parent's run starts (every domain has a child). Once per tree and level."""
    cache = tree.__dict__.setdefault("_child_runs", {})
    out = cache.get(level)
    if out is None:
        parent = tree.parent[level] if level > 0 else np.zeros(tree.count(level), dtype=np.int64)
        order = np.argsort(parent, kind="stable")
        out = cache[level] = (order, np.searchsorted(parent[order], np.arange(tree.count(level - 1))))
    return out


def _homogeneous(vecs: np.ndarray) -> bool:
    """All or none of the tasks need GPUs, and every other scalar is requested by all or none (8.3)."""
    requested = vecs > 0
    return bool(np.all(requested.all(axis=0) | ~requested.any(axis=0)))


def scope_demand(state: ClusterState, tasks: list[TaskInfo]) -> tuple[np.ndarray, np.ndarray | None]:
    """Summed request (pods slots ignored) and, for homogeneous tasks, the element-wise largest pod."""
    table = state.table
    # one row per distinct request (a gang's pods mostly share one), weighted by its pods
    counts: dict[int, list] = {}
    for t in tasks:
        hit = counts.get(id(t.request))
        if hit is None:
            counts[id(t.request)] = [t, 1]
        else:
            hit[1] += 1
    vecs = np.stack([table.vector(t) for t, _ in counts.values()])
    demand = (vecs * np.array([n for _, n in counts.values()], dtype=np.int64)[:, None]).sum(axis=0)
    pods_col = table.col.get("pods")
    if pods_col is not None:
        demand[pods_col] = 0
    return demand, (vecs.max(axis=0) if _homogeneous(vecs) else None)


def allocatable_pods(free: np.ndarray, max_pod: np.ndarray, n_tasks: int) -> np.ndarray:
    """Copies of the largest pod each node can hold (8.3); pod-slot-only pods count every task."""
    need = max_pod > 0
    if not need.any():
        return np.full(free.shape[0], n_tasks, dtype=np.int64)
    return np.maximum((np.maximum(free[:, need], 0) // max_pod[need]).min(axis=1), 0)


class DomainView:
    """Free capacity of one tree's domains, for one scope's tasks, at one moment of the session.
    Sums are taken over nodes at the `deepest` level asked for, and upwards from there.
    `kept`: the session's MemberFree of the tree when the view is over all its members (its
    free capacity, pod counts and sums, shared and filled in as levels are asked for)."""

    def __init__(self, tree: TopologyTree, valid: np.ndarray, free: np.ndarray,
                 demand: np.ndarray, max_pod: np.ndarray | None, n_tasks: int, deepest: int = ROOT,
                 kept: "MemberFree | None" = None):
        self.tree, self.valid, self.deepest = tree, valid, deepest
        self.demand, self.n_tasks = demand, n_tasks
        self.need = demand > 0
        self.free = free
        if kept is not None:
            self._sums = kept.sums
            self.pods, self._pods = kept.pods(max_pod, n_tasks) if max_pod is not None else (None, {})
            return
        # zero outside the view, as `free` is (a pod-slot-only scope counts every node)
        self.pods = np.where(valid, allocatable_pods(free, max_pod, n_tasks), 0) if max_pod is not None else None
        self._sums: dict[int, np.ndarray] = {}
        self._pods: dict[int, np.ndarray] = {}

    def sums(self, level: int) -> np.ndarray:
        return self._level(self._sums, level, self.free)

    def pod_counts(self, level: int) -> np.ndarray | None:
        return None if self.pods is None else self._level(self._pods, level, self.pods)

    def _level(self, cache: dict[int, np.ndarray], level: int, values: np.ndarray) -> np.ndarray:
        s = cache.get(level)
        if s is None:
            s = cache[level] = (_domain_sums(self.tree, level, values) if level >= self.deepest else
                                _parent_sums(self.tree, level, self._level(cache, level + 1, values)))
        return s

    def ratio(self, level: int) -> np.ndarray:
        """max over requested resources of demand / free (GPUs as devices); a missing resource counts 1000."""
        free = self.sums(level)[:, self.need].astype(np.float64)
        want = self.demand[self.need].astype(np.float64)
        if want.size == 0:
            return np.zeros(free.shape[0])
        with np.errstate(divide="ignore"):
            r = np.where(free > 0, want / np.maximum(free, 1), MISSING_RESOURCE_RATIO)
        return r.max(axis=1)

    def fits(self, level: int) -> np.ndarray:
        pods = self.pod_counts(level)
        if pods is not None:
            return pods >= self.n_tasks
        return self.ratio(level) <= 1.0


class MemberFree:
    """A tree's member nodes' free capacity, the copies of the largest pod of each shape they can
    hold, and the per-domain sums of both, kept in step with one session: scopes over the whole
    tree (every topology gang's top level) read them instead of copying and summing 10,000 rows
    per gang. Brought up to date by comparing with the session's free capacity, so rollbacks and
    evictions need no bookkeeping; sums change by the changed rows' differences (exact ints)."""

    def __init__(self, tree: TopologyTree, session: Session):
        self.tree = tree
        self.free = np.zeros(session.free.shape, dtype=session.free.dtype)     # row-major, as views read it
        np.copyto(self.free, session.free, where=tree.member[:, None])
        self.sums: dict[int, np.ndarray] = {}
        self._seen = np.asarray(session.free).copy(order="K")     # the session's layout: compared whole
        # per pod shape: [pod counts, shape, tasks, per-level sums, refreshes seen]; brought up
        # to date when asked for (gangs of many shapes: each refresh touches only the sums)
        self._pods: dict[tuple, list] = {}
        self._refreshes = 0
        self._stamp = np.zeros(len(tree.member), dtype=np.int64)   # per node: the refresh that last changed it

    @classmethod
    def of(cls, tree: TopologyTree, session: Session) -> "MemberFree":
        kept = session.__dict__.setdefault("_member_free", {})
        mine = kept.get(id(tree))
        if mine is None or mine.tree is not tree:
            mine = kept[id(tree)] = cls(tree, session)
        else:
            mine.refresh(session.free)
        return mine

    def pods(self, max_pod: np.ndarray, n_tasks: int) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        key = (max_pod.tobytes(), n_tasks if not (max_pod > 0).any() else 0)
        hit = self._pods.get(key)
        if hit is None:
            pods = np.where(self.tree.member, allocatable_pods(self.free, max_pod, n_tasks), 0)
            hit = self._pods[key] = [pods, max_pod.copy(), n_tasks, {}, self._refreshes]
        elif hit[4] < self._refreshes:
            pods, shape, tasks, sums, seen = hit
            rows = np.flatnonzero(self._stamp > seen)
            new = allocatable_pods(self.free[rows], shape, tasks)
            self._add(sums, rows, new - pods[rows])
            pods[rows] = new
            hit[4] = self._refreshes
        return hit[0], hit[3]

    def refresh(self, now: np.ndarray) -> None:
        changed = np.flatnonzero((self._seen != now).any(axis=1) & self.tree.member)
        if not len(changed):
            return
        rows = np.ascontiguousarray(now[changed])
        self._add(self.sums, changed, rows - self.free[changed])
        self.free[changed] = rows
        self._seen[changed] = rows
        self._refreshes += 1
        self._stamp[changed] = self._refreshes

    def _add(self, sums: dict[int, np.ndarray], nodes: np.ndarray, delta: np.ndarray) -> None:
        for level, s in sums.items():
            np.add.at(s, self.tree.domain_of(level)[nodes], delta)


def candidate_sets(state: ClusterState, session: Session, job: JobInfo, scope: Scope, tasks: list[TaskInfo],
                   mask: np.ndarray, first_choice: Callable[[TaskInfo, np.ndarray], int | None] | None = None
                   ) -> tuple[Iterable[NodeSet], str | None]:
    """KAI's `subset_nodes` (8.3): node sets to try in order, or ([], the reason none fits).

    A gang's own pod affinity keeps KAI's first-pod rule (seed 002): the domain of the node the
    first pod would take, and no other (`first_choice` gives that node)."""
    c = scope.constraint
    if c is None or not tasks:
        return [NodeSet(mask, "", None)], None
    tree = c.tree
    valid = mask & tree.member
    if c.source == "pod-affinity" and first_choice is not None:
        dom = tree.domain_of(0)
        placed = pinned_domains(job, scope, c, state.table.index, session.placements, session.evictions)
        if placed is not None:            # the gang's pods already there are the ones to be near
            valid = valid & np.isin(dom, placed)
        node = first_choice(tasks[0], valid)
        if node is None:
            return [], f"no node with label {tree.levels[0]} can take the first pod"
        return [NodeSet(valid & (dom == dom[node]), tree.domain_name(0, int(dom[node])), None, fixed=True)], None
    demand, max_pod = scope_demand(state, tasks)
    if whole_tree := bool(mask.all()):
        kept = MemberFree.of(tree, session)
        view = DomainView(tree, valid, kept.free, demand, max_pod, len(tasks), deepest=c.lowest, kept=kept)
    else:
        # row-major, whatever the session's layout: _domain_sums gathers whole rows
        free = np.zeros(session.free.shape, dtype=session.free.dtype)
        np.copyto(free, session.free, where=valid[:, None])
        view = DomainView(tree, valid, free, demand, max_pod, len(tasks), deepest=c.lowest)
    start_level, start = _member_start(tree, c.lowest) if whole_tree else _start_domain(tree, valid, c.lowest)
    if not bool(view.fits(start_level)[start]):
        where = "the cluster" if start_level == ROOT else tree.domain_name(start_level, start)
        return [], _shortfall(view, c, start_level, np.array([start]), f"not enough resources in {where} to allocate the job")
    rank = _sorted_tree_ranks(view, tree, start_level, c.lowest)
    allowed = pinned_domains(job, scope, c, state.table.index, session.placements, session.evictions)
    domains: list[tuple[int, np.ndarray]] = []       # per level, its fitting domains in order
    for level in range(c.lowest, c.highest - 1, -1):
        if level < start_level:
            break
        ok = view.fits(level)
        if start_level != ROOT:
            ok &= tree.ancestors(level, start_level) == start
        if allowed is not None:
            ok &= np.isin(tree.ancestors(level, c.required), allowed)
        cands = np.nonzero(ok)[0]
        if len(cands):
            domains.append((level, cands[np.argsort(rank[level][cands], kind="stable")]))
    if not domains:
        return [], _shortfall(view, c, c.highest, None, "no domain has enough free resources")
    scores = None if c.preferred is None else _preferred_scores(tree, c.preferred, start_level, start, rank[c.preferred])
    return _node_sets(tree, valid, domains, scores), None


def _node_sets(tree: TopologyTree, valid: np.ndarray, domains: list[tuple[int, np.ndarray]],
               scores: np.ndarray | None) -> Iterator[NodeSet]:
    """The candidate sets one at a time, each with its mask made as it is reached: a scope may
    have ~200 fitting racks over 10,000 nodes and the allocator usually stops at the first (all
    of them were ~30,000 objects per 10,000-node allocation). Each reads only the tree and the
    scope's valid nodes, fixed when the sets were decided."""
    for level, ds in domains:
        nodes, starts = _runs(tree, level)
        ends = np.append(starts[1:], len(nodes))
        for d in ds.tolist():
            # the domain's members (its run of the tree's nodes), those the scope may use: two
            # passes over every node per set were most of a tried set's cost at 10,000 nodes
            members = nodes[starts[d]:ends[d]]
            mask = np.zeros(len(valid), dtype=bool)
            mask[members[valid.take(members)]] = True
            yield NodeSet(mask, tree.domain_name(level, d), scores, fixed=True)


def _start_domain(tree: TopologyTree, valid: np.ndarray, lowest: int) -> tuple[int, int]:
    """Lowest domain holding every valid node, not below the lowest searched level (root if they differ)."""
    level, domain = ROOT, 0
    idx = np.nonzero(valid)[0]
    if len(idx) == 0:
        return level, domain
    for lv in range(0, lowest + 1):
        ds = tree.domain[lv, idx]
        if (ds != ds[0]).any():
            break
        level, domain = lv, int(ds[0])
    return level, domain


def _member_start(tree: TopologyTree, lowest: int) -> tuple[int, int]:
    """_start_domain of all the tree's members, once per tree and level."""
    cache = tree.__dict__.setdefault("_member_start", {})
    out = cache.get(lowest)
    if out is None:
        out = cache[lowest] = _start_domain(tree, tree.member, lowest)
    return out


def _sorted_tree_ranks(view: DomainView, tree: TopologyTree, start_level: int, lowest: int) -> dict[int, np.ndarray]:
    """Per level, every domain's position in a left-to-right walk of the tree whose children are
    sorted by ratio descending, ties by id (most packed first): parent's position, then own key."""
    ranks: dict[int, np.ndarray] = {}
    for level in range(max(start_level, ROOT), lowest + 1):
        n = tree.count(level)
        if level <= start_level:
            ranks[level] = np.zeros(n, dtype=np.int64)
            continue
        # lexsort((name rank, -ratio, parent rank)) as two stable sorts from the fixed name order,
        # the parent's left out where every domain has the same one
        order = tree.name_order(level)
        order = order[np.argsort(-view.ratio(level)[order], kind="stable")]
        if level > 0 and level - 1 > start_level:
            parent = ranks[level - 1][tree.parent[level]]
            order = order[np.argsort(parent[order], kind="stable")]
        r = np.empty(n, dtype=np.int64)
        r[order] = np.arange(n)
        ranks[level] = r
    return ranks


def _preferred_scores(tree: TopologyTree, preferred: int, start_level: int, start: int, rank: np.ndarray) -> np.ndarray:
    """Nodes of the i-th of n preferred-level domains under the start domain score 10000*floor(10*i/n) (8.4)."""
    under = np.ones(tree.count(preferred), dtype=bool) if start_level == ROOT else \
        tree.ancestors(preferred, start_level) == start
    doms = np.nonzero(under)[0]
    doms = doms[np.argsort(rank[doms], kind="stable")]
    per_domain = np.zeros(tree.count(preferred), dtype=np.float64)
    n = len(doms)
    per_domain[doms] = 10000.0 * ((10 * np.arange(1, n + 1)) // max(n, 1))
    dom = tree.domain_of(preferred)
    return np.where(dom >= 0, per_domain[np.maximum(dom, 0)], 0.0)


def _shortfall(view: DomainView, c: Constraint, level: int, domains: np.ndarray | None, fallback: str) -> str:
    """Why no domain fits, in numbers a user can act on: what the scope needs and what the best domain offers."""
    tree = c.tree
    level = max(level, c.highest)
    label = "the whole topology" if level == ROOT else f"one {tree.levels[level]}"
    pods = view.pod_counts(level)
    if pods is not None and view.demand[GPU_COL] > 0:
        sums = view.sums(level)[:, GPU_COL]
        best = int(sums.max()) if len(sums) else 0
        best_pods = int(pods.max()) if len(pods) else 0
        return (f"needs {label} with {view.n_tasks} pods and {int(view.demand[GPU_COL])} GPUs free; the largest has "
                f"{best} GPUs free and room for {best_pods} of the pods")
    if pods is not None:
        best_pods = int(pods.max()) if len(pods) else 0
        return f"needs {label} with room for {view.n_tasks} pods; the largest has room for {best_pods}"
    if view.demand[GPU_COL] > 0:
        sums = view.sums(level)[:, GPU_COL]
        best = int(sums.max()) if len(sums) else 0
        return f"needs {label} with {int(view.demand[GPU_COL])} GPUs free; the largest has {best}"
    return fallback


def topology_message(job: JobInfo, scope: Scope, detail: str) -> str:
    c = scope.constraint
    if c.source == "pod-affinity":
        return (f"required pod affinity on {c.tree.levels[0]} couldn't be satisfied for job "
                f"{job.namespace}/{job.name}: {detail}")
    sub = f", subgroup {scope.name}" if scope.depth > 0 else ""
    return (f"topology {c.tree.name}, requirement {c.required_name} couldn't be satisfied for job "
            f"{job.namespace}/{job.name}{sub}: {detail}")
