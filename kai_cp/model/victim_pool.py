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
from typing import TYPE_CHECKING, Callable, Iterable
from fractions import Fraction

import numpy as np

from kai_cp.actions import min_runtime
from kai_cp.actions.allocate import GreedyResult
from kai_cp.arrays import distinct
from kai_cp.fairshare import allocatable
from kai_cp.jobs import ACTIVE_ALLOCATED, PENDING, JobInfo, TaskInfo
from kai_cp.ordering import queue_rank, queue_tree, rank_less, request_vector, tasks_to_allocate
from kai_cp.queues import RESOURCES, UNLIMITED
from kai_cp.state import ClusterState
from kai_cp.victim_pods import bounded, priorities, victim_pods

if TYPE_CHECKING:
    from kai_cp.model.base import ModelContext

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


@dataclass(eq=False)
class Pool:
    """The units as arrays, each Unit made when asked for: the model reads only the units its
    candidate pairs may evict (justified: 560 of 30,566 at 10,000 nodes), and making every one
    was most of the pool's time."""
    reach: dict[tuple[str, int], np.ndarray]          # (queue, priority) -> what evictions may free, per node
    reclaimers: set[str]
    loses: np.ndarray                                  # per unit, all it may lose (summed over its nodes)
    queue_names: list[str]
    unit_queue: np.ndarray                             # per unit: its queue, an index into queue_names
    unit_priority: np.ndarray
    unit_preempt: np.ndarray
    reclaimed_by: dict[str, np.ndarray]                # reclaiming queue -> the units it may reclaim
    member_unit: np.ndarray                            # per running pod of a unit: the unit and its node
    member_node: np.ndarray
    make: Callable[[int], Unit]
    kai: np.ndarray | None = None                      # per unit: KAI's actions (greedy) evicted from it
    made: dict[int, Unit] = field(default_factory=dict)
    # (queue, priority) -> what preempting alone may free, for a reclaiming queue's jobs gate 1 refuses
    reach_preempt: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.unit_priority)

    def unit(self, i: int) -> Unit:
        u = self.made.get(i)
        if u is None:
            u = self.made[i] = self.make(i)
        return u

    @property
    def units(self) -> list[Unit]:
        return [self.unit(i) for i in range(len(self))]

    def justified(self, pair_node: np.ndarray, pair_job: list[JobInfo], may: np.ndarray) -> list[Unit]:
        """The units some candidate pair may evict (_legal): a pair on one of the unit's nodes
        whose job preempts it or whose queue reclaims it and which gate 1 lets ask (`may`, per
        pair: may_reclaim); and those KAI's actions evicted from. In unit order. The model gives
        only these a variable: 560 of 12,834 units on candidates' nodes at 10,000 nodes."""
        if len(pair_node) == 0 or len(self) == 0:
            return []
        code = {q: i for i, q in enumerate(self.queue_names)}
        width = len(self.queue_names) + 1
        pair_queue = np.fromiter((code.get(j.queue, -1) for j in pair_job), dtype=np.int64, count=len(pair_job))
        pair_prio = priorities((j.priority for j in pair_job), len(pair_job))
        # preempt: the highest priority among the pairs of each (node, queue)
        keys = pair_node * width + pair_queue
        order = np.lexsort((pair_prio, keys))
        last = np.ones(len(order), dtype=bool)
        last[:-1] = keys[order][1:] != keys[order][:-1]
        top_key, top_prio = keys[order][last], pair_prio[order][last]
        mu, mn = self.member_unit, self.member_node
        want = mn * width + self.unit_queue[mu]
        at = np.minimum(np.searchsorted(top_key, want), len(top_key) - 1)
        ok = self.unit_preempt[mu] & (top_key[at] == want) & (top_prio[at] > self.unit_priority[mu])
        for r, units in self.reclaimed_by.items():      # reclaim: a pair of a reclaiming queue there
            nodes = pair_node[(pair_queue == code.get(r, -2)) & may]
            if len(nodes):
                ok |= units[mu] & np.isin(mn, nodes)
        if self.kai is not None:
            ok |= self.kai[mu]
        return [self.unit(i) for i in distinct(mu[ok]).tolist()]

    def legal(self, job: JobInfo, state: ClusterState) -> np.ndarray:
        """_legal for every unit at once."""
        code = self.queue_names.index(job.queue) if job.queue in self.queue_names else -1
        mine = self.unit_preempt & (self.unit_queue == code) & (self.unit_priority < bounded(job.priority))
        if job.queue in self.reclaimed_by and may_reclaim(state, job):
            mine = mine | self.reclaimed_by[job.queue]
        return mine

    def freeable_under(self, state: ClusterState, job: JobInfo, ancestor: str) -> np.ndarray:
        """What the job's legal victims hold inside `ancestor`'s subtree, summed: the most its
        evictions can return under that queue's limit."""
        under = np.array([any(q.name == ancestor for q in state.queue_path(name)) for name in self.queue_names],
                         dtype=bool)
        return self.loses[self.legal(job, state) & under[self.unit_queue]].sum(axis=0)


