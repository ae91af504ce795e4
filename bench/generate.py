#!/usr/bin/env python3
"""Seeded generator of realistic KAI cluster snapshots (interfaces.md section 1).

Why: the engine must be measured on clusters that look like production ones -- fragmented
GPU nodes, department/project queue trees, gangs of many sizes, taints, cordoned nodes --
not only on KAI's small test scenarios. Everything is derived from one ``random.Random(seed)``
and a fixed base timestamp, so a seed names one cluster forever (benchmarks are repeatable).

Objects are built as plain dicts, one at a time (no deepcopy of templates), so 10,000 nodes
with 100,000 running and 5,000 pending pods take a few seconds.

CLI::

    python bench/generate.py --nodes 1000 --pending 5000 [--running N] --seed 1 -o out.json
    python bench/generate.py --nodes 48 --pending 120 --running 300 -o snapshot.zip
    python bench/generate.py --nodes 200 --pending 100000 --fragmentation 0.9 --utilization 0.55 \
        --pending-gpu-ratio 1.1 -o fragmented.json      # GPU-bound, fragmented (bench_fragmentation.py)
    python bench/generate.py --nodes 1000 --pending 5000 --utilization 0.95 --contention \
        -o contended.json                             # queues over/under fair share (bench_evictions.py)
    python bench/generate.py --nodes 48 --pending 120 --running 300 --seed 6 --contention \
        --utilization 0.9 --fractional-share 0.7 -o examples/showcase-cluster.zip   # + shared GPUs

Topology: the snapshot carries a Topology ``cluster-topology`` (zone, block, rack, hostname
labels, all on every node) and a third of the multi-pod pending GPU gangs a
``spec.topologyConstraint`` (``--topology-share``, 0 for none; ``assign_topology``). That share
has a random stream of its own: with or without it a seed yields the same cluster otherwise.

Contention (``--contention``, ``apply_contention``): the running jobs are moved, mostly, into
half of the projects (over their fair share, mostly preemptible) and the pending gangs into
the other half (under it), a share of small pending gangs of higher priority staying with the
over-share projects, so reclaim and preempt have work. Its own random stream too: without it
a seed yields exactly the default cluster.

Fractional GPUs (``--fractional-share F``, ``bench/gpu_sharing_mix.py``): a share F of the small
pending 1-GPU jobs (1-4 pods) ask for part of a GPU instead (annotation ``gpu-fraction`` 0.25 /
0.5 / 0.75 or ``gpu-memory`` in MiB, no ``nvidia.com/gpu`` request), and on a share F of the nodes
running single-pod 1-GPU jobs those pods share devices: each shared device is a GPU group
(label ``runai-gpu-group``) held by one running KAI reservation pod with its one GPU, so node GPU
accounting stays exact. Its own random stream again; 0 (default) yields exactly the cluster
without the option.

A name ending in ``.zip`` writes a ZIP with the single member ``snapshot.json``, as KAI's
``/get-snapshot`` serves it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import statistics
import sys
import time
import zipfile
from dataclasses import dataclass, field
from typing import Any, Callable

from kai_cp.gcpause import gc_paused

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_sharing_mix import apply_gpu_sharing  # noqa: E402  (bench/ is a folder of scripts)

# --------------------------------------------------------------------------------------------
# constants
# --------------------------------------------------------------------------------------------

#: Fixed "now" of every generated cluster (2025-06-02T12:00:00Z): timestamps must not depend
#: on the wall clock, or two runs with the same seed would differ.
BASE_EPOCH = 1748865600

SCHEDULER_NAME = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
POD_GROUP_ANNOTATION = "pod-group-name"
LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"
GPU = "nvidia.com/gpu"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
BLOCK_LABEL = "cloud.provider.com/topology-block"
RACK_LABEL = "cloud.provider.com/topology-rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
PRODUCT_LABEL = "nvidia.com/gpu.product"
TOPOLOGY_NAME = "cluster-topology"
#: Share of multi-pod pending GPU gangs that carry a topologyConstraint (issue 6: about a third).
DEFAULT_TOPOLOGY_SHARE = 1 / 3
REGION = "us-east-1"
GIB = 1024 ** 3

PRIORITY_CLASSES: dict[str, int] = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
#: Pending mix: training dominates, interactive/build and inference are the minority.
PENDING_CLASS_WEIGHTS: dict[str, int] = {"train": 65, "build-preemptible": 10, "build": 12, "inference": 13}

#: Pending gang sizes, skewed small but with a tail of 16/32/64-pod distributed jobs.
GANG_SIZES: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 16, 32, 64)
GANG_SIZE_WEIGHTS: tuple[int, ...] = (50, 12, 3, 10, 3, 10, 6, 4, 2)

DEFAULT_TOLERATIONS: tuple[tuple[str, int], ...] = (
    ("node.kubernetes.io/not-ready", 300), ("node.kubernetes.io/unreachable", 300))

PLUGINS: tuple[str, ...] = (
    "predicates", "proportion", "priority", "elastic", "kubeflow", "ray", "nodeavailability",
    "gpusharingorder", "gpupack", "resourcetype", "subgrouporder", "taskorder", "nominatednode",
    "dynamicresources", "nodeplacement", "minruntime", "topology", "snapshot")

DEPARTMENT_NAMES: tuple[str, ...] = ("research", "platform", "autonomy", "llm", "vision", "speech")
PROJECT_NAMES: tuple[str, ...] = ("pretrain", "finetune", "eval", "serving", "data", "rl", "infra")
JOB_KINDS: dict[str, tuple[str, ...]] = {
    "train": ("train", "pretrain", "ft", "sweep"),
    "build-preemptible": ("nb", "dev"),
    "build": ("build", "ci"),
    "inference": ("infer", "serve"),
}


@dataclass(frozen=True)
class NodeType:
    """One hardware flavour; racks are homogeneous, as in real data centres."""

    key: str
    gpus: int
    product: str
    gpu_memory_mib: int
    cores: int
    memory_gib: int
    instance_type: str
    weight: float


NODE_TYPES: tuple[NodeType, ...] = (
    NodeType("h100", 8, "NVIDIA-H100-80GB-HBM3", 81559, 128, 2048, "p5.48xlarge", 0.50),
    NodeType("a100", 8, "NVIDIA-A100-SXM4-80GB", 81920, 112, 2048, "p4de.24xlarge", 0.25),
    NodeType("l40s", 4, "NVIDIA-L40S", 46068, 96, 1024, "g6e.24xlarge", 0.25),
)


@dataclass
class Node:
    """Free-capacity bookkeeping for one node while the running load is laid out."""

    name: str
    ntype: NodeType
    zone: str
    cpu_m: int            # allocatable millicores
    mem_b: int            # allocatable bytes
    pods: int = 110
    gpu_taint: bool = False
    cordoned: bool = False
    not_ready: bool = False
    free_gpus: int = 0
    free_cpu_m: int = 0
    free_mem_b: int = 0
    free_pods: int = 110

    def __post_init__(self) -> None:
        self.free_gpus = self.ntype.gpus
        self.free_cpu_m = self.cpu_m
        self.free_mem_b = self.mem_b
        self.free_pods = self.pods

    @property
    def cpu_per_gpu_m(self) -> int:
        return self.cpu_m // self.ntype.gpus

    @property
    def mem_per_gpu_b(self) -> int:
        return self.mem_b // self.ntype.gpus


@dataclass
class Project:
    """A leaf queue: jobs live here, in the namespace ``runai-<name>``."""

    name: str
    namespace: str
    gpu_quota: int


@dataclass
class PodSpec:
    """What one pod of a job asks for; the pod dict is rendered from it."""

    gpus: int
    cpu_m: int
    mem_b: int
    node: str | None = None
    tolerate_gpu_taint: bool = True


@dataclass
class Job:
    """A PodGroup and its pods, before rendering."""

    name: str
    project: Project
    pclass: str
    created: int                       # seconds relative to BASE_EPOCH (negative = past)
    pods: list[PodSpec] = field(default_factory=list)
    min_member: int = 0
    started: int | None = None         # running jobs: when they started
    node_selector: dict[str, str] | None = None
    zone_affinity: str | None = None
    topology_required: str | None = None   # spec.topologyConstraint levels (node label keys)
    topology_preferred: str | None = None


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1 << 18)
def ts(offset_s: int) -> str:
    """RFC 3339 time ``offset_s`` seconds after the fixed base time (cached: jobs share times)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(BASE_EPOCH + offset_s))


