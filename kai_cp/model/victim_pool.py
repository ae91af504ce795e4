"""The victim pool: the running pods the model may evict, aggregated before any variable exists
(model/evictions.py decides them), and per (queue, priority) of pending work what evicting its
legal victims frees on each node (the candidate selection reads it, model/candidates.py).

- single-pod jobs of the same queue, priority and request on the same node are one *pods* unit,
  one count variable (how many of them leave the node);
- every other job is a *job* unit: a Boolean for the whole gang and, when it is elastic, a count
  per (PodSet, node) of surplus pods (the gang keeps its minimum or leaves whole).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable
from fractions import Fraction

import numpy as np

from kai_cp.actions import min_runtime
from kai_cp.actions.allocate import GreedyResult
from kai_cp.fairshare import allocatable
from kai_cp.jobs import ACTIVE_ALLOCATED, JobInfo, TaskInfo
from kai_cp.ordering import queue_rank, queue_tree, rank_less, request_vector, tasks_to_allocate
from kai_cp.queues import RESOURCES
from kai_cp.state import ClusterState

# Per pod evicted: fewest first, then cheapest (< 2 x base). In utilisation's level, so a pod
# evicted outweighs any one pod placed (100 + GPUs x 100, model/utilisation.py).
BASE_COST, QUOTA_COST, PRIORITY_STEP, PRIORITY_BANDS = 2000, 400, 200, 3


@dataclass(eq=False)
class Unit:
    index: int
    kind: str                          # "pods" | "job"
    queue: str
    priority: int
    tasks: list[TaskInfo]              # pods: best victim first; job: task order
    node_tasks: dict[int, dict[str, list[TaskInfo]]]    # node -> podset -> tasks there
    vec: np.ndarray                    # per pod (pods units)
    centi: int                         # GPUs x 100 per pod (pods) or of the whole job (job)
    chunk: int                         # largest reclaim chunk, GPUs x 100 (gate 2's slack)
    preempt: bool = False
    reclaim: bool = False
    reclaimers: frozenset = frozenset()
    whole: bool = True                 # the whole job may go (not protected)
    surplus: dict[str, int] = field(default_factory=dict)   # podset -> pods above its minimum
    cost: int = BASE_COST

    @property
    def nodes(self) -> list[int]:
        return sorted(self.node_tasks)


@dataclass
class Pool:
    units: list[Unit]
    reach: dict[tuple[str, int], np.ndarray]          # (queue, priority) -> what evictions may free, per node
    reclaimers: set[str]
    loses: np.ndarray                                  # per unit, all it may lose (summed over its nodes)

    def freeable_under(self, state: ClusterState, job: JobInfo, ancestor: str) -> np.ndarray:
        """What the job's legal victims hold inside `ancestor`'s subtree, summed: the most its
        evictions can return under that queue's limit."""
        mine = [u.index for u in self.units
                if _legal(u, job) and any(q.name == ancestor for q in state.queue_path(u.queue))]
        return self.loses[mine].sum(axis=0)


def _reclaim_ok_queues(state: ClusterState, greedy: GreedyResult, classes_queues: set[str]) -> set[str]:
    """Queues that may reclaim: below their fair share in GPUs now (gate 1's spirit)."""
    out = set()
    for name in classes_queues:
        q = state.queues.get(name)
        if q is None or not q.is_leaf:
            continue
        if q.allocated["gpu"] < q.fair_share["gpu"]:
            out.add(name)
    return out


def _goes_first(state: ClusterState, greedy: GreedyResult, reclaimer: str, victim: str) -> bool:
    """KAI's simulation re-places the victims' job before the preemptor when the victim's queue
    comes first in queue order (3.8, 6.2.4): a victim then takes its place back and the reclaim
    fails. So a queue of higher priority is only reclaimed from when it is over its fair share
    in every resource (rule 1 puts it last)."""
    v, r = state.queues[victim], state.queues[reclaimer]
    alloc = v.allocated
    over = all(v.fair_share[x] < alloc[x] for x in ("cpu", "memory", "gpu"))
    return over or r.priority >= v.priority


