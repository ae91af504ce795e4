"""Evictions in the model: reclaim and preempt decided together with the placements (spec 6).

Running pods that may be evicted are aggregated before any variable exists:
- single-pod jobs of the same queue, priority and request on the same node are one *pods* unit,
  one count variable (how many of them leave the node);
- every other job is a *job* unit: a Boolean for the whole gang and, when it is elastic, a count
  per (PodSet, node) of surplus pods (the gang keeps its minimum or leaves whole).
What a unit frees on a node adds to that node's capacity (node_capacity.py, pipeline.py,
gpu_sharing.py read `freed_terms`); a pod placed on freed capacity is pipelined (decode).

Which evictions are allowed (hard constraints):
- only preemptible pods, not protected by their minimum runtime (protected elastic jobs only
  lose surplus pods), never non-preemptible ones (6.1, 6.7);
- preempt: a unit may leave a node only if a job of its own queue with strictly higher priority
  places a pod on one of the unit's nodes (6.5);
- reclaim: only if a job of another queue that reclaims places a pod there; a reclaiming queue
  ends within its fair share (gates 1 and 3 where the reclaimer stays within its share), and each
  victim queue level above the reclaimer's loses victims only while it is above its allocatable
  share (or its quota, for a reclaimer whose own level stays within its quota: quota reclaim):
  all but the largest take strictly less than that excess, KAI's test-before-subtract (gate 2,
  3.7.2).
Objective: below KAI's order (so evictions serve the jobs KAI would serve) and in utilisation's
level, each pod evicted outweighing any one pod placed: fewest pods evicted, then cheaper ones
(over-quota queues before in-quota ones, lower priority first), each GPU taken below a victim
queue's fair share counting as four pods, but never so far that more pods go than KAI's own
actions evict (a pod beyond greedy's count outweighs what greedy took below the shares).
(A level of its own between utilisation and KAI's order does not stay exact in a double on
1,000-node clusters.)

Consolidation moves and shared-GPU victims are not modelled: when KAI's greedy actions make one,
the model decides the allocation alone and the greedy eviction actions run on its answer
(cycle.py, actions/pipeline.py `unmodelled_evictions`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable
from fractions import Fraction

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.actions import min_runtime
from kai_cp.actions.allocate import GreedyResult
from kai_cp.actions.reclaim_rules import quota_floor_applies
from kai_cp.fairshare import allocatable
from kai_cp.jobs import ACTIVE_ALLOCATED, JobInfo, TaskInfo
from kai_cp.model.base import ModelContext
from kai_cp.model.freed_use import only_preemptors_use_freed
from kai_cp.model.linear_rows import add_at_most_if, add_enforced_le, upper_bound as _ub
from kai_cp.ordering import queue_rank, queue_tree, rank_less, request_vector, tasks_to_allocate
from kai_cp.queues import RESOURCES
from kai_cp.state import ClusterState

NAME = "evictions"
# Per pod evicted: fewest first, then cheapest (< 2 x base). In utilisation's level, so a pod
# evicted outweighs any one pod placed (100 + GPUs x 100, model/utilisation.py).
BASE_COST, QUOTA_COST, PRIORITY_STEP, PRIORITY_BANDS = 2000, 400, 200, 3
BELOW_SHARE_COST = 4 * BASE_COST // 100   # per hundredth of a GPU taken below the victim queue's fair share


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


def _before_last(q, alloc: Fraction, quota: bool = True) -> int | None:
    """Gate 2 checked before each victim is subtracted (3.7.2): a level above its allocatable
    share (or, with `quota`, its quota) by `over` may lose victims while it stays above, so all
    but the last victim take strictly less than `over`. GPUs x 100, the most those victims may
    take; None when the level is not above (it loses nothing)."""
    over = Fraction(-1)
    a = allocatable(q.deserved["gpu"], q.limit["gpu"], q.fair_share["gpu"])
    if a != -1:
        over = max(over, alloc - a)
    if quota and q.deserved["gpu"] != -1:
        over = max(over, alloc - q.deserved["gpu"])
    if over <= 0:
        return None
    return math.ceil(over * 100) - 1


def _beside(state: ClusterState, queue: str, level):
    """The ancestor of `queue` (or itself) that is a sibling of `level`; None when there is none."""
    return next((q for q in state.queue_path(queue) if q.parent == level.parent), None)


def _quota_floor(q, alloc: Fraction) -> int | None:
    """GPUs x 100 a level at or above its quota may lose by reclaim without going below it,
    where the quota floor applies (actions/reclaim_rules.py quota_floor_applies: KAI's last
    chunk may cross it, and the level then reclaims back within its quota). None when the
    level has no quota or is below it already (gate 2 decides alone)."""
    quota = q.deserved["gpu"]
    if quota == -1 or alloc < quota:
        return None
    return math.floor((alloc - quota) * 100)


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


class Evictions:
    """Runs before node capacity: its variables free capacity the other constraints count."""
    name = NAME

    def contribute(self, ctx: ModelContext) -> None:
        pool: Pool | None = ctx.extensions.get("victim-pool")
        if pool is None or len(ctx.pair_node) == 0:
            return
        m = ctx.model
        state = ctx.state
        table = state.table
        pair_nodes = set(ctx.pair_node.tolist())
        pair_job = [ctx.classes[c].job for c in ctx.pair_class.tolist()]
        by_node_queue: dict[tuple[int, str], list[int]] = {}     # (node, queue) -> pairs, in pair order
        by_queue_pairs: dict[str, list[int]] = {}
        for i, n in enumerate(ctx.pair_node.tolist()):
            q = pair_job[i].queue
            by_node_queue.setdefault((n, q), []).append(i)
            by_queue_pairs.setdefault(q, []).append(i)
        freed: dict[int, list[tuple[cp_model.IntVar, np.ndarray]]] = {}
        by_queue: dict[str, list[tuple[cp_model.IntVar, np.ndarray]]] = {}   # what evictions take off each leaf queue
        preemptors: set[str] = set()             # jobs whose placement may justify a preempt
        reclaimers_used: set[str] = set()        # queues whose placements may justify a reclaim
        evict_vars: list[cp_model.IntVar] = []
        unit_vars: list[tuple] = []              # (unit, evicted-pods expression parts, var list)
        z: dict[tuple[str, int], cp_model.IntVar] = {}
        r_of: dict[str, cp_model.IntVar] = {}
        costs_v, costs_c = [], []
        pod_terms: list[tuple[cp_model.IntVar, int]] = []     # (variable, pods it evicts per unit)
        gpu_terms: dict[str, list[tuple[cp_model.IntVar, int]]] = {}   # victim queue -> reclaimable GPU terms
        greedy_ev = ctx.greedy.session.evictions
        unit_jobs = {u.tasks[0].job for u in pool.units if u.kind == "job"}
        own_pairs: dict[str, list[int]] = {}
        for i, job in enumerate(pair_job):
            if job.name in unit_jobs:
                own_pairs.setdefault(job.name, []).append(i)

        def justification(u, nodes) -> list:
            lits = []
            reclaimers = sorted(u.reclaimers)
            for n in nodes:
                if u.preempt:
                    for i in by_node_queue.get((n, u.queue), ()):
                        job = pair_job[i]
                        if job.priority > u.priority:
                            lits.append(ctx.x[i])
                            preemptors.add(job.name)
                for r in reclaimers:
                    key = (r, n)
                    if key not in z:
                        xs = [ctx.x[i] for i in by_node_queue.get((n, r), ())]
                        if not xs:
                            continue
                        reclaimers_used.add(r)
                        if r not in r_of:
                            r_of[r] = m.new_bool_var("")
                        zv = m.new_bool_var("")
                        m.add(zv <= sum(xs))
                        m.add(zv <= r_of[r])
                        z[key] = zv
                    lits.append(z[key])
            return lits

        for u in pool.units:
            if pair_nodes.isdisjoint(u.node_tasks):      # no candidate pair on its nodes
                continue
            lits = justification(u, u.nodes)
            if not lits:
                continue
            if u.kind == "pods":
                n = u.nodes[0]
                k = m.new_int_var(0, len(u.tasks), "")
                ctx.hint(k, sum(1 for t in u.tasks if t.key in greedy_ev))
                m.add(k <= len(u.tasks) * sum(lits))
                freed.setdefault(n, []).append((k, u.vec))
                by_queue.setdefault(u.queue, []).append((k, u.vec))
                unit_vars.append((u, [(u.tasks, k, "first")]))
                evict_vars.append(k)
                pod_terms.append((k, 1))
                costs_v.append(k)
                costs_c.append(u.cost)
                if u.reclaim:
                    gpu_terms.setdefault(u.queue, []).append((k, u.centi, u))
                continue
            evicted_all = all(t.key in greedy_ev for t in u.tasks)
            y = m.new_bool_var("") if u.whole else None
            if y is not None:
                ctx.hint(y, 1 if evicted_all else 0)
                # A job evicted whole gets no new pods this cycle: they would run below its gang
                # minimum (an elastic job's pending pods are modelled as growth of a started job).
                own = own_pairs.get(u.tasks[0].job)
                if own:
                    m.add(cp_model.LinearExpr.sum([ctx.x[i] for i in own]) == 0).only_enforce_if(y)
            parts = []
            total_pods = []
            plan = []
            for n, by_ps in u.node_tasks.items():
                for ps, ts in by_ps.items():
                    vec = table.vector(ts[0])
                    if u.surplus.get(ps):
                        w = m.new_int_var(0, len(ts), "")
                        ctx.hint(w, sum(1 for t in ts if t.key in greedy_ev))
                        if y is not None:
                            m.add(w >= len(ts) * y)
                        parts.append((ps, w))
                        freed.setdefault(n, []).append((w, vec))
                        by_queue.setdefault(u.queue, []).append((w, vec))
                        total_pods.append((w, 1))
                        plan.append((ts, w, "last"))
                    elif y is not None:
                        freed.setdefault(n, []).append((y, vec * len(ts)))
                        by_queue.setdefault(u.queue, []).append((y, vec * len(ts)))
                        total_pods.append((y, len(ts)))
                        plan.append((ts, y, "all"))
            for ps, extra in u.surplus.items():
                ws = [w for p, w in parts if p == ps]
                minimum = state.jobs[u.tasks[0].job].podsets[ps].min_available
                m.add(sum(ws) <= extra + (minimum * y if y is not None else 0))
            if not total_pods:
                continue
            # Each variable once, in order of first use: a set of IntVars (hashed by address)
            # ordered these rows differently from run to run, and the model proto with them.
            for v in dict.fromkeys(v for v, _ in total_pods):
                ub = len(u.tasks)
                m.add(v <= ub * sum(lits))
            unit_vars.append((u, plan))
            evict_vars.extend(v for v, _ in total_pods)
            pod_terms.extend(total_pods)
            for v, c in total_pods:
                costs_v.append(v)
                costs_c.append(u.cost * c)
            if u.reclaim:
                per_pod = u.centi // max(len(u.tasks), 1)
                for v, c in total_pods:
                    gpu_terms.setdefault(u.queue, []).append((v, per_pod * c, u))
        if not unit_vars:
            return
        # Gate 2 at each victim-side level the reclaimers do not share (3.7.2).
        from kai_cp.model.utilisation import pair_centi_gpus
        centi = pair_centi_gpus(ctx)
        alloc = {q: v.allocated for q, v in state.queues.items()}          # the snapshot's
        jobs = state.jobs
        kai_reclaims = {(jobs[e.for_job].queue, jobs[e.task.job].queue) for e in ctx.greedy.session.evictions.values()
                        if e.action == "reclaim" and e.for_job in jobs}
        allowances: list[tuple[dict[int, int], int]] = []
        caps: dict[str, int] = {}
        var_nodes: dict[int, set[int]] = {}            # eviction variable -> the nodes it frees
        for _, plan in unit_vars:
            for ts, var, _ in plan:
                var_nodes.setdefault(var.index, set()).add(ctx.state.table.index[ts[0].node])
        for qname in gpu_terms:
            for level in state.queue_path(qname):
                sub = self._subtree(state, level.name)
                # A unit only queues inside this level may reclaim is reclaimed below it (not gated
                # here). One that queues inside and outside may reclaim counts here unless a queue
                # inside places a pod on a node the evicted pods free (decode then names that
                # queue's job).
                terms = []            # (counted variable, GPUs x 100 per unit, unit, unit variable)
                for q in sorted(sub):         # (a frozenset: its order follows the hash seed)
                    for v, c, u in gpu_terms.get(q, []):
                        inside = u.reclaimers & sub
                        if inside == u.reclaimers:
                            continue
                        frees = sorted(var_nodes.get(v.index, u.nodes))
                        ys = [z[(r, n)] for r in sorted(inside) for n in frees if (r, n) in z]
                        if not ys:
                            terms.append((v, c, u, v))
                            continue
                        y = m.new_bool_var("")
                        m.add(y <= cp_model.LinearExpr.sum(ys))
                        w = m.new_int_var(0, _ub(v), "")
                        m.add(w >= v - _ub(v) * y)
                        m.add(w <= v)
                        ctx.derive_hint(lambda y=y, w=w, v=v, ys=ys: _hint_inside(ctx, y, w, v, ys))
                        terms.append((w, c, u, v))
                if not terms:
                    continue
                before = _before_last(level, alloc[level.name]["gpu"])
                share = _before_last(level, alloc[level.name]["gpu"], quota=False)
                chunks = sorted({u.chunk for _, _, u, _ in terms})
                worst = sum(c * (_ub(v)) for v, c, _, _ in terms)
                beside = [_beside(state, r, level)
                          for r in sorted({r for _, _, u, _ in terms for r in u.reclaimers if r not in sub})]
                floor = _quota_floor(level, alloc[level.name]["gpu"]) if any(
                    b is not None and quota_floor_applies(state, b, level) for b in beside) else None
                # the quota route below is conditional: what the share route allows decides the skip
                quota_wider = before is not None and (share is None or share < before)
                widest = share if quota_wider else before
                floored = floor is not None and worst > floor
                gate2_holds = worst <= (widest + chunks[-1] if widest is not None else 0)
                if not floored and gate2_holds:
                    continue
                total = cp_model.LinearExpr.weighted_sum([v for v, _, _, _ in terms], [c for _, c, _, _ in terms])
                # improve_hint charges the unit variables (a mixed unit as if counted: the safe side)
                charged: dict[int, int] = {}
                for _, c, _, uv in terms:          # a gang's Boolean is counted once per node and PodSet
                    charged[uv.index] = charged.get(uv.index, 0) + c
                if floored:         # not below its quota (actions/reclaim_rules.py quota_floor_applies)
                    m.add(total <= floor)
                    allowances.append((charged, floor))
                if gate2_holds:
                    continue
                if before is None:
                    m.add(total <= 0)
                    allowances.append((charged, 0))
                    continue
                # Test before subtract, with the largest victim last: the others take strictly less
                # than the level holds above its share, the largest one chunk more. `steps[k]`: a
                # victim of chunk >= chunks[k] goes.
                steps, prev = [], 0
                for c in chunks:
                    b = m.new_bool_var("")
                    mine = [v for v, _, u, _ in terms if u.chunk >= c]
                    m.add(b <= cp_model.LinearExpr.sum(mine))
                    ctx.derive_hint(lambda b=b, mine=mine: ctx.hint(b, 1 if any(ctx.hinted(v) for v in mine) else 0))
                    steps.append((b, c - prev))
                    prev = c
                slack = cp_model.LinearExpr.weighted_sum([b for b, _ in steps], [d for _, d in steps])
                quota_route = self._quota_route(ctx, state, level, terms, sub, r_of, by_queue_pairs, centi,
                                                kai_reclaims) if quota_wider else None
                if quota_route is None:
                    m.add(total <= before + slack)
                else:
                    m.add(total <= (share or 0) + (before - (share or 0)) * quota_route + slack)
                    if share is None:
                        m.add(total <= 0).only_enforce_if(quota_route.Not())
                    # the route is taken when the share route (its last victim's chunk included) is short
                    ctx.derive_hint(lambda r=quota_route, terms=terms, steps=steps, share=share: ctx.hint(
                        r, int(_hinted(ctx, [(v, c) for v, c, _, _ in terms]) > (
                            0 if share is None else share + _hinted(ctx, steps)))))
                    before = share or 0
                # improve_hint adds victims within `before` only, so the steps hold
                allowances.append((charged, before))
        # Reclaiming queues end within their fair share (GPUs x 100).
        for r, rv in r_of.items():
            q = state.queues[r]
            idx = by_queue_pairs.get(r, [])
            fair = int(q.fair_share["gpu"] * 100)
            have = int(alloc[r]["gpu"] * 100)
            m.add(cp_model.LinearExpr.weighted_sum([ctx.x[i] for i in idx], [centi[i] for i in idx])
                  <= fair - have).only_enforce_if(rv)
            caps[r] = fair - have
        self._gate3_above_leaf(ctx, state, r_of, by_queue_pairs, gpu_terms, centi, alloc)
        only_preemptors_use_freed(ctx, unit_vars, r_of, pair_job)
        ev_of = ctx.extensions.get("eviction-node", {})
        self._hint_reclaim(ctx, z, r_of)
        ctx.extensions["freed"] = freed
        ctx.extensions["evicted-by-queue"] = by_queue
        ctx.extensions["eviction-beneficiaries"] = (evict_vars, preemptors, reclaimers_used)
        ctx.extensions["eviction-model"] = EvictionModel(z, r_of, allowances, caps, ev_of)
        ctx.extensions["eviction-units"] = unit_vars
        ctx.aux += [v for _, plan in unit_vars for _, v, _ in plan]
        # Cheap victims do not take a queue below its fair share: every GPU reclaimed beyond what
        # the queue holds above its share costs as much as four pods (KAI's gate 2 lets the last
        # chunk cross the share; its victim order then prefers the small jobs that do not).
        below_weight = BELOW_SHARE_COST
        greedy_below = 0
        for qname, terms in gpu_terms.items():
            q = state.queues[qname]
            above = int((alloc[qname]["gpu"] - q.fair_share["gpu"]) * 100)
            worst = sum(c * _ub(v) for v, c, _ in terms)
            if worst <= max(above, 0):
                continue
            below = m.new_int_var(0, worst - min(above, 0), "")    # a queue below its share: all it loses, and more
            m.add(below >= cp_model.LinearExpr.weighted_sum([v for v, _, _ in terms], [c for _, c, _ in terms]) - above)
            pairs = [(v, c) for v, c, _ in terms]
            ctx.derive_hint(lambda below=below, pairs=pairs, above=above:
                            ctx.hint(below, max(0, _hinted(ctx, pairs) - above)))
            greedy_below += max(0, _hinted(ctx, pairs) - above)
            costs_v.append(below)
            costs_c.append(below_weight)
        # No more pods evicted than KAI's actions evict for the same outcome above this level:
        # sparing a queue's share is worth pods only up to what greedy's own choice took below
        # the shares, so each pod beyond greedy's count costs more than that could save.
        if greedy_below:
            greedy_pods = _hinted(ctx, pod_terms)
            worst = sum(c * _ub(v) for v, c in pod_terms)
            excess = m.new_int_var(0, max(0, worst - greedy_pods), "")
            m.add(excess >= cp_model.LinearExpr.weighted_sum([v for v, _ in pod_terms], [c for _, c in pod_terms])
                  - greedy_pods)
            ctx.derive_hint(lambda: ctx.hint(excess, max(0, _hinted(ctx, pod_terms) - greedy_pods)))
            costs_v.append(excess)
            costs_c.append(below_weight * greedy_below + 1)
        ctx.extensions["eviction-costs"] = (costs_v, costs_c)

    def _quota_route(self, ctx: ModelContext, state: ClusterState, level, terms: list, sub: frozenset,
                     r_of: dict, by_queue_pairs: dict[str, list[int]], centi,
                     kai_reclaims: set[tuple[str, str]]) -> cp_model.IntVar | None:
        """Gate 2's quota reclaim (3.7.2 `guarantee_quota`): a level may lose victims down to its
        quota, below its allocatable share, only for a reclaimer whose own level (its ancestor
        beside `level`) stays within its quota with what it places. Without this the model took
        a whole gang from a queue at its fair share for a queue that ended above its quota, and
        the next cycle took it back: a reclaim loop. Called where the quota route is the wider;
        the indicator returned is 1 when the level loses more than its share route allows.
        `kai_reclaims`: (reclaiming queue, victim queue) of KAI's actions' reclaims this cycle."""
        reclaimers = sorted({r for _, _, u, _ in terms for r in u.reclaimers if r not in sub and r in r_of})
        levels = {r: _beside(state, r, level) for r in reclaimers}
        if not reclaimers or any(q is None for q in levels.values()):
            # A reclaimer from another branch is gated at a higher level, not this one; the victims
            # are not attributed to reclaimers, so the level keeps its wider allowance for all.
            return None
        if any(r in levels and v in sub for r, v in kai_reclaims):
            # KAI's actions reclaimed here: their gate 2 counts what this cycle placed in the level
            # before (its share route may hold where the snapshot's allocation does not), so their
            # reclaims stay possible, as the pool keeps them (build_pool).
            return None
        m = ctx.model
        route = m.new_bool_var("")
        for r in reclaimers:
            mine = levels[r]
            if mine.deserved["gpu"] == -1:
                continue          # no quota to stay within
            room = int((mine.deserved["gpu"] - mine.allocated["gpu"]) * 100)
            idx = [i for q in sorted(self._subtree(state, mine.name)) for i in by_queue_pairs.get(q, ())]
            if len(idx) > 1:
                add_enforced_le(m, [ctx.x[i].index for i in idx], [centi[i] for i in idx], room,
                                [route.index, r_of[r].index])
            else:
                placed = cp_model.LinearExpr.weighted_sum([ctx.x[i] for i in idx], [int(centi[i]) for i in idx])
                m.add(placed <= room).only_enforce_if([route, r_of[r]])
        return route

    def _gate3_above_leaf(self, ctx: ModelContext, state: ClusterState, r_of: dict, by_queue_pairs: dict,
                          gpu_terms: dict, centi, alloc: dict) -> None:
        """Gate 3 at the reclaimer's ancestors (3.7.3): at each level above a reclaiming leaf
        (the leaf itself ends within its fair share, rows above), the level ends within its fair
        share or strictly poorer (saturation x multiplier) than each sibling it takes victims
        from, in GPUs. Without it a queue reclaimed from a department while its own department
        went past its share, and KAI reclaimed it back, every four cycles (tests/fixtures/
        evictions/cpsat_reclaims_against_kai_every_four_cycles.json).

        Levels count their final allocation: the snapshot's, plus this cycle's placements, less
        the reclaimed pods (KAI checks each reclaim in turn, on the allocation so far)."""
        m = ctx.model
        mult = state.config.reclaimer_saturation_multiplier
        checks = Gate3Checks(ctx)
        after: dict[str, tuple] = {}
        within_of: dict[str, cp_model.IntVar] = {}

        def level_after(name: str) -> tuple:
            """A queue's final GPUs x 100 as (snapshot's, terms, their variable indices and
            coefficients as arrays): the snapshot's, plus the placements in its subtree, less the
            pods reclaimed there. (An integer variable per level made its rows short but, as hard
            equalities in the LP, slowed the search: on kai-differential small-s2-full the solver
            no longer left greedy's hint.) The rows over it are written in bulk from the arrays."""
            if name not in after:
                sub = sorted(self._subtree(state, name))
                terms = [(ctx.x[i], int(centi[i])) for q in sub for i in by_queue_pairs.get(q, ())]
                terms += [(v, -c) for q in sub for v, c, _ in gpu_terms.get(q, ())]
                have = int(alloc[name]["gpu"] * 100)
                after[name] = (have, terms, np.array([v.index for v, _ in terms], dtype=np.int64),
                               np.array([c for _, c in terms], dtype=np.int64))
                checks.level(name, have, terms)
            return after[name]

        def expression(have: int, terms: list) -> cp_model.LinearExpr:
            """A level's final GPUs as cp_model's expression, for the rows of a level with one
            term or none (cp_model writes those in other forms than the bulk rows')."""
            return have + cp_model.LinearExpr.weighted_sum([v for v, _ in terms], [c for _, c in terms])

        for r in sorted(r_of):
            rv = r_of[r]
            for level in state.queue_path(r)[1:]:
                fs_mine = level.fair_share["gpu"]
                if fs_mine < 0:                        # unlimited: saturation 0, never above
                    continue
                siblings = []
                for s in state.queues.values():
                    if s.parent != level.parent or s.name == level.name or not s.fair_share["gpu"] > 0:
                        continue
                    sub = self._subtree(state, s.name)
                    for_r = [v for q in sorted(sub) for v, _, u in gpu_terms.get(q, ()) if r in u.reclaimers]
                    if for_r:
                        siblings.append((s, for_r))
                if not siblings:
                    continue
                have, terms, mv, mc = level_after(level.name)
                fair = math.floor(fs_mine * 100)
                within = within_of.get(level.name)
                if within is None:
                    within = within_of[level.name] = m.new_bool_var("")
                    if len(terms) > 1:
                        add_enforced_le(m, mv, mc, fair - have, [within.index])
                    else:
                        m.add(expression(have, terms) <= fair).only_enforce_if(within)
                    ctx.derive_hint(lambda w=within, have=have, terms=terms, f=fair: ctx.hint(
                        w, 1 if have + _hinted(ctx, terms) <= f else 0))
                for s, victims in siblings:
                    lost = m.new_bool_var("")
                    add_at_most_if(m, [v.index for v in victims], [_ub(v) for v in victims], lost.index)
                    ctx.derive_hint(lambda lost=lost, victims=victims: ctx.hint(
                        lost, 1 if any(ctx.hinted(v) for v in victims) else 0))
                    have_theirs, theirs_terms, tv, tc = level_after(s.name)
                    # mine / fs_mine x mult < theirs / fs_theirs, in integers
                    k_mine = mult * s.fair_share["gpu"]
                    k_theirs = fs_mine
                    d = math.lcm(k_mine.denominator, k_theirs.denominator)
                    a, b = int(k_mine * d), int(k_theirs * d)
                    if len(terms) > 1 and len(theirs_terms) > 1:     # (cp_model's form for such sums)
                        add_enforced_le(m, np.concatenate([mv, tv]), np.concatenate([a * mc, -b * tc]),
                                        b * have_theirs - 1 - a * have, [rv.index, lost.index, -within.index - 1])
                    else:
                        m.add(a * expression(have, terms) <= b * expression(have_theirs, theirs_terms) - 1
                              ).only_enforce_if([rv, lost, within.Not()])
                    checks.add(Gate3Check(level.name, fair, s.name, victims, a, b))
        ctx.extensions["gate3-checks"] = checks

    @staticmethod
    def _subtree(state: ClusterState, name: str) -> frozenset:
        out, stack = set(), [name]
        while stack:
            q = stack.pop()
            out.add(q)
            stack += state.queues[q].children
        return frozenset(out)

    @staticmethod
    def _hint_reclaim(ctx: ModelContext, z: dict, r_of: dict) -> None:
        """z[R, n] = R placed a pod on n in greedy and greedy reclaimed there for one of R's jobs."""
        took = _greedy_reclaims(ctx)
        for key, var in z.items():
            ctx.hint(var, 1 if key in took else 0)
        for r, var in r_of.items():
            ctx.hint(var, 1 if any(k[0] == r and k in took for k in z) else 0)


@dataclass
class Gate3Check:
    """One of gate 3's rows above the leaf, for the constructive hint (eviction_hint.py), which
    raises hint values and must keep them a solution: taken with the reclaimer's indicator set
    (the safe side), level `mine` ends within `fair` or `a x mine <= b x theirs - 1` while any
    of `victims` is evicted."""
    mine: str
    fair: int
    theirs: str
    victims: list
    a: int
    b: int


class Gate3Checks:
    """Gate 3's rows above the leaf, checked on the hint as it would be after some changes. The
    levels' final allocations are kept as running totals of the hint (`commit`), so a check
    reads only what the changes touch."""

    def __init__(self, ctx: ModelContext):
        self.ctx = ctx
        self.rows: list[Gate3Check] = []
        self.levels: dict[str, tuple[int, list]] = {}          # level -> (snapshot's, terms)
        self.in_levels: dict[int, list[tuple[str, int]]] = {}   # variable index -> (level, coefficient)
        self.by_level: dict[str, list[int]] = {}               # level -> rows reading it
        self.by_victim: dict[int, list[int]] = {}              # victim variable index -> rows
        self.totals: dict[str, int] | None = None

    def level(self, name: str, have: int, terms: list) -> None:
        self.levels[name] = (have, terms)
        for v, c in terms:
            self.in_levels.setdefault(v.index, []).append((name, c))

    def add(self, row: Gate3Check) -> None:
        r = len(self.rows)
        self.rows.append(row)
        for name in (row.mine, row.theirs):
            self.by_level.setdefault(name, []).append(r)
        for v in row.victims:
            self.by_victim.setdefault(v.index, []).append(r)

    def _deltas(self, changes: list[tuple[int, int]]) -> tuple[dict[str, int], dict[int, int]]:
        by_level: dict[str, int] = {}
        by_var: dict[int, int] = {}
        for index, by in changes:
            by_var[index] = by_var.get(index, 0) + by
            for name, c in self.in_levels.get(index, ()):
                by_level[name] = by_level.get(name, 0) + c * by
        return by_level, by_var

    def fits(self, changes: list[tuple[int, int]]) -> bool:
        """Whether the hint with each variable (index) raised by its amount keeps every row."""
        if self.totals is None:      # the hint as the constructive pass starts from it
            self.totals = {name: have + _hinted(self.ctx, terms) for name, (have, terms) in self.levels.items()}
        by_level, by_var = self._deltas(changes)
        touched = {r for name in by_level for r in self.by_level.get(name, ())}
        touched |= {r for index in by_var for r in self.by_victim.get(index, ())}
        hinted = self.ctx.hinted
        for r in sorted(touched):
            row = self.rows[r]
            mine = self.totals[row.mine] + by_level.get(row.mine, 0)
            if mine <= row.fair or not any(hinted(v) + by_var.get(v.index, 0) for v in row.victims):
                continue
            if row.a * mine > row.b * (self.totals[row.theirs] + by_level.get(row.theirs, 0)) - 1:
                return False
        return True

    def commit(self, changes: list[tuple[int, int]]) -> None:
        """The changes were made to the hint: the totals follow."""
        if self.totals is not None:
            for name, d in self._deltas(changes)[0].items():
                self.totals[name] += d


def _hint_inside(ctx: ModelContext, y, w, v, ys: list) -> None:
    """A mixed unit's pods count at a level unless a queue inside reclaims on their nodes (y)."""
    inside = any(ctx.hinted(z) for z in ys)
    ctx.hint(y, 1 if inside else 0)
    ctx.hint(w, 0 if inside else ctx.hinted(v))


def _hinted(ctx: ModelContext, terms: Iterable[tuple[cp_model.IntVar, int]]) -> int:
    return sum(c * ctx.hinted(v) for v, c in terms)


def _greedy_reclaims(ctx: ModelContext) -> set[tuple[str, int]]:
    """(queue R, node n): greedy placed a pod of R on n and reclaimed there for one of R's jobs."""
    s = ctx.greedy.session
    used: set[tuple[str, int]] = set()
    for e in s.evictions.values():
        if e.action == "reclaim" and e.for_job in ctx.state.jobs:
            used.add((ctx.state.jobs[e.for_job].queue, e.node))
    placed = {(ctx.state.jobs[p.task.job].queue, p.node) for p in s.placements.values()}
    return used & placed


@dataclass
class EvictionModel:
    """What the constructive hint (model/eviction_hint.py) must respect."""
    z: dict                                    # (reclaiming queue, node) -> Boolean
    r_of: dict                                 # reclaiming queue -> Boolean
    allowances: list                           # ({var index: GPUs x 100}, room) per victim level
    caps: dict                                 # reclaiming queue -> GPUs x 100 it may add
    ev_of: dict                                # node -> "loses pods" Boolean (where outsiders are kept off)


class VictimCost:
    """Fewest, then cheapest victims (in utilisation's level, below KAI's order)."""
    name = "victims"

    def contribute(self, ctx: ModelContext) -> None:
        costs = ctx.extensions.get("eviction-costs")
        if not costs:
            return
        variables, weights = costs
        scale = ctx.levels.scale
        ctx.add_term(self.name, variables, [-w * scale for w in weights])
        ctx.levels.added(sum(w * int(_ub(v)) for v, w in zip(variables, weights)) * scale)


def freed_terms(ctx: ModelContext, n: int, col: int) -> tuple[list, list[int]]:
    """Variables and coefficients of what evictions free on node n in one resource column."""
    out_v, out_c = [], []
    for v, vec in ctx.extensions.get("freed", {}).get(n, []):
        c = int(vec[col])
        if c:
            out_v.append(v)
            out_c.append(c)
    return out_v, out_c


def freed_max(ctx: ModelContext) -> np.ndarray | None:
    """Per node and resource, the most evictions may free (for constraints that skip when safe)."""
    freed = ctx.extensions.get("freed")
    if not freed:
        return None
    out = np.zeros_like(ctx.free)
    nodes = [n for n, terms in freed.items() for _ in terms]
    if nodes:           # (integer sums: the order of the additions does not matter)
        vecs = np.array([vec for terms in freed.values() for _, vec in terms], dtype=out.dtype).reshape(len(nodes), -1)
        ubs = np.array([_ub(v) for terms in freed.values() for v, _ in terms], dtype=out.dtype)
        np.add.at(out, np.array(nodes, dtype=np.int64), vecs * ubs[:, None])
    return out


def pending_keys(classes) -> list[tuple[str, int]]:
    return sorted({(c.job.queue, c.job.priority) for c in classes})


def reach_for(pool: Pool | None, job: JobInfo) -> np.ndarray | None:
    return None if pool is None else pool.reach.get((job.queue, job.priority))
