"""GPU fragmentation as FGD measures it (Weng et al., USENIX ATC'23), over all nodes at once.

The fragmentation of a node for a kind of pod is the free GPU capacity that kind could not use
there: everything free when its CPU, memory or node predicates do not fit; otherwise the free
part of every GPU too small for it (a fraction needs that much on one device; a whole-GPU pod
needs untouched GPUs, and when there are fewer than it asks, all free GPU capacity is lost to
it). A node's fragmentation is its expectation over the workload mix, here the kinds of pods the
cluster runs and waits on (the snapshot's own pods, counted in state.workload). Placing a pod
where it raises fragmentation least keeps whole GPUs whole for big pods, pairs fractions that
complete a GPU, and keeps CPU-heavy pods off nodes whose GPUs they would strand.

Units: milli-GPU (free capacity of a device: 0..1000), exact integers in the node arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kai_cp.arrays import groups, row_groups
from kai_cp.gpu_sharing import task_memory

# The most common kinds of pods; the rest of the mix is small. 24 left the pressure on the nodes
# of rarer kinds unseen (FGD gpuspec33, whose pods restricted to GPU models are kinds of their
# own: 87.59 % over ten seeds, 90.07 % with 64); 64 kinds made the model pipeline pods behind
# evictions rather than bind them on kai-differential small-s2-full, which the cycle no longer
# returns when KAI's actions bind more (kai_cp/cycle.py short_of_kai).
MAX_KINDS = 64
FULL = 1000
SCARCITY_WEIGHT = 0.5   # milli-GPU of cost per milli-GPU taken, per unit of extra pressure on a node
CPU_BOUND_AFTER = 4     # cpu_bound judges the pods' CPU per GPU once they hold 1 / this of the GPUs
SHARED_ROWS = 2048      # nodes measured from which equal rows are measured once (FragIndex._expect_at)


@dataclass
class Mix:
    cpu: np.ndarray          # per kind: millicores
    memory: np.ndarray       # bytes
    milli: np.ndarray        # GPU need per device (milli-GPU; 1000 for whole GPUs)
    count: np.ndarray        # devices per pod
    fraction: np.ndarray     # bool: a shared-GPU kind
    weight: np.ndarray       # popularity (sums to 1)
    allowed: np.ndarray      # kinds x nodes: node predicates pass


@dataclass
class Devices:
    free: np.ndarray         # nodes x slots, milli-GPU free per device; -1 where no device
    cpu: np.ndarray          # nodes: idle + releasing millicores
    memory: np.ndarray       # nodes: bytes
    groups: list[list[str | None]]   # per node, per slot: shared group id, or None for a whole GPU


def workload_mix(state) -> Mix | None:
    """The GPU kinds of pods in the snapshot, most common first (CPU-only kinds cannot use a
    GPU wherever they go, so they do not change which placement fragments less)."""
    seen = getattr(state, "workload", None)
    if not seen:
        return None
    kinds = [(k, n) for k, n in seen.items() if k[0].needs_gpu and k[0].kind != "MigInstance"]
    if not kinds:
        return None
    kinds.sort(key=lambda kn: -kn[1])
    kinds = kinds[:MAX_KINDS]
    mem_ref = int(np.median([n.gpu_memory for n in state.nodes])) if state.nodes else 100
    cpu, memory, milli, count, frac, weight, allowed = [], [], [], [], [], [], []
    for (r, pkey), n in kinds:
        cpu.append(r.cpu)
        memory.append(r.memory)
        if r.is_shared_gpu:
            milli.append(max(1, -(-task_memory(r, mem_ref) * FULL // max(mem_ref, 1))))
            count.append(max(r.devices, 1))
            frac.append(True)
        else:
            milli.append(FULL)
            count.append(max(r.gpus, 1))
            frac.append(False)
        weight.append(n)
        allowed.append(state.predicates.mask(pkey))
    w = np.array(weight, dtype=np.float64)
    return Mix(np.array(cpu, dtype=np.int64), np.array(memory, dtype=np.int64), np.array(milli, dtype=np.int64),
               np.array(count, dtype=np.int64), np.array(frac, dtype=bool), w / w.sum(), np.array(allowed, dtype=bool))


def cpu_bound(state) -> bool:
    """Whether the pods ask for more CPU per GPU than the nodes have (CPU-only pods counted):
    then there is no CPU to keep for idle GPUs, and the stranding term only moves pods around
    (it sends CPU-heavy GPU pods to the nodes with CPU to spare, whose spare CPU-only pods then
    miss and take from GPU nodes instead). FGD's cpu250 trace asks 18.1 cores per GPU of nodes
    with 17.2: 93.26 % of GPUs allocated with the term, 94.24 % without (bench/bench_fgd.py,
    seeds 42-51). Judged once the pods hold a quarter of the cluster's GPUs: on fewer, a run of
    large CPU-only pods looks CPU-bound (gpushare100 asks 15.6 cores per GPU, yet up to 17.8
    before 10 % of it has arrived, and lost a point on a seed judged then)."""
    seen = getattr(state, "workload", None)
    if not seen:
        return False
    cpu = gpu = 0.0
    for (r, _), n in seen.items():
        cpu += r.cpu * n
        gpu += float(r.pending_gpus(state.gpu_memory_divisor)) * n
    have_cpu, have_gpu = float(state.total["cpu"]), float(state.total["gpu"])     # the ready nodes' (3.2.1)
    return have_gpu > 0 and gpu * CPU_BOUND_AFTER >= have_gpu and cpu / gpu >= have_cpu / have_gpu


def devices_of(state, free: np.ndarray, ledger) -> Devices:
    """Free capacity per device (shared GPUs by their free memory, idle whole GPUs at 1000).
    Nodes without shared GPUs, most of a cluster, are filled at once."""
    whole = np.maximum(np.asarray(free[:, 2], dtype=np.int64), 0)
    shared: dict[int, tuple[list[int], list[str]]] = {}
    for i in ledger.nodes_with_groups():
        cap = int(ledger.capacity[i])
        used = [(g, d) for g, d in sorted(ledger.groups(i).items()) if d.used > 0]
        if used:
            shared[i] = ([max(0, (cap - d.allocated) * FULL // max(cap, 1)) for _, d in used], [g for g, _ in used])
    width = int(max(int(whole.max(initial=0)),
                    max((len(r) + int(whole[i]) for i, (r, _) in shared.items()), default=0)))
    arr = np.where(np.arange(max(width, 1))[None, :] < whole[:, None], FULL, -1).astype(np.int64)
    groups: list[list[str | None]] = [[None] * w for w in whole.tolist()]
    for i, (row, gs) in shared.items():
        arr[i] = -1
        arr[i, :len(row) + int(whole[i])] = row + [FULL] * int(whole[i])
        groups[i] = gs + groups[i]
    return Devices(arr, free[:, 0].astype(np.int64), free[:, 1].astype(np.int64), groups)


class FragIndex:
    """Fragmentation of every node and how one more pod would change it, in closed form: a pod
    changes one device (a fraction) or takes untouched devices (whole GPUs), so each kind's
    fragment after it follows from a few per-node counts without re-summing the devices."""

    def __init__(self, mix: Mix, devs: Devices, strand: bool = True):
        self.mix, self.devs, self.strand = mix, devs, strand
        self._allowed_t = np.ascontiguousarray(mix.allowed.T)
        self._whole_part: dict[int, tuple] = {}
        self._cpu_sorted, self._memory_sorted = np.sort(mix.cpu), np.sort(mix.memory)
        dev = devs.free
        self.present = dev >= 0
        self.d = np.where(self.present, dev, 0)
        self.total = self.d.sum(axis=1)                                               # n
        # per kind, the free capacity of devices too small for it and the count of those not:
        # summed a slot at a time (a reduction over the short slot axis of an n x m x s array
        # was most of the index's build at 10,000 nodes). A node whose devices are each idle
        # (1000) or used up (0), most nodes, has only its idle GPUs to count: the slots are summed
        # on the others alone.
        self.full = ((self.d == FULL) & self.present).sum(axis=1)                      # n
        self.frag_small = self.full[:, None] * (FULL * (FULL < mix.milli))[None, :]    # n x m
        self.ok_count = self.full[:, None] * (FULL >= mix.milli)[None, :]              # n x m
        mixed = np.flatnonzero((self.present & (self.d > 0) & (self.d < FULL)).any(axis=1))
        if len(mixed):
            frag_small = np.zeros((len(mixed), len(mix.milli)), dtype=np.int64)
            ok_count = np.zeros((len(mixed), len(mix.milli)), dtype=np.int64)
            for s in range(dev.shape[1]):
                d, present = self.d[mixed, s, None], self.present[mixed, s, None]
                small = d < mix.milli[None, :]
                frag_small += np.where(small & present, d, 0)
                ok_count += ~small & present
            self.frag_small[mixed], self.ok_count[mixed] = frag_small, ok_count
        self.partial = self.total - FULL * self.full
        # fragments kept as floats: _expect's product is then one pass
        self.g0 = self._g(self.frag_small, self.ok_count, self.full[:, None], self.partial[:, None],
                          self.total[:, None]).astype(np.float64)
        self.before = self._expect_at(None, self.g0, self.total, 0, 0)
        self._gpu_part: dict = {}
        # CPU per GPU the mix asks for: a node with less CPU than that per free GPU strands GPUs
        gpus = mix.milli * mix.count / FULL
        self.cpu_per_gpu = float((mix.weight * mix.cpu).sum() / max((mix.weight * gpus).sum(), 1e-9)) if strand else 0.0

    # What the index keeps per node: each depends on that node's devices, CPU, memory and
    # predicates alone (sums included: _unfit), so a node's rows are the same in any index.
    ROWS = ("present", "d", "total", "frag_small", "ok_count", "full", "partial", "g0", "before")

    def rows(self, nodes: np.ndarray) -> "FragIndex":
        """The index of some of its nodes (positions here), their rows as they are here: the index
        they would get on their own, with this one's scarcity (a property of the whole cluster)."""
        return FragIndex.stacked([(self, nodes)])

    @staticmethod
    def stacked(parts: list[tuple["FragIndex", np.ndarray]]) -> "FragIndex":
        """One index of the given nodes (positions) of indexes of the same mix, in that order,
        each row as its own index has it (scarcity included)."""
        first = parts[0][0]
        out = FragIndex.__new__(FragIndex)
        m = first.mix
        out.mix = Mix(m.cpu, m.memory, m.milli, m.count, m.fraction, m.weight,
                      np.concatenate([i.mix.allowed[:, n] for i, n in parts], axis=1))
        arrays = (np.concatenate([getattr(i.devs, f)[n] for i, n in parts]) for f in ("free", "cpu", "memory"))
        out.devs = Devices(*arrays, [i.devs.groups[k] for i, n in parts for k in n.tolist()])
        out.strand, out.cpu_per_gpu = first.strand, first.cpu_per_gpu
        out._allowed_t = np.concatenate([i._allowed_t[n] for i, n in parts])
        out._whole_part, out._gpu_part = {}, {}
        out._cpu_sorted, out._memory_sorted = first._cpu_sorted, first._memory_sorted
        for name in FragIndex.ROWS:
            setattr(out, name, np.concatenate([getattr(i, name)[n] for i, n in parts]))
        out.__dict__["_scarcity"] = np.concatenate([i.scarcity()[n] for i, n in parts])
        return out

    def set_rows(self, nodes: np.ndarray, fresh: "FragIndex") -> None:
        """Replace the rows of `nodes` (positions here) by those of `fresh`, an index of those
        nodes in that order measured after pods changed them; what was kept from the old rows
        per request is dropped (scarcity stays this index's)."""
        for name in self.ROWS:
            getattr(self, name)[nodes] = getattr(fresh, name)
        self.devs.free[nodes], self.devs.cpu[nodes], self.devs.memory[nodes] = \
            fresh.devs.free, fresh.devs.cpu, fresh.devs.memory
        for kept in (self._whole_part, self._gpu_part):
            kept.clear()
        self.__dict__.pop("_node_ids", None)

    def _g(self, frag_small, ok_count, full, partial, total):
        """Per kind, the fragment when the pod's CPU and memory fit."""
        m = self.mix
        frac = np.where(ok_count >= m.count, frag_small, total)
        whole = np.where(full >= m.count, partial, total)
        return np.where(m.fraction, frac, whole)

    def _expect(self, g: np.ndarray, base: np.ndarray, total: np.ndarray) -> np.ndarray:
        w = self.mix.weight
        return np.einsum("nm,nm->n", g, base * w) + total * _unfit(base, w)

    def _expect_at(self, rows: np.ndarray | None, g: np.ndarray, total: np.ndarray, cpu: int, memory: int,
                   extra: np.ndarray | None = None) -> np.ndarray:
        """`_expect(g, _base_at(rows, cpu, memory), total)` (rows None: every node), measured once
        per distinct row. A node's figure follows from its devices (`g` and `total`: per row, what
        the pod leaves of them, which depends on the node's devices and `extra` alone), its
        predicates, and which kinds' CPU and memory still fit, i.e. how many kinds ask no more
        than it keeps: most nodes of a large cluster share all of that with others (10,000 nodes:
        ~700 distinct per request; the kinds x nodes products were most of the fragmentation
        rows). Bit for bit the direct measure: each row's sums are its own (_unfit)."""
        where = slice(None) if rows is None else rows
        if len(total) < max(SHARED_ROWS, 1):
            return self._expect(g, self._base_at(where, cpu, memory), total)
        kinds = len(self.mix.cpu) + 1
        key = self._node_id()[where]
        if extra is not None:
            key = key * (int(extra.max()) + 1) + extra
        key = (key * kinds + np.searchsorted(self._cpu_sorted, self.devs.cpu[where] - cpu, side="right")) * kinds \
            + np.searchsorted(self._memory_sorted, self.devs.memory[where] - memory, side="right")
        first, inverse = groups(key)
        at = first if rows is None else rows[first]
        return self._expect(g[first], self._base_at(at, cpu, memory), total[first])[inverse]

    def _node_id(self) -> np.ndarray:
        """Per node, a number shared exactly by the nodes with the same devices and predicates."""
        cached = self.__dict__.get("_node_ids")
        if cached is None:
            allowed = np.packbits(self._allowed_t, axis=1).astype(np.int64)
            cached = self.__dict__["_node_ids"] = row_groups(np.concatenate([self.devs.free, allowed], axis=1))
        return cached

    def stranding(self, taken: np.ndarray | int, cpu: int) -> np.ndarray:
        """Rise in GPUs (milli) a node can no longer use for want of CPU, at the mix's CPU per
        GPU, when a pod takes `taken` milli-GPU and `cpu` millicores there. FGD's measure only
        sees the next pod; this sees the CPU a node's remaining GPUs will need. Zero when the
        index is built with `strand` off (the pods are CPU-bound: cpu_bound)."""
        if self.cpu_per_gpu <= 0:
            return np.zeros(len(self.total))
        before = np.maximum(0.0, self.total - FULL * self.devs.cpu / self.cpu_per_gpu)
        after = np.maximum(0.0, self.total - taken - FULL * (self.devs.cpu - cpu) / self.cpu_per_gpu)
        return after - before

    def scarcity(self) -> np.ndarray:
        """Per node, how much more the mix needs its GPUs than GPUs elsewhere (0 when every kind
        may use every node): kinds restricted to some nodes (a GPU model) press on those nodes'
        free capacity, so a pod that could run anywhere should leave them alone."""
        cached = self.__dict__.get("_scarcity")
        if cached is None:
            m = self.mix
            free = self.total.astype(np.float64)
            total = max(free.sum(), 1.0)
            cap = (m.allowed * free[None, :]).sum(axis=1)                       # per kind
            press = (m.weight[:, None] * m.allowed * (total / np.maximum(cap, 1.0))[:, None]).sum(axis=0)
            cached = self.__dict__["_scarcity"] = SCARCITY_WEIGHT * (press - (m.weight * (cap > 0)).sum())
        return cached

    def whole(self, gpus: int, cpu: int, memory: int) -> np.ndarray:
        """Rise in fragmentation per node for a pod of `gpus` whole GPUs (inf where they do not fit).
        Measured only on the nodes where it is not known beforehand: inf where fewer GPUs are
        whole; for a CPU-only pod, the stranding term alone where no GPU capacity is free (every
        fragment is 0 there). Each node's figure is its own row's arithmetic, the same on a
        subset (the kinds x nodes products were 0.2 s of a 10,000-node cycle)."""
        rows, g, total = self._whole_rows(gpus)
        part = self._expect_at(rows, g, total, cpu, memory) - self.before[rows]
        if gpus <= 0:
            out = self.stranding(0, cpu)
            out[rows] = part + out[rows]
            return out
        out = np.full(len(self.total), np.inf)
        out[rows] = part + self.stranding(FULL * gpus, cpu)[rows] + FULL * gpus * self.scarcity()[rows]
        return out

    def _whole_rows(self, gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(nodes measured, their fragments per kind after the pod, their free GPU capacity after
        it) for a pod of `gpus` whole GPUs: the GPU part depends on the count alone."""
        part = self._whole_part.get(gpus)
        if part is None:
            if gpus <= 0:
                rows = np.flatnonzero(self.total > 0)
                part = (rows, self.g0[rows], self.total[rows])
            else:
                rows = np.flatnonzero(self.full >= gpus)
                total = self.total[rows] - FULL * gpus
                g = self._g(self.frag_small[rows], self.ok_count[rows] - gpus, (self.full[rows] - gpus)[:, None],
                            self.partial[rows][:, None], total[:, None])
                part = (rows, g.astype(np.float64), total)
            self._whole_part[gpus] = part
        return part

    def _base_at(self, rows: np.ndarray | slice, cpu: int, memory: int) -> np.ndarray:
        """Kinds that still fit these nodes' CPU, memory and predicates once a pod took `cpu` and
        `memory` there (not kept: few requests share CPU, memory and the nodes measured)."""
        m = self.mix
        return ((self.devs.cpu[rows, None] >= m.cpu[None, :] + cpu)
                & (self.devs.memory[rows, None] >= m.memory[None, :] + memory) & self._allowed_t[rows])

    def kai_slot(self, need: np.ndarray, spread: bool) -> np.ndarray:
        """Per node, the device KAI's GPU order gives a shared-GPU pod (7.4): the fullest shared
        GPU it fits on (gpupack), or a fresh GPU first (gpuspread); slot 0 where none fits."""
        fits = self.present & (self.d >= need[:, None])
        key = np.where(fits, self.d, np.iinfo(np.int64).max if not spread else -1)
        return key.argmax(axis=1) if spread else key.argmin(axis=1)

    def fraction_at(self, need: np.ndarray, cpu: int, memory: int, slot: np.ndarray, key=None) -> np.ndarray:
        """Rise in fragmentation per node when the pod takes `need[n]` milli-GPU on device
        `slot[n]` (inf where that device cannot take it). The GPU part depends only on `need`
        and the slots, so it is kept per `key` (the request's GPU ask and the device order); CPU
        and memory are applied per pod. Measured only on the nodes whose device takes the pod."""
        cached = self._gpu_part.get(key) if key is not None else None
        if cached is None:
            every = np.arange(len(slot))
            d = self.d[every, slot]
            rows = np.flatnonzero(self.present[every, slot] & (d >= need))
            d, q = d[rows], need[rows]
            dd, mu = d[:, None], self.mix.milli[None, :]
            was_ok = dd >= mu
            now_small = was_ok & (dd - q[:, None] < mu)
            frag_small = self.frag_small[rows] - q[:, None] * (~was_ok) + (dd - q[:, None]) * now_small
            is_full = d == FULL
            total = self.total[rows] - q
            g = self._g(frag_small, self.ok_count[rows] - now_small, (self.full[rows] - is_full)[:, None],
                        (self.partial[rows] + FULL * is_full - q)[:, None], total[:, None]).astype(np.float64)
            cached = (rows, g, total)
            if key is not None:
                self._gpu_part[key] = cached
        rows, g, total = cached
        part = self._expect_at(rows, g, total, cpu, memory, need[rows] * self.d.shape[1] + slot[rows])
        out = np.full(len(self.total), np.inf)
        out[rows] = part - self.before[rows] + (self.stranding(need, cpu)[rows] + need[rows] * self.scarcity()[rows])
        return out


def _unfit(base: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per node, the weight of the kinds that do not fit. Sums here are einsum's, row by row:
    a matrix product's (BLAS) sum for a node depends on its position among the rows, so two
    identical nodes could differ in the last bit and rank apart, and a subset of the nodes
    measured differently from the whole index."""
    return np.einsum("nm,m->n", ~base, weight)


def kai_slot_deltas(idx: "FragIndex", need: np.ndarray, cpu: int, memory: int, spread: bool, key=None) -> np.ndarray:
    """Per node, the rise at the device KAI's GPU order would give the pod (7.4). The model keeps
    KAI's device choice within a node; fragmentation decides between nodes."""
    return idx.fraction_at(need, cpu, memory, idx.kai_slot(need, spread), None if key is None else (key, spread))


def fragmentation(mix: Mix, dev: np.ndarray, cpu: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """Expected fragmentation (milli-GPU) per node, summed device by device from the definition:
    the reference FragIndex's closed form is tested against."""
    out = np.zeros(len(dev))
    for n in range(len(dev)):
        devices = [int(x) for x in dev[n] if x >= 0]
        total = sum(devices)
        for k in range(len(mix.weight)):
            if cpu[n] < mix.cpu[k] or memory[n] < mix.memory[k] or not mix.allowed[k, n]:
                f = total
            elif mix.fraction[k]:
                ok = [x for x in devices if x >= mix.milli[k]]
                f = total - sum(ok) if len(ok) >= mix.count[k] else total
            else:
                full = sum(1 for x in devices if x == FULL)
                f = total - FULL * full if full >= mix.count[k] else total
            out[n] += mix.weight[k] * f
    return out
