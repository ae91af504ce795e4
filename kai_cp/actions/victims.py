"""KAI's job solver (spec 6.2), shared by consolidation, reclaim and preempt: for one pending job
(the preemptor) grow a set of running victims, in victim order, until a scenario places the
preemptor's next gang step on the freed capacity and the action's validator accepts it.

Each action gives the victims it may take (`Policy.victim_jobs`), the eviction message, and the
validator; everything else (victim order, scenarios, simulation, un-evicting victims the
simulation leaves in place) is common, as in KAI.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable, NamedTuple, Protocol

import numpy as np

from kai_cp.actions.allocate import Allocator, JobOutcome
from kai_cp.actions.repack import RepackBound
from kai_cp.gpu_sharing import task_memory
from kai_cp.jobs import ACTIVE_ALLOCATED, JobInfo, TaskInfo, elastic_state
from kai_cp.ordering import JobQueue, queue_less, queue_tree, tasks_to_allocate
from kai_cp.queues import RESOURCES, ancestors
from kai_cp.session import Session
from kai_cp.state import ClusterState
from kai_cp.topology import pinned_domains


ORDER_WORK_PER_UNIT = 8    # pending jobs ordered in a simulation per unit of hint work


@dataclass
class Victim:
    """A victim job restricted to the tasks that may still be chosen from it (task order)."""
    job: JobInfo
    tasks: list[TaskInfo]
    # victim_order_key, once: it reads only the job and these tasks, and every gang step of a
    # preemptor builds a victim queue of the same victims again
    order_key: tuple | None = field(default=None, repr=False, compare=False)
    # what these tasks count for in their queue, as floats (VictimQueue._vector), once: a queue's
    # head is compared at every pop
    floats: list[float] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.order_key is None:      # every victim is queued: its key is always needed
            self.order_key = victim_order_key(self)


@dataclass
class Solution:
    evicted: list[TaskInfo]                       # really evicted (Releasing)
    moved: list[TaskInfo]                         # evicted and pipelined elsewhere

    @property
    def victims(self) -> list[TaskInfo]:
        return self.evicted + self.moved


class Policy(Protocol):
    """What one eviction action decides; the solver does the rest."""
    action: str
    moves_victims: bool      # a solution re-places every victim (consolidation): the filter checks they fit again

    def victim_jobs(self, preemptor: JobInfo) -> list[Victim]: ...

    def fewest_victims(self, preemptor: JobInfo) -> int:
        """A lower bound of len(victim_jobs(preemptor)), without making the list."""
        ...

    def message(self, victim: TaskInfo, preemptor: JobInfo) -> str: ...

    def validate(self, preemptor: JobInfo, tasks: list[TaskInfo], solution: Solution) -> str | None: ...

    def failure(self, preemptor: JobInfo) -> str: ...


def active_tasks(job: JobInfo, session: Session) -> list[TaskInfo]:
    """Active-allocated tasks of the snapshot's running pods in this cycle, in task order: those
    still running, and those an earlier commit moved (evicted and pipelined elsewhere: KAI's
    Pipelined status), so that a gang is always taken whole. Pods bound to a node the snapshot
    lacks hold nothing anyone could use, so they are no victims (KAI skips them too)."""
    v = snapshot_victim(session.state, job)
    if v is None:
        return []
    ev, pl = session.evictions, session.placements
    return [t for t in v.tasks if (t.key in ev) == (t.key in pl)]


def _snapshot_victims(state: ClusterState) -> dict[str, Victim]:
    """Per preemptible job with any, the victim its snapshot's active-allocated tasks on known
    nodes make (task order), order key included; in job order of the state (and per queue,
    `_snapshot_by_queue`). Statuses and nodes are fixed per snapshot, so once per state: it is
    the victim of every job a cycle has not changed, and reclaim and preempt ask for all of
    them (~31,000 at 10,000 nodes; consolidation needs only the last of each queue,
    victim_heads)."""
    cached = state.__dict__.get("_snapshot_victims")
    if cached is not None:
        return cached
    one = state.__dict__.get("_snapshot_victim")     # made one at a time before (snapshot_victim)
    index = state.table.index
    cached = state.__dict__["_snapshot_victims"] = {}
    by_queue: dict[str, list[Victim]] = {}
    state.__dict__["_snapshot_by_queue"] = by_queue
    jobs = state.jobs
    for name in state.victims:          # (JobInfo.tally, in job order)
        j = jobs[name]
        v = one.get(name) if one else None
        v = cached[j.name] = v if v is not None else Victim(j, _on_node_tasks(j, index), j.victim_key)
        q = by_queue.get(j.queue)
        if q is None:
            by_queue[j.queue] = [v]
        else:
            q.append(v)
    return cached


def snapshot_victim(state: ClusterState, job: JobInfo) -> Victim | None:
    """One job's entry of _snapshot_victims, without making the others' when they were not made."""
    full = state.__dict__.get("_snapshot_victims")
    if full is not None:
        return full.get(job.name)
    key = job.victim_key
    if key is None:
        return None
    one = state.__dict__.setdefault("_snapshot_victim", {})
    v = one.get(job.name)
    if v is None:
        v = one[job.name] = Victim(job, _on_node_tasks(job, state.table.index), key)
    return v


def _on_node_tasks(job: JobInfo, index) -> list[TaskInfo]:
    """The job's active-allocated tasks on the cycle's nodes (JobInfo.tally), in task order."""
    podsets = job.podsets
    if len(podsets) == 1:          # most jobs: no list to join
        (ps,) = podsets.values()
        mine = ps.on_nodes(index)
        return sorted(mine, key=_TASK_ORDER) if len(mine) > 1 else list(mine)
    tasks = [t for ps in podsets.values() for t in ps.on_nodes(index)]
    tasks.sort(key=_TASK_ORDER)
    return tasks


_TASK_ORDER = attrgetter("order_key")
_VICTIM_KEY = attrgetter("victim_key")


def _last_in_job_order(state: ClusterState, queue: str, k: int) -> list[JobInfo]:
    """Jobs of one queue that include the `k` last in job order (largest victim_key): the `k`
    last by priority, elastic state and creation, and every job tied with the k-th of them
    (names decide between those)."""
    jobs, cols = state.jobs, state.victim_jobs[queue]
    n = len(cols.jobs)
    if n <= k:
        return [jobs[name] for name in cols.jobs]
    neg, elastic, creation, order = _victim_order(state, queue)
    kth = order[n - k]
    take = np.zeros(n, dtype=bool)
    take[order[n - k:]] = True
    take |= (neg == neg[kth]) & (elastic == elastic[kth]) & (creation == creation[kth])
    return [jobs[cols.jobs[i]] for i in np.flatnonzero(take).tolist()]


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _victim_order(state: ClusterState, queue: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A queue's victim columns as arrays and their job order, ascending (the last are the
    largest victim_key), once per state: consolidation asks at every commit, and sorting ~2,500
    jobs per queue again each time was a tenth of a 10,000-node eviction search."""
    orders = state.__dict__.setdefault("_victim_orders", {})
    hit = orders.get(queue)
    if hit is None:
        cols = state.victim_jobs[queue]
        neg, elastic = -np.array(cols.priority, dtype=np.int64), np.array(cols.elastic, dtype=np.int64)
        creation = np.array(cols.creation, dtype=np.float64)
        hit = orders[queue] = (neg, elastic, creation, np.lexsort((creation, elastic, neg)))
    return hit