class NextCycleOrder:
    """Whether next cycle's allocate serves the reclaimer before a victim's recreated job.

    A reclaimed pod comes back pending, and the preemptor, pipelined this cycle, holds nothing
    across cycles: if KAI's queue order (3.1) then puts the victim's queue first, allocate binds
    the victim back onto the freed GPUs and the reclaim repeats every cycle. KAI's own simulation
    orders queues by their head job (3.8), which is how its reclaim avoids that; the model keeps
    only the reclaims whose reclaimer's head job (its first pending job in KAI's order) comes
    before the victim's job, compared where the two queues' branches meet in the tree."""

    def __init__(self, state: ClusterState, greedy: GreedyResult):
        self.state = state
        self.views = queue_tree(state)[0]
        self.head: dict[str, list[float]] = {}
        self._plan: dict[str, dict[str, tuple[tuple, str] | bool]] = {}   # victim queue -> reclaimer -> _entry
        self._pairs: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._keys: dict[tuple, tuple] = {}   # queue_rank by (reclaimer, branch) / (branch, victim request)
        started = greedy.started_jobs
        for name in greedy.order:
            job = state.jobs.get(name)
            if job is None or job.queue in self.head or name in started:
                continue
            tasks = tasks_to_allocate(job, greedy.session)
            if not tasks:
                continue
            req = request_vector(tasks, state.gpu_memory_divisor)
            self.head[job.queue] = [float(req[x]) for x in RESOURCES]

    def _branches(self, a: str, b: str) -> tuple[str, str] | None:
        key = (a, b)
        if key in self._pairs:
            return self._pairs[key]
        pa = [q.name for q in reversed(self.state.queue_path(a))]     # root first
        pb = [q.name for q in reversed(self.state.queue_path(b))]
        out = None
        for x, y in zip(pa, pb):
            if x != y:
                out = (x, y)
                break
        self._pairs[key] = out
        return out

    def passing(self, reclaimers: Iterable[str], victim_queue: str, vreq: tuple[float, ...]) -> frozenset[str]:
        """The reclaimers that go before a victim of `victim_queue` requesting `vreq` (before()
        for each, in one pass: victim requests rarely repeat, and a call per reclaimer was half
        of the victim pool's time at 1,000 nodes)."""
        plan = self._plan.get(victim_queue)
        if plan is None:
            plan = self._plan[victim_queue] = {}
        keys = self._keys
        ranks: dict[str, tuple] = {}          # victim branch -> its rank without the victim
        out = []
        for r in reclaimers:
            entry = plan.get(r)
            if entry is None:
                entry = plan[r] = self._entry(r, victim_queue)
            if entry is True:
                out.append(r)
                continue
            lk, vb = entry
            rk = ranks.get(vb)
            if rk is None:
                rk = keys.get((vb, vreq))
                if rk is None:
                    va = [float(self.state.queues[vb].allocated[x]) - vreq[i] for i, x in enumerate(RESOURCES)]
                    rk = keys[(vb, vreq)] = queue_rank(self.views[vb], va, list(vreq))
                ranks[vb] = rk
            if rank_less(lk, rk):
                out.append(r)
        return frozenset(out)

    def _entry(self, reclaimer: str, victim_queue: str) -> tuple[tuple, str] | bool:
        """What compares a reclaimer with victims of one queue: True when it always goes first
        (no pending head job, or the same branch), else the rank of the reclaimer's branch with
        its head job and the victim's branch (queue_less(rb with the reclaimer's head, vb without
        the victim's pods); each side's rank is kept, as many reclaimers meet one victim branch
        and the other way round)."""
        head = self.head.get(reclaimer)
        if head is None:
            return True
        pair = self._branches(reclaimer, victim_queue)
        if pair is None:
            return True
        rb, vb = pair
        lk = self._keys.get((reclaimer, rb))
        if lk is None:
            ra = [float(self.state.queues[rb].allocated[x]) for x in RESOURCES]
            lk = self._keys[(reclaimer, rb)] = queue_rank(self.views[rb], ra, head)
        return lk, vb


def _allowance(q, alloc: Fraction) -> int:
    """Gate 2 without the chunk slack, GPUs x 100: how far above its allocatable share (or quota)."""
    best = -1
    a = allocatable(q.deserved["gpu"], q.limit["gpu"], q.fair_share["gpu"])
    if a != -1 and alloc > a:
        best = max(best, int((alloc - a) * 100))
    if q.deserved["gpu"] != -1 and alloc > q.deserved["gpu"]:
        best = max(best, int((alloc - q.deserved["gpu"]) * 100))
    return best