def _reclaim_ok_queues(state: ClusterState, classes_queues: set[str]) -> set[str]:
    """Queues that may reclaim: below their fair share in GPUs now. Which of their jobs may is
    gate 1's own test, per job (may_reclaim)."""
    out = set()
    for name in classes_queues:
        q = state.queues.get(name)
        if q is None or not q.is_leaf:
            continue
        if q.allocated["gpu"] < q.fair_share["gpu"]:
            out.add(name)
    return out


def may_reclaim(state: ClusterState, job: JobInfo) -> bool:
    """Gate 1 (spec 3.7.1) with the snapshot's allocation and the job's smallest pending pod: KAI
    lets a job reclaim only while its leaf queue, the job's request added, stays within the
    queue's fair share in every resource, and a non-preemptible job within the queue's quota
    too. (A vector test: a queue over its non-preemptible GPU quota reclaims nothing for a
    non-preemptible CPU-only job.) The model's own rows then keep reclaiming queues within their
    fair share (model/evictions.py); this keeps the jobs KAI refuses from using what reclaims free.
    Kept per state (each cycle's state is new; state_cache.py)."""
    known = state.__dict__.setdefault("_may_reclaim", {})
    ok = known.get(job.name)
    if ok is None:
        ok = known[job.name] = _gate1(state, job)
    return ok


def _gate1(state: ClusterState, job: JobInfo) -> bool:
    q = state.queues.get(job.queue)
    asks = [t.request for t in job.tasks if t.status == PENDING]
    if q is None or not asks:
        return False
    divisor = state.gpu_memory_divisor
    least = {"cpu": min(r.cpu for r in asks), "memory": min(r.memory for r in asks),
             "gpu": min(r.pending_gpus(divisor) for r in asks)}
    caps = [(q.allocated, q.fair_share)] + ([] if job.preemptible else [(q.allocated_np, q.deserved)])
    return all(cap[r] == UNLIMITED or held[r] + least[r] <= cap[r] for held, cap in caps for r in RESOURCES)


def pairs_may_reclaim(ctx: ModelContext, pair_job: list[JobInfo]) -> np.ndarray:
    """may_reclaim per candidate pair, once per model (evictions.py and freed_use.py read it)."""
    out = ctx.extensions.get("pairs-may-reclaim")
    if out is None:
        out = ctx.extensions["pairs-may-reclaim"] = np.array([may_reclaim(ctx.state, j) for j in pair_job], dtype=bool)
    return out


def _goes_first(state: ClusterState, reclaimer: str, victim: str) -> bool:
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


CHECK_EVERY_JOBS = 256      # the deadline checks of the jobs decided one by one