def victim_heads(session: Session, pops: int) -> tuple[dict[str, list[Victim]], int]:
    """Per queue, victims that include the `pops` last in job order, and how many victims there
    are in all: what a VictimQueue limited to `pops` pops keeps of preemptible_running, from
    the snapshot's keys (JobInfo.tally) and the jobs this cycle changed, without making the
    other ~31,000 victims of a 10,000-node cluster (consolidation takes 18)."""
    state = session.state
    changed = _changed_victims(session)
    heads: dict[str, list[Victim]] = {}
    total = 0
    for queue, cols in state.victim_jobs.items():
        mine = changed.get(queue)
        gone = {j.name for j in mine} if mine else set()
        total += len(cols.jobs) - len(gone)
        last = _last_in_job_order(state, queue, pops + len(gone))
        vs = [snapshot_victim(state, j) for j in heapq.nlargest(pops, (j for j in last if j.name not in gone),
                                                                  key=_VICTIM_KEY)]
        for j in mine or ():
            # as preemptible_running: per job until its tasks change
            v = session.job_derived(_VICTIM, j.name, lambda j=j: _victim(j, session))
            if v is not None:
                vs.append(v)
                total += 1
        if vs:
            heads[queue] = vs
    return heads, total


def preemptible_running(session: Session) -> dict[str, list[Victim]]:
    """Per queue, the preemptible jobs with active tasks, in job order of the state. Kept while
    the session's decisions are the same (Session.decisions_derived), so the actions'
    per-preemptor victim lists cost a filter, not a scan of all pods. A queue the cycle has not
    changed shares the snapshot's list: callers read these lists and never change them."""
    return session.decisions_derived("victims", lambda: _preemptible_running(session))


def _preemptible_running(session: Session) -> dict[str, list[Victim]]:
    # A commit touches a few jobs, so only the queues holding a changed one are rebuilt (30,000
    # victims at 10,000 nodes).
    touched = _changed_victims(session)
    changed = {j.name for jobs in touched.values() for j in jobs}
    out: dict[str, list[Victim]] = {}
    by_queue = _snapshot_by_queue(session.state)
    for queue, victims in by_queue.items():
        if queue not in touched:
            out[queue] = victims
            continue
        kept: list[Victim] = []
        for v0 in victims:
            name = v0.job.name
            # per job until its tasks change
            v = v0 if name not in changed else session.job_derived(_VICTIM, name, lambda: _victim(v0.job, session))
            if v is not None:
                kept.append(v)
        if kept:
            out[queue] = kept
    if any(q not in out or out[q][0].job is not by_queue[q][0].job for q in touched):
        # queues in the order of their first victim in job order, as a scan of every job gives
        # (a queue whose first job lost all its pods this cycle moves back)
        position = _snapshot_positions(session.state)
        out = dict(sorted(out.items(), key=lambda qv: position[qv[1][0].job.name]))
    return out


def _changed_victims(session: Session) -> dict[str, list[JobInfo]]:
    """Per queue, the snapshot's victim jobs whose tasks this cycle placed or evicted (each
    change counts in job_version): their victims are made again from the session. Kept while the
    session holds the same decisions (a job changed only by attempts rolled back since is as
    the snapshot made it, so its snapshot victim is its victim): consolidation asks at every
    preemptor, over every job allocate placed. Read-only for callers."""
    return session.decisions_derived("changed victim jobs", lambda: _changed_victim_jobs(session))


def _changed_victim_jobs(session: Session) -> dict[str, list[JobInfo]]:
    jobs = session.state.jobs
    out: dict[str, list[JobInfo]] = {}
    for name, version in session.job_version.items():
        j = jobs.get(name) if version else None
        if j is not None and j.victim_key is not None:
            out.setdefault(j.queue, []).append(j)
    return out


def changed_victim_counts(session: Session) -> dict[str, int]:
    """Per queue, how many of the snapshot's victim jobs this cycle changed (_changed_victims):
    preemptible_running keeps each of the others as the snapshot made it."""
    return session.decisions_derived("changed victims",
                                     lambda: {q: len(js) for q, js in _changed_victims(session).items()})


def _snapshot_positions(state: ClusterState) -> dict[str, int]:
    cached = state.__dict__.get("_snapshot_positions")
    if cached is None:
        cached = state.__dict__["_snapshot_positions"] = {name: i for i, name in enumerate(_snapshot_victims(state))}
    return cached


def _snapshot_by_queue(state: ClusterState) -> dict[str, list[Victim]]:
    """The snapshot's victims per queue, in job order of the state (made with them)."""
    _snapshot_victims(state)
    return state.__dict__["_snapshot_by_queue"]


_VICTIM = ("victim",)


def _victim(job: JobInfo, session: Session) -> Victim | None:
    tasks = active_tasks(job, session)
    return Victim(job, tasks) if tasks else None


def moved_earlier(t: TaskInfo, session: Session) -> bool:
    """Evicted and pipelined elsewhere by an earlier commit of this cycle."""
    return t.key in session.evictions and t.key in session.placements


def moved_victims(session: Session) -> list[str]:
    """The pods this cycle's commits moved (evicted and placed again), in eviction order."""
    return [k for k in session.evictions if k in session.placements]


def tasks_to_evict(v: Victim, session: Session | None = None) -> list[TaskInfo]:
    """An elastic PodSet above its minimum gives one pod (the last in task order); otherwise the
    whole remaining gang goes (6.2.3). PodSets are scanned in reverse order.

    Pending pods of the job placed in this cycle (bound or pipelined by allocate, not moved
    victims) are active too: they count towards "above its minimum" but are not taken back, so
    a gang that would have to go whole while it has such pods is no victim now (empty list):
    evicting only its running pods would leave the new ones below minMember."""
    by_ps: dict[str, list[TaskInfo]] = {}
    for t in v.tasks:
        by_ps.setdefault(t.podset, []).append(t)
    placed: dict[str, int] = {}
    if session is not None:
        for t in v.job.tasks:
            if t.key in session.placements and t.key not in session.evictions:
                placed[t.podset] = placed.get(t.podset, 0) + 1
    for name in reversed(list(v.job.podsets)):
        ts = by_ps.get(name)
        if ts and len(ts) + placed.get(name, 0) > v.job.podsets[name].min_available:
            return [ts[-1]]
    return [] if placed else list(v.tasks)


