"""Pod resource requests and node capacities in KAI's exact scheduler units.

CPU in millicores, memory in bytes, whole GPUs as integers, GPU amounts for queue accounting as
exact fractions, extended resources in milli-units (spec 1.4, 1.10). No floats.
"""

from __future__ import annotations

import re
from functools import cached_property, lru_cache
from dataclasses import dataclass, field, fields
from fractions import Fraction
from typing import Iterable, Mapping

from models.quantity import cpu_millis, to_int_ceil

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
MIG_PREFIX = "nvidia.com/mig-"
_MIG_RE = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb$")
FRACTION_ANNOTATION = "gpu-fraction"
GPU_MEMORY_ANNOTATION = "gpu-memory"
NUM_DEVICES_ANNOTATION = "gpu-fraction-num-devices"
CONTAINER_ANNOTATION = "gpu-fraction-container-name"
MPS_ANNOTATION = "mps"
_STORAGE = ("ephemeral-storage", "storage")
_IGNORED = {"cpu", "memory", "pods", *GPU_RESOURCES}
BEST_EFFORT_CPU = 10                      # millicores
BEST_EFFORT_MEMORY = 10 * 1024 * 1024     # bytes
BEST_EFFORT_SCALAR = 10                   # milli-units
BEST_EFFORT_GPUS = Fraction(1, 100)
DEFAULT_GPU_MEMORY_DIVISOR = 100         # MiB: KAI's DefaultGpuMemory, a GPU node without its memory label


def mig_gpus(name: str) -> int:
    """GPUs a MIG profile counts for in quota math: the `<g>` of `nvidia.com/mig-<g>g.<m>gb`."""
    m = _MIG_RE.match(name)
    return int(m.group(1)) if m else 0