class _Rules:
    """Which of a job's running pods the model may evict, and as what unit (spec 6.1, 6.5, 6.7,
    3.7.2): the rules one job at a time. build_pool applies them to most jobs as arrays; the jobs
    greedy placed pods of and those a queue may reclaim are decided here, and every job unit is
    made here when the model asks for it (so the arrays and these rules cannot disagree on a
    unit's pods; tests/test_victim_pool.py checks they agree on whole pools)."""

    def __init__(self, state: ClusterState, greedy: GreedyResult, pending: list[tuple[str, int]]) -> None:
        actions = state.config.actions
        self.state, self.now = state, greedy.now
        self.index, self.placements = state.table.index, greedy.session.placements
        self.may_preempt = "preempt" in actions
        queues_with_work = {q for q, _ in pending}
        self.reclaimers = _reclaim_ok_queues(state, queues_with_work) if "reclaim" in actions else set()
        self.top_prio: dict[str, int] = {}
        for q, p in pending:
            self.top_prio[q] = max(self.top_prio.get(q, p), p)
        # The model decides the whole cycle from the snapshot: queue allocations are the snapshot's.
        self.allowance = {q: _allowance(v, v.allocated["gpu"]) for q, v in state.queues.items()}
        self.first: dict[str, frozenset] = {}       # victim queue -> reclaimers that go before it
        self.next_order = NextCycleOrder(state, greedy) if self.reclaimers else None
        self.greedy_reclaimed: dict[str, frozenset] = {}     # victim job -> queues greedy reclaimed it for
        for e in greedy.session.evictions.values():
            if e.action == "reclaim" and e.for_job in state.jobs:
                self.greedy_reclaimed[e.task.job] = self.greedy_reclaimed.get(e.task.job, frozenset()) \
                    | {state.jobs[e.for_job].queue}
        self.greedy_preempted = {e.task.job for e in greedy.session.evictions.values() if e.action == "preempt"}
        self.ordered: dict[tuple, frozenset] = {}    # (victim queue, reclaimers passed, victim request) -> reclaimers

    def decide(self, job: JobInfo) -> tuple | None:
        """None (no victim), ("pods", (preempt, reclaimers), pod) for a job that leaves pod by pod
        (the pool groups such pods by queue, priority, request and node too), or ("job", unit,
        its losable pods as (node, pod)); the unit's index and cost are set by the pool."""
        state, now, index, placements = self.state, self.now, self.index, self.placements
        if job.queue not in state.queues:
            return None
        # A pod greedy's actions moved (evicted and re-placed elsewhere) keeps running where greedy
        # put it: the model has no moves, so it is no victim, and its gang can lose only pods above
        # its minimum, never the rest "whole".
        running, moved, shared = [], 0, 0
        for ps in job.podsets.values():
            for t in ps.on_nodes(index):
                if t.request.is_shared_gpu:
                    shared += 1
                    continue
                if t.key in placements:
                    moved += 1
                else:
                    running.append(t)
        if not running:
            return None
        pre = self.may_preempt and self.top_prio.get(job.queue, -1 << 30) > job.priority \
            and min_runtime.filter_victim(state, job, "preempt", job.queue, now)
        gpus = sum(t.request.gpus for t in running)
        # Gate 2 first: a victim queue not above its share, or a job holding no GPUs, is reclaimed
        # by no one (deciding who else goes first was half of the pool's time when it was not).
        recl = frozenset()
        if self.reclaimers and gpus and self.allowance[job.queue] >= 0:
            order_ok = self.first.get(job.queue)
            if order_ok is None:
                order_ok = self.first[job.queue] = frozenset(
                    r for r in self.reclaimers if r != job.queue and _goes_first(state, r, job.queue))
            recl, passed = min_runtime.reclaimers_passed(state, job, order_ok, now)
        if recl:
            victim_req = request_vector(running, state.gpu_memory_divisor)
            vreq = tuple(float(victim_req[x]) for x in RESOURCES)
            vkey = (job.queue, passed, vreq)
            hit = self.ordered.get(vkey)
            if hit is None:
                hit = self.ordered[vkey] = self.next_order.passing(recl, job.queue, vreq)
            recl = hit
        # KAI's own reclaims stay possible whatever the gates above judge on the snapshot's
        # allocation (KAI's actions judged them on the cycle's, after allocate placed its jobs), so
        # greedy's decisions stay a solution (its preemptor is nominated: next cycle serves it
        # first, as for greedy's cycle).
        recl = recl | self.greedy_reclaimed.get(job.name, frozenset())
        if not pre and not recl:
            return None
        if _single_pod(job):
            t = running[0]
            return "pods", (pre, recl), t
        # Minimum runtime (6.7) per route: a protected job loses only pods above its minimum.
        protected_pre = pre and min_runtime.protected(state, job, "preempt", job.queue, now)
        protected_recl = {r for r in recl if min_runtime.protected(state, job, "reclaim", r, now)}
        if pre and not protected_pre and protected_recl and not moved \
                and not protected_recl & self.greedy_reclaimed.get(job.name, frozenset()):
            # Preempt may take the job whole; the reclaimers it is protected from could take only
            # its surplus, which a whole unit cannot say, so they leave this unit. (Dropping the
            # unit instead made KAI's preemption of it unrepresentable: the model was infeasible.)
            recl = frozenset(recl - protected_recl)
            protected_recl = set()
        elif protected_pre and recl and not protected_recl and not moved and job.name not in self.greedy_preempted:
            # The other way round: reclaim may take the job whole, and preempt could take only
            # its surplus, so preempt leaves this unit. (Dropping the unit made KAI's reclaim of
            # a job protected from preemption only unrepresentable: the model was infeasible.)
            pre, protected_pre = False, False
        # Shared-GPU pods are no victims of the model (evictions.py): a job running one cannot go
        # whole (its other pods alone left it below its gang minimum), only lose surplus pods.
        whole = not protected_pre and not protected_recl and not moved and not shared
        surplus = {}
        for ps in job.podsets.values():
            n = sum(1 for t in running if t.podset == ps.name)
            kept = sum(1 for t in ps.tasks if t.key in placements and t.status in ACTIVE_ALLOCATED)
            if n + kept > ps.min_available and n:
                surplus[ps.name] = min(n, n + kept - ps.min_available)
        if not whole and not surplus:
            return None
        unit, losable = _job_unit(job, running, index, pre, recl, whole, surplus)
        return "job", unit, losable