_ZERO = [0.0, 0.0, 0.0]


def victim_order_key(v: Victim) -> tuple:
    """Job order (4.2) of the victim as restricted: its elastic state counts only the pods it
    still offers, as KAI orders the restricted clone it pushes back."""
    counts: dict[str, int] = {}
    for t in v.tasks:
        counts[t.podset] = counts.get(t.podset, 0) + 1
    below = any(counts.get(n, 0) < ps.min_available for n, ps in v.job.podsets.items())
    above = any(counts.get(n, 0) > ps.min_available for n, ps in v.job.podsets.items())
    return v.job.order_key_at(elastic_state(below, above))


_ORDER_KEY = attrgetter("order_key")


class _Reversed:
    """Inverts a key for heapq: the largest job key (last in job order) pops first."""
    __slots__ = ("key",)

    def __init__(self, key: tuple):
        self.key = key

    def __lt__(self, other: "_Reversed") -> bool:
        return other.key < self.key


def _queue_floats(session: Session, t: TaskInfo) -> tuple[float, float, float]:
    """A running pod's queue vector (Session.queue_vector, on its snapshot node) as floats: fixed
    per pod, as are its request and node."""
    q = session.queue_vector(t, session.state.table.index[t.node])
    return float(q[RESOURCES[0]]), float(q[RESOURCES[1]]), float(q[RESOURCES[2]])


class VictimQueue:
    """Victims in KAI's victim order (3.8): the queue tree with every comparison negated, each
    queue's allocation less what was already taken from it; reverse job order inside a leaf."""

    def __init__(self, session: Session, victims: list[Victim] | dict[str, list[Victim]], pops: int | None = None):
        """`victims`: a list, or per queue as preemptible_running gives them (not regrouped).
        `pops`: at most this many pops follow, and no push: a leaf keeps only its first `pops`
        victims (a victim's job is in a queue once, so keys are distinct and these are exactly
        the ones that could pop; consolidation takes 18 of ~31,000)."""
        self.session = session
        state = session.state
        self.views, self.children, self.roots = queue_tree(state)
        self.heaps: dict[str, list] = {}
        self.taken: dict[str, list[float]] = {}
        # per victim pod, what it counts for in its queue, once per state: each pick reads every
        # queue head's (the Fractions made for it were a quarter of a long eviction search)
        self._floats: dict[str, tuple[float, float, float]] = state.__dict__.setdefault("_victim_floats", {})
        self._seq = 0
        # _head and _pick per queue (a parent's pick among its children; None: among the roots),
        # kept until a pop, push or take in the subtree (_changed) or a change of the session
        # (the allocations compared): each pop walked the whole tree again
        self._heads: dict[str, Victim | None] = {}
        self._picks: dict[str | None, str | None] = {}
        self._at = session.version
        if isinstance(victims, dict):
            by_queue = victims
        else:
            by_queue = {}
            for v in victims:
                by_queue.setdefault(v.job.queue, []).append(v)
        for name, vs in by_queue.items():
            q = state.queues.get(name)
            if q is None or not q.is_leaf or not vs:     # jobs of a parent queue are in no leaf: KAI never sees them
                continue
            if pops is not None and len(vs) > pops:
                vs = heapq.nlargest(pops, vs, key=_ORDER_KEY)      # the last in job order pop first
            heap = self.heaps[name] = []
            for v in vs:
                self._seq += 1
                heap.append((_Reversed(v.order_key), self._seq, v))
            heapq.heapify(heap)                  # at once: the same pop order as pushing one by one

    def push(self, v: Victim) -> None:
        self._seq += 1
        heapq.heappush(self.heaps.setdefault(v.job.queue, []), (_Reversed(v.order_key), self._seq, v))
        self._changed(v.job.queue)

    def _changed(self, leaf: str) -> None:
        """The leaf's heap or a taken amount on its path changed: the picks above it go."""
        heads, picks = self._heads, self._picks
        for q in self.session.state.queue_path(leaf):
            heads.pop(q.name, None)
            picks.pop(q.name, None)
        picks.pop(None, None)

    def _fresh(self) -> None:
        """The session changed since the picks were made (the queues' allocations): they go."""
        at = self.session.version
        if at != self._at:
            self._heads.clear()
            self._picks.clear()
            self._at = at

    def __bool__(self) -> bool:
        return any(self.heaps.values())

    def _vector(self, tasks: list[TaskInfo]) -> list[float]:
        """What the tasks count for in their queues, as floats (cpu, memory, gpu)."""
        out = [0.0, 0.0, 0.0]
        floats = self._floats
        for t in tasks:
            f = floats.get(t.key)
            if f is None:
                f = floats[t.key] = _queue_floats(self.session, t)
            out[0] += f[0]
            out[1] += f[1]
            out[2] += f[2]
        return out

    def _head(self, queue: str) -> Victim | None:
        kids = self.children[queue]
        if not kids:
            heap = self.heaps.get(queue)
            return heap[0][2] if heap else None
        if queue in self._heads:
            return self._heads[queue]
        best = self._pick(kids, queue)
        head = self._heads[queue] = None if best is None else self._head(best)
        return head

    def _pick(self, names: list[str], parent: str | None) -> str | None:
        """The queue among `names` (the children of `parent`, None: the roots) whose head goes next."""
        if parent in self._picks:
            return self._picks[parent]
        best = best_a = best_req = None
        for name in names:
            head = self._head(name)
            if head is None:
                continue
            a = self.session.allocated_floats(name)[1]
            taken = self.taken.get(name, [0.0, 0.0, 0.0])
            nxt = head.floats
            if nxt is None:
                nxt = head.floats = self._vector(head.tasks)
            req = [-(x + y) for x, y in zip(taken, nxt)]
            # negated order (3.8): `name` goes first unless it would come before `best` in the
            # allocation order
            if best is None or not queue_less(self.views[name], a, _ZERO, self.views[best], best_a, _ZERO, req, best_req):
                best, best_a, best_req = name, a, req
        self._picks[parent] = best
        return best

    def pop(self) -> Victim | None:
        self._fresh()
        name = self._pick(self.roots, None)
        while name is not None and self.children[name]:
            name = self._pick(self.children[name], name)
        if name is None:
            return None
        v = heapq.heappop(self.heaps[name])[2]
        self._changed(name)
        return v

    def took(self, tasks: list[TaskInfo]) -> None:
        if not tasks:
            return
        vec = self._vector(tasks)
        leaf = tasks[0].job and self.session.state.jobs[tasks[0].job].queue
        for q in self.session.state.queue_path(leaf):
            cur = self.taken.setdefault(q.name, [0.0, 0.0, 0.0])
            for i in range(3):
                cur[i] += vec[i]
        self._changed(leaf)


