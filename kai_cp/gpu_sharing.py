"""Shared GPUs (spec 7.2-7.4): per-device memory needs, the in-cycle per-device ledger, where a
fractional task fits, and KAI's choice of GPU on a node.

A shared GPU is a GPU group: the id of one physical device that fractional pods share, in MiB
of the node's per-GPU memory. Everything here is exact integers (MiB, whole devices); a
fraction's need on a device is floor(portion x M) as KAI computes it. A device opened for
sharing leaves the node's whole-GPU pool once, whatever number of pods later join it.
"""

from __future__ import annotations

from types import MappingProxyType

import uuid
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from kai_cp.jobs import TaskInfo
from kai_cp.resources import PodRequest

GROUP_LABEL = "runai-gpu-group"
RESERVATION_APP = "kai-resource-reservation"
_GROUP_NAMESPACE = uuid.UUID("6f1c7a52-6d0e-4d5b-9a1e-2f7a9c3b8e41")
WHOLE = None          # a candidate entry meaning "open an idle whole GPU as a new group"


def task_memory(request: PodRequest, node_memory: int) -> int:
    """Per-device memory need of a shared-GPU request on a node (MiB): gpu-memory, or portion x M."""
    if request.kind == "GpuMemory":
        return request.gpu_memory
    p = request.gpu_portion
    return (p.numerator * node_memory) // p.denominator


def task_memory_vector(request: PodRequest, node_memory: np.ndarray) -> np.ndarray:
    if request.kind == "GpuMemory":
        return np.full(len(node_memory), request.gpu_memory, dtype=np.int64)
    p = request.gpu_portion
    return (p.numerator * node_memory) // p.denominator