def _job_unit(job: JobInfo, running: list[TaskInfo], index: dict[str, int], pre: bool, recl: frozenset,
              whole: bool, surplus: dict[str, int]) -> tuple[Unit, list[tuple[int, TaskInfo]]]:
    """A job unit of its running pods (task order), and the pods it may lose as (node, pod);
    its index and cost are set by the pool."""
    node_tasks: dict[int, dict[str, list[TaskInfo]]] = {}
    losable: list[tuple[int, TaskInfo]] = []
    # Gate 2 takes a victim job's pods above each PodSet's minimum as chunks of their own
    # first and its core (the first minAvailable pods of each PodSet, in task order) last
    # (3.7.2): the core is the chunk that may cross the share.
    core = per_pod = gpus = 0
    left = {ps.name: ps.min_available for ps in job.podsets.values()}    # core pods still to count
    for t in sorted(running, key=lambda t: t.order_key):
        n = index[t.node]
        node_tasks.setdefault(n, {}).setdefault(t.podset, []).append(t)
        if whole or surplus.get(t.podset):
            losable.append((n, t))
        centi = 100 * t.request.gpus
        gpus += centi
        per_pod = max(per_pod, centi)
        if left.get(t.podset, 0) > 0:
            left[t.podset] -= 1
            core += centi
    unit = Unit(-1, "job", job.queue, job.priority, running, node_tasks, np.zeros(0), gpus,
                max(core, per_pod) if whole else per_pod, pre, bool(recl), recl, whole, surplus)
    return unit, losable