class StepGpus(NamedTuple):
    """A gang step's whole GPUs and where they may go: what the scenario filter and
    `out_of_reach` start from."""
    need: int                         # whole GPUs of the step in all
    largest: int                      # of its largest pod
    admitted: np.ndarray              # nodes the static predicates of some whole-GPU pod admit
    base_free: np.ndarray             # whole GPUs free on the admitted feasible nodes
    best: int                         # the most of them on one node
    alike: dict[tuple, list]          # (request, predicates) -> [a pod, pods]: a gang's pods mostly share both


def step_gpus(solver: "JobSolver", tasks: list[TaskInfo], base: np.ndarray) -> StepGpus:
    state = solver.state
    need = [t.request.gpus for t in tasks if t.request.gpus > 0 and not t.request.is_shared_gpu]
    alike: dict[tuple, list] = {}
    for t in tasks:
        hit = alike.get((id(t.request), t.predicate_key))
        if hit is None:
            alike[(id(t.request), t.predicate_key)] = [t, 1]
        else:
            hit[1] += 1
    admitted = np.zeros(len(state.nodes), dtype=bool)
    for t, _ in alike.values():
        if t.request.gpus > 0 and not t.request.is_shared_gpu:
            admitted |= state.predicates.mask(t.predicate_key)
    base_free = np.where(base & admitted, solver.free_now()[:, 2], 0).astype(np.int64)
    return StepGpus(sum(need), max(need, default=0), admitted, base_free, int(base_free.max(initial=0)), alike)


def freed_row(session: Session, table, t: TaskInfo, moved: bool) -> np.ndarray | None:
    """What evicting a victim frees where it is now, as a row (whole GPUs only): its pipelined
    placement where an earlier commit moved it, nothing where it is releasing already (counted in
    free), else its request."""
    if moved:
        p = session.placements.get(t.key)
        return p.vec if p is not None else None
    if t.key in session.evictions:
        return None
    return table.vector(t)


def out_of_reach(solver: "JobSolver", gpus: StepGpus, victims: list[Victim], recorded: list[TaskInfo]) -> bool:
    """No admitted feasible node would have whole GPUs for the step's largest pod even with every
    victim evicted (and every shared GPU of theirs released whole): every scenario of the step
    fails the scenario filter's `ok`, which only grows with victims, so the step fails without
    popping them. At 10,000 nodes (bench_scale's) 81 of consolidation's 91 failed preemptors,
    each ~2.5 ms building the filter, popping and adding 17 victims."""
    if not gpus.largest or gpus.best >= gpus.largest:
        return False
    s, table = solver.session, solver.state.table
    freed: dict[int, int] = {}
    for t in [t for v in victims for t in v.tasks] + recorded:
        n, moved = solver.location(t)
        row = freed_row(s, table, t, moved)
        if row is None:
            continue
        g = len(t.gpu_groups) if t.request.is_shared_gpu and not moved else int(row[2])
        if g and gpus.admitted[n]:
            freed[n] = freed.get(n, 0) + g
    return all(int(gpus.base_free[n]) + g < gpus.largest for n, g in freed.items())