def cpu_q(millis: int) -> str:
    """Canonical Kubernetes CPU quantity ("4", "500m")."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def mem_q(nbytes: int) -> str:
    """Canonical memory quantity as users write it ("64Gi"), bytes when not whole KiB."""
    for unit, suffix in ((GIB, "Gi"), (1024 ** 2, "Mi"), (1024, "Ki")):
        if nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


class UidSource:
    """UUID-shaped uids from the seeded rng, so a seed also fixes every uid."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def __call__(self) -> str:
        h = f"{self._rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


def split_integer(total: int, weights: list[float]) -> list[int]:
    """Split ``total`` into integers proportional to ``weights`` (largest remainder)."""
    s = sum(weights) or 1.0
    raw = [total * w / s for w in weights]
    out = [int(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - out[i], reverse=True)
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


# --------------------------------------------------------------------------------------------
# nodes
# --------------------------------------------------------------------------------------------

def layout_nodes(rng: random.Random, count: int) -> tuple[list[Node], dict[str, tuple[str, str]]]:
    """Zones -> blocks -> racks -> nodes; returns nodes and node name -> (block, rack).

    Rack sizes are 16-32 nodes (2-4 racks a block) on large clusters and scale down on small
    ones so a small cluster still has several racks, blocks and zones. A zone holds whole
    blocks; zones get about the same number of nodes.
    """
    zones = [f"{REGION}{c}" for c in "abcd"[: max(1, min(rng.randint(2, 4), count // 8 or 1))]]
    lo = min(16, max(2, count // 8))
    hi = min(32, max(lo, count // 4))
    nodes: list[Node] = []
    where: dict[str, tuple[str, str]] = {}
    block_idx = rack_idx = 0
    racks_per_block = (2, 4) if count >= 200 else (1, 2)
    while len(nodes) < count:
        zone = zones[min(len(zones) - 1, len(nodes) * len(zones) // count)]   # contiguous, balanced
        block = f"block-{block_idx:03d}"
        for _ in range(rng.randint(*racks_per_block)):
            if len(nodes) >= count:
                break
            ntype = rng.choices(NODE_TYPES, weights=[t.weight for t in NODE_TYPES])[0]
            rack = f"rack-{rack_idx:04d}"
            for _ in range(min(rng.randint(lo, hi), count - len(nodes))):
                name = f"{ntype.key}-{len(nodes):05d}"
                cpu_m = ntype.cores * 1000 - 500                      # kubelet/system reserved
                mem_b = (ntype.memory_gib - 16) * GIB                 # kubelet/system reserved
                nodes.append(Node(name, ntype, zone, cpu_m, mem_b))
                where[name] = (block, rack)
            rack_idx += 1
        block_idx += 1
    mark_node_conditions(rng, nodes)
    return nodes, where


def mark_node_conditions(rng: random.Random, nodes: list[Node]) -> None:
    """A few GPU-tainted, cordoned and NotReady nodes (at least one each from 20 nodes on)."""
    n = len(nodes)
    minimum = 1 if n >= 20 else 0
    picks = rng.sample(range(n), n)
    n_taint = max(minimum, round(n * 0.05))
    n_cordon = max(minimum, round(n * 0.015))
    n_down = max(minimum, round(n * 0.01))
    for i in picks[:n_taint]:
        nodes[i].gpu_taint = True
    for i in picks[n_taint:n_taint + n_cordon]:
        nodes[i].cordoned = True
    for i in picks[n_taint + n_cordon:n_taint + n_cordon + n_down]:
        nodes[i].not_ready = True


def render_node(node: Node, block: str, rack: str, uid: str) -> dict[str, Any]:
    """A Node as the API server returns it (capacity, allocatable, labels, taints, conditions)."""
    t = node.ntype
    cap_mem_ki = t.memory_gib * 1024 * 1024 - 4_012
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
        HOSTNAME_LABEL: node.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": t.instance_type,
        REGION_LABEL: REGION, ZONE_LABEL: node.zone, BLOCK_LABEL: block, RACK_LABEL: rack,
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(t.gpus),
        "nvidia.com/gpu.memory": str(t.gpu_memory_mib), PRODUCT_LABEL: t.product,
        "nvidia.com/mig.strategy": "single", "node-role.kubernetes.io/mig-enabled": "false",
    }
    taints: list[dict[str, Any]] = []
    if node.gpu_taint:
        taints.append({"key": GPU, "value": "present", "effect": "NoSchedule"})
    if node.cordoned:
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                       "timeAdded": ts(-3600)})
    if node.not_ready:
        taints.append({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule",
                       "timeAdded": ts(-900)})
        taints.append({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                       "timeAdded": ts(-900)})
    spec: dict[str, Any] = {"podCIDR": "", "providerID": f"aws:///{node.zone}/i-{uid[:8]}{uid[9:13]}"}
    if node.cordoned:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node.name, "uid": uid, "resourceVersion": "1",
                     "creationTimestamp": ts(-90 * 86400), "labels": labels},
        "spec": spec,
        "status": {
            "capacity": {"cpu": str(t.cores), "memory": f"{cap_mem_ki}Ki", GPU: str(t.gpus),
                         "pods": str(node.pods)},
            "allocatable": {"cpu": cpu_q(node.cpu_m), "memory": mem_q(node.mem_b), GPU: str(t.gpus),
                            "pods": str(node.pods)},
            "conditions": node_conditions(node),
            "addresses": [{"type": "Hostname", "address": node.name}],
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.33.1",
                         "containerRuntimeVersion": "containerd://2.0.5"},
        },
    }


def node_conditions(node: Node) -> list[dict[str, str]]:
    """Pressure conditions False; Ready True, or Unknown for a node whose kubelet went silent."""
    beat = ts(-1200) if node.not_ready else ts(-20)
    out = [{"type": c, "status": "False", "lastHeartbeatTime": beat, "lastTransitionTime": ts(-90 * 86400),
            "reason": f"KubeletHas{r}", "message": m}
           for c, r, m in (("MemoryPressure", "SufficientMemory", "kubelet has sufficient memory available"),
                           ("DiskPressure", "NoDiskPressure", "kubelet has no disk pressure"),
                           ("PIDPressure", "SufficientPID", "kubelet has sufficient PID available"))]
    if node.not_ready:
        out.append({"type": "Ready", "status": "Unknown", "lastHeartbeatTime": beat,
                    "lastTransitionTime": ts(-900), "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status."})
    else:
        out.append({"type": "Ready", "status": "True", "lastHeartbeatTime": beat,
                    "lastTransitionTime": ts(-90 * 86400), "reason": "KubeletReady",
                    "message": "kubelet is posting ready status"})
    return out


# --------------------------------------------------------------------------------------------
# queues
# --------------------------------------------------------------------------------------------

def make_queues(rng: random.Random, total_gpus: int, uid: UidSource) -> tuple[list[dict[str, Any]], list[Project]]:
    """Department -> project tree; project GPU quotas sum to ~90-100% of the cluster's GPUs.

    Some projects carry a limit, weights vary, and a few queues get a non-default priority,
    so fair share and over-quota ordering have something to decide.
    """
    n_dept = rng.randint(3, 6)
    depts = rng.sample(DEPARTMENT_NAMES, n_dept)
    target = max(n_dept, round(total_gpus * rng.uniform(0.9, 1.0)))
    dept_quota = split_integer(target, [rng.uniform(0.5, 2.0) for _ in depts])
    queues: list[dict[str, Any]] = []
    projects: list[Project] = []
    for d_i, (dept, dq) in enumerate(zip(depts, dept_quota)):
        names = [f"{dept}-{p}" for p in rng.sample(PROJECT_NAMES, rng.randint(2, 5))]
        quotas = split_integer(dq, [rng.uniform(0.3, 2.0) for _ in names])
        if len(names) > 2 and rng.random() < 0.3:
            quotas[-2] += quotas[-1]          # a best-effort project: quota 0, lives on over-quota
            quotas[-1] = 0
        dept_spec = queue_spec(dq, -1, rng.choice((1, 1, 2)), None)
        queues.append(queue_object(dept, dept_spec, -30 * 86400 + d_i * 60, names, uid()))
        for p_i, (name, q) in enumerate(zip(names, quotas)):
            limit = -1
            if q > 0 and rng.random() < 0.3:
                limit = math.ceil(q * rng.choice((1.0, 1.5, 2.0, 3.0)))
            prio = rng.choice((50, 150, 200)) if rng.random() < 0.15 else None
            spec = queue_spec(q, limit, rng.choice((1, 1, 1, 2, 3)), prio)
            spec["parentQueue"] = dept
            queues.append(queue_object(name, spec, -29 * 86400 + d_i * 600 + p_i * 60, None, uid()))
            projects.append(Project(name, f"runai-{name}", q))
    return queues, projects


def queue_spec(gpu_quota: int, gpu_limit: int, weight: int, priority: int | None) -> dict[str, Any]:
    """spec of a v2 Queue; CPU/memory quotas follow GPUs (12 cores, 150 GB per GPU)."""
    spec: dict[str, Any] = {"displayName": "", "resources": {
        "gpu": {"quota": gpu_quota, "overQuotaWeight": weight, "limit": gpu_limit},
        "cpu": {"quota": gpu_quota * 12_000, "overQuotaWeight": weight, "limit": -1},
        "memory": {"quota": gpu_quota * 150_000, "overQuotaWeight": weight, "limit": -1},
    }}
    if priority is not None:
        spec["priority"] = priority
    return spec


def queue_object(name: str, spec: dict[str, Any], created: int, children: list[str] | None,
                 uid: str) -> dict[str, Any]:
    """A scheduling.run.ai/v2 Queue; children are listed in status like KAI's controller does."""
    spec["displayName"] = name
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": name, "uid": uid, "resourceVersion": "1", "generation": 1,
                         "creationTimestamp": ts(created)},
            "spec": spec, "status": {"childQueues": list(children)} if children else {}}


# --------------------------------------------------------------------------------------------
# running load
# --------------------------------------------------------------------------------------------

@dataclass
class Slot:
    """One running GPU pod before it is grouped into a job."""

    node: Node
    gpus: int
    whole_node: bool


def plan_gpu_slots(rng: random.Random, nodes: list[Node], fragmentation: float,
                   utilization: float) -> list[Slot]:
    """Decide, node by node, which GPUs are busy and with which pod sizes.

    A node is empty, fully used by one whole-node pod (distributed training) or partially
    used by 1/2/4-GPU pods ("fragmented": 1..G-1 GPUs left free). ``fragmentation`` is the
    share of fragmented nodes; the fragmented nodes' load is tuned so that the busy share of
    GPUs approaches ``utilization``. fragmentation 0 = packed (nodes full or empty),
    1 = every node partly used and none free.
    """
    p_empty = (1.0 - utilization) * (1.0 - fragmentation)
    p_frag = fragmentation * (1.0 - p_empty)
    p_full = max(0.0, 1.0 - p_empty - p_frag)
    mean_frag = (utilization - p_full) / p_frag if p_frag > 0 else 0.5
    slots: list[Slot] = []
    for node in nodes:
        if node.not_ready:
            continue
        g = node.ntype.gpus
        r = rng.random()
        if r < p_full:
            slots.append(Slot(node, g, True))
        elif r < p_full + p_frag:
            used = min(g - 1, max(1, round(rng.gauss(mean_frag * g, g / 4))))
            slots.extend(Slot(node, s, False) for s in decompose(rng, used))
    return slots


def decompose(rng: random.Random, used: int) -> list[int]:
    """Split ``used`` GPUs of one node into pod sizes 4/2/1, like a mix of small jobs."""
    out: list[int] = []
    while used > 0:
        size = rng.choice([s for s in (1, 1, 2, 2, 4) if s <= used])
        out.append(size)
        used -= size
    return out


def group_slots(rng: random.Random, slots: list[Slot]) -> list[list[Slot]]:
    """Group slots into running jobs.

    Whole-node pods on consecutive nodes (same rack) form distributed jobs of 1-16 nodes;
    small pods of the same size are grouped at random (scattered multi-pod jobs) or alone.
    """
    groups: list[list[Slot]] = []
    run: list[Slot] = []
    for s in (s for s in slots if s.whole_node):
        if run and (run[-1].node.ntype is not s.node.ntype or len(run) >= rng.choice((1, 2, 4, 8, 16))):
            groups.append(run)
            run = []
        run.append(s)
    if run:
        groups.append(run)
    by_size: dict[int, list[Slot]] = {}
    for s in slots:
        if not s.whole_node:
            by_size.setdefault(s.gpus, []).append(s)
    for size in sorted(by_size):
        pool = by_size[size]
        rng.shuffle(pool)
        i = 0
        while i < len(pool):
            k = 1 if rng.random() < 0.6 else rng.randint(2, 8)
            groups.append(pool[i:i + k])
            i += k
    return groups


def gpu_pod_resources(rng: random.Random, node: Node, gpus: int) -> tuple[int, int]:
    """CPU/memory of a running GPU pod: up to 90% of the node's per-GPU share."""
    frac = rng.choice((0.25, 0.5, 0.75, 0.9))
    cpu = max(500, int(node.cpu_per_gpu_m * frac * gpus) // 500 * 500)
    mem = max(GIB, int(node.mem_per_gpu_b * frac * gpus) // GIB * GIB)
    return cpu, mem


def place_slot(rng: random.Random, slot: Slot) -> PodSpec:
    """Reserve the slot's GPUs, CPU and memory on its node and return the pod it becomes."""
    node = slot.node
    cpu, mem = gpu_pod_resources(rng, node, slot.gpus)
    node.free_gpus -= slot.gpus
    node.free_cpu_m -= cpu
    node.free_mem_b -= mem
    node.free_pods -= 1
    tolerate = node.gpu_taint or rng.random() < 0.9
    return PodSpec(slot.gpus, cpu, mem, node.name, tolerate)


CPU_CHOICES_M: tuple[int, ...] = (500, 1000, 2000, 4000, 8000, 16000)
MEM_CHOICES_GIB: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


def place_cpu_pods(rng: random.Random, nodes: list[Node], count: int) -> list[PodSpec]:
    """Scatter ``count`` CPU-only pods (data loaders, notebooks, services) over the nodes.

    They avoid GPU-tainted and NotReady nodes and leave 75% of every free GPU's CPU/memory
    share untouched, so the free GPUs stay usable by pending GPU pods.
    """
    eligible = [n for n in nodes if not n.gpu_taint and not n.not_ready]
    if not eligible or count <= 0:
        return []
    headroom = {n.name: (n.free_cpu_m - int(n.free_gpus * n.cpu_per_gpu_m * 0.75),
                         n.free_mem_b - int(n.free_gpus * n.mem_per_gpu_b * 0.75)) for n in eligible}
    room = {name: list(v) for name, v in headroom.items()}
    out: list[PodSpec] = []
    for _ in range(count):
        cpu = rng.choice(CPU_CHOICES_M)
        mem = rng.choice(MEM_CHOICES_GIB) * GIB
        for attempt in range(8):
            node = eligible[rng.randrange(len(eligible))]
            r = room[node.name]
            if attempt >= 4:                     # crowded: fall back to the smallest pod
                cpu, mem = 500, GIB
            if node.free_pods > 0 and r[0] >= cpu and r[1] >= mem:
                r[0] -= cpu
                r[1] -= mem
                node.free_cpu_m -= cpu
                node.free_mem_b -= mem
                node.free_pods -= 1
                out.append(PodSpec(0, cpu, mem, node.name, False))
                break
    return out


def make_running_jobs(rng: random.Random, nodes: list[Node], projects: list[Project], count: int,
                      fragmentation: float, utilization: float, names: "NameSource") -> list[Job]:
    """Running jobs with exactly ``count`` pods where capacity allows (GPU pods first)."""
    slots = plan_gpu_slots(rng, nodes, fragmentation, utilization)
    if len(slots) > count:                       # few pods asked for: keep a random subset
        keep = set(rng.sample(range(len(slots)), count))
        slots = [s for i, s in enumerate(slots) if i in keep]
    jobs: list[Job] = []
    weights = [p.gpu_quota + 1 for p in projects]
    for group in group_slots(rng, slots):
        pods = [place_slot(rng, s) for s in group]
        jobs.append(running_job(rng, projects, weights, pods, names, prefer_train=len(pods) > 1))
    cpu_pods = place_cpu_pods(rng, nodes, count - len(slots))
    i = 0
    while i < len(cpu_pods):
        k = 1 if rng.random() < 0.7 else rng.randint(2, 10)
        jobs.append(running_job(rng, projects, weights, cpu_pods[i:i + k], names, prefer_train=False))
        i += k
    return jobs


def running_job(rng: random.Random, projects: list[Project], weights: list[int], pods: list[PodSpec],
                names: "NameSource", prefer_train: bool) -> Job:
    """Wrap placed pods into a job of a random project, started within the last three days."""
    project = rng.choices(projects, weights=weights)[0]
    pclass = "train" if prefer_train and rng.random() < 0.8 else pick_class(rng)
    created = -rng.randint(600, 72 * 3600)
    job = Job(names.job(pclass), project, pclass, created, pods, len(pods))
    job.started = created + rng.randint(5, 300)
    return job


# --------------------------------------------------------------------------------------------
# pending gangs
# --------------------------------------------------------------------------------------------

def pick_class(rng: random.Random) -> str:
    """A priority class name with the pending mix's weights."""
    return rng.choices(list(PENDING_CLASS_WEIGHTS), weights=list(PENDING_CLASS_WEIGHTS.values()))[0]


def make_pending_jobs(rng: random.Random, projects: list[Project], zones: list[str], count: int,
                      names: "NameSource", max_gang: int,
                      cpu_per_gpu_m: int | None = None, mem_per_gpu_b: int | None = None) -> list[Job]:
    """Pending gangs totalling exactly ``count`` pods, sizes 1-64 (the last one truncated).

    Gangs are at most ``max_gang`` pods (half the nodes): nobody submits a 64-node job to a
    48-node cluster, and such gangs would only be noise in a small benchmark.
    """
    jobs: list[Job] = []
    sizes = [s for s in GANG_SIZES if s <= max_gang] or [1]
    weights = GANG_SIZE_WEIGHTS[:len(sizes)]
    left = count
    while left > 0:
        size = min(left, rng.choices(sizes, weights=weights)[0])
        jobs.append(pending_job(rng, projects, zones, size, names,
                                cpu_per_gpu_m=cpu_per_gpu_m, mem_per_gpu_b=mem_per_gpu_b))
        left -= size
    return jobs


#: GPU-bound scenario (``pending_gpu_ratio``): GPUs per pod, including the 3- and 6-GPU pods
#: that do not tile an 8-GPU node, and gangs of 1-16 pods.
GPU_BOUND_POD_GPUS: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
GPU_BOUND_POD_GPU_WEIGHTS: tuple[int, ...] = (25, 25, 15, 20, 10, 5)
GPU_BOUND_GANG_SIZES: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)
GPU_BOUND_GANG_WEIGHTS: tuple[int, ...] = (35, 20, 6, 14, 5, 10, 4, 6)
GPU_BOUND_GANG_GPUS = 32


def schedulable_free_gpus(nodes: list[Node]) -> int:
    """Free GPUs on nodes that accept new pods (neither cordoned nor NotReady)."""
    return sum(n.free_gpus for n in nodes if not n.cordoned and not n.not_ready)


def make_gpu_bound_pending_jobs(rng: random.Random, projects: list[Project], zones: list[str],
                                target_gpus: int, max_pods: int, names: "NameSource",
                                max_gang: int, cpu_per_gpu_m: int,
                                mem_per_gpu_b: int) -> list[Job]:
    """Pending GPU gangs whose GPU demand totals ``target_gpus`` (at most ``max_pods`` pods).

    Every pod asks for 1, 2, 3, 4, 6 or 8 GPUs with a fixed CPU/memory share per GPU, so GPUs
    are the binding resource; gangs are 1-16 pods but at most ``GPU_BOUND_GANG_GPUS`` GPUs (and
    a quarter of the target), so no single gang is most of a small cluster's demand. The last
    gang is shortened so the demand overshoots the target by less than one pod.
    """
    jobs: list[Job] = []
    sizes = [s for s in GPU_BOUND_GANG_SIZES if s <= max_gang] or [1]
    weights = GPU_BOUND_GANG_WEIGHTS[:len(sizes)]
    gang_gpus = min(GPU_BOUND_GANG_GPUS, max(8, target_gpus // 4))
    demand = pods = 0
    while demand < target_gpus and pods < max_pods:
        gpus = rng.choices(GPU_BOUND_POD_GPUS, weights=GPU_BOUND_POD_GPU_WEIGHTS)[0]
        size = rng.choices(sizes, weights=weights)[0]
        size = max(1, min(size, gang_gpus // gpus, max_pods - pods, -(-(target_gpus - demand) // gpus)))
        jobs.append(pending_job(rng, projects, zones, size, names, gpus_per_pod=gpus,
                                cpu_per_gpu_m=cpu_per_gpu_m, mem_per_gpu_b=mem_per_gpu_b))
        demand += gpus * size
        pods += size
    return jobs


def pending_gpus_per_pod(rng: random.Random, size: int) -> int:
    """Large gangs use whole 8- or 4-GPU nodes; small ones mostly 1/2/4 GPUs, some CPU-only."""
    if size >= 8:
        return 8 if rng.random() < 0.65 else 4
    if rng.random() < 0.05:
        return 0
    return rng.choices((1, 2, 4, 8), weights=(40, 25, 20, 15))[0]


def pending_job(rng: random.Random, projects: list[Project], zones: list[str], size: int,
                names: "NameSource", gpus_per_pod: int | None = None,
                cpu_per_gpu_m: int | None = None, mem_per_gpu_b: int | None = None) -> Job:
    """One pending gang: class, elasticity, placement constraints, requests, submit time.

    ``gpus_per_pod``, ``cpu_per_gpu_m`` and ``mem_per_gpu_b`` fix what is otherwise drawn
    (None, the default, draws them: the default scenario's random stream is unchanged).
    """
    pclass = "train" if size >= 16 else pick_class(rng)
    project = rng.choice(projects)
    gpus = pending_gpus_per_pod(rng, size) if gpus_per_pod is None else gpus_per_pod
    if gpus:
        cpu = gpus * (rng.choice((4000, 8000, 12000)) if cpu_per_gpu_m is None else cpu_per_gpu_m)
        mem = gpus * (rng.choice((32, 64, 128, 192)) * GIB if mem_per_gpu_b is None else mem_per_gpu_b)
    else:
        cpu = rng.choice(CPU_CHOICES_M)
        mem = rng.choice(MEM_CHOICES_GIB) * GIB
    tolerate = gpus > 0 and rng.random() < 0.9
    pods = [PodSpec(gpus, cpu, mem, None, tolerate) for _ in range(size)]
    min_member = size
    if size >= 2 and rng.random() < 0.2:
        min_member = rng.randint(max(1, size // 2), size - 1)     # elastic
    job = Job(names.job(pclass), project, pclass, -rng.randint(30, 6 * 3600), pods, min_member)
    r = rng.random()
    if r < 0.05:
        job.node_selector = {ZONE_LABEL: rng.choice(zones)}
    elif r < 0.10:
        job.zone_affinity = rng.choice(zones)
    elif r < 0.13 and gpus == 8:
        job.node_selector = {PRODUCT_LABEL: NODE_TYPES[0].product}
    if size >= 8 and gpus:
        rng.random()   # once drew the topology choice, now on its own stream: kept so seeds keep their clusters
    return job


#: Topology constraint mix of the constrained gangs (``assign_topology``): the share that only
#: prefers (no required level), and of the required ones the share that asks one level wider
#: than the narrowest one whose typical domain holds the gang.
TOPOLOGY_PREFERRED_ONLY = 0.3
TOPOLOGY_WIDER_REQUIRED = 0.25
#: Levels a gang may require, narrowest first.
TOPOLOGY_LEVELS: tuple[str, ...] = (RACK_LABEL, BLOCK_LABEL, ZONE_LABEL)


def domain_gpus(nodes: list[Node], where: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Median GPUs of a domain at each level of ``TOPOLOGY_LEVELS`` (domains are label paths)."""
    totals: dict[str, dict[tuple[str, ...], int]] = {lvl: {} for lvl in TOPOLOGY_LEVELS}
    for n in nodes:
        block, rack = where[n.name]
        for lvl, path in ((ZONE_LABEL, (n.zone,)), (BLOCK_LABEL, (n.zone, block)),
                          (RACK_LABEL, (n.zone, block, rack))):
            totals[lvl][path] = totals[lvl].get(path, 0) + n.ntype.gpus
    return {lvl: statistics.median(v.values()) for lvl, v in totals.items()}


def topology_choice(rng: random.Random, demand_gpus: int,
                    level_gpus: dict[str, float]) -> tuple[str | None, str | None]:
    """(required, preferred) levels for a gang asking ``demand_gpus`` GPUs, as users set them.

    Users require the narrowest level whose typical domain holds the whole gang (sometimes
    one wider, to get scheduled sooner) and prefer racks below it; a gang too big for any
    level, and a share of the others, only prefers racks (fewest racks, no hard rule).
    """
    fits = [lvl for lvl in TOPOLOGY_LEVELS if level_gpus[lvl] >= demand_gpus]
    if rng.random() < TOPOLOGY_PREFERRED_ONLY or not fits:
        return None, RACK_LABEL
    i = TOPOLOGY_LEVELS.index(fits[0])
    if i + 1 < len(TOPOLOGY_LEVELS) and rng.random() < TOPOLOGY_WIDER_REQUIRED:
        i += 1
    required = TOPOLOGY_LEVELS[i]
    return required, (RACK_LABEL if required != RACK_LABEL else None)


def assign_topology(seed: int, jobs: list[Job], nodes: list[Node], where: dict[str, tuple[str, str]],
                    share: float) -> None:
    """Give ``share`` of the multi-pod GPU gangs a topologyConstraint (``topology_choice``).

    A random stream of its own (``topology/<seed>``): every other object of a seed is the same
    whatever the share, so clusters with and without topology differ only in these fields.
    """
    if share <= 0:
        return
    rng = random.Random(f"topology/{seed}")
    level_gpus = domain_gpus(nodes, where)
    for job in jobs:
        if len(job.pods) < 2 or not job.pods[0].gpus or rng.random() >= share:
            continue
        demand = sum(p.gpus for p in job.pods)
        job.topology_required, job.topology_preferred = topology_choice(rng, demand, level_gpus)


#: Contention (``apply_contention``): share of running jobs in the over-share projects, share of
#: the quota in the under-share ones, share of small pending gangs (<= 8 pods) kept in the
#: over-share ones as same-queue preemptors, and the class mixes.
CONTENTION_RUNNING_OVER = 0.85
CONTENTION_UNDER_QUOTA = 2 / 3     # share of the quota held by the under-share projects
CONTENTION_PENDING_OVER = 0.2
CONTENTION_PREEMPTOR_MAX_PODS = 8
CONTENTION_RUNNING_CLASSES: dict[str, int] = {"train": 60, "build-preemptible": 20, "build": 12, "inference": 8}
CONTENTION_PREEMPTOR_CLASSES: dict[str, int] = {"build-preemptible": 30, "build": 40, "inference": 30}


def contention_split(rng: random.Random, projects: list[Project]) -> tuple[list[Project], list[Project]]:
    """(over, under) projects: projects with a quota, in drawn order, go under while their quotas
    stay within ``CONTENTION_UNDER_QUOTA`` of all quotas; the others (and the zero-quota
    best-effort projects, over their share with anything running) go over. Over-share projects
    then hold ~``CONTENTION_RUNNING_OVER`` of the running GPUs on about a third of the quota."""
    funded = [p for p in projects if p.gpu_quota > 0] or list(projects)
    order = list(funded)
    rng.shuffle(order)
    budget = CONTENTION_UNDER_QUOTA * sum(p.gpu_quota for p in funded)
    under: list[Project] = []
    taken = 0
    for p in order:
        if not under or taken + p.gpu_quota <= budget:
            under.append(p)
            taken += p.gpu_quota
    if len(under) == len(funded) > 1:
        under.pop()
    over = [p for p in projects if p not in under] or list(under)
    return over, under


def apply_contention(seed: int, running: list[Job], pending: list[Job], projects: list[Project]) -> None:
    """Queues over and under fair share with mixed priorities (``--contention``).

    Running jobs go to the over-share projects with probability ``CONTENTION_RUNNING_OVER``
    (weighted by quota + 1) and get a class of ``CONTENTION_RUNNING_CLASSES`` (mostly
    preemptible: reclaim victims); pending gangs go to the under-share projects (reclaimers),
    except a ``CONTENTION_PENDING_OVER`` share of the small ones, which stay in the over-share
    projects with a higher-priority class (``CONTENTION_PREEMPTOR_CLASSES``: preempt's
    preemptors, the train jobs there its victims). Job names keep their number and take a
    kind of the new class. A stream of its own (``contention/<seed>``): the rest of the seed's
    cluster is unchanged.
    """
    rng = random.Random(f"contention/{seed}")
    over, under = contention_split(rng, projects)
    over_w = [p.gpu_quota + 1 for p in over]
    under_w = [p.gpu_quota + 1 for p in under]
    run_classes, pre_classes = list(CONTENTION_RUNNING_CLASSES), list(CONTENTION_PREEMPTOR_CLASSES)

    def reclass(job: Job, pclass: str) -> None:
        job.pclass = pclass
        job.name = f"{rng.choice(JOB_KINDS[pclass])}-{job.name.rsplit('-', 1)[1]}"

    for job in running:
        if rng.random() < CONTENTION_RUNNING_OVER:
            job.project = rng.choices(over, weights=over_w)[0]
        else:
            job.project = rng.choices(under, weights=under_w)[0]
        reclass(job, rng.choices(run_classes, weights=list(CONTENTION_RUNNING_CLASSES.values()))[0])
    for job in pending:
        if len(job.pods) <= CONTENTION_PREEMPTOR_MAX_PODS and rng.random() < CONTENTION_PENDING_OVER:
            job.project = rng.choices(over, weights=over_w)[0]
            reclass(job, rng.choices(pre_classes, weights=list(CONTENTION_PREEMPTOR_CLASSES.values()))[0])
        else:
            job.project = rng.choices(under, weights=under_w)[0]


# --------------------------------------------------------------------------------------------
# rendering jobs
# --------------------------------------------------------------------------------------------

class NameSource:
    """Globally unique job names (``<kind>-<6 digits>``) whatever the namespace."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._n = 0

    def job(self, pclass: str) -> str:
        self._n += 1
        return f"{self._rng.choice(JOB_KINDS[pclass])}-{self._n:06d}"


def render_job(job: Job, uid: UidSource) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The PodGroup and Pods of one job."""
    pg_meta: dict[str, Any] = {
        "name": job.name, "namespace": job.project.namespace, "uid": uid(), "resourceVersion": "1",
        "generation": 1, "creationTimestamp": ts(job.created), "labels": {QUEUE_LABEL: job.project.name}}
    if job.started is not None:
        pg_meta["annotations"] = {LAST_START_ANNOTATION: ts(job.started)}
    spec: dict[str, Any] = {"minMember": job.min_member, "queue": job.project.name,
                            "priorityClassName": job.pclass}
    if job.topology_required or job.topology_preferred:
        tc: dict[str, str] = {"topology": TOPOLOGY_NAME}
        if job.topology_required:
            tc["requiredTopologyLevel"] = job.topology_required
        if job.topology_preferred:
            tc["preferredTopologyLevel"] = job.topology_preferred
        spec["topologyConstraint"] = tc
    pg = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": pg_meta,
          "spec": spec, "status": {}}
    pods = [render_pod(job, i, p, uid()) for i, p in enumerate(job.pods)]
    return pg, pods


def render_pod(job: Job, index: int, p: PodSpec, uid: str) -> dict[str, Any]:
    """A Pod as the API server returns it; Running (with nodeName) or Pending."""
    requests: dict[str, str] = {"cpu": cpu_q(p.cpu_m), "memory": mem_q(p.mem_b)}
    container: dict[str, Any] = {"name": "main", "image": "nvcr.io/nvidia/pytorch:25.04-py3",
                                 "resources": {"requests": requests},
                                 "terminationMessagePath": "/dev/termination-log",
                                 "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}
    if p.gpus:
        requests[GPU] = str(p.gpus)
        container["resources"]["limits"] = {GPU: str(p.gpus)}
    tolerations: list[dict[str, Any]] = [
        {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": s}
        for k, s in DEFAULT_TOLERATIONS]
    if p.tolerate_gpu_taint:
        tolerations.append({"key": GPU, "operator": "Exists", "effect": "NoSchedule"})
    spec: dict[str, Any] = {
        "containers": [container], "restartPolicy": "Always" if job.pclass == "inference" else "Never",
        "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
        "securityContext": {}, "schedulerName": SCHEDULER_NAME, "priorityClassName": job.pclass,
        "priority": PRIORITY_CLASSES[job.pclass], "preemptionPolicy": "PreemptLowerPriority",
        "enableServiceLinks": True, "tolerations": tolerations}
    if job.node_selector:
        spec["nodeSelector"] = dict(job.node_selector)
    if job.zone_affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": ZONE_LABEL, "operator": "In", "values": [job.zone_affinity]}]}]}}}
    name = f"{job.name}-{index}"
    meta: dict[str, Any] = {
        "name": name, "namespace": job.project.namespace, "uid": uid, "resourceVersion": "1",
        "creationTimestamp": ts(job.created + 2),
        "labels": {"job-name": job.name, QUEUE_LABEL: job.project.name},
        "annotations": {POD_GROUP_ANNOTATION: job.name}}
    if p.node is not None:
        spec["nodeName"] = p.node
        meta["annotations"]["received-resource-type"] = "Regular"
        status = running_status(job.started if job.started is not None else job.created)
    else:
        status = {"phase": "Pending", "qosClass": "Burstable"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def running_status(started: int) -> dict[str, Any]:
    """status of a Running pod started at ``started``."""
    t = ts(started)
    return {"phase": "Running",
            "conditions": [{"type": c, "status": "True", "lastProbeTime": None, "lastTransitionTime": t}
                           for c in ("PodReadyToStartContainers", "Initialized", "Ready",
                                     "ContainersReady", "PodScheduled")],
            "startTime": t,
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "started": True,
                                   "image": "nvcr.io/nvidia/pytorch:25.04-py3", "imageID": "",
                                   "state": {"running": {"startedAt": t}}}],
            "qosClass": "Burstable"}


# --------------------------------------------------------------------------------------------
# cluster-wide objects
# --------------------------------------------------------------------------------------------

def scheduler_config() -> dict[str, Any]:
    """The default KAI plugin tiers (nodeplacement binpack for GPU and CPU), all actions."""
    plugins: list[dict[str, Any]] = []
    for name in PLUGINS:
        entry: dict[str, Any] = {"name": name}
        if name == "nodeplacement":
            entry["arguments"] = {"cpu": "binpack", "gpu": "binpack"}
        plugins.append(entry)
    return {"actions": "allocate, consolidation, reclaim, preempt, stalegangeviction",
            "tiers": [{"plugins": plugins}]}


def scheduler_params() -> dict[str, Any]:
    """schedulerParams as a production KAI install serializes them (kai-semantics.md 9.2)."""
    return {"schedulerName": SCHEDULER_NAME,
            "partitionParams": {"NodePoolLabelKey": "kai.scheduler/node-pool", "NodePoolLabelValue": ""},
            "maxNumberConsolidationPreemptees": 16, "useSchedulingSignatures": True,
            "fullHierarchyFairness": True, "allowConsolidatingReclaim": True,
            "numOfStatusRecordingWorkers": 5, "globalDefaultStalenessGracePeriod": 60_000_000_000,
            "schedulePeriod": 1_000_000_000, "queueLabelKey": QUEUE_LABEL}


def priority_classes(uid: UidSource) -> list[dict[str, Any]]:
    """The four PriorityClasses KAI's Helm chart installs."""
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": name, "uid": uid(), "resourceVersion": "1",
                          "creationTimestamp": ts(-120 * 86400)},
             "value": value, "preemptionPolicy": "PreemptLowerPriority"}
            for name, value in PRIORITY_CLASSES.items()]


def topology_object(uid: UidSource) -> dict[str, Any]:
    """The Topology naming the node labels of the zone/block/rack/host hierarchy."""
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
            "metadata": {"name": TOPOLOGY_NAME, "uid": uid(), "resourceVersion": "1", "generation": 1,
                         "creationTimestamp": ts(-90 * 86400)},
            "spec": {"levels": [{"nodeLabel": ZONE_LABEL}, {"nodeLabel": BLOCK_LABEL},
                                {"nodeLabel": RACK_LABEL}, {"nodeLabel": HOSTNAME_LABEL}]}}


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------

def generate_cluster(nodes: int, pending_pods: int, running_pods: int | None = None, seed: int = 0,
                     fragmentation: float = 0.6, utilization: float = 0.75,
                     topology_share: float = DEFAULT_TOPOLOGY_SHARE, pending_gpu_ratio: float | None = None,
                     cpu_per_gpu: float | None = None, mem_per_gpu: float | None = None,
                     contention: bool = False, fractional_share: float = 0.0) -> dict[str, Any]:
    """Generate a snapshot document (interfaces.md section 1) for one seeded cluster.

    nodes: number of GPU nodes (~75% 8-GPU, ~25% 4-GPU).
    pending_pods: pods of pending gangs, exactly (gangs of 1-64 pods).
    running_pods: pods already Running; default 10 per node. Fewer may be placed when the
        nodes cannot hold them (CPU-only pods are dropped when no node has room).
    fragmentation: 0..1, share of nodes partly used by small pods (free GPUs scattered);
        0 leaves busy nodes full and the rest empty.
    utilization: target share of GPUs (on ready nodes) used by the running load.
    topology_share: share of the multi-pod pending GPU gangs with a spec.topologyConstraint
        (required rack, block or zone and preferred rack, or preferred rack only; see
        ``topology_choice``); a third by default, 0 for none. Drawn from a stream of its own, so
        the share changes these fields only: every other object of a seed stays the same.
    pending_gpu_ratio: None (default) for the mix above. A number selects the GPU-bound
        scenario: pending gangs (1-16 pods of 1, 2, 3, 4, 6 or 8 GPUs, no CPU-only pods) are
        drawn until their GPU demand is this many times the free GPUs on schedulable nodes;
        ``pending_pods`` then only caps the number of pending pods. With a high
        ``fragmentation`` the free GPUs are scattered, 1-7 per node, and packing them is hard.
    cpu_per_gpu, mem_per_gpu: cores and GiB that each pending GPU pod asks for per GPU; None
        draws them (4/8/12 cores, 32-192 GiB per GPU). The GPU-bound scenario defaults to 4
        cores and 32 GiB, well under what nodes keep free per free GPU, so GPUs bind.
    contention: move running jobs into over-share projects and pending gangs into under-share
        ones, with mixed priorities (``apply_contention``; pair with a high ``utilization``).
        Off (default): the document is exactly the one without the option.
    fractional_share: share of the small pending 1-GPU jobs (1-4 pods) that ask for part of a GPU,
        and of the nodes whose running single-pod 1-GPU jobs share devices held by reservation
        pods; ``bench/gpu_sharing_mix.py``. 0 (default): the document is exactly the one without
        the option.
    """
    if pending_gpu_ratio is not None and pending_gpu_ratio < 0:
        raise ValueError("pending_gpu_ratio must be >= 0")
    if pending_gpu_ratio is not None:
        cpu_per_gpu = 4.0 if cpu_per_gpu is None else cpu_per_gpu
        mem_per_gpu = 32.0 if mem_per_gpu is None else mem_per_gpu
    cpu_m = None if cpu_per_gpu is None else int(round(cpu_per_gpu * 1000))
    mem_b = None if mem_per_gpu is None else int(round(mem_per_gpu * GIB))
    with gc_paused():
        return build_document(nodes, pending_pods, running_pods, seed, fragmentation, utilization,
                              topology_share, pending_gpu_ratio, cpu_m, mem_b, contention, fractional_share)


def build_document(nodes: int, pending_pods: int, running_pods: int | None, seed: int,
                   fragmentation: float, utilization: float, topology_share: float,
                   pending_gpu_ratio: float | None = None, cpu_per_gpu_m: int | None = None,
                   mem_per_gpu_b: int | None = None, contention: bool = False,
                   fractional_share: float = 0.0) -> dict[str, Any]:
    """generate_cluster's body (see there for the parameters)."""
    if nodes < 1 or pending_pods < 0:
        raise ValueError("need nodes >= 1 and pending_pods >= 0")
    if not 0.0 <= fragmentation <= 1.0 or not 0.0 <= utilization <= 1.0:
        raise ValueError("fragmentation and utilization must be within [0, 1]")
    rng = random.Random(seed)
    uid = UidSource(random.Random(f"uid/{seed}"))
    names = NameSource(rng)
    if running_pods is None:
        running_pods = 10 * nodes
    node_list, where = layout_nodes(rng, nodes)
    zones = sorted({n.zone for n in node_list})
    ready_gpus = sum(n.ntype.gpus for n in node_list if not n.not_ready and not n.cordoned)
    queues, projects = make_queues(rng, ready_gpus, uid)
    jobs = make_running_jobs(rng, node_list, projects, running_pods, fragmentation, utilization, names)
    if pending_gpu_ratio is None:
        pending = make_pending_jobs(rng, projects, zones, pending_pods, names,
                                    max_gang=max(1, nodes // 2), cpu_per_gpu_m=cpu_per_gpu_m,
                                    mem_per_gpu_b=mem_per_gpu_b)
    else:
        target = round(pending_gpu_ratio * schedulable_free_gpus(node_list))
        pending = make_gpu_bound_pending_jobs(rng, projects, zones, target, pending_pods, names,
                                              max(1, nodes // 2),
                                              cpu_per_gpu_m if cpu_per_gpu_m is not None else 4000,
                                              mem_per_gpu_b if mem_per_gpu_b is not None else 32 * GIB)
    assign_topology(seed, pending, node_list, where, topology_share)
    if contention:
        apply_contention(seed, jobs, pending, projects)
    jobs += pending
    doc = render_document(jobs, node_list, lambda n: where[n.name], queues, uid)
    apply_gpu_sharing(doc, seed, fractional_share)
    return doc


def render_document(jobs: list[Job], nodes: list[Node], place: Callable[[Node], tuple[str, str]],
                    queues: list[dict[str, Any]], uid: UidSource, topology: bool = True) -> dict[str, Any]:
    """The snapshot document of these jobs, nodes (at `place(node)` = (block, rack)) and queues;
    object ids are drawn in a fixed order (jobs, nodes, priority classes, topology), so the same
    inputs give the same document."""
    pods: list[dict[str, Any]] = []
    pod_groups: list[dict[str, Any]] = []
    for job in jobs:
        pg, job_pods = render_job(job, uid)
        pod_groups.append(pg)
        pods.extend(job_pods)
    raw = {
        "pods": pods,
        "nodes": [render_node(n, *place(n), uid()) for n in nodes],
        "queues": queues, "podGroups": pod_groups, "bindRequests": [],
        "priorityClasses": priority_classes(uid), "configMaps": [], "persistentVolumeClaims": [],
        "csiStorageCapacities": [], "storageClasses": [], "csiDrivers": [], "resourceClaims": [],
        "resourceSlices": [], "deviceClasses": [], "topologies": [topology_object(uid)] if topology else [],
    }
    return {"config": scheduler_config(), "schedulerParams": scheduler_params(), "rawObjects": raw}


def write_snapshot(doc: dict[str, Any], path: str) -> None:
    """Write JSON, or a ZIP with the single member snapshot.json when ``path`` ends in .zip."""
    if path.endswith(".zip"):
        data = json.dumps(doc, separators=(",", ":")).encode()
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
            info = zipfile.ZipInfo("snapshot.json", date_time=(2025, 6, 2, 12, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, compresslevel=9)
    else:
        with open(path, "w") as fh:
            json.dump(doc, fh, separators=(",", ":"))
            fh.write("\n")


def summarize(doc: dict[str, Any]) -> str:
    """One line of counts, printed by the CLI on stderr."""
    raw = doc["rawObjects"]
    running = sum(1 for p in raw["pods"] if p["status"]["phase"] == "Running")
    gpus = sum(int(n["status"]["allocatable"][GPU]) for n in raw["nodes"])
    return (f"{len(raw['nodes'])} nodes ({gpus} GPUs), {len(raw['queues'])} queues, "
            f"{len(raw['podGroups'])} podgroups, {running} running + {len(raw['pods']) - running} pending pods")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate a realistic KAI cluster snapshot.")
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--pending", type=int, required=True, help="number of pending pods (in gangs)")
    ap.add_argument("--running", type=int, default=None, help="number of running pods (default 10 per node)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fragmentation", type=float, default=0.6)
    ap.add_argument("--utilization", type=float, default=0.75)
    ap.add_argument("--topology-share", type=float, default=DEFAULT_TOPOLOGY_SHARE,
                    help="share of multi-pod pending GPU gangs with a topologyConstraint (0: none)")
    ap.add_argument("--pending-gpu-ratio", type=float, default=None,
                    help="GPU-bound scenario: pending GPU demand = this x free GPUs (--pending caps the pods)")
    ap.add_argument("--cpu-per-gpu", type=float, default=None, help="cores per GPU of pending GPU pods")
    ap.add_argument("--mem-per-gpu", type=float, default=None, help="GiB per GPU of pending GPU pods")
    ap.add_argument("--contention", action="store_true",
                    help="queues over and under fair share, mixed priorities, preemptible running jobs")
    ap.add_argument("--fractional-share", type=float, default=0.0,
                    help="share of small pending 1-GPU jobs asking for gpu-fraction / gpu-memory instead, and of "
                         "nodes whose running 1-GPU pods share devices (runai-gpu-group + reservation pod); "
                         "0 (default): none, the same document as without the option")
    ap.add_argument("-o", "--output", required=True, help="output file (.json, or .zip)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    doc = generate_cluster(args.nodes, args.pending, args.running, seed=args.seed,
                           fragmentation=args.fragmentation, utilization=args.utilization,
                           topology_share=args.topology_share, pending_gpu_ratio=args.pending_gpu_ratio,
                           cpu_per_gpu=args.cpu_per_gpu, mem_per_gpu=args.mem_per_gpu,
                           contention=args.contention, fractional_share=args.fractional_share)
    t1 = time.perf_counter()
    write_snapshot(doc, args.output)
    t2 = time.perf_counter()
    print(f"{summarize(doc)}; generated in {t1 - t0:.2f}s, written in {t2 - t1:.2f}s -> {args.output}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
