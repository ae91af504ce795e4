"""In-cycle mutable state: virtual placements on top of the snapshot (KAI's session + statement).

The greedy engine places tasks one by one and rolls back failed gangs; the CP-SAT decoder
replays the model's answer through the same operations, so both engines produce decisions
the same way and every decision passes the same bookkeeping.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from fractions import Fraction
from typing import Any, Callable, Hashable, Iterator

import numpy as np

from kai_cp.gpu_sharing import SharedLedger, task_memory
from kai_cp.jobs import ALLOCATED, PIPELINED, RELEASING, JobInfo, TaskInfo, queue_gpu_of_accepted
from kai_cp.state import ClusterState


@dataclass
class Placement:
    task: TaskInfo
    node: int
    pipelined: bool
    from_releasing: np.ndarray
    vec: np.ndarray | None = None              # what it takes on the node (a shared GPU it opens counts whole)
    gpu_groups: tuple[str, ...] = ()           # shared GPUs it joins or opens (fractional tasks)
    ledger_pipelined: bool = False             # how the shared-GPU ledger recorded it (undo exactly that)


class _Zeros(dict):
    """Read-only zero vectors by length: what a bound placement takes from releasing capacity."""

    def __missing__(self, n: int) -> np.ndarray:
        z = self[n] = np.zeros(n, dtype=np.int64)
        z.flags.writeable = False
        return z


_NOTHING = _Zeros()


@dataclass
class Eviction:
    """A running pod an eviction action takes away (spec 6.2.5): it releases on its node."""
    task: TaskInfo
    node: int
    action: str                                # consolidation | reclaim | preempt | stalegangeviction
    for_job: str | None                        # the preemptor it makes room for
    message: str                               # KAI's event text (spec 6.1, 6.6, 10.4)
    vec: np.ndarray                            # what it frees on the node (a shared GPU it empties counts whole)
    shared_mem: int = 0                        # its memory on each of its shared GPUs


@dataclass
class _Cancel:
    """Log entry of Session.cancel_move: rolled back, the move is restored."""
    placement: Placement
    eviction: Eviction


@dataclass
class _Unplace:
    """Log entry of Session.unplace: rolled back, the placement is restored."""
    placement: Placement


@dataclass
class _Pipelined:
    """Log entry of Session.convert_to_pipelined: rolled back, these placements bind again (an
    eviction search's simulation pipelines the jobs it places, pods allocate bound included)."""
    placements: list[Placement]


def _exact(vec: dict[str, Fraction]) -> dict[str, int | Fraction]:
    """Whole amounts as ints: every placement adds to these, and int arithmetic is exact and far
    cheaper than Fraction's (only shared GPUs need fractions)."""
    return {r: int(v) if v.denominator == 1 else v for r, v in vec.items()}


@dataclass
class Session:
    state: ClusterState
    idle: np.ndarray
    releasing: np.ndarray
    allocated: dict[str, dict[str, Fraction]]
    allocated_np: dict[str, dict[str, Fraction]]
    placements: dict[str, Placement] = field(default_factory=dict)     # task key -> placement
    added: dict[tuple[str, str], int] = field(default_factory=dict)    # (job, podset) -> tasks placed this cycle
    free: np.ndarray | None = None                                     # idle + releasing, kept in step
    touched: set[int] = field(default_factory=set)                     # nodes placed on since the checkpoint
    shared: SharedLedger | None = None                                 # shared GPUs per node (7.3)
    evictions: dict[str, Eviction] = field(default_factory=dict)       # task key -> eviction
    pipeline_only: bool = False                                        # every placement is a pipeline op
    # The nodes that may have releasing capacity (> 0): on every other node idle >= free, so what
    # fits its free capacity fits its idle (fit checks read idle on these nodes only). Made at
    # open, added to wherever releasing grows, never cleared.
    releasing_nodes: set[int] = field(default_factory=set)
    _releasing_rows: np.ndarray | None = None
    # job -> count of changes to its tasks (placed, unplaced, evicted, un-evicted): what was
    # derived from a job's session state (its tasks to allocate) stays valid while this does
    job_version: dict[str, int] = field(default_factory=dict)
    derived: dict[tuple, tuple[int, Any]] = field(default_factory=dict)  # (what, job) -> (job_version, value)
    # queue -> count of changes to its allocation, and its allocation as floats at that count: the
    # queue order reads every sibling's allocation at each pop (kai_cp/ordering.py)
    alloc_version: dict[str, int] = field(default_factory=dict)
    _alloc_floats: dict[str, tuple[int, list[float]]] = field(default_factory=dict)
    _log: list[Placement | Eviction | _Cancel | _Unplace | _Pipelined] = field(default_factory=list)
    _decided: dict[Hashable, tuple[int, Any]] = field(default_factory=dict)    # what -> (version, value)
    # Per log entry, a number no other entry of this session had (`version`), and the last given
    _serials: list[int] = field(default_factory=list)
    _last_serial: int = 0

    @classmethod
    def open(cls, state: ClusterState) -> "Session":
        t = state.table
        # Column-major: fit checks gather a few resource columns over thousands of nodes (a
        # contiguous column gathers twice as fast), a placement writes one row; ints, so the
        # layout changes no value.
        idle, releasing = t.idle.copy(order="F"), t.releasing.copy(order="F")
        return cls(state=state, idle=idle, releasing=releasing,
                   allocated={q: _exact(v.allocated) for q, v in state.queues.items()},
                   allocated_np={q: _exact(v.allocated_np) for q, v in state.queues.items()}, free=idle + releasing,
                   shared=SharedLedger.of_state(state),
                   releasing_nodes=set(np.flatnonzero((releasing > 0).any(axis=1)).tolist()))

    def fork(self) -> "Session":
        """An independent session holding these decisions, to keep while this one goes on: KAI's
        allocate's decisions are kept so before its eviction actions change the session, the
        CP-SAT model's hint where the actions' moves are no variables of the model (running
        allocate again for it took 0.3-0.6 s of a 1 s cycle at 10,000 nodes). Placements and
        evictions are copied (a later commit changes them in place: convert_to_pipelined, an
        eviction's message), the log with them, so either session rolls back alone; what is
        derived from the decisions starts again."""
        memo: dict[int, Any] = {}

        def copied(x: Any) -> Any:
            c = memo.get(id(x))
            if c is None:
                if isinstance(x, _Cancel):
                    c = _Cancel(copied(x.placement), copied(x.eviction))
                elif isinstance(x, _Unplace):
                    c = _Unplace(copied(x.placement))
                elif isinstance(x, _Pipelined):
                    c = _Pipelined([copied(p) for p in x.placements])
                else:       # a Placement or an Eviction: its arrays are never written in place
                    c = copy.copy(x)
                memo[id(x)] = c
            return c
        kept = {f.name: getattr(self, f.name) for f in fields(self)}
        kept.update(
            idle=self.idle.copy(order="K"), releasing=self.releasing.copy(order="K"), free=self.free.copy(order="K"),
            allocated={q: dict(v) for q, v in self.allocated.items()},
            allocated_np={q: dict(v) for q, v in self.allocated_np.items()},
            placements={k: copied(p) for k, p in self.placements.items()},
            evictions={k: copied(e) for k, e in self.evictions.items()},
            added=dict(self.added), touched=set(self.touched), shared=self.shared.fork() if self.shared is not None else None,
            releasing_nodes=set(self.releasing_nodes), _releasing_rows=None, job_version=dict(self.job_version),
            derived={}, alloc_version=dict(self.alloc_version), _alloc_floats={}, _log=[copied(x) for x in self._log],
            _decided={}, _serials=list(self._serials))
        return Session(**kept)

    def take(self, node: int, from_idle: np.ndarray | None, from_releasing: np.ndarray) -> None:
        """Take capacity off a node: these amounts of its idle (None: none) and releasing resources."""
        if from_idle is None:
            self.free[node] -= from_releasing
        else:
            self.idle[node] -= from_idle
            self.free[node] -= from_idle + from_releasing
        self.releasing[node] -= from_releasing

    def give_back(self, node: int, to_idle: np.ndarray | None, to_releasing: np.ndarray) -> None:
        """Add capacity to a node (what `take` or a placement took, or what an eviction frees: no
        idle), noting the nodes whose releasing capacity grows (`releasing_nodes`)."""
        if to_idle is None:
            self.free[node] += to_releasing
        else:
            self.idle[node] += to_idle
            self.free[node] += to_idle + to_releasing
        self.releasing[node] += to_releasing
        if node not in self.releasing_nodes and to_releasing.any():
            self.releasing_nodes.add(node)
            self._releasing_rows = None

    def releasing_rows(self) -> np.ndarray:
        """`releasing_nodes`, ascending."""
        if self._releasing_rows is None:
            self._releasing_rows = np.array(sorted(self.releasing_nodes), dtype=np.int64)
        return self._releasing_rows

    # -- queries -------------------------------------------------------------------------
    def status(self, task: TaskInfo) -> str:
        p = self.placements.get(task.key)
        if p is None:
            return RELEASING if task.key in self.evictions else task.status
        return PIPELINED if p.pipelined else ALLOCATED

    def job_derived(self, what: tuple, job: str, compute: Callable[[], Any]) -> Any:
        """A value derived from one job's session state, computed again only once the job's tasks
        changed (job_version): the eviction search orders every pending job in each simulation."""
        version = self.job_version.get(job, 0)
        key = (what, job)
        hit = self.derived.get(key)
        if hit is None or hit[0] != version:
            hit = self.derived[key] = (version, compute())
        return hit[1]

    @property
    def version(self) -> int:
        """Changes with every decision made or undone, and is never the same for other decisions;
        a rollback to a checkpoint restores that checkpoint's version with its decisions. (It was
        the log's length, which a rollback followed by as many other decisions gave again.)"""
        return self._serials[-1] if self._serials else 0

    def _logged(self, entry: "Placement | Eviction | _Cancel | _Unplace | _Pipelined") -> None:
        self._log.append(entry)
        self._last_serial += 1
        self._serials.append(self._last_serial)

    def decisions_derived(self, what: Hashable, compute: Callable[[], Any]) -> Any:
        """A value derived from the session's decisions, computed again only once they changed
        (`version`): the eviction actions ask for the same victims and pending jobs at every
        preemptor, and a preemptor that found nothing rolls back."""
        hit = self._decided.get(what)
        version = self.version
        if hit is None or hit[0] != version:
            hit = self._decided[what] = (version, compute())
        return hit[1]

    def allocated_floats(self, queue: str) -> tuple[int, list[float]]:
        """The queue's allocation (cpu, memory, gpu) as floats, with its change count."""
        version = self.alloc_version.get(queue, 0)
        hit = self._alloc_floats.get(queue)
        if hit is None or hit[0] != version:
            a = self.allocated[queue]
            hit = self._alloc_floats[queue] = (version, [float(a["cpu"]), float(a["memory"]), float(a["gpu"])])
        return hit

    def active_allocated(self, job: JobInfo, podset: str) -> int:
        return job.podsets[podset].active_allocated + self.added.get((job.name, podset), 0)

    def queue_vector(self, task: TaskInfo, node: int | None) -> dict[str, Fraction]:
        mem = self.state.nodes[node].gpu_memory if node is not None else None
        return {"cpu": Fraction(task.request.cpu), "memory": Fraction(task.request.memory),
                "gpu": queue_gpu_of_accepted(task, mem)}

    # -- operations ----------------------------------------------------------------------
    def place(self, task: TaskInfo, node: int, pipelined: bool, gpu_groups: tuple[str, ...] = (),
              new_groups: int = 0) -> None:
        vec = self.state.table.vector(task)
        if new_groups:
            vec = vec.copy()
            vec[2] += new_groups          # each newly opened shared GPU leaves the whole-GPU pool once
        if self.pipeline_only:
            # KAI's pipeline operation (1.5): Releasing -= res, Idle untouched, even when the
            # task would fit on idle (an eviction scenario's simulation, 6.2.4).
            pipelined, from_rel = True, vec
        elif pipelined:
            # A pipelined task consumes releasing capacity first, then idle, so that a later
            # bind never counts on capacity a pipelined task was promised.
            from_rel = np.minimum(vec, np.maximum(self.releasing[node], 0))
        else:
            from_rel = None
        if from_rel is None:        # bound: idle only (most placements; two array updates fewer)
            from_rel = _NOTHING[len(vec)]
            self.idle[node] -= vec
        else:
            self.releasing[node] -= from_rel
            self.idle[node] -= vec - from_rel
        self.free[node] -= vec
        self.touched.add(node)
        p = Placement(task, node, pipelined, from_rel, vec, tuple(gpu_groups), pipelined)
        if gpu_groups:
            self.shared.apply(node, p.gpu_groups, task_memory(task.request, self.state.nodes[node].gpu_memory),
                              pipelined, +1)
        self._logged(p)
        self._enter(p)

    def _enter(self, p: Placement) -> None:
        self.placements[p.task.key] = p
        k = (p.task.job, p.task.podset)
        self.added[k] = self.added.get(k, 0) + 1
        self._account(p.task, p.node, +1)

    def _account(self, task: TaskInfo, node: int, sign: int) -> None:
        self.job_version[task.job] = self.job_version.get(task.job, 0) + 1
        job = self.state.jobs[task.job]
        r = task.request
        mem = self.state.nodes[node].gpu_memory
        gpu = queue_gpu_of_accepted(task, mem)
        if sign < 0:           # (negation, not a product: a Fraction product takes a gcd)
            cpu, mem, gpu = -r.cpu, -r.memory, -gpu
        else:
            cpu, mem = r.cpu, r.memory
        versions = self.alloc_version
        for q in self.state.queue_path(job.queue):
            versions[q.name] = versions.get(q.name, 0) + 1
            a = self.allocated[q.name]
            a["cpu"] += cpu
            a["memory"] += mem
            a["gpu"] += gpu
            if not job.preemptible:
                a = self.allocated_np[q.name]
                a["cpu"] += cpu
                a["memory"] += mem
                a["gpu"] += gpu

    def evict(self, task: TaskInfo, action: str, for_job: str | None, message: str) -> Eviction:
        """Evict a running pod of the snapshot: its resources become releasing on its node, its
        queue loses them, its PodSet one active pod (KAI's statement Evict)."""
        node = self.state.table.index[task.node]
        vec = self.state.table.vector(task).copy()
        mem = 0
        if task.request.is_shared_gpu and task.gpu_groups:
            mem = task_memory(task.request, self.state.nodes[node].gpu_memory)
            vec[2] += self.shared.release(node, task.gpu_groups, mem, +1)
        ev = Eviction(task, node, action, for_job, message, vec, mem)
        self._logged(ev)
        self._reevict(ev, shared=False)
        return ev

    def _reevict(self, ev: Eviction, shared: bool = True) -> None:
        if shared and ev.shared_mem:
            self.shared.release(ev.node, ev.task.gpu_groups, ev.shared_mem, +1)
        self.give_back(ev.node, None, ev.vec)
        self.touched.add(ev.node)
        self.evictions[ev.task.key] = ev
        k = (ev.task.job, ev.task.podset)
        self.added[k] = self.added.get(k, 0) - 1
        self._account(ev.task, ev.node, -1)

    def _unevict(self, ev: Eviction) -> None:
        if ev.shared_mem:
            self.shared.release(ev.node, ev.task.gpu_groups, ev.shared_mem, -1)
        self.take(ev.node, None, ev.vec)
        del self.evictions[ev.task.key]
        self.added[(ev.task.job, ev.task.podset)] += 1
        self._account(ev.task, ev.node, +1)

    def cancel_move(self, task: TaskInfo) -> None:
        """A victim the simulation re-placed on its own node is no victim (6.2.4): undo both its
        eviction and its placement, which together left the node as it was."""
        c = _Cancel(self.placements[task.key], self.evictions[task.key])
        self._logged(c)
        self._unplace(c.placement)
        self._unevict(c.eviction)

    def unplace(self, task: TaskInfo) -> None:
        """Take back one placement of this cycle, logged so that a rollback restores it: a pod
        moved earlier (evicted, pipelined elsewhere) taken as a victim again keeps its eviction
        (KAI evicting a Pipelined task); stale-gang eviction withdraws a placement."""
        p = self.placements[task.key]
        self._logged(_Unplace(p))
        self._unplace(p)

    def _replace_placement(self, p: Placement) -> None:
        self.take(p.node, p.vec - p.from_releasing, p.from_releasing)
        if p.gpu_groups:
            self.shared.apply(p.node, p.gpu_groups, task_memory(p.task.request, self.state.nodes[p.node].gpu_memory),
                              p.ledger_pipelined, +1)
        self._enter(p)

    def _unplace(self, p: Placement) -> None:
        if p.gpu_groups:
            self.shared.apply(p.node, p.gpu_groups, task_memory(p.task.request, self.state.nodes[p.node].gpu_memory),
                              p.ledger_pipelined, -1)
        self.give_back(p.node, p.vec - p.from_releasing, p.from_releasing)
        del self.placements[p.task.key]
        self.added[(p.task.job, p.task.podset)] -= 1
        self._account(p.task, p.node, -1)

    def pod_changes(self) -> Iterator[tuple[str, TaskInfo, int | None]]:
        """The decisions in the order they stand, as what each did to a pod: ("placed", task,
        node); ("gone", task, None) when it stops being active where it was (evicted, or a
        placement taken back); ("back", task, its own node) when a move is cancelled. Converting a
        job to pipelined changes no pod's place. For checks that hold at each decision
        (kai_cp/validate.py's topology rule)."""
        index = self.state.table.index
        for e in self._log:
            if isinstance(e, Placement):
                yield "placed", e.task, e.node
            elif isinstance(e, Eviction):
                yield "gone", e.task, None
            elif isinstance(e, _Unplace):
                yield "gone", e.placement.task, None
            elif isinstance(e, _Cancel):
                yield "back", e.placement.task, index[e.placement.task.node]

    def checkpoint(self) -> int:
        self.touched = set()
        return len(self._log)

    def rollback(self, cp: int) -> None:
        while len(self._log) > cp:
            p = self._log.pop()
            self._serials.pop()
            if isinstance(p, Eviction):
                self._unevict(p)
            elif isinstance(p, _Cancel):
                self._reevict(p.eviction)
                self._replace_placement(p.placement)
            elif isinstance(p, _Unplace):
                self._replace_placement(p.placement)
            elif isinstance(p, _Pipelined):
                for placement in p.placements:
                    placement.pipelined = False
            else:
                self._unplace(p)

    def convert_to_pipelined(self, job: JobInfo, keep_nominated: bool = False) -> None:
        """KAI's ConvertAllAllocatedToPipelined: the whole job waits for releasing resources (5.6).
        `keep_nominated`: nominated pods allocate bound stay bound (an eviction action growing the
        job; they alone hold its minimum, kai_cp/actions/allocate.py nominated_tasks)."""
        flipped = []
        for t in job.tasks:
            p = self.placements.get(t.key)
            if p is not None and not p.pipelined and not (keep_nominated and t.nominated_node is not None):
                p.pipelined = True
                flipped.append(p)
        if flipped:
            self._logged(_Pipelined(flipped))