class _ScenarioFilter:
    """Scenario filter 6.2.3 (c), kept as necessary conditions only (it never rejects a feasible
    scenario, so the scenarios simulated and their outcomes are KAI's), over what is free and what
    the victims free:
    - the step's whole GPUs fit, in total and for its largest pod, on feasible nodes its pods'
      static predicates admit;
    - its regular pods fit, each kind (request and predicates) counted node by node, whole
      request, within one domain of the job's required topology level (the cluster without one),
      one of those the gang already runs in where it runs anywhere.
    Simulating is what the eviction search costs (1.5-9 ms a scenario at 200-1,000 nodes); the GPU
    count alone let through scenarios whose victims could make room for no pod (a NotReady node's
    idle GPUs, CPU short everywhere) or not within one rack: at 200 nodes all but a tenth of the
    simulated scenarios. `ok` reads every victim popped so far (updated per victim), `admits` one
    scenario's victims, before it is simulated."""

    def __init__(self, solver: "JobSolver", preemptor: JobInfo, tasks: list[TaskInfo], base: np.ndarray,
                 gpus: "StepGpus"):
        state, s = solver.state, solver.session
        fitter = solver.alloc.fitter
        self.solver = solver
        self.need, self.largest = gpus.need, gpus.largest
        self.free0 = free0 = solver.free_now()
        # Required topology: every pod of the step on member nodes of one domain of that level
        # (topology_fit.candidate_sets' node sets); else the cluster is one domain.
        c = preemptor.scope.constraint if preemptor.scope is not None else None
        if c is not None and c.required is not None and c.source == "topology":
            dom = c.tree.domain_of(c.required)
            # A gang with pods running or placed in a domain stays there (topology.pinned_domains,
            # as candidate_sets reads it): victims elsewhere make it no room. The preemptor's own
            # pods are never its victims, so the pinned domains hold for the whole step. Ignoring
            # them let through every scenario of a pinned gang whose pods fit in some other rack:
            # 93 simulations, most of a 10,000-node consolidation, none of which could work.
            pinned = pinned_domains(preemptor, preemptor.scope, c, state.table.index, s.placements, s.evictions)
            member = c.tree.member if pinned is None else c.tree.member & np.isin(dom, pinned)
            self.dom = np.where(member, dom, -1)
            domains = int(self.dom.max(initial=-1)) + 1
        else:
            self.dom, domains = np.zeros(len(state.nodes), dtype=np.int64), 1
        kinds: dict[tuple, tuple[np.ndarray, TaskInfo, int]] = {}      # kind -> (request row, a pod, pods)
        alike = gpus.alike
        for t, n in alike.values():
            r = t.request
            if not r.best_effort:
                vec = state.table.vector(t)
                key = (vec.tobytes(), t.predicate_key, r.kind)
                _, first, count = kinds.get(key, (vec, t, 0))
                kinds[key] = (vec, first, count + n)
        member = self.dom >= 0
        # A shared-GPU pod's row holds its CPU, memory and pod slot (its GPU is per device, 0
        # here): it is followed on the nodes the simulation may use, those with GPU room now
        # (`base`) and the victims' (whatever GPU room they free), so a pinned gang of fractional
        # pods gets no scenario freeing CPU in another rack either (38 at 10,000 nodes).
        self.kinds = [_Kind(vec, count, member & state.predicates.mask(t.predicate_key) & fitter.types.mask(t.request),
                            solver.copies_now(vec) if (vec > 0).any() else None, self.dom, domains,
                            base if t.request.is_shared_gpu else None)
                      for vec, t, count in kinds.values()]
        held = np.ones(domains, dtype=bool)
        for k in self.kinds:
            held &= k.in_domain >= k.count
        if held.any():
            self.kinds = []         # some domain holds every pod already: nothing to follow
        self.placeable = not self.kinds
        self.admitted, self.base_free = gpus.admitted, gpus.base_free
        self.free = self.base_free.copy()
        self.total0 = self.total = int(self.free.sum())
        self.best0 = self.best = gpus.best
        # Per node, Python ints: a scenario's few nodes are summed and compared in pure Python,
        # several times faster than numpy on rows of five.
        self.rows: dict[int, list[int]] = {}                     # node -> free0's row
        self.extra: dict[int, list[int]] = {}
        self.freed: dict[str, tuple[int, list[int]]] = {}        # victim -> (node, what evicting it frees)
        self.shared_mem: dict[tuple[int, str], int] = {}
        self.active = bool(self.need or self.kinds)
        # consolidation's victims must find room again beside the step (actions/repack.py)
        self.repack = (RepackBound(s, free0, base, list(alike.values()), self._kind_of)
                       if solver.policy.moves_victims and not any(t.request.is_shared_gpu for t in tasks) else None)
        self._recorded: tuple[list[TaskInfo] | None, tuple] | None = None     # admits' recorded victims, worked out

    def add(self, t: TaskInfo) -> None:
        """A victim popped (before any scenario evicts it)."""
        if not self.active and self.repack is None:
            return
        solver = self.solver
        s = solver.session
        n, moved = solver._where[t.key], t.key in solver._moved
        row = freed_row(s, solver.state.table, t, moved)
        vec = None if row is None else row.tolist()
        if vec is not None and not moved and self.active and t.request.is_shared_gpu and t.gpu_groups:
            # with every victim popped so far: never less than a scenario of some of them frees
            vec[2] += self._shared(n, t)
        if self.repack is not None:
            self.repack.add(t, n, vec)
        if vec is None or not self.active:
            return
        self.freed[t.key] = (n, vec)
        g = vec[2]
        if g and self.admitted[n]:
            self.free[n] += g
            self.total += g
            self.best = max(self.best, int(self.free[n]))
        if not self.placeable:
            e = _sum_at(self.extra, n, vec)
            row = self._row(n)
            for k in self.kinds:
                k.grow(n, row, e)
            d = int(self.dom[n])
            self.placeable = d >= 0 and all(k.in_domain[d] >= k.count for k in self.kinds)

    def _kind_of(self, t: TaskInfo) -> tuple[np.ndarray, Callable[[], np.ndarray]]:
        """A pod's request as a row, and the nodes its static predicates and device type admit."""
        state, fitter = self.solver.state, self.solver.alloc.fitter
        return state.table.vector(t), lambda: state.predicates.mask(t.predicate_key) & fitter.types.mask(t.request)

    def _shared(self, n: int, t: TaskInfo) -> int:
        """A shared GPU whose every holder is a victim is released whole (7.3): one GPU, once."""
        s = self.solver.session
        mem = task_memory(t.request, self.solver.state.nodes[n].gpu_memory)
        whole = 0
        for g in t.gpu_groups:
            key = (n, g)
            before = self.shared_mem.get(key, 0)
            self.shared_mem[key] = before + mem
            d = s.shared.groups(n).get(g)
            if d is None or d.used <= 0 or d.allocated == d.releasing:
                continue
            left = d.allocated - d.releasing
            if before < left <= before + mem:
                whole += 1
        return whole

    def _row(self, n: int) -> list[int]:
        row = self.rows.get(n)
        if row is None:
            row = self.rows[n] = self.free0[n].tolist()
        return row

    def ok(self) -> bool:
        return self.total >= self.need and self.best >= self.largest and self.placeable

    def admits(self, victims: list[TaskInfo], recorded: list[TaskInfo] | None = None) -> bool:
        """The same conditions for a scenario that evicts these victims and the `recorded` ones
        (each added before). What the recorded victims free, and what that gains each domain, is
        worked out once per filter (_recorded_part): every scenario of a gang step holds them all,
        and a long search's scenarios summed them again each time (a third of its cost). Then,
        for consolidation, whether the victims fit again (the dearer count, asked last)."""
        return self._room_for_step(victims, recorded) and self.fit_again([*victims, *recorded] if recorded else victims)

    def fit_again(self, victims: list[TaskInfo]) -> bool:
        """For consolidation, whether these victims can all be placed again beside the step."""
        return self.repack is None or self.repack.admits(victims)

    def _room_for_step(self, victims: list[TaskInfo], recorded: list[TaskInfo] | None) -> bool:
        if not self.active:
            return True
        rec_nodes, rec_total, rec_best, rec_gains, rec_at = self._recorded_part(recorded)
        by_node = self._freed_by_node(victims, {})
        if self.need:
            total, best = self._gpus(by_node, rec_nodes, rec_total, rec_best)
            if total < self.need or best < self.largest:
                return False
        if not self.kinds:
            return True
        gains = self._gains(by_node, rec_nodes, rec_gains, rec_at)
        return any(all(int(k.in_domain0[d]) + g[i] >= k.count for i, k in enumerate(self.kinds))
                   for d, g in gains.items())

    def _recorded_part(self, recorded: list[TaskInfo] | None) -> tuple:
        """For `recorded` (memoised per list): per node what they free, the GPU total and best
        node that gives, per domain the pods each kind gains, and per node the pods each kind
        holds then."""
        memo = self._recorded
        if memo is not None and memo[0] is recorded:
            return memo[1]
        by_node = self._freed_by_node(recorded or (), {})
        total, best = self._gpus(by_node, {}, self.total0, self.best0)
        at: dict[int, list[int]] = {}
        gains = self._gains(by_node, {}, {}, {}, at) if self.kinds else {}
        part = (by_node, total, best, gains, at)
        self._recorded = (recorded, part)
        return part

    def _gpus(self, by_node: dict[int, list[int]], rec_nodes: dict[int, list[int]], total: int,
              best: int) -> tuple[int, int]:
        """The whole GPUs free on admitted feasible nodes, in all and on the best node, once the
        victims of `by_node` are evicted beside the recorded ones (their `total` and `best`). What
        a node frees only grows with more victims, so the recorded part's best holds."""
        for n, e in by_node.items():
            if e[2] and self.admitted[n]:
                total += e[2]
                r = rec_nodes.get(n)
                best = max(best, int(self.base_free[n]) + e[2] + (r[2] if r is not None else 0))
        return total, best

    def _gains(self, by_node: dict[int, list[int]], rec_nodes: dict[int, list[int]],
               rec_gains: dict[int, list[int]], rec_at: dict[int, list[int]],
               at: dict[int, list[int]] | None = None) -> dict[int, list[int]]:
        """Per domain, per kind, the pods more than it holds now once the victims of `by_node` are
        evicted beside the recorded ones (their gains, and what each kind holds on their nodes);
        `at` records what each kind then holds per node."""
        gains = {d: g.copy() for d, g in rec_gains.items()}
        for n, e in by_node.items():
            d = int(self.dom[n])
            if d < 0:
                continue
            g = gains.setdefault(d, [0] * len(self.kinds))
            row = self._row(n)
            r = rec_nodes.get(n)
            if r is not None:       # the node's recorded gain replaced by its gain with both
                e = [x + y for x, y in zip(r, e)]
            before = rec_at[n] if r is not None else None
            held = [k.fits(n, row, e) for k in self.kinds]
            for i, k in enumerate(self.kinds):
                g[i] += held[i] - (int(k.at0[n]) if before is None else before[i])
            if at is not None:
                at[n] = held
        return gains

    def _freed_by_node(self, victims: list[TaskInfo], by_node: dict[int, list[int]]) -> dict[int, list[int]]:
        """Add what evicting each victim frees to its node's sum in `by_node`."""
        freed = self.freed
        for t in victims:
            f = freed.get(t.key)
            if f is not None:
                _sum_at(by_node, *f)
        return by_node