CHECK_EVERY_JOBS = 256      # build_pool's deadline checks: ~6 ms of jobs apart at 10,000 nodes


def build_pool(state: ClusterState, greedy: GreedyResult, pending: list[tuple[str, int]],
               check: Callable[[], None] | None = None) -> Pool | None:
    """The units and, per (queue, priority) of pending work, what evicting its legal victims frees.
    `check` is called every few hundred jobs: it raises when the cycle's time is up (every victim
    job of the cluster is looked at, 30,000 in 0.4 s at 10,000 nodes)."""
    actions = state.config.actions
    if "reclaim" not in actions and "preempt" not in actions:
        return None
    now = greedy.now
    table = state.table
    queues_with_work = {q for q, _ in pending}
    reclaimers = _reclaim_ok_queues(state, greedy, queues_with_work) if "reclaim" in actions else set()
    top_prio: dict[str, int] = {}
    for q, p in pending:
        top_prio[q] = max(top_prio.get(q, p), p)
    # The model decides the whole cycle from the snapshot: queue allocations are the snapshot's.
    allowance = {q: _allowance(v, v.allocated["gpu"]) for q, v in state.queues.items()}
    units: list[Unit] = []
    pods_groups: dict[tuple, list[TaskInfo]] = {}
    first: dict[str, frozenset] = {}            # victim queue -> reclaimers that go before it
    next_order = NextCycleOrder(state, greedy) if reclaimers else None
    greedy_reclaimed: dict[str, frozenset] = {}     # victim job -> queues greedy reclaimed it for
    for e in greedy.session.evictions.values():
        if e.action == "reclaim" and e.for_job in state.jobs:
            greedy_reclaimed[e.task.job] = greedy_reclaimed.get(e.task.job, frozenset()) | {state.jobs[e.for_job].queue}
    ordered: dict[tuple, frozenset] = {}       # (victim queue, reclaimers passed, victim request) -> reclaimers
    index, placements, may_preempt = table.index, greedy.session.placements, "preempt" in actions
    losable = _Losable(table.vector)
    jobs, queues = state.jobs, state.queues
    # The preemptible jobs with pods on the cycle's nodes (state.victims, in job order): the
    # others have nothing to lose. Their pods there, per PodSet, were found at state build.
    for i, name in enumerate(state.victims):
        if check is not None and not i % CHECK_EVERY_JOBS:
            check()
        job = jobs[name]
        if job.queue not in queues:
            continue
        # A pod greedy's actions moved (evicted and re-placed elsewhere) keeps running where greedy
        # put it: the model has no moves, so it is no victim, and its gang can lose only pods above
        # its minimum, never the rest "whole".
        running, moved = [], 0
        for ps in job.podsets.values():
            for t in ps.on_nodes(index):
                if t.request.is_shared_gpu:
                    continue
                if t.key in placements:
                    moved += 1
                else:
                    running.append(t)
        if not running:
            continue
        pre = may_preempt and top_prio.get(job.queue, -1 << 30) > job.priority \
            and min_runtime.filter_victim(state, job, "preempt", job.queue, now)
        gpus = sum(t.request.gpus for t in running)
        # Gate 2 first: a victim queue not above its share, or a job holding no GPUs, is reclaimed
        # by no one (deciding who else goes first was half of the pool's time when it was not).
        recl = frozenset()
        if reclaimers and gpus and allowance[job.queue] >= 0:
            order_ok = first.get(job.queue)
            if order_ok is None:
                order_ok = first[job.queue] = frozenset(r for r in reclaimers
                                                        if r != job.queue and _goes_first(state, greedy, r, job.queue))
            recl, passed = min_runtime.reclaimers_passed(state, job, order_ok, now)
        if recl:
            victim_req = request_vector(running, state.gpu_memory_divisor)
            vreq = tuple(float(victim_req[x]) for x in RESOURCES)
            vkey = (job.queue, passed, vreq)
            hit = ordered.get(vkey)
            if hit is None:
                hit = ordered[vkey] = next_order.passing(recl, job.queue, vreq)
            # KAI's own reclaims stay possible, so greedy's decisions stay a solution (its
            # preemptor is nominated: next cycle serves it first, as for greedy's cycle)
            recl = hit | (recl & greedy_reclaimed.get(job.name, frozenset()))
        if not pre and not recl:
            continue
        if _single_pod(job):
            t = running[0]
            key = (job.queue, job.priority, t.request, t.node, pre, recl)
            pods_groups.setdefault(key, []).append(t)
            continue
        # Minimum runtime (6.7) per route: a protected job loses only pods above its minimum.
        protected_pre = pre and min_runtime.protected(state, job, "preempt", job.queue, now)
        protected_recl = {r for r in recl if min_runtime.protected(state, job, "reclaim", r, now)}
        if pre and not protected_pre and protected_recl and not moved \
                and not protected_recl & greedy_reclaimed.get(job.name, frozenset()):
            # Preempt may take the job whole; the reclaimers it is protected from could take only
            # its surplus, which a whole unit cannot say, so they leave this unit. (Dropping the
            # unit instead made KAI's preemption of it unrepresentable: the model was infeasible.)
            recl = frozenset(recl - protected_recl)
            protected_recl = set()
        whole = not protected_pre and not protected_recl and not moved
        surplus = {}
        for ps in job.podsets.values():
            n = sum(1 for t in running if t.podset == ps.name)
            kept = sum(1 for t in ps.tasks if t.key in placements and t.status in ACTIVE_ALLOCATED)
            if n + kept > ps.min_available and n:
                surplus[ps.name] = min(n, n + kept - ps.min_available)
        if not whole and not surplus:
            continue
        node_tasks: dict[int, dict[str, list[TaskInfo]]] = {}
        # Gate 2 takes a victim job's pods above each PodSet's minimum as chunks of their own
        # first and its core (the first minAvailable pods of each PodSet, in task order) last
        # (3.7.2): the core is the chunk that may cross the share.
        core = per_pod = 0
        left = {ps.name: ps.min_available for ps in job.podsets.values()}    # core pods still to count
        u_index = len(units)
        for t in sorted(running, key=lambda t: t.order_key):
            n = index[t.node]
            node_tasks.setdefault(n, {}).setdefault(t.podset, []).append(t)
            if whole or surplus.get(t.podset):
                losable.add(u_index, n, t)
            centi = 100 * t.request.gpus
            per_pod = max(per_pod, centi)
            if left.get(t.podset, 0) > 0:
                left[t.podset] -= 1
                core += centi
        units.append(Unit(len(units), "job", job.queue, job.priority, running, node_tasks,
                          np.zeros(0), 100 * gpus, max(core, per_pod) if whole else per_pod, pre, bool(recl), recl,
                          whole, surplus))
    for (queue, prio, _req, node, pre, recl), tasks in pods_groups.items():
        # best victims first: reverse job order (newest, then name), as KAI's victim queue takes them
        if len(tasks) > 1:
            tasks = sorted(tasks, key=lambda t: (state.jobs[t.job].creation, t.job), reverse=True)
        n = index[node]
        vec = table.vector(tasks[0])
        losable.add_alike(len(units), n, vec, len(tasks))
        units.append(Unit(len(units), "pods", queue, prio, tasks, {n: {tasks[0].podset: tasks}}, vec,
                          100 * tasks[0].request.gpus, 100 * tasks[0].request.gpus, pre, bool(recl), recl))
    if not units:
        return None
    in_quota: dict[str, bool] = {}          # per queue (Fraction comparisons, once, not per unit)
    for u in units:
        inq = in_quota.get(u.queue)
        if inq is None:
            q = state.queues[u.queue]
            inq = in_quota[u.queue] = q.allocated["gpu"] <= q.deserved["gpu"] or q.deserved["gpu"] == -1
        u.cost = BASE_COST + QUOTA_COST * inq + PRIORITY_STEP * max(0, min(PRIORITY_BANDS, u.priority // 50))
    reach, loses = _reach(state, units, pending, losable)
    return Pool(units, reach, reclaimers, loses)


def _single_pod(job: JobInfo) -> bool:
    """One pod, and every PodSet's minimum at most 1: a job that leaves pod by pod."""
    pods = 0
    for ps in job.podsets.values():
        if ps.min_available > 1:
            return False
        pods += len(ps.tasks)
    return pods == 1


class _Losable:
    """The pods the pool's units can lose, as (unit, node, request) rows, recorded while the
    units are made (a second pass over every unit's pods was a third of the pool's time at
    10,000 nodes). Only what a unit can lose: a job not taken whole loses surplus pods only.
    (Its other pods counted let a candidate's bound on a node assume capacity no variable
    frees, and a node with one candidate has no capacity row: the model pipelined a pod onto a
    full node; found by the generated invariant test.)"""

    def __init__(self, vector: Callable[[TaskInfo], np.ndarray]) -> None:
        self.vector = vector
        self.unit: list[int] = []
        self.node: list[int] = []
        self.vecs: list[np.ndarray] = []

    def add(self, unit: int, node: int, task: TaskInfo) -> None:
        self.unit.append(unit)
        self.node.append(node)
        self.vecs.append(self.vector(task))

    def add_alike(self, unit: int, node: int, vec: np.ndarray, count: int) -> None:
        self.unit += [unit] * count
        self.node += [node] * count
        self.vecs += [vec] * count


def _reach(state: ClusterState, units: list[Unit], pending: list[tuple[str, int]], losable: _Losable
           ) -> tuple[dict[tuple[str, int], np.ndarray], np.ndarray]:
    """Per (queue, priority) of pending work, what evicting the units it may evict frees on each
    node (_legal's rule), and what each unit may lose in all. One row per (unit, node) and a mask
    of legal units per key, summed with numpy: the loop over every key and unit was a third of
    the pool's time at 1,000 nodes. Integer sums, so the order of the additions does not matter."""
    table = state.table
    width = table.allocatable.shape[1]
    task_unit = np.array(losable.unit, dtype=np.int64)
    task_node = np.array(losable.node, dtype=np.int64)
    stacked = np.array(losable.vecs, dtype=table.allocatable.dtype).reshape(-1, width)
    # rows: a unit's pods on one node (each unit's pods are recorded node by node, but a job's
    # nodes are not in order: rows are found by sorting on (unit, node), stably)
    order = np.lexsort((task_node, task_unit))
    key_unit, key_node = task_unit[order], task_node[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (key_unit[1:] != key_unit[:-1]) | (key_node[1:] != key_node[:-1])
    starts = np.flatnonzero(first)
    vecs = np.add.reduceat(stacked[order], starts, axis=0) if len(order) else stacked
    row_unit_arr = key_unit[starts]
    row_node_arr = key_node[starts]
    names = sorted({u.queue for u in units})
    code = {q: i for i, q in enumerate(names)}
    unit_queue = np.array([code[u.queue] for u in units], dtype=np.int64)
    unit_prio = np.array([u.priority for u in units], dtype=np.int64)
    unit_preempt = np.array([u.preempt for u in units], dtype=bool)
    reclaimed_by: dict[str, np.ndarray] = {}          # reclaiming queue -> units it may reclaim
    for u in units:
        for r in u.reclaimers:
            mask = reclaimed_by.get(r)
            if mask is None:
                mask = reclaimed_by[r] = np.zeros(len(units), dtype=bool)
            mask[u.index] = True
    reach: dict[tuple[str, int], np.ndarray] = {}
    for q, p in set(pending):
        legal = unit_preempt & (unit_queue == code.get(q, -1)) & (unit_prio < p)
        if q in reclaimed_by:
            legal |= reclaimed_by[q]
        rows = legal[row_unit_arr]
        if not rows.any():
            continue
        arr = np.zeros_like(table.allocatable)
        np.add.at(arr, row_node_arr[rows], vecs[rows])
        if arr.any():
            reach[(q, p)] = arr
    loses = np.zeros((len(units), width), dtype=table.allocatable.dtype)
    np.add.at(loses, row_unit_arr, vecs)
    return reach, loses


def _preempts(u: Unit, job: JobInfo) -> bool:
    """May this job preempt unit u (its own queue, strictly lower priority)?"""
    return u.preempt and job.queue == u.queue and job.priority > u.priority


def _legal(u: Unit, job: JobInfo) -> bool:
    """May this job's pods use what evicting unit u frees (preempt or reclaim)?"""
    return _preempts(u, job) or job.queue in u.reclaimers


def pending_keys(classes) -> list[tuple[str, int]]:
    return sorted({(c.job.queue, c.job.priority) for c in classes})


def reach_for(pool: Pool | None, job: JobInfo) -> np.ndarray | None:
    return None if pool is None else pool.reach.get((job.queue, job.priority))
