"""Jobs (PodGroups), their PodSets and tasks (pods), with KAI's task statuses (spec 1.3, 1.4, 1.8, 4.5)."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction

from kai_cp.resources import PodRequest

# Task statuses (spec 1.4).
PENDING, RUNNING, RELEASING, BOUND, BINDING, GATED = "Pending", "Running", "Releasing", "Bound", "Binding", "Gated"
SUCCEEDED, FAILED, UNKNOWN = "Succeeded", "Failed", "Unknown"
ALLOCATED, PIPELINED = "Allocated", "Pipelined"

ALIVE = frozenset({ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING, PENDING, GATED})
ACTIVE_USED = frozenset({ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING, RELEASING})
ACTIVE_ALLOCATED = frozenset({ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING})
QUEUE_ALLOCATED = frozenset({ALLOCATED, BINDING, BOUND, RUNNING})

DEFAULT_PODSET = "default"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def ts_key(ts: datetime | None) -> float:
    epoch = getattr(ts, "epoch", None)      # a parsed time's (models/times.KubeTime)
    if epoch is not None:
        return epoch
    ts = ts or _EPOCH
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    return ts.timestamp()


@dataclass(eq=False, slots=True)   # slots: ~0.5 KB less per pod (issue 9: 140,000 pods in 2 GiB)
class TaskInfo:
    uid: str
    name: str
    namespace: str
    job: str | None
    podset: str | None
    status: str
    node: str | None
    request: PodRequest
    order_key: tuple                      # KAI task order (spec 4.3), smaller first
    predicate_key: tuple                  # hashable: node selector, required affinity, tolerations
    gpu_groups: tuple[str, ...] = ()
    nominated_node: str | None = None
    scheduler_name: str = ""
    utility: bool = False                 # reservation / scaling pods (spec 1.4)
    pod: object = None                    # the models.Pod it came from
    volume_problem: str | None = None     # a pending pod's claims stop it (kai_cp/volumes.py)
    # namespace/name, kept: read ~250,000 times in a 10,000-node cycle (the pool, the model,
    # decoding), and formatting it at each read cost more than the string's ~60 bytes a pod
    key: str = field(init=False)

    def __post_init__(self) -> None:
        self.key = f"{self.namespace}/{self.name}"


@dataclass(eq=False)
class PodSet:
    name: str
    min_available: int
    tasks: list[TaskInfo] = field(default_factory=list)

    def count(self, statuses: frozenset[str]) -> int:
        return sum(1 for t in self.tasks if t.status in statuses)

    def _count_once(self, key: str, statuses: frozenset[str]) -> int:
        """A count of the snapshot's statuses (fixed for the cycle), once (JobInfo.tally sets it)."""
        cached = self.__dict__.get(key)
        if cached is None:
            cached = self.__dict__[key] = self.count(statuses)
        return cached

    @property
    def active_allocated(self) -> int:
        """Active-allocated tasks in the snapshot."""
        return self._count_once("_active", ACTIVE_ALLOCATED)

    @property
    def active_used(self) -> int:
        """Active-used tasks in the snapshot (KAI's staleness counts these)."""
        return self._count_once("_used", ACTIVE_USED)

    def on_nodes(self, known: Container[str]) -> list[TaskInfo]:
        """Active-allocated tasks of the snapshot bound to one of the cycle's nodes (`known`),
        in pod order: what the eviction actions may take."""
        cached = self.__dict__.get("_on_nodes")
        if cached is None:
            cached = self.__dict__["_on_nodes"] = [t for t in self.tasks if t.status in ACTIVE_ALLOCATED
                                                   and t.node in known]
        return cached

    @property
    def pending(self) -> list[TaskInfo]:
        """Pending tasks in KAI's task order (4.3); computed once, statuses are fixed per snapshot."""
        cached = self.__dict__.get("_pending")
        if cached is None:
            cached = sorted((t for t in self.tasks if t.status == PENDING), key=lambda t: t.order_key)
            self.__dict__["_pending"] = cached
        return cached