@dataclass(frozen=True)
class PodRequest:
    """What one pod asks for (KAI's ResReq)."""

    cpu: int = 0                                      # millicores
    memory: int = 0                                   # bytes
    gpus: int = 0                                     # whole devices (Regular requests)
    scalars: tuple[tuple[str, int], ...] = ()         # extended resources, milli-units / bytes
    kind: str = "Regular"                             # Regular | Fraction | GpuMemory | MigInstance
    gpu_portion: Fraction = Fraction(0)               # per device, Fraction requests
    gpu_memory: int = 0                               # MiB per device, GpuMemory requests
    devices: int = 0                                  # devices for Fraction/GpuMemory requests
    problems: tuple[str, ...] = field(default=(), compare=False)

    def __hash__(self) -> int:
        """The hash dataclass would give (the compared fields as a tuple), kept: requests key the
        pool's, the classes' and the fragmentation rows' dicts, ~100,000 lookups a cycle at
        10,000 nodes, and hashing a Fraction each time was most of a lookup."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, name) for name in _COMPARED))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        """Pickled without the kept hash: a string's hash differs from process to process."""
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state

    @property
    def is_shared_gpu(self) -> bool:
        return self.kind in ("Fraction", "GpuMemory")

    @property
    def mig(self) -> dict[str, int]:
        return {k: v for k, v in self.scalars if k.startswith(MIG_PREFIX)}

    @cached_property
    def gpu_quota(self) -> int | Fraction:
        """GPUs counted for queue accounting while pending (spec 7.1), with GPU memory over the
        smallest per-GPU memory KAI's tests use (100; see `pending_gpus` for a real cluster's).
        Whole-GPU requests stay plain ints: exact, and far cheaper to add up than Fractions.
        Kept (the request is immutable): read per placement, and a Fraction made each time."""
        return self.pending_gpus(DEFAULT_GPU_MEMORY_DIVISOR)

    def pending_gpus(self, divisor: int) -> int | Fraction:
        """GPUs a pending request counts for in fair share, queue order and reclaim (3.2.2): a
        GPU-memory request as memory over `divisor`, the smallest per-GPU memory of the
        cluster's GPU nodes (KAI's ClusterInfo.MinNodeGPUMemory; ClusterState.gpu_memory_divisor)."""
        if self.kind == "Fraction":
            return Fraction(round(self.gpu_portion * 100), 100) * self.devices
        if self.kind == "GpuMemory":
            return Fraction(self.gpu_memory * self.devices, divisor)
        if self.kind == "MigInstance":
            return Fraction(sum(mig_gpus(k) * v // 1000 for k, v in self.mig.items()))
        return self.gpus

    @property
    def needs_gpu(self) -> bool:
        return self.gpus > 0 or self.is_shared_gpu or bool(self.mig)

    @property
    def best_effort(self) -> bool:
        return (self.cpu < BEST_EFFORT_CPU and self.memory < BEST_EFFORT_MEMORY
                and self.kind != "GpuMemory" and self.gpu_quota <= BEST_EFFORT_GPUS
                and all(v < BEST_EFFORT_SCALAR for k, v in self.scalars if k not in _STORAGE)
                and not any(k in _STORAGE for k, _ in self.scalars))

    def scalar(self, name: str) -> int:
        for k, v in self.scalars:
            if k == name:
                return v
        return 0


_COMPARED = tuple(f.name for f in fields(PodRequest) if f.compare)   # what __eq__ and the hash read


def _add(total: dict[str, object], requests: Mapping[str, str] | None) -> None:
    for name, q in (requests or {}).items():
        total[name] = total.get(name, 0) + _value(name, q)  # type: ignore[operator]


@lru_cache(maxsize=1 << 16)
def _value(name: str, q: str) -> int:
    if name == "cpu":
        return cpu_millis(q)
    if name == "memory" or name in _STORAGE or name == "pods" or name in GPU_RESOURCES:
        return to_int_ceil(q)
    return cpu_millis(q)          # extended resources: milli-units, like KAI


def _add_into(total: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        total[k] = total.get(k, 0) + v


#: An init container with this restart policy is a sidecar: it runs as long as the pod.
SIDECAR_RESTART_POLICY = "Always"


def _max_into(total: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        total[k] = max(total.get(k, 0), v)


NEGATIVE_REQUEST = "negative resource request"     # the problem's words (a warning on the requests field)
ABSURD_REQUEST = "resource request beyond any node's capacity"     # the same, for values past MAX_CAPACITY
# More of a resource than any node has (2^53 scheduler units: millicores, bytes, pods) is a
# corrupt value, and summed over nodes or pods it would not fit the int64 capacity arrays.
MAX_CAPACITY = 1 << 53
# A GPU fraction finer than a billionth is read as the nearest with this denominator.
PORTION_DENOMINATOR_MAX = 10 ** 9


def pod_request(spec, annotations: Mapping[str, str]) -> PodRequest:
    """KAI's ResReq: containers summed, init containers max'ed in, overhead added, annotations override GPUs."""
    base: dict[str, int] = {}
    for c in spec.containers or []:
        _add(base, c.resources.requests if c.resources else None)
    # Init containers run one at a time before the pod's containers: each needs its request
    # beside the sidecars started before it. A sidecar (an init container with restartPolicy
    # Always, Kubernetes 1.29+) keeps running, so it also adds to the containers' sum. This is
    # what the kubelet admits a pod by (Kubernetes' PodRequests); KAI's ResReq (spec 1.4) takes
    # the plain max, which counts a sidecar only while it is the largest init container, so the
    # kubelet could refuse a pod KAI bound (OutOfcpu). Without sidecars both are the same.
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.init_containers or []:
        own: dict[str, int] = {}
        _add(own, c.resources.requests if c.resources else None)
        if getattr(c, "restart_policy", None) == SIDECAR_RESTART_POLICY:
            _add_into(base, own)
            _add_into(sidecars, own)
            _max_into(init_peak, sidecars)
        else:
            _add_into(own, sidecars)
            _max_into(init_peak, own)
    _max_into(base, init_peak)
    _add(base, spec.overhead)
    problems: list[str] = []
    negative = sorted(k for k, v in base.items() if v < 0)
    absurd = sorted(k for k, v in base.items() if v > MAX_CAPACITY)
    if negative:
        # The API server refuses these; one that got through would make capacity grow as it is
        # placed (a -4,573,409,460 GPU request sent the device choice into a MemoryError).
        problems.append(f"{NEGATIVE_REQUEST} ({', '.join(negative)}): requests must be >= 0")
    if absurd:
        # The API server keeps up to 2^63 - 1 millicores (9.2e15 cores); one pod's value past
        # any node's overflowed the int64 node vectors (an internal error, no decisions at all).
        # Pending: the job waits with the reason. Running: counted as a full node, not past it.
        problems.append(f"{ABSURD_REQUEST} ({', '.join(absurd)}): more than {MAX_CAPACITY} scheduler units")
    if negative or absurd:
        base = {k: min(max(v, 0), MAX_CAPACITY) for k, v in base.items()}
    gpus = sum(base.get(g, 0) for g in GPU_RESOURCES)
    scalars = tuple(sorted((k, v) for k, v in base.items() if k not in _IGNORED and v))
    kind, portion, memory, devices = "Regular", Fraction(0), 0, 0
    frac_raw = annotations.get(FRACTION_ANNOTATION)
    mem_raw = annotations.get(GPU_MEMORY_ANNOTATION)
    num_raw = annotations.get(NUM_DEVICES_ANNOTATION)
    if mem_raw is not None:
        try:
            memory = int(str(mem_raw).strip())
            if memory <= 0:
                raise ValueError
            kind, devices, gpus = "GpuMemory", 1, 0
        except ValueError:
            problems.append(f"annotation {GPU_MEMORY_ANNOTATION}={mem_raw!r} is not an integer > 0")
            memory = 0
        if memory > MAX_CAPACITY:      # MiB no device has; it overflowed the int64 device ledger
            problems.append(f"annotation {GPU_MEMORY_ANNOTATION}={mem_raw!r}: {ABSURD_REQUEST}")
            memory = MAX_CAPACITY
    if frac_raw is not None:
        try:
            portion = Fraction(str(frac_raw).strip())
            if portion.denominator > PORTION_DENOMINATOR_MAX:
                # KAI reads a float: 0.9999999999999999999999 is 1 there, and 1e-300 is no
                # memory at all; exact, such a portion times a device's memory overflowed int64.
                portion = portion.limit_denominator(PORTION_DENOMINATOR_MAX)
            if not 0 < portion < 1:
                raise ValueError
            kind, devices, gpus, memory = "Fraction", 1, 0, 0
        except (ValueError, ZeroDivisionError):
            problems.append(f"annotation {FRACTION_ANNOTATION}={frac_raw!r} is not a number strictly between 0 and 1 "
                            f"(ask for whole GPUs with nvidia.com/gpu)")
            portion = Fraction(0)
        if mem_raw is not None:
            problems.append(f"annotations {FRACTION_ANNOTATION} and {GPU_MEMORY_ANNOTATION} cannot be combined")
    problems += _sharing_problems(spec, annotations, frac_raw, mem_raw, num_raw)
    if kind in ("Fraction", "GpuMemory") and num_raw is not None:
        try:
            devices = int(str(num_raw).strip())
            if devices <= 0:
                raise ValueError
        except ValueError:
            problems.append(f"annotation {NUM_DEVICES_ANNOTATION}={num_raw!r} is not an integer > 0")
            devices = 1
    if any(k.startswith(MIG_PREFIX) for k, _ in scalars):
        kind = "MigInstance"
    return PodRequest(cpu=base.get("cpu", 0), memory=base.get("memory", 0), gpus=int(gpus), scalars=scalars,
                      kind=kind, gpu_portion=portion, gpu_memory=memory, devices=devices, problems=tuple(problems))


def _sharing_problems(spec, annotations: Mapping[str, str], frac_raw, mem_raw, num_raw) -> list[str]:
    """The admission webhook's GPU-sharing rules (spec 7.1): KAI rejects such pods at creation,
    so a pod that got past it anyway is not scheduled rather than guessed at."""
    out: list[str] = []
    containers = list(spec.containers or [])
    whole_limit = any(g in ((c.resources.limits or {}) if c.resources else {}) or
                      g in ((c.resources.requests or {}) if c.resources else {})
                      for c in containers + list(spec.init_containers or []) for g in GPU_RESOURCES)
    if whole_limit and frac_raw is not None:
        out.append(f"annotation {FRACTION_ANNOTATION} cannot be combined with a whole-GPU (nvidia.com/gpu) request")
    if whole_limit and mem_raw is not None:
        out.append(f"annotation {GPU_MEMORY_ANNOTATION} cannot be combined with a whole-GPU (nvidia.com/gpu) request")
    if num_raw is not None and frac_raw is None and mem_raw is None:
        out.append(f"annotation {NUM_DEVICES_ANNOTATION} needs {FRACTION_ANNOTATION} or {GPU_MEMORY_ANNOTATION}")
    if str(annotations.get(MPS_ANNOTATION, "")).lower() == "true" and frac_raw is None and mem_raw is None:
        out.append(f"annotation {MPS_ANNOTATION}=true needs a fractional GPU request")
    if any(str(k).startswith(MIG_PREFIX) for k in annotations):
        out.append("MIG requested through annotations (legacy MIG) is never scheduled; request "
                   "nvidia.com/mig-<g>g.<m>gb as a resource instead")
    target = annotations.get(CONTAINER_ANNOTATION)
    if target is not None and (frac_raw is not None or mem_raw is not None):
        names = {c.name for c in containers + list(spec.init_containers or [])}
        if target not in names:
            out.append(f"annotation {CONTAINER_ANNOTATION}={target!r} names no container of the pod")
    return out


def _requests_of(containers) -> tuple | bytes:
    """Per container: name, requests, limits (the sharing rules read whole-GPU limits and names)
    and restart policy (an init container's makes it a sidecar); for a view's list, the JSON it
    was decoded from, which holds all of them."""
    if not containers:
        return ()
    key = getattr(containers, "key", None)      # a view's shared list (kai_cp/podview.SharedList)
    if key is not None:
        return key
    return tuple([(c.name, tuple(c.resources.requests.items()) if c.resources is not None and c.resources.requests else (),
                   tuple(c.resources.limits.items()) if c.resources is not None and c.resources.limits else (),
                   getattr(c, "restart_policy", None))
                  for c in containers])


_REQUEST_CACHE: dict[tuple, PodRequest] = {}
_REQUEST_CACHE_MAX = 1 << 16
_SHARING_KEYS = frozenset({FRACTION_ANNOTATION, GPU_MEMORY_ANNOTATION, NUM_DEVICES_ANNOTATION, CONTAINER_ANNOTATION,
                           MPS_ANNOTATION})


def some_key_contains(mapping: Mapping[str, str] | None, text: str) -> bool:
    """Whether a key of the mapping contains `text`: necessary for a key to start with it. A
    search of the joined keys where there are many (per-key scans of every pod's labels and
    annotations, by a generator, were ~0.5 s of a 105,000-pod state build); for a few, a loop
    of `in` tests is cheaper still (0.23 vs 0.57 us for two keys)."""
    if not mapping:
        return False
    try:
        if len(mapping) <= 8:       # most pods' labels and annotations: a plain loop is cheaper than a join
            for k in mapping:
                if text in k:
                    return True
            return False
        return text in "\x00".join(mapping)
    except TypeError:           # a key that is not a string: test each
        return any(text in str(k) for k in mapping)


def _sharing_annotations(annotations: Mapping[str, str]) -> tuple:
    """The annotations `pod_request` reads, sorted (most pods have none)."""
    if not annotations or (_SHARING_KEYS.isdisjoint(annotations) and not some_key_contains(annotations, MIG_PREFIX)):
        return ()
    return tuple(sorted((k, v) for k, v in annotations.items() if k in _SHARING_KEYS or str(k).startswith(MIG_PREFIX)))


def cached_pod_request(spec, annotations: Mapping[str, str]) -> PodRequest:
    """`pod_request`, shared between pods that ask for the same: a 100,000-pod cluster has a
    few hundred distinct requests, and one PodRequest each also saves memory. The key holds
    every input `pod_request` reads (extend it with them)."""
    key = (_requests_of(spec.containers), _requests_of(spec.init_containers),
           tuple(spec.overhead.items()) if spec.overhead else None, _sharing_annotations(annotations))
    try:
        found = _REQUEST_CACHE.get(key)
    except TypeError:    # an unhashable value: compute it alone
        return pod_request(spec, annotations)
    if found is None:
        if len(_REQUEST_CACHE) >= _REQUEST_CACHE_MAX:
            _REQUEST_CACHE.clear()
        found = _REQUEST_CACHE[key] = pod_request(spec, annotations)
    return found


def node_capacity(allocatable: Mapping[str, str] | None) -> dict[str, int]:
    """Allocatable resources of a node in scheduler units (same units as PodRequest)."""
    out: dict[str, int] = {}
    for name, q in (allocatable or {}).items():
        out[name] = _value(name, q)
    return out


def sum_fractions(values: Iterable[Fraction]) -> Fraction:
    return sum(values, Fraction(0))