def portion_on_node(request: PodRequest, node_memory: int) -> Fraction:
    """The GPU portion the task receives on this node (a GPU-memory request rounds up to 1/100)."""
    if request.kind == "GpuMemory":
        return Fraction(-(-100 * request.gpu_memory // max(node_memory, 1)), 100)
    return request.gpu_portion


def gpu_fraction(state, placement) -> float | None:
    """The per-device portion a shared-GPU bind carries (BindRequest receivedGPU.portion), else None."""
    r = placement.task.request
    if not r.is_shared_gpu:
        return None
    return float(portion_on_node(r, state.nodes[placement.node].gpu_memory))


def group_labels(groups) -> dict[str, str]:
    """The pod labels KAI's binder writes (7.6): one group as `runai-gpu-group`, several as
    `runai-gpu-group/<g>` each (plus the first as `runai-gpu-group`)."""
    groups = list(groups)
    if not groups:
        return {}
    out = {GROUP_LABEL: groups[0]}
    if len(groups) > 1:
        out.update({f"{GROUP_LABEL}/{g}": g for g in groups})
    return out


def largest_portion(request: PodRequest, state) -> Fraction:
    """The most GPUs a GPU-memory request can count for on any node (its portion on the node with
    the least GPU memory). KAI counts 0 in its per-task queue check (quirk 15) and so can take a
    queue over its limit or non-preemptible quota once the pod counts on its node; kai-cp checks
    the amount the pod will count for."""
    least = state.__dict__.get("_least_gpu_memory")
    if least is None:     # once per state: a scan of every node per GPU-memory pod (50 ms at 10,000 nodes)
        least = state.__dict__["_least_gpu_memory"] = min(
            (n.gpu_memory for n in state.nodes if n.gpu_memory_synced), default=100)
    return portion_on_node(request, least) * max(request.devices, 1)


def new_group_id(node: str, task: TaskInfo, index: int) -> str:
    """KAI draws a random UUID; kai-cp derives one from node, pod and device index, so the same
    snapshot gives the same decisions."""
    return str(uuid.uuid5(_GROUP_NAMESPACE, f"{node}/{task.key}/{index}"))


@dataclass
class Device:
    """One shared GPU during a cycle (MiB): what its pods use, hold, and are releasing."""

    used: int = 0
    allocated: int = 0
    releasing: int = 0
    holders: int = 0          # tasks holding memory here (KAI: the group has an "allocated" entry)

    def fits(self, mem: int, capacity: int) -> bool:
        """fits_on_group (7.2): in use, room counting releasing memory, not entirely releasing."""
        return self.used != 0 and capacity - self.allocated + self.releasing - mem >= 0 \
            and self.allocated != self.releasing

    def fits_idle(self, mem: int, capacity: int) -> bool:
        """fits_idle_on_group (7.2): only on a GPU some task holds; one opened by a pipelined
        task is still being released, so whoever joins it waits too."""
        return self.holders > 0 and capacity - self.allocated - mem >= 0

    def free(self, capacity: int) -> int:
        """Room for a new pod counting releasing memory, or -1 when no pod may join."""
        if self.used == 0 or self.allocated == self.releasing:
            return -1
        return capacity - self.allocated + self.releasing


_NO_DEVICES: "MappingProxyType[str, Device]" = MappingProxyType({})


@dataclass
class SharedLedger:
    """The shared GPUs of every node, changed by the cycle's placements (copy on first write).

    `best[n]` is the largest room of a joinable shared GPU on node n (-1: none), kept in step
    so that "is there a shared GPU this task fits on" is one vector comparison over all nodes.
    """

    capacity: np.ndarray                                  # MiB per device, per node
    base: list[dict[str, Device]]                         # snapshot groups per node
    best: np.ndarray
    synced: np.ndarray                                    # GPU memory label present (gpu-memory requests)
    _nodes: dict[int, dict[str, Device]] = field(default_factory=dict)
    _rooms: tuple[np.ndarray, np.ndarray] | None = None   # rooms(), until the next write

    @classmethod
    def open(cls, nodes) -> "SharedLedger":
        capacity = np.array([n.gpu_memory for n in nodes], dtype=np.int64)
        # nodes without shared GPUs (most) share one empty, read-only mapping: writes go to a
        # node's own copy (_writable)
        base = [_NO_DEVICES if not n.gpu_groups else
                {g: Device(d.used, d.allocated, d.releasing, len(d.tasks)) for g, d in n.gpu_groups.items()}
                for n in nodes]
        best = np.full(len(nodes), -1, dtype=np.int64)
        for i, groups in enumerate(base):
            if groups:
                best[i] = max(d.free(int(capacity[i])) for d in groups.values())
        synced = np.array([n.gpu_memory_synced for n in nodes], dtype=bool)
        return cls(capacity, base, best, synced)

    @classmethod
    def of_state(cls, state) -> "SharedLedger":
        """A fresh ledger of the state's shared GPUs. The devices as the snapshot has them are read
        once per state and shared by its ledgers (never written: each copies a node's devices on
        its first write there); reading them per session was 14 ms at 10,000 nodes with shared
        GPUs, twice a cycle (KAI's allocate, the model's decoding)."""
        cached = state.__dict__.get("_shared_base")
        if cached is None:
            cached = state.__dict__["_shared_base"] = cls.open(state.nodes)
        return cls(cached.capacity, cached.base, cached.best.copy(), cached.synced)

    def fork(self) -> "SharedLedger":
        """An independent ledger with the same devices (Session.fork): the nodes written so far
        copied, the snapshot's shared."""
        return SharedLedger(self.capacity, self.base, self.best.copy(), self.synced,
                            {n: {g: Device(d.used, d.allocated, d.releasing, d.holders) for g, d in devs.items()}
                             for n, devs in self._nodes.items()})

    def groups(self, n: int) -> dict[str, Device]:
        g = self._nodes.get(n)
        return g if g is not None else self.base[n]

    def nodes_with_groups(self) -> list[int]:
        """The nodes that have shared GPUs (or had, this cycle), in node order."""
        return sorted({i for i, g in enumerate(self.base) if g} | set(self._nodes))

    def rooms(self) -> tuple[np.ndarray, np.ndarray]:
        """Every shared GPU's node and room for a new pod (Device.free, -1: none may join), in node
        order: shared_bound reads them for all nodes at once (one node at a time was a third of
        the candidate selection at 10,000 nodes)."""
        if self._rooms is None:
            nodes, rooms = [], []
            for n in self.nodes_with_groups():
                cap = int(self.capacity[n])
                for d in self.groups(n).values():
                    nodes.append(n)
                    rooms.append(d.free(cap))
            self._rooms = (np.array(nodes, dtype=np.int64), np.array(rooms, dtype=np.int64))
        return self._rooms

    def _writable(self, n: int) -> dict[str, Device]:
        self._rooms = None
        g = self._nodes.get(n)
        if g is None:
            g = self._nodes[n] = {k: Device(d.used, d.allocated, d.releasing, d.holders) for k, d in self.base[n].items()}
        return g

    def apply(self, n: int, groups: tuple[str, ...], mem: int, pipelined: bool, sign: int) -> None:
        """Add (sign +1) or remove (-1) one task's memory on its devices (7.3: a pipelined task
        consumes releasing memory, an allocated one holds memory)."""
        devs = self._writable(n)
        for g in groups:
            d = devs.get(g)
            if d is None:
                d = devs[g] = Device()
            d.used += sign * mem
            if pipelined:
                d.releasing -= sign * mem
            else:
                d.allocated += sign * mem
                d.holders += sign
            if d.used == 0 and d.allocated == 0 and d.releasing == 0 and g not in self.base[n]:
                del devs[g]
        cap = int(self.capacity[n])
        self.best[n] = max((d.free(cap) for d in devs.values()), default=-1)

    def release(self, n: int, groups: tuple[str, ...], mem: int, sign: int) -> int:
        """An evicted pod's memory starts (sign +1) or stops (-1) releasing on its devices. Returns
        how many devices became (or stopped being) entirely releasing: each frees a whole GPU
        for pipelined placements (7.3)."""
        devs = self._writable(n)
        whole = 0
        for g in groups:
            d = devs.get(g)
            if d is None:
                continue
            before = d.used > 0 and d.allocated == d.releasing
            d.releasing += sign * mem
            after = d.used > 0 and d.allocated == d.releasing
            whole += int(after) - int(before)
        cap = int(self.capacity[n])
        self.best[n] = max((d.free(cap) for d in devs.values()), default=-1)
        return whole

    def fitting_count(self, n: int, mem: int) -> int:
        cap = int(self.capacity[n])
        return sum(1 for d in self.groups(n).values() if d.fits(mem, cap))


def node_fits(request: PodRequest, ledger: SharedLedger, sub: np.ndarray, whole_free: np.ndarray,
              pods_free: np.ndarray, synced: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Over the nodes `sub`: (the task's GPU part fits (7.2), it fits on an existing shared GPU).

    `whole_free` are the whole GPUs counted as available (idle, or idle + releasing); a new
    shared GPU also needs a pod slot for its reservation pod, so every fractional task needs two
    free pod slots (KAI's quirk, 5.3 predicate 4)."""
    cap = ledger.capacity[sub]
    mem = task_memory_vector(request, cap)
    on_group = ledger.best[sub] >= mem
    devices = max(request.devices, 1)
    if devices == 1:
        gpu_ok = on_group | (whole_free >= 1)
    else:
        counts = np.array([ledger.fitting_count(int(n), int(m)) for n, m in zip(sub.tolist(), mem.tolist())],
                          dtype=np.int64) if len(sub) else np.zeros(0, dtype=np.int64)
        gpu_ok = whole_free + counts >= devices
    ok = gpu_ok & (pods_free >= 2) & (mem <= cap) & (mem > 0)
    if request.kind == "GpuMemory":
        ok &= synced[sub]
    return ok, on_group


def choose_devices(request: PodRequest, ledger: SharedLedger, n: int, idle_whole: int, free_whole: int,
                   spread: bool) -> list[str | None] | None:
    """KAI's candidate GPUs on node n (7.4), best first, cut to the devices the task needs:
    existing shared GPUs it fits on (pack: fullest first; spread: emptiest first, after whole
    GPUs), and whole GPUs (WHOLE). Ties between shared GPUs go by group id (KAI: map order)."""
    cap = int(ledger.capacity[n])
    mem = task_memory(request, cap)
    devs = ledger.groups(n)
    fitting = sorted((g for g, d in devs.items() if d.fits(mem, cap)),
                     key=(lambda g: (devs[g].used, g)) if spread else (lambda g: (-devs[g].used, g)))
    if spread:
        entries = [WHOLE] * max(free_whole, 0) + fitting
    else:
        entries = fitting + [WHOLE] * max(free_whole, 0)
    need = max(request.devices, 1)
    return entries[:need] if len(entries) >= need else None


def releasing_needed(request: PodRequest, ledger: SharedLedger, n: int, chosen: list[str | None],
                     idle_whole: int, base_fits_idle: bool) -> bool:
    """Whether the placement waits on releasing resources (7.4's `releasing` flag)."""
    if not base_fits_idle:
        return True
    cap = int(ledger.capacity[n])
    mem = task_memory(request, cap)
    whole = sum(1 for g in chosen if g is WHOLE)
    if whole > idle_whole:
        return True
    devs = ledger.groups(n)
    return any(g is not WHOLE and not devs[g].fits_idle(mem, cap) for g in chosen)


def shared_bound(request: PodRequest, ledger: SharedLedger, free: np.ndarray) -> np.ndarray:
    """Per node, how many of these pods its shared and whole GPUs could hold at most (`free`:
    the node table's idle + releasing rows)."""
    cap = ledger.capacity
    mem = task_memory_vector(request, cap)
    out = np.zeros(len(cap), dtype=np.int64)
    ok = (mem > 0) & (mem <= cap)
    if request.kind == "GpuMemory":
        ok &= ledger.synced
    devices = max(request.devices, 1)
    per_whole = np.where(ok, cap // np.maximum(mem, 1), 0)
    places = np.maximum(free[:, 2], 0) * per_whole
    dev_node, dev_room = ledger.rooms()
    if len(dev_node):        # pods each shared GPU holds (a device without room adds 0)
        held = np.maximum(dev_room, 0) // np.maximum(mem, 1)[dev_node]
        places += np.bincount(dev_node, weights=held, minlength=len(cap)).astype(np.int64)
    if devices > 1:
        places = np.minimum(places // devices, np.maximum(free[:, 2], 0)
                            + np.bincount(dev_node, minlength=len(cap)))
    out[ok] = places[ok]
    return out