@dataclass(eq=False)
class JobInfo:
    name: str
    namespace: str
    uid: str
    queue: str
    priority: int
    preemptible: bool
    creation: float
    podsets: dict[str, PodSet]
    problems: list[str] = field(default_factory=list)      # reasons the job can't be scheduled at all
    notes: list[str] = field(default_factory=list)         # warnings about some of its pods
    topology_constraint: object = None
    pod_group: object = None
    scope: object = None                                   # kai_cp.topology.Scope when topology-constrained
    last_start: float | None = None                        # kai.scheduler/last-start-timestamp, epoch seconds (6.7)
    stale_since: float | None = None                       # stale-podgroup-timestamp annotation (spec 6.6), epoch s
    stale_annotated: bool = False                          # the PodGroup carries that annotation (any value)

    @property
    def tasks(self) -> list[TaskInfo]:
        return [t for ps in self.podsets.values() for t in ps.tasks]

    @property
    def order_key(self) -> tuple:
        """Static part of KAI's job order: priority desc, then creation, then name (spec 4.2)."""
        return (-self.priority, self.creation, self.name)

    def order_key_at(self, elastic: int) -> tuple:
        """KAI's job order (4.2) with an elastic state (elastic_state): priority desc, below <
        exactly < above its PodSets' minimums, creation, name (the allocate queue, victim order
        and victim keys)."""
        return (-self.priority, elastic, self.creation, self.name)

    @property
    def waiting(self) -> list[TaskInfo]:
        """Pending and gated tasks of the snapshot, computed once."""
        cached = self.__dict__.get("_waiting")
        if cached is None:
            cached = self.__dict__["_waiting"] = [t for t in self.tasks if t.status in (PENDING, GATED)]
        return cached

    @property
    def succeeded(self) -> bool:
        """A pod of the snapshot succeeded (KAI never calls such a job stale)."""
        cached = self.__dict__.get("_succeeded")
        if cached is None:
            cached = self.__dict__["_succeeded"] = any(t.status == SUCCEEDED for t in self.tasks)
        return cached

    @property
    def stale_in_snapshot(self) -> bool:
        """KAI's IsStale on the snapshot's statuses: no pod succeeded, some pod active-used, and
        some PodSet below its minimum of active-used pods."""
        cached = self.__dict__.get("_stale")
        if cached is None:
            used = [ps.active_used for ps in self.podsets.values()]
            cached = self.__dict__["_stale"] = not self.succeeded and any(used) and any(
                u < ps.min_available for u, ps in zip(used, self.podsets.values()))
        return cached

    def tally(self, known: Container[str]) -> int | None:
        """One pass over the job's pods at state build for what every cycle reads of the
        snapshot's statuses: per PodSet the active counts and the pods on the cycle's nodes
        (`known`), the waiting pods, and staleness. Separate scans of the 100,000 pods of a
        10,000-node cluster were a fifth of its greedy cycle (issue 9); the same values as the
        properties compute alone (tests/test_snapshot_tally.py)."""
        waiting: list[TaskInfo] = []
        succeeded = any_used = below = False
        on_total, on_below, on_above = 0, False, False      # the pods on nodes, as a victim offers them
        elsewhere = False                                   # an active pod on a node outside the cycle's
        for ps in self.podsets.values():
            active = used = 0
            on_nodes: list[TaskInfo] = []
            for t in ps.tasks:
                s = t.status
                if s in ACTIVE_USED:
                    used += 1
                    if s != RELEASING:
                        active += 1
                        if t.node in known:
                            on_nodes.append(t)
                        else:
                            elsewhere = True
                elif s == PENDING or s == GATED:
                    waiting.append(t)
                elif s == SUCCEEDED:
                    succeeded = True
            d = ps.__dict__
            d["_active"], d["_used"], d["_on_nodes"] = active, used, on_nodes
            any_used = any_used or used > 0
            below = below or used < ps.min_available
            n = len(on_nodes)
            on_total += n
            on_below = on_below or n < ps.min_available
            on_above = on_above or n > ps.min_available
        d = self.__dict__
        d["_waiting"], d["_succeeded"], d["_stale"] = waiting, succeeded, not succeeded and any_used and below
        # Returned: the elastic state (0 below, 1 exactly, 2 above its minimums) of the victim its
        # pods on nodes make, for a preemptible job with any; None: no victim (victim_key).
        # A job with an active pod outside the cycle's nodes (bound or binding to another shard's
        # node, or to a node gone from the snapshot) is no victim: its pods here could not go
        # whole, and the pod there would be left below its gang minimum (random objectives found
        # the model evicting such a gang's two pods here and keeping its third, binding elsewhere).
        d["_victim_state"] = state = (elastic_state(on_below, on_above)
                                      if self.preemptible and on_total and not elsewhere else None)
        return state

    @property
    def victim_key(self) -> tuple | None:
        """Job order (4.2) of the victim the snapshot's pods on nodes make (JobInfo.tally), or
        None when they make none; made when asked for (an action takes a few of ~31,000)."""
        state = self.__dict__.get("_victim_state")
        return None if state is None else self.order_key_at(state)

    def has_pending(self) -> bool:
        return any(ps.pending for ps in self.podsets.values())

    def is_ready(self) -> bool:
        """Spec 4.5: every PodSet has enough alive, non-gated pods for its minimum."""
        return all(ps.count(ALIVE) - ps.count(frozenset({GATED})) >= ps.min_available for ps in self.podsets.values())

    @property
    def is_gang(self) -> bool:
        return any(ps.min_available > 1 for ps in self.podsets.values())

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


def is_elastic(job: JobInfo) -> bool:
    """Some PodSet has more pods than its minimum (spec 1.3). (A loop, not any() over a
    generator: asked of every running job by the victim pool, ~30,000 at 10,000 nodes.)"""
    for ps in job.podsets.values():
        if ps.min_available < len(ps.tasks):
            return True
    return False


def protected_since(job: JobInfo) -> float:
    """The instant min-runtime protection counts from (the job's last start), -inf where it never
    protects the job: more pods than its minimum (protected per scenario instead, min_runtime
    elastic_ok) or never started (spec 6.7)."""
    return float("-inf") if job.last_start is None or is_elastic(job) else job.last_start


def elastic_state(below: bool, above: bool) -> int:
    """A job's place in job order among equal priorities (4.2): 0 below some PodSet's minimum,
    2 above one (and below none), 1 exactly at them."""
    return 0 if below else (2 if above else 1)


def queue_gpu_of_accepted(task: TaskInfo, node_gpu_memory: int | None) -> int | Fraction:
    """GPUs a placed task counts for in queue accounting ("accepted resources", spec 3.2.2)."""
    r = task.request
    if r.kind == "GpuMemory":
        mem = node_gpu_memory or 100
        return Fraction(-(-100 * r.gpu_memory // mem), 100) * r.devices
    return r.gpu_quota