def _sum_at(sums: dict[int, list[int]], n: int, vec: list[int]) -> list[int]:
    """Add `vec` to node `n`'s sum (a new list: the rows summed are shared) and return it."""
    e = sums.get(n)
    e = sums[n] = vec if e is None else [a + b for a, b in zip(e, vec)]
    return e


class _Kind:
    """Pods of one request and one set of admitted nodes, in a scenario filter: how many fit on
    each node with what is free there (the filter's `free0`) and what victims free, and in each
    domain."""
    __slots__ = ("need", "mask", "count", "dom", "at0", "at", "in_domain0", "in_domain")

    def __init__(self, vec: np.ndarray, count: int, mask: np.ndarray, copies: np.ndarray | None, dom: np.ndarray,
                 domains: int, now: np.ndarray | None = None):
        """`copies`: per node, how many of the request its free capacity holds (JobSolver.copies_now;
        None for a request of nothing); `now`: the nodes counted before a victim frees something
        there (default: `mask`'s)."""
        cols = np.flatnonzero(vec > 0)
        self.need = list(zip(cols.tolist(), vec[cols].tolist()))       # (column, amount) per resource asked
        self.count, self.mask, self.dom = count, mask, dom
        first = mask if now is None else mask & now
        if len(cols):
            self.at0 = np.where(first, np.clip(copies, 0, count), 0)
        else:       # a request of nothing: an admitted node holds them all
            self.at0 = np.where(first, count, 0)
        if domains == 1:        # no required topology: `at0` is 0 off `mask`, one sum (exact ints)
            self.in_domain0 = np.array([int(self.at0.sum())], dtype=np.int64)
        else:
            self.in_domain0 = np.bincount(dom[mask], weights=self.at0[mask], minlength=domains).astype(np.int64)
        self.in_domain = self.in_domain0.copy()
        self.at: dict[int, int] = {}

    def fits(self, n: int, row: list[int], extra: list[int]) -> int:
        """Pods of this kind node `n` (free: `row`) holds with `extra` freed there (at most `count`)."""
        if not self.mask[n]:
            return 0
        return max(0, min([self.count] + [(row[c] + extra[c]) // q for c, q in self.need]))

    def grow(self, n: int, row: list[int], extra: list[int]) -> None:
        """Node `n` now frees `extra` in all (every victim popped there)."""
        if not self.mask[n]:
            return
        now = self.fits(n, row, extra)
        self.in_domain[self.dom[n]] += now - self.at.get(n, int(self.at0[n]))
        self.at[n] = now


def order_relevant(state: ClusterState, others: list[JobInfo], queues: list[str]) -> list[JobInfo]:
    """The other pending jobs that can change the order in which jobs of `queues` pop.

    A queue's rank reads only its own allocation and best job, and the others' pops allocate
    nothing. Below the queues' lowest common ancestor, a child subtree holding none of
    `queues` only ever pops its own jobs, never changing another's rank, and nothing outside
    that ancestor competes with anything inside it but as a whole: both are left out (the
    same order for these jobs, far fewer pops). Subtrees holding one of `queues` stay whole:
    their best job is part of their rank."""
    kept = _relevant_queues(state, frozenset(queues))
    return others if kept is None else [j for j in others if j.queue in kept]


def _relevant_queues(state: ClusterState, queues: frozenset[str]) -> frozenset[str] | None:
    """The queues whose jobs order_relevant keeps (None: every job), once per state and set of
    queues: every simulated scenario of a preemptor asks again for the same few queues."""
    memo = state.__dict__.setdefault("_relevant_queues", {})
    if queues in memo:
        return memo[queues]
    paths = state.__dict__.get("_queue_paths")
    if paths is None:          # root-first path of every queue, once per state
        qs = state.queues
        paths = state.__dict__["_queue_paths"] = {
            q: tuple(a.name for a in reversed(ancestors(qs, q))) for q in qs}
    if any(q not in paths for q in queues):
        memo[queues] = None
        return None
    mine = [paths[q] for q in queues]
    depth = 0
    while all(len(p) > depth for p in mine) and len({p[depth] for p in mine}) == 1:
        depth += 1
    if all(len(p) == depth for p in mine):       # one leaf queue
        kept = frozenset([mine[0][-1]])
    else:
        prefix = mine[0][:depth]
        keep = {p[depth] for p in mine}
        kept = frozenset(q for q, p in paths.items() if len(p) > depth and p[depth] in keep and p[:depth] == prefix)
    memo[queues] = kept
    return kept


class JobSolver:
    def __init__(self, state: ClusterState, session: Session, policy: Policy, budget=None):
        self.budget = budget
        self.state = state
        self.session = session
        self.policy = policy
        self.alloc = Allocator(state, session, growing=True)
        self.nodes = state.table.index
        self._where: dict[str, int] = {}          # victim task -> node it occupies when chosen
        self._moved: set[str] = set()             # victims an earlier commit had moved
        self._victims: list[Victim] = []

    def free_now(self) -> np.ndarray:
        """A read-only copy of the session's free capacity, the same one while the session holds
        the same decisions (Session.decisions_derived): the scenario filter of every preemptor
        step starts from it, and a step that fails rolls back to where the next starts (copying
        10,000 rows per step, and the counts below, were a fifth of a 10,000-node eviction
        search). Within the eviction actions the capacity changes only through logged decisions."""
        return self.session.decisions_derived("free capacity", lambda: _read_only(self.session.free.copy()))

    def copies_now(self, vec: np.ndarray) -> np.ndarray:
        """Per node, copies of the request `vec` (asking for something) that free_now() holds."""
        cols = np.flatnonzero(vec > 0)
        return self.session.decisions_derived(
            ("copies", vec.tobytes()), lambda: _read_only((self.free_now()[:, cols] // vec[cols]).min(axis=1)))

    def _note(self, tasks: list[TaskInfo]) -> None:
        """Remember where each victim is now (a moved pod: its pipelined node) before any
        scenario changes it."""
        for t in tasks:
            if t.key in self._where:
                continue
            self._where[t.key], moved = self.location(t)
            if moved:
                self._moved.add(t.key)

    def location(self, t: TaskInfo) -> tuple[int, bool]:
        """A victim's node now, and whether an earlier commit moved it there (pipelined)."""
        s = self.session
        if moved_earlier(t, s):
            return s.placements[t.key].node, True
        return self.nodes[t.node], False

    # -- 6.2.2 --------------------------------------------------------------------------
    def solve(self, preemptor: JobInfo) -> Solution | None:
        """Victims for the preemptor's next gang step; on success the session holds the
        evictions and the pipelined placements (the committed statement)."""
        s = self.session
        tasks = tasks_to_allocate(preemptor, s)
        if not tasks:
            return None
        if self.budget is not None:
            # The first gang step spends one unit per victim job: where the bound cannot pay even
            # the fewest there can be, the attempt stops as it would, before the list is made (a
            # 10,000-node reclaim's first preemptor listed 28,000 victims, 0.25 s, to stop there).
            self.budget.require(self.policy.fewest_victims(preemptor))
        recorded: list[TaskInfo] = []
        self.pending = self._pending_jobs()
        self._victims = self.policy.victim_jobs(preemptor)     # the same for every step (fresh queue each)
        self._where, self._moved = {}, set()
        start = s.checkpoint()
        for k in range(1, len(tasks) + 1):
            cp = s.checkpoint()
            try:
                solution = self._solve_partial(preemptor, tasks[:k], recorded)
            except BaseException:
                s.pipeline_only = False
                s.rollback(start)
                raise
            if solution is None:
                s.rollback(start)
                return None
            if k < len(tasks):
                s.rollback(cp)
            recorded = solution.victims
        for t in solution.victims:       # messages only for what is committed (they read queue state)
            ev = s.evictions[t.key]
            # a pod an earlier commit moved, taken again: its eviction is now this action's
            ev.action, ev.for_job = self.policy.action, preemptor.name
            ev.message = self.policy.message(t, preemptor)
        return solution

    # -- 6.2.3 --------------------------------------------------------------------------
    def _solve_partial(self, preemptor: JobInfo, tasks: list[TaskInfo], recorded: list[TaskInfo]) -> Solution | None:
        """Scenarios in victim order until one works. The recorded victims are part of every
        scenario: evicted once here, not per scenario (same outcome, linear instead of quadratic)."""
        s = self.session
        if self.budget is not None:
            self.budget.spend(len(self._victims))
        vq = VictimQueue(s, self._victims)
        rec = {t.key for t in recorded}
        base = self._feasible_base(tasks)
        gpus = step_gpus(self, tasks, base)
        if out_of_reach(self, gpus, self._victims, recorded):
            return None
        gate = _ScenarioFilter(self, preemptor, tasks, base, gpus)
        self._note(recorded)
        for t in recorded:
            gate.add(t)
        cp0 = s.checkpoint()
        self._evict(recorded, preemptor)
        feasible = base.copy()
        for t in recorded:
            feasible[self._where[t.key]] = True
        if recorded and gate.ok() and gate.fit_again(recorded):
            r = self._simulate(preemptor, tasks, recorded, feasible)
            if r is not None:
                return r
        by_node: dict[int, list[str]] = {}           # node -> potential victim jobs with a task there
        by_job: dict[str, list[TaskInfo]] = {}       # job -> its potential victim tasks
        while vq:
            v = vq.pop()
            if v is None:
                break
            cand = tasks_to_evict(v, s)
            if not cand:
                continue
            if any(t.key in rec for t in cand):
                rest = [t for t in v.tasks if t.key not in rec]
                if rest:
                    vq.push(Victim(v.job, rest))
                continue
            if len(cand) < len(v.tasks):
                vq.push(Victim(v.job, [t for t in v.tasks if t not in cand]))
            vq.took(cand)
            self._note(cand)
            for t in cand:
                gate.add(t)
                jobs = by_node.setdefault(self._where[t.key], [])
                if t.job not in jobs:
                    jobs.append(t.job)
                by_job.setdefault(t.job, []).append(t)
            if not gate.ok():
                continue
            r = self._try(preemptor, tasks, cand, by_node, by_job, recorded, feasible, gate)
            if r is not None:
                return r
        s.rollback(cp0)
        return None

    def _feasible_base(self, tasks: list[TaskInfo]) -> np.ndarray:
        """6.2.1: all nodes for a CPU-only step, else nodes with idle or releasing GPU capacity."""
        s = self.session
        if any(not t.request.needs_gpu for t in tasks):
            return np.ones(len(self.state.nodes), dtype=bool)
        return (s.free[:, 2] > 0) | (s.shared.best > 0)

    # -- 6.2.4 --------------------------------------------------------------------------
    def _try(self, preemptor: JobInfo, tasks: list[TaskInfo], latest: list[TaskInfo], by_node: dict[int, list[str]],
             by_job: dict[str, list[TaskInfo]], recorded: list[TaskInfo], feasible: np.ndarray,
             gate: _ScenarioFilter) -> Solution | None:
        """One scenario per node of the latest victim: evict every potential victim job with a
        pod on that node, then simulate (unless the filter rules it out)."""
        s = self.session
        seen: list[int] = []
        for t in latest:
            if self._where[t.key] not in seen:
                seen.append(self._where[t.key])
        for node in seen:
            batch = [t for j in by_node[node] for t in by_job[j]]
            if not gate.admits(batch, recorded):
                continue
            cp = s.checkpoint()
            self._evict(batch, preemptor)
            f = feasible.copy()
            for t in batch:
                f[self._where[t.key]] = True
            r = self._simulate(preemptor, tasks, recorded + batch, f)
            if r is not None:
                return r
            s.rollback(cp)
        return None

    def _evict(self, tasks: list[TaskInfo], preemptor: JobInfo) -> None:
        for t in tasks:
            s = self.session
            if t.key not in s.evictions:
                s.evict(t, self.policy.action, preemptor.name, "")
            elif t.key in self._moved and t.key in s.placements:
                s.unplace(t)          # a pod moved by an earlier commit: its new placement goes

    def _simulate(self, preemptor: JobInfo, tasks: list[TaskInfo], victims: list[TaskInfo],
                  feasible: np.ndarray) -> Solution | None:
        s = self.session
        cp = s.checkpoint()
        victim_jobs: dict[str, list[TaskInfo]] = {}
        for t in victims:
            victim_jobs.setdefault(t.job, []).append(t)
        # KAI's GetJobsToAllocate: every job with pending pods takes part in the queue order (a
        # queue's best pending job decides where the queue stands), though only the preemptor
        # and the victims are allocated
        others = [j for j in self.pending if j is not preemptor and j.name not in victim_jobs]
        if self.budget is not None:
            # Ordering every pending job is most of a simulation's cost on large clusters.
            self.budget.spend(len(tasks) + len(victims) + len(others) // ORDER_WORK_PER_UNIT)
        others = order_relevant(self.state, others, [preemptor.queue, *(self.state.jobs[j].queue for j in victim_jobs)])
        order = JobQueue(s, [preemptor] + [self.state.jobs[j] for j in victim_jobs if j != preemptor.name] + others,
                         real=False)
        s.pipeline_only = True
        todo = {preemptor.name, *victim_jobs}     # the others only rank queues; done once these are
        try:
            while order and todo:
                job = self._last(todo, preemptor, order)
                if job is not None:
                    todo.clear()
                else:
                    job = order.pop()
                    if job is None:
                        break
                    if job is not preemptor and job.name not in victim_jobs:
                        continue
                    todo.discard(job.name)
                if job is not preemptor:
                    self._replace(job, feasible)
                elif not self.alloc.attempt_tasks(job, tasks, JobOutcome(job.name, 0), feasible, pipeline_only=True,
                                                     explain=False):
                    s.rollback(cp)
                    return None
        finally:
            s.pipeline_only = False
        evicted, moved = [], []
        for t in victims:
            p = s.placements.get(t.key)
            if p is None:
                evicted.append(t)
            elif t.key in self._moved and p.node == self._where[t.key]:
                continue       # an earlier move re-placed where it was pipelined: no victim here
            elif t.key not in self._moved and self.state.nodes[p.node].name == t.node and not (
                    t.request.is_shared_gpu and t.gpu_groups and tuple(p.gpu_groups) != tuple(t.gpu_groups)):
                # Back on its own node (and, for a shared-GPU pod, its own GPUs): no victim. A
                # shared-GPU pod moved to another GPU of its node stays a moved victim (KAI's
                # Statement.Pipeline, isSharedAndMoveToDifferentGPU).
                s.cancel_move(t)
            else:
                moved.append(t)
        solution = Solution(evicted, moved)
        if self._breaks_a_gang(evicted) or self.policy.validate(preemptor, tasks, solution) is not None:
            s.rollback(cp)
            return None
        return solution

    def _last(self, todo: set[str], preemptor: JobInfo, order: JobQueue) -> JobInfo | None:
        """The scenario's last job to allocate, which goes next whatever would be popped before it:
        the others only rank queues, and popping one changes nothing else (those pops were half of
        a 1,000-node consolidation search). None while more are left, or where no leaf queue holds
        it (never popped)."""
        if len(todo) != 1:
            return None
        (name,) = todo
        job = preemptor if name == preemptor.name else self.state.jobs[name]
        return None if order.children.get(job.queue, True) else job

    def _pending_jobs(self) -> list[JobInfo]:
        """Jobs with a pending pod not placed in this cycle, in an existing leaf queue (KAI's
        GetAllPendingJobs, no readiness filter)."""
        s, queues = self.session, self.state.queues
        cands = self.state.__dict__.get("_pending_candidates")
        if cands is None:        # the jobs with pending pods never change within a cycle: once per state
            # (the jobs with waiting pods, listed at state build: most jobs have none)
            cands = self.state.__dict__["_pending_candidates"] = [
                (j, frozenset(t.key for ps in j.podsets.values() for t in ps.pending)) for j in self.state.waiting_jobs
                if j.queue in queues and queues[j.queue].is_leaf and any(ps.pending for ps in j.podsets.values())]

        def unplaced() -> list[JobInfo]:        # (~2,000 at 10,000 nodes, asked by every preemptor)
            placed = s.placements.keys()
            return [j for j, keys in cands if not placed >= keys]      # not every pending pod placed
        return s.decisions_derived("pending jobs", unplaced)

    def _breaks_a_gang(self, evicted: list[TaskInfo]) -> bool:
        """6.8: a gang loses its pods whole, or only pods above its minimum. A scenario whose
        recorded victims (from the previous step) were partly re-placed on their own node could
        otherwise leave a gang with fewer pods than its minimum. A PodSet emptied by this scenario
        breaks the gang too while another PodSet of the job keeps pods (a pod an earlier commit
        moved stays pipelined when only its sibling PodSet's pods are taken)."""
        s = self.session
        gone = {(t.job, t.podset) for t in evicted}
        for name in {t.job for t in evicted}:
            job = self.state.jobs[name]
            emptied = kept = False
            for ps in job.podsets.values():
                alive = sum(1 for t in ps.tasks if t.status in ACTIVE_ALLOCATED and t.node is not None
                            and (t.key not in s.evictions or t.key in s.placements))
                if 0 < alive < ps.min_available:
                    return True
                kept |= alive > 0
                emptied |= alive < ps.min_available and (name, ps.name) in gone
            if emptied and kept:
                return True
        return False

    def _replace(self, job: JobInfo, feasible: np.ndarray) -> None:
        """Try to put a victim job's evicted pods back (pipelined): one allocation attempt of its
        tasks to allocate, evicted pods included (4.4, real=False); failing is fine."""
        tasks = tasks_to_allocate(job, self.session, real=False)
        if tasks:
            self.alloc.attempt_tasks(job, tasks, JobOutcome(job.name, 0), feasible, pipeline_only=True, explain=False)