def build_pool(state: ClusterState, greedy: GreedyResult, pending: list[tuple[str, int]],
               check: Callable[[], None] | None = None, one_by_one: bool = False) -> Pool | None:
    """The units and, per (queue, priority) of pending work, what evicting its legal victims frees.

    Every victim job of the cluster is looked at (30,000 at 10,000 nodes, where the rules one job
    at a time took 0.4 s): as arrays (victim_pods) for the jobs that only preempt can take and
    that greedy placed no pod of (their units' pods, protection and surplus follow from counts),
    one by one (_Rules) for the others and with `one_by_one` for all (the arrays' reference in
    tests). `check` is called every CHECK_EVERY_JOBS jobs decided one by one and between steps:
    it raises when the cycle's time is up."""
    actions = state.config.actions
    if "reclaim" not in actions and "preempt" not in actions:
        return None
    if check is not None:
        check()
    rules = _Rules(state, greedy, pending)
    vp = victim_pods(state)
    names = vp.queue_names
    count = len(vp.jobs)
    known = vp.queue >= 0
    placed = np.zeros(count, dtype=bool)
    for p in greedy.session.placements.values():
        j = vp.at.get(p.task.job)
        if j is not None:
            placed[j] = True
    shared = vp.request_shared[vp.pod_request]
    running = ~shared
    holds_gpus = np.bincount(vp.pod_job[running], weights=vp.request_centi[vp.pod_request[running]],
                             minlength=count) > 0
    allowed = np.array([rules.allowance[q] >= 0 for q in names] + [False], dtype=bool)
    reclaimable = holds_gpus & allowed[vp.queue] if rules.reclaimers else np.zeros(count, dtype=bool)
    kai_victim = np.zeros(count, dtype=bool)           # jobs KAI's actions evicted from: the rules decide them
    kai_victim[[vp.at[e.task.job] for e in greedy.session.evictions.values() if e.task.job in vp.at]] = True
    alone = known & (placed | reclaimable | kai_victim) if not one_by_one else known
    # The arrays' jobs: preempt only (_Rules.decide with no reclaimers and nothing greedy placed).
    now = greedy.now
    if state.config.min_runtime_enabled:
        runtime = np.array([min_runtime.min_runtime_seconds(state, "preempt", q, q) for q in names] + [0.0])
        with np.errstate(invalid="ignore"):
            protected = ~np.isnan(vp.last_start) & (now < vp.last_start + runtime[vp.queue])
    else:
        protected = np.zeros(count, dtype=bool)
    top = np.array([bounded(rules.top_prio.get(q, -1 << 30)) for q in names] + [-1 << 30], dtype=np.int64)
    pre = rules.may_preempt & (top[vp.queue] > vp.priority) & (vp.elastic | ~protected)
    runs = np.bincount(vp.pod_job[running], minlength=count) > 0
    by_arrays = known & ~alone & pre & runs
    ps_running = np.bincount(vp.pod_podset[running], minlength=len(vp.podset_min))
    ps_surplus = np.where((ps_running > vp.podset_min) & (ps_running > 0), ps_running - vp.podset_min, 0)
    has_surplus = np.bincount(vp.podset_job, weights=ps_surplus > 0, minlength=count) > 0
    # a job running a shared-GPU pod is never whole (_Rules.decide)
    whole_ok = ~protected & ~(np.bincount(vp.pod_job[shared], minlength=count) > 0)
    array_jobs = by_arrays & ~vp.single & (whole_ok | has_surplus)
    array_pods = by_arrays & vp.single

    # The jobs decided one by one, in job order.
    job_units: dict[int, tuple[Unit, list]] = {}           # victim index -> (unit, losable pods)
    pod_members: list[tuple[int, tuple, TaskInfo]] = []    # (victim index, (preempt, reclaimers), pod)
    for i, j in enumerate(np.flatnonzero(alone).tolist()):
        if check is not None and not i % CHECK_EVERY_JOBS:
            check()
        out = rules.decide(vp.jobs[j])
        if out is None:
            continue
        if out[0] == "job":
            job_units[j] = (out[1], out[2])
        else:
            pod_members.append((j, out[1], out[2]))
    if check is not None:
        check()

    # Job units first, in job order; then pods units in the order their first pod comes.
    is_job = array_jobs.copy()
    is_job[list(job_units)] = True
    job_at = np.cumsum(is_job) - 1                          # victim index -> unit index
    n_jobs = int(is_job.sum())
    recl_code: dict[frozenset, int] = {frozenset(): 0}
    single_j = np.flatnonzero(array_pods)
    single_pod = vp.first_pod[single_j]                     # the one pod (on a node, not shared)
    keys = [np.stack([vp.queue[single_j], vp.priority[single_j], vp.pod_request[single_pod],
                      vp.pod_node[single_pod], np.ones(len(single_j), dtype=np.int64),
                      np.zeros(len(single_j), dtype=np.int64)], axis=1)]
    member_j = [single_j]
    member_task: list[TaskInfo] = [vp.tasks[k] for k in single_pod.tolist()]
    if pod_members:
        keys.append(np.array([(vp.queue[j], vp.priority[j], vp.requests[t.request], state.table.index[t.node],
                               int(pre_), recl_code.setdefault(recl, len(recl_code)))
                              for j, (pre_, recl), t in pod_members], dtype=np.int64))
        member_j.append(np.array([m[0] for m in pod_members], dtype=np.int64))
        member_task += [m[2] for m in pod_members]
    key = np.concatenate(keys)
    mj = np.concatenate(member_j)
    order = np.argsort(mj, kind="stable")                 # job order
    key, mj = key[order], mj[order]
    member_task = [member_task[k] for k in order.tolist()]
    group, heads = _groups(key)
    n_units = n_jobs + len(heads)
    if n_units == 0:
        return None
    recl_of = {c: r for r, c in recl_code.items()}

    # Per unit: queue, priority, preempt, reclaimers; and its pods as (unit, node, request row) rows.
    unit_queue = np.empty(n_units, dtype=np.int64)
    unit_prio = np.empty(n_units, dtype=np.int64)
    unit_pre = np.empty(n_units, dtype=bool)
    jobs_at = np.flatnonzero(is_job)
    unit_queue[:n_jobs], unit_prio[:n_jobs] = vp.queue[jobs_at], vp.priority[jobs_at]
    unit_pre[:n_jobs] = True                                # the arrays' jobs; one-by-one ones below
    unit_queue[n_jobs:], unit_prio[n_jobs:] = key[heads, 0], key[heads, 1]
    unit_pre[n_jobs:] = key[heads, 4] == 1
    unit_recl: dict[int, frozenset] = {}
    for g in np.flatnonzero(key[heads, 5]).tolist():
        unit_recl[n_jobs + g] = recl_of[int(key[heads[g], 5])]
    vecs_of = vp.request_vecs
    in_arrays = array_jobs[vp.pod_job] & running
    lose = in_arrays & (whole_ok[vp.pod_job] | (ps_surplus[vp.pod_podset] > 0))
    row_unit = [job_at[vp.pod_job[lose]], n_jobs + group]
    row_node = [vp.pod_node[lose], key[:, 3]]
    row_vec = [vecs_of[vp.pod_request[lose]], vecs_of[key[:, 2]]]
    member_unit = [job_at[vp.pod_job[in_arrays]], n_jobs + group]
    member_node = [vp.pod_node[in_arrays], key[:, 3]]
    vector = state.table.vector
    for j, (u, losable) in job_units.items():
        k = int(job_at[j])
        unit_pre[k] = u.preempt
        if u.reclaimers:
            unit_recl[k] = u.reclaimers
        if losable:
            row_unit.append(np.full(len(losable), k, dtype=np.int64))
            row_node.append(np.array([n for n, _ in losable], dtype=np.int64))
            row_vec.append(np.array([vector(t) for _, t in losable], dtype=np.int64))
        nodes = [n for n, by_ps in u.node_tasks.items() for ts in by_ps.values() for _ in ts]
        member_unit.append(np.full(len(nodes), k, dtype=np.int64))
        member_node.append(np.array(nodes, dtype=np.int64))
    width = state.table.allocatable.shape[1]
    rows = (np.concatenate(row_unit), np.concatenate(row_node), np.concatenate(row_vec).reshape(-1, width))
    reclaimed_by: dict[str, np.ndarray] = {}
    for k, recl in unit_recl.items():
        for r in recl:
            mask = reclaimed_by.get(r)
            if mask is None:
                mask = reclaimed_by[r] = np.zeros(n_units, dtype=bool)
            mask[k] = True
    in_quota = np.array([_in_quota(state.queues[q]) for q in names], dtype=bool)
    cost = BASE_COST + QUOTA_COST * in_quota[unit_queue] \
        + PRIORITY_STEP * np.clip(unit_prio // 50, 0, PRIORITY_BANDS)
    reach, reach_preempt, loses = _reach(state, names, unit_queue, unit_prio, unit_pre, reclaimed_by, pending, rows)
    made_jobs = {int(job_at[j]): u for j, (u, _) in job_units.items()}
    members_at = np.concatenate([[0], np.cumsum(np.bincount(group, minlength=len(heads)))])
    by_group = np.argsort(group, kind="stable")               # members grouped, in job order
    cost_list = cost.tolist()

    def make(k: int) -> Unit:
        if k < n_jobs:
            u = made_jobs.get(k)
            if u is None:                                   # an arrays' job: preempt only, nothing moved
                j = int(jobs_at[k])
                job = vp.jobs[j]
                lo, hi = int(vp.first_pod[j]), int(vp.first_pod[j + 1])
                pods = (lo + np.flatnonzero(running[lo:hi])).tolist()
                extra = ps_surplus[vp.first_podset[j]:vp.first_podset[j + 1]].tolist()
                u = _job_unit(job, [vp.tasks[p] for p in pods], state.table.index, True, frozenset(),
                              bool(whole_ok[j]), {ps.name: n for ps, n in zip(job.podsets.values(), extra) if n > 0})[0]
            u.index = k
        else:
            g = k - n_jobs
            tasks = [member_task[m] for m in by_group[members_at[g]:members_at[g + 1]].tolist()]
            # best victims first: reverse job order (newest, then name), as KAI's victim queue takes them
            if len(tasks) > 1:
                tasks = sorted(tasks, key=lambda t: (state.jobs[t.job].creation, t.job), reverse=True)
            n = state.table.index[tasks[0].node]
            centi = 100 * tasks[0].request.gpus
            recl = unit_recl.get(k, frozenset())
            u = Unit(k, "pods", names[unit_queue[k]], state.jobs[tasks[0].job].priority, tasks,
                     {n: {tasks[0].podset: tasks}}, vector(tasks[0]), centi, centi, bool(unit_pre[k]), bool(recl), recl)
        u.cost = cost_list[k]
        return u

    # The units KAI's actions evicted from (greedy's evictions): the model keeps them whether or
    # not a candidate pair justifies them, so greedy's decisions stay a solution.
    kai = np.zeros(n_units, dtype=bool)
    kai[job_at[kai_victim & is_job]] = True
    evicted = greedy.session.evictions
    kai[[n_jobs + g for g, t in zip(group.tolist(), member_task) if t.key in evicted]] = True
    return Pool(reach, rules.reclaimers, loses, names, unit_queue, unit_prio, unit_pre, reclaimed_by,
                np.concatenate(member_unit), np.concatenate(member_node), make, kai, reach_preempt=reach_preempt)


def _groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The group of each row of `key` (equal rows, one group), groups numbered in the order their
    first row comes, and each group's first row."""
    if not len(key):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    order = np.lexsort(key.T[::-1])           # rows sorted, equal ones in row order
    ordered = key[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    sorted_group = np.cumsum(new) - 1
    heads = order[new]                         # each group's first row (lexsort is stable)
    rank = np.empty(len(heads), dtype=np.int64)
    rank[np.argsort(heads, kind="stable")] = np.arange(len(heads))
    group = np.empty(len(order), dtype=np.int64)
    group[order] = rank[sorted_group]
    return group, np.sort(heads)


def _in_quota(q) -> bool:
    return q.allocated["gpu"] <= q.deserved["gpu"] or q.deserved["gpu"] == -1


def _single_pod(job: JobInfo) -> bool:
    """One pod, and every PodSet's minimum at most 1: a job that leaves pod by pod."""
    pods = 0
    for ps in job.podsets.values():
        if ps.min_available > 1:
            return False
        pods += len(ps.tasks)
    return pods == 1


def _reach(state: ClusterState, names: list[str], unit_queue: np.ndarray, unit_prio: np.ndarray,
           unit_preempt: np.ndarray, reclaimed_by: dict[str, np.ndarray], pending: list[tuple[str, int]],
           rows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[dict, dict, np.ndarray]:
    """Per (queue, priority) of pending work, what evicting the units it may evict frees on each
    node (_legal's rule), and for a reclaiming queue also what preempting alone frees (its jobs
    gate 1 refuses); and what each unit may lose in all, from the units' losable pods as (unit,
    node, request row) rows. Integer sums, so the order of the additions does not matter."""
    table = state.table
    task_unit, task_node, stacked = rows
    # one row per (unit, node), the rows in node order: a key's rows are then runs of nodes
    key = task_node * max(1, len(unit_prio)) + task_unit
    order = np.argsort(key, kind="stable")
    key = key[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    starts = np.flatnonzero(first)
    vecs = np.add.reduceat(stacked[order], starts, axis=0) if len(order) else stacked
    row_unit_arr = task_unit[order][starts]
    row_node_arr = task_node[order][starts]
    code = {q: i for i, q in enumerate(names)}
    def frees(legal: np.ndarray) -> np.ndarray | None:
        pick = np.flatnonzero(legal[row_unit_arr])
        if not len(pick):
            return None
        nodes = row_node_arr[pick]
        head = np.ones(len(pick), dtype=bool)
        head[1:] = nodes[1:] != nodes[:-1]
        at = np.flatnonzero(head)
        arr = np.zeros_like(table.allocatable)
        arr[nodes[at]] = np.add.reduceat(vecs[pick], at, axis=0)
        return arr if arr.any() else None

    reach: dict[tuple[str, int], np.ndarray] = {}
    reach_preempt: dict[tuple[str, int], np.ndarray] = {}
    for q, p in set(pending):
        preempt = unit_preempt & (unit_queue == code.get(q, -1)) & (unit_prio < bounded(p))
        arr = frees(preempt | reclaimed_by[q] if q in reclaimed_by else preempt)
        if arr is not None:
            reach[(q, p)] = arr
        if q in reclaimed_by:
            arr = frees(preempt)
            if arr is not None:
                reach_preempt[(q, p)] = arr
    loses = np.zeros((len(unit_prio), table.allocatable.shape[1]), dtype=table.allocatable.dtype)
    np.add.at(loses, row_unit_arr, vecs)
    return reach, reach_preempt, loses


def _preempts(u: Unit, job: JobInfo) -> bool:
    """May this job preempt unit u (its own queue, strictly lower priority)?"""
    return u.preempt and job.queue == u.queue and job.priority > u.priority


def _reclaims(u: Unit, job: JobInfo, state: ClusterState) -> bool:
    """May this job reclaim unit u (its queue may, and gate 1 lets the job ask)?"""
    return job.queue in u.reclaimers and may_reclaim(state, job)


def _legal(u: Unit, job: JobInfo, state: ClusterState) -> bool:
    """May this job's pods use what evicting unit u frees (preempt or reclaim)?"""
    return _preempts(u, job) or _reclaims(u, job, state)


def pending_keys(classes) -> list[tuple[str, int]]:
    return sorted({(c.job.queue, c.job.priority) for c in classes})


def reach_for(pool: Pool | None, job: JobInfo, state: ClusterState) -> np.ndarray | None:
    if pool is None:
        return None
    key = (job.queue, job.priority)
    if job.queue in pool.reclaimed_by and not may_reclaim(state, job):
        return pool.reach_preempt.get(key)
    return pool.reach.get(key)
