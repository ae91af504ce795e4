"""What placing a pod of each class does to the cluster's GPU fragmentation, per node
(kai_cp/fragmentation.py measures it): the objective's coefficients (model/fragmentation.py) and
the candidates' ranking (model/candidates.py) read these rows.

A cycle places many pods at once, and measuring every one against the cycle start sends them all
to the same few least-fragmenting nodes (on the FGD benchmark, 100 pods per cycle: a shared GPU
opened by one pod is what the next should join, and CPU one pod takes strands another's GPUs).
So the classes are walked in KAI's order and each pod is placed where it raises fragmentation
least, on a copy of the cycle-start devices, CPU and memory; each class's row is measured after
the classes before it. The walk's placements are also offered as the model's hint
(model/walk_hint.py). Measured on the FGD benchmark (bench/bench_fgd.py, seed 42, batches of
100): gpuspec33 83.36 -> 88.77 % allocated, gpushare100 83.95 -> 86.98 %, default 95.12 ->
95.64 %; cpu250 92.65 -> 92.01 %. Walking only the shared-GPU pods (whole-GPU and CPU-only ones
on greedy's nodes) gave gpushare100 82.80 %: their CPU is what strands GPUs there.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from kai_cp.fragmentation import FULL, Devices, FragIndex, Mix, cpu_bound, devices_of, kai_slot_deltas, workload_mix
from kai_cp.gpu_sharing import SharedLedger, task_memory_vector
from kai_cp.gpu_sharing_place import device_spread
from kai_cp.model.base import greedy_placements
from kai_cp.pod_affinity import carries_anti_affinity


def frag_index(state, free: np.ndarray) -> FragIndex | None:
    """The cycle-start index, built once per state."""
    key = "_frag_index"
    if key in state.__dict__:
        return state.__dict__[key]
    mix = workload_mix(state)
    idx = None
    if mix is not None:
        idx = FragIndex(mix, devices_of(state, free, SharedLedger.of_state(state)), strand=not cpu_bound(state))
    state.__dict__[key] = idx
    return idx


def _caps(state) -> np.ndarray:
    cached = state.__dict__.get("_frag_caps")
    if cached is None:
        cached = state.__dict__["_frag_caps"] = np.array([n.gpu_memory for n in state.nodes], dtype=np.int64)
    return cached


def _need(cap: np.ndarray, request) -> np.ndarray:
    """Milli-GPU a shared-GPU pod takes on one device of each node (memory over device memory)."""
    mem = task_memory_vector(request, cap)
    return -(-mem * FULL // np.maximum(cap, 1))


def _deltas(idx: FragIndex, cap: np.ndarray, request, spread: bool, key=None) -> np.ndarray:
    if request.is_shared_gpu:
        need = _need(cap, request)
        return kai_slot_deltas(idx, need, request.cpu, request.memory, spread, key)
    return idx.whole(int(request.gpus), request.cpu, request.memory)


def _key(request) -> tuple:
    return (request.kind, request.gpu_portion, request.gpu_memory)


def class_deltas(state, free: np.ndarray, request) -> np.ndarray | None:
    """Rise in fragmentation per node (best device for a shared-GPU pod), or None without a mix.
    Computed once per distinct request per cycle (candidates and this concern both ask; classes
    of many jobs share requests)."""
    idx = frag_index(state, free)
    if idx is None:
        return None
    memo = state.__dict__.setdefault("_frag_deltas", {})
    out = memo.get(request)
    if out is None:
        out = memo[request] = _deltas(idx, _caps(state), request, device_spread(state), _key(request))
    return out


WALK_PODS = 2_000       # pods the walk places one by one; classes after it are measured at the cycle start
WALK_NODES = 256        # nodes the walk may change (each class re-measures them in a small index)


class _Walk:
    """Pods of the cycle placed one after another, each where it raises fragmentation least, on a
    copy of the cycle-start devices: later classes are measured against what earlier ones took.
    Only the nodes touched so far differ from the cycle-start index, so they are re-measured in a
    small index of their own."""

    def __init__(self, state, free: np.ndarray, idx: FragIndex) -> None:
        self.state, self.free, self.idx = state, free, idx
        self.cap = _caps(state)
        self.spread = device_spread(state)
        d = idx.devs
        self.dev, self.cpu, self.mem = d.free.copy(), d.cpu.copy(), d.memory.copy()
        # idle CPU, memory and whole GPUs: the walk chooses only nodes a pod fits without waiting
        # on releasing resources (a pipelined pod is no placement to steer the others by)
        self.idle = np.asarray(state.table.idle)[:, :3].astype(np.int64).copy()
        self.gid = [list(g) for g in d.groups]         # per node and slot: shared group id, None when whole
        self.shared0 = np.zeros(d.free.shape, dtype=bool)
        for i, gs in enumerate(d.groups):
            if gs and gs[0] is not None:        # (devices_of lists a node's shared GPUs first)
                self.shared0[i, :len(gs)] = [g is not None for g in gs]
        self.dirty: list[int] = []
        self.pods = 0
        self._mini: FragIndex | None = None
        # the nodes the walk changed, measured as it left them (positions: `_at`); `_changed`:
        # nodes changed since their rows were last measured
        self._now: FragIndex | None = None
        self._at: dict[int, int] = {}
        self._changed: list[int] = []

    @property
    def open(self) -> bool:
        return self.pods < WALK_PODS and len(self.dirty) < WALK_NODES

    def _index(self, nodes: list[int]) -> FragIndex:
        """The index of `nodes` (nodes the walk changed) as the walk left them. Only the nodes
        changed since the last call are measured again (a class changes a few; the walk's nodes
        were all measured again for every class)."""
        if self._changed:
            d = sorted(set(self._changed))
            self._changed = []
            m = self.idx.mix
            mix = Mix(m.cpu, m.memory, m.milli, m.count, m.fraction, m.weight, m.allowed[:, d])
            fresh = FragIndex(mix, Devices(self.dev[d], self.cpu[d], self.mem[d], [[None]] * len(d)),
                              strand=self.idx.strand)
            fresh.__dict__["_scarcity"] = self.idx.scarcity()[d]      # the cycle start's, of the whole cluster
            known = [k for k, n in enumerate(d) if n in self._at]
            if known:
                self._now.set_rows(np.array([self._at[d[k]] for k in known]), fresh.rows(np.array(known)))
            new = [k for k, n in enumerate(d) if n not in self._at]
            if new:
                more = (fresh, np.array(new))
                self._now = FragIndex.stacked([more] if self._now is None else
                                              [(self._now, np.arange(len(self._at))), more])
                for k in new:
                    self._at[d[k]] = len(self._at)
        return self._now.rows(np.array([self._at[n] for n in nodes], dtype=np.int64))

    def row(self, request) -> np.ndarray:
        base = class_deltas(self.state, self.free, request)
        if not self.dirty:
            return base
        if self._mini is None:
            self._mini = self._index(self.dirty)
        out = base.copy()
        d = np.array(self.dirty, dtype=np.int64)
        now = _deltas(self._mini, self.cap[self.dirty], request, self.spread)
        # where earlier classes filled a node in the walk, its cycle-start rise stands (the model
        # may still put this class there instead of them)
        out[d] = np.where(np.isfinite(now), now, base[d])
        return out

    def _devices(self, i: int, request, need: int) -> list[int] | None:
        """The devices KAI's GPU order gives the pod on node i (None: it does not fit); `need`:
        milli-GPU per device of a shared-GPU pod."""
        dev = self.dev[i]
        if request.is_shared_gpu:
            ok = np.nonzero(dev >= need)[0]
            k = max(request.devices, 1)
            if len(ok) < k:
                return None
            return ok[np.argsort(-dev[ok] if self.spread else dev[ok], kind="stable")][:k].tolist()
        whole = np.nonzero(dev == FULL)[0]
        if len(whole) < request.gpus:
            return None
        return whole[:int(request.gpus)].tolist()

    def take(self, i: int, request, groups: tuple[str, ...] | None = None) -> tuple[str, ...] | None:
        """Place one pod on node i: on `groups` (greedy's devices) or on KAI's choice of devices.
        Returns the shared groups it joined or opened (new ones named by the walk)."""
        need = int(_need(self.cap[i:i + 1], request)[0]) if request.is_shared_gpu else FULL
        if groups is not None and request.is_shared_gpu:
            slots = []
            for g in groups:
                s = next((k for k, x in enumerate(self.gid[i]) if x == g), None)
                if s is None:
                    s = next((k for k, x in enumerate(self.gid[i]) if x is None and self.dev[i, k] == FULL), None)
                if s is None:
                    return None
                slots.append(s)
        else:
            slots = self._devices(i, request, need)
            if slots is None:
                return None
        out = []
        for s in slots:
            if request.is_shared_gpu:
                if self.gid[i][s] is None:
                    self.gid[i][s] = groups[len(out)] if groups is not None else f"walk:{i}:{s}"
                    self.idle[i, 2] -= 1
                self.dev[i, s] -= need
                out.append(self.gid[i][s])
            else:
                self.dev[i, s] = -1
                self.idle[i, 2] -= 1
        self.cpu[i] -= request.cpu
        self.mem[i] -= request.memory
        self.idle[i, 0] -= request.cpu
        self.idle[i, 1] -= request.memory
        if i not in self.dirty:
            self.dirty.append(i)
        self._changed.append(i)
        self._mini = None
        self.pods += 1
        return tuple(out)

    def place(self, request, row: np.ndarray, mask: np.ndarray, count: int) -> list[tuple[int, tuple]]:
        """Up to `count` pods, each on the node where it raises fragmentation least (a node with a
        cycle-start shared GPU it fits on first, as gpu_sharing.SHARING_ORDER ranks them)."""
        first = np.zeros(len(row))
        if request.is_shared_gpu and not self.spread and self.state.config.gpu_placement != "spread":
            first = -SHARING_BONUS * self._joinable(request)
        row = np.where(mask & np.isfinite(row) & self._fits(request), row + first, np.inf)
        out: list[tuple[int, tuple]] = []
        while len(out) < count and len(row):
            i = int(np.argmin(row))
            if not np.isfinite(row[i]):
                break
            groups = self.take(i, request)
            if groups is None:
                row[i] = np.inf
                continue
            out.append((i, groups))
            row[i] = self.row_at(i, request) + first[i] if self._fits(request, i) else np.inf
        return out

    def _fits(self, request, i: int | slice = slice(None)):
        idle = self.idle[i]
        return (self.cpu[i] >= request.cpu) & (self.mem[i] >= request.memory) & (idle[..., 0] >= request.cpu) \
            & (idle[..., 1] >= request.memory) & (idle[..., 2] >= (0 if request.is_shared_gpu else request.gpus))

    def row_at(self, i: int, request) -> float:
        return float(_deltas(self._index([i]), self.cap[i:i + 1], request, self.spread)[0])

    def _joinable(self, request) -> np.ndarray:
        """Nodes with a cycle-start shared GPU the pod fits on (the model's SHARING_ORDER)."""
        return (self.shared0 & (self.idx.devs.free >= _need(self.cap, request)[:, None])).any(axis=1)


SHARING_BONUS = 1e9     # the walk ranks joinable nodes first, as gpu_sharing.SHARING_ORDER does


def class_rows(state, free: np.ndarray, classes, greedy, check: Callable[[], None] | None = None
               ) -> dict[int, np.ndarray] | None:
    """Per pod class (in KAI's order), the rise in fragmentation per node once the classes before
    it took their least-fragmenting nodes: one cycle places many pods, and measuring each against
    the cycle start alone sends them all to the same few nodes. Classes whose nodes depend on more
    than their own fit (topology scopes, anti-affinity among this cycle's pods) take greedy's
    nodes in the walk. The walk's own choices are kept (state cache) for `walk_hint`. `check` is
    called per class: it raises when the cycle's time is up (a second at 10,000 nodes)."""
    cached = state.__dict__.get("_frag_rows")
    if cached is not None and cached[0] is classes:
        return cached[1]
    idx = frag_index(state, free)
    if idx is None:
        return None
    # While resources are releasing the model weighs binding now against waiting for them
    # (pipelining) with terms the walk does not see, and rows measured after the walk's choices
    # tipped that towards waiting (kai-differential small-s1-full: 148.75 -> 141.75 GPUs bound,
    # 3 -> 8 pods pipelined). Such cycles are measured at the cycle start.
    releasing = bool((np.asarray(free) != np.asarray(state.table.idle)).any())
    walk = None if releasing else _Walk(state, free, idx)
    free_choice = not any(carries_anti_affinity(c.tasks[0]) for c in classes)
    greedy_of = greedy_placements(greedy, classes)
    rows: dict[int, np.ndarray] = {}
    placed: dict[int, list] = {}
    for c in classes:
        if check is not None:
            check()
        req = c.tasks[0].request
        if walk is None or not walk.open:
            rows[c.index] = class_deltas(state, free, req)
            continue
        row = rows[c.index] = walk.row(req)
        if free_choice and c.job.scope is None:
            placed[c.index] = walk.place(req, row.copy(), state.predicates.mask(c.tasks[0].predicate_key), c.size)
        else:
            for node, groups in greedy_of.get(c.index, ()):
                walk.take(node, req, groups)
    state.__dict__["_frag_rows"] = (classes, rows, placed)
    return rows


def walked(state) -> dict[int, list[tuple[int, tuple[str, ...]]]]:
    """The last walk's placements of the classes it chose nodes for: class -> (node, shared
    groups) per pod."""
    cached = state.__dict__.get("_frag_rows")
    return cached[2] if cached is not None else {}
