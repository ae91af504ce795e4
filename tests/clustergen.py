"""Small KAI cluster snapshots for tests: object builders and a hypothesis strategy.

Why: the engine's invariants (node capacity, predicates, gangs, queue limits, the
non-preemptible quota, cp-sat never worse than greedy) must hold on every cluster, not only on
the few hand-written ones. `clusters()` draws small but varied snapshot documents in the input
format of interfaces.md section 1: nodes with 0/2/4/8 GPUs, some tainted, cordoned, NotReady or
labelled; a 1-3 level queue tree with quotas (including -1, 0 and fractional GPU quotas),
limits (including -1 and tight ones), weights and priorities; PodGroups with gangs, sub-groups,
elastic pods, priority classes, explicit preemptibility, node selectors, node affinity and
tolerations; host ports (hostNetwork too); volume claims, some missing; init containers and
sidecars; an extended resource (example.com/fpga) some nodes offer and a few pending pods ask
for; running, bound, binding, releasing and finished pods on nodes that fit them; and pending
pods. A Topology (zone and rack, rack names repeated across zones; some nodes lack the
labels) with required and preferred constraints on jobs and sub-groups (some naming a missing
topology or level), and jobs whose pods must share a zone or keep one per node (pod affinity).

The builders (`node`, `queue`, `pod`, `pod_group`, `snapshot`) are also used by hand-written
scenarios (tests/test_cycle.py). Everything is plain dicts: no engine code is imported here,
so the checks built on these documents stay independent of the engine.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from hypothesis import strategies as st

BASE_EPOCH = 1748865600            # 2025-06-02T12:00:00Z: fixed, so a document never depends on the clock
SCHEDULER_NAME = "kai-scheduler"
POD_GROUP_ANNOTATION = "pod-group-name"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
QUEUE_LABEL = "kai.scheduler/queue"
NODE_POOL_LABEL = "kai.scheduler/node-pool"
GPU = "nvidia.com/gpu"
EXTENDED = "example.com/fpga"     # an extended resource some generated nodes offer
TOPOLOGY = "net"
TOPOLOGY_LEVELS = ("topo/zone", "topo/rack")      # rack names repeat across zones: distinct domains
GI = 1024 ** 3

#: KAI's customary priority classes (train and build-preemptible are preemptible by default).
PRIORITY_CLASSES: dict[str, int] = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


def ts(offset_s: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(BASE_EPOCH + offset_s))


def cpu_q(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def mem_q(nbytes: int) -> str:
    return f"{nbytes // GI}Gi" if nbytes % GI == 0 else str(nbytes)


# ------------------------------------------------------------------------------------------------
# object builders
# ------------------------------------------------------------------------------------------------

def node(name: str, gpus: int = 0, cpu_m: int = 32_000, mem_b: int = 128 * GI, pods: int = 110,
         labels: dict[str, str] | None = None, taints: Iterable[tuple[str, str, str]] = (),
         unschedulable: bool = False, ready: str = "True", pressure: str | None = None,
         extended: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node as the API server returns it. ready: status of the Ready condition
    ("True", "False", "Unknown"); pressure: a pressure condition type set to "True";
    extended: other allocatable resources (name -> quantity)."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}
    if gpus:
        labels.setdefault("nvidia.com/gpu.count", str(gpus))
        labels.setdefault("nvidia.com/gpu.memory", "81920")
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    taint_list = [{"key": k, "value": v, "effect": e} if v else {"key": k, "effect": e} for k, v, e in taints]
    if taint_list:
        spec["taints"] = taint_list
    conditions = [{"type": c, "status": "True" if c == pressure else "False", "reason": "Kubelet",
                   "lastTransitionTime": ts(-86400)}
                  for c in ("MemoryPressure", "DiskPressure", "PIDPressure")]
    conditions.append({"type": "Ready", "status": ready,
                       "reason": "KubeletReady" if ready == "True" else "NodeStatusUnknown",
                       "lastTransitionTime": ts(-86400)})
    alloc = {"cpu": cpu_q(cpu_m), "memory": mem_q(mem_b), "pods": str(pods)}
    if gpus:
        alloc[GPU] = str(gpus)
    alloc.update(extended or {})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"uid-node-{name}", "resourceVersion": "1",
                         "creationTimestamp": ts(-90 * 86400), "labels": labels},
            "spec": spec,
            "status": {"capacity": dict(alloc), "allocatable": alloc, "conditions": conditions}}


def resource(quota: float | int, limit: float | int = -1, weight: float | int = 1) -> dict[str, Any]:
    return {"quota": quota, "limit": limit, "overQuotaWeight": weight}


def queue(name: str, parent: str | None = None, gpu: dict | None = None, cpu: dict | None = None,
          memory: dict | None = None, priority: int | None = None, created: int = -30 * 86400) -> dict[str, Any]:
    """A scheduling.run.ai/v2 Queue; cpu in millicores, memory in MB, gpu in devices.
    Omitted resources are unlimited here (quota -1, limit -1), not KAI's 0."""
    spec: dict[str, Any] = {"displayName": name, "resources": {
        "gpu": gpu or resource(-1), "cpu": cpu or resource(-1), "memory": memory or resource(-1)}}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
            "metadata": {"name": name, "uid": f"uid-queue-{name}", "resourceVersion": "1", "generation": 1,
                         "creationTimestamp": ts(created)},
            "spec": spec, "status": {}}


def pod(name: str, group: str | None, cpu_m: int = 1000, mem_b: int = GI, gpus: int = 0,
        phase: str = "Pending", node_name: str | None = None, namespace: str = "default",
        queue_name: str | None = None, subgroup: str | None = None,
        node_selector: dict[str, str] | None = None, affinity: dict | None = None,
        tolerations: list[dict] | None = None, deleting: bool = False, created: int = -600,
        init_cpu_m: int | None = None, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, sidecar_cpu_m: int | None = None,
        host_ports: Iterable[tuple[int, str]] = (), host_network: bool = False) -> dict[str, Any]:
    requests = {"cpu": cpu_q(cpu_m), "memory": mem_q(mem_b)}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU] = str(gpus)
        limits[GPU] = str(gpus)
    meta_labels = dict(labels or {})
    if queue_name:
        meta_labels[QUEUE_LABEL] = queue_name
    if subgroup:
        meta_labels[SUBGROUP_LABEL] = subgroup
    meta_ann = dict(annotations or {})
    if group:
        meta_ann[POD_GROUP_ANNOTATION] = group
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-pod-{namespace}-{name}",
                            "resourceVersion": "1", "creationTimestamp": ts(created),
                            "labels": meta_labels, "annotations": meta_ann}
    if deleting:
        meta["deletionTimestamp"] = ts(-5)
        meta["deletionGracePeriodSeconds"] = 30
    container: dict[str, Any] = {"name": "main", "image": "ubuntu:22.04", "resources": {"requests": requests}}
    if limits:
        container["resources"]["limits"] = limits
    ports = [{"containerPort": port, "protocol": proto, **({} if host_network else {"hostPort": port})}
             for port, proto in host_ports]
    if ports:
        container["ports"] = ports
    spec: dict[str, Any] = {"containers": [container], "schedulerName": SCHEDULER_NAME, "restartPolicy": "Always"}
    if host_network:
        spec["hostNetwork"] = True
    if sidecar_cpu_m is not None:       # a sidecar (restartPolicy Always) runs beside the init container after it
        spec["initContainers"] = [{"name": "mesh", "image": "envoy", "restartPolicy": "Always",
                                   "resources": {"requests": {"cpu": cpu_q(sidecar_cpu_m)}}}]
    if init_cpu_m is not None:
        spec.setdefault("initContainers", []).append({"name": "init", "image": "busybox",
                                                      "resources": {"requests": {"cpu": cpu_q(init_cpu_m)}}})
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = list(tolerations)
    status: dict[str, Any] = {"phase": phase}
    if phase == "Running":
        status["startTime"] = ts(created + 30)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def reservation_pod(name: str, node_name: str, group: str) -> dict[str, Any]:
    """KAI's reservation pod holding a shared GPU (spec 7.6): pinned to its node, one GPU."""
    p = pod(name, None, cpu_m=0, mem_b=0, gpus=1, phase="Running", node_name=node_name,
            namespace="kai-resource-reservation", labels={"app": "kai-resource-reservation", "runai-gpu-group": group})
    p["spec"]["schedulerName"] = "default-scheduler"
    return p


def pod_group(name: str, queue_name: str, min_member: int = 1, priority_class: str | None = None,
              preemptibility: str | None = None, sub_groups: list[dict] | None = None,
              namespace: str = "default", created: int = -700,
              topology: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member, "queue": queue_name}
    if topology:
        spec["topologyConstraint"] = topology
    if priority_class:
        spec["priorityClassName"] = priority_class
    if preemptibility:
        spec["preemptibility"] = preemptibility
    if sub_groups:
        spec["subGroups"] = sub_groups
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-pg-{namespace}-{name}",
                         "resourceVersion": "1", "generation": 1, "creationTimestamp": ts(created),
                         "labels": {QUEUE_LABEL: queue_name}},
            "spec": spec, "status": {}}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name, "uid": f"uid-pc-{name}", "resourceVersion": "1",
                         "creationTimestamp": ts(-90 * 86400)},
            "value": value, "preemptionPolicy": "PreemptLowerPriority"}


def bind_request(pod_name: str, namespace: str, node_name: str) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
            "metadata": {"name": f"{pod_name}-bind", "namespace": namespace, "uid": f"uid-br-{namespace}-{pod_name}",
                         "resourceVersion": "1", "creationTimestamp": ts(-10)},
            "spec": {"podName": pod_name, "selectedNode": node_name, "receivedResourceType": "Regular"},
            "status": {"phase": "Pending"}}


def topology_object(name: str, levels: Iterable[str]) -> dict[str, Any]:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
            "metadata": {"name": name, "uid": f"uid-topology-{name}", "resourceVersion": "1",
                         "creationTimestamp": ts(-90 * 86400)},
            "spec": {"levels": [{"nodeLabel": lv} for lv in levels]}}


def constraint(topology: str = TOPOLOGY, required: str | None = None, preferred: str | None = None) -> dict[str, str]:
    out = {"topology": topology}
    if required:
        out["requiredTopologyLevel"] = required
    if preferred:
        out["preferredTopologyLevel"] = preferred
    return out


def snapshot(nodes: list[dict], queues: list[dict], pods: list[dict], pod_groups: list[dict],
             priority_classes: list[dict] | None = None, config: dict | None = None,
             bind_requests: list[dict] | None = None, scheduler_params: dict | None = None,
             topologies: list[dict] | None = None, claims: list[dict] | None = None) -> dict[str, Any]:
    if priority_classes is None:
        priority_classes = [priority_class(n, v) for n, v in PRIORITY_CLASSES.items()]
    doc: dict[str, Any] = {"rawObjects": {
        "pods": pods, "nodes": nodes, "queues": queues, "podGroups": pod_groups,
        "bindRequests": bind_requests or [], "priorityClasses": priority_classes, "configMaps": [],
        "persistentVolumeClaims": claims or [], "csiStorageCapacities": [], "storageClasses": [], "csiDrivers": [],
        "resourceClaims": [], "resourceSlices": [], "deviceClasses": [], "topologies": topologies or []}}
    if config is not None:
        doc["config"] = config
    if scheduler_params is not None:
        doc["schedulerParams"] = scheduler_params
    return doc


def claim(name: str, namespace: str) -> dict[str, Any]:
    """A PersistentVolumeClaim bound to a volume."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-pvc-{namespace}-{name}"},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": f"pv-{namespace}-{name}",
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound"}}


def placement_config(gpu: str = "binpack", cpu: str = "binpack", actions: str | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {"tiers": [{"plugins": [
        {"name": "predicates"}, {"name": "proportion"}, {"name": "priority"}, {"name": "elastic"},
        {"name": "nodeplacement", "arguments": {"gpu": gpu, "cpu": cpu}}]}]}
    if actions is not None:
        cfg["actions"] = actions
    return cfg


# ------------------------------------------------------------------------------------------------
# the hypothesis strategy
# ------------------------------------------------------------------------------------------------

def _chance(draw, percent: int) -> bool:
    """True with about `percent`% probability; shrinks towards False."""
    return draw(st.sampled_from(range(100))) >= 100 - percent


TAINTS = [("dedicated", "gpu", "NoSchedule"), ("dedicated", "infer", "NoExecute"),
          ("dedicated", "gpu", "PreferNoSchedule"), ("maintenance", "", "NoSchedule")]
TOLERATIONS = [
    [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
    [{"key": "dedicated", "operator": "Exists"}],
    [{"operator": "Exists"}],
    [{"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoExecute"},
     {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}],
]
NODE_SELECTORS = [{"pool": "a"}, {"pool": "b"}, {"zone": "z1", "pool": "a"}]
AFFINITIES = [
    [[("zone", "In", ["z1", "z2"])]],
    [[("pool", "NotIn", ["b"])]],
    [[("fast-disk", "Exists", [])]],
    [[("fast-disk", "DoesNotExist", [])], [("zone", "In", ["z2"])]],     # two terms: OR
    [[("zone", "In", ["z1"]), ("pool", "In", ["a", "b"])]],               # one term: AND
]


def peer_affinity(app: str, mode: str) -> dict[str, Any]:
    """Required pod affinity to the pods labelled app=<app>: "spread" one per node (anti-affinity
    on the hostname), "together" in one zone (affinity on the topology's zone label)."""
    term = {"labelSelector": {"matchLabels": {"app": app}}}
    if mode == "spread":
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {**term, "topologyKey": "kubernetes.io/hostname"}]}}
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {**term, "topologyKey": TOPOLOGY_LEVELS[0]}]}}


def affinity_of(terms: list[list[tuple[str, str, list[str]]]]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": k, "operator": op, **({"values": list(v)} if v else {})} for k, op, v in term]}
        for term in terms]}}}


def _draw_nodes(draw, max_nodes: int) -> list[dict]:
    out = []
    for i in range(draw(st.integers(1, max_nodes))):
        labels: dict[str, str] = {}
        if _chance(draw, 60):
            labels["pool"] = draw(st.sampled_from(["a", "b"]))
        if _chance(draw, 40):
            labels["zone"] = draw(st.sampled_from(["z1", "z2"]))
        if _chance(draw, 25):
            labels["fast-disk"] = "true"
        if _chance(draw, 85):                          # the rest are invisible to topology-constrained jobs
            labels[TOPOLOGY_LEVELS[0]] = draw(st.sampled_from(["z1", "z2"]))
            labels[TOPOLOGY_LEVELS[1]] = draw(st.sampled_from(["r1", "r2"]))
        if _chance(draw, 4):
            labels[NODE_POOL_LABEL] = "other"          # another node pool: not this scheduler's node
        taints = [draw(st.sampled_from(TAINTS))] if _chance(draw, 25) else []
        condition = draw(st.sampled_from(["ok"] * 12 + ["unschedulable", "notready", "unknown", "pressure"]))
        out.append(node(
            f"node-{i:02d}", gpus=draw(st.sampled_from([0, 2, 4, 8])),
            cpu_m=draw(st.sampled_from([4_000, 8_000, 16_000, 32_000, 64_000])),
            mem_b=draw(st.sampled_from([16, 32, 64, 128, 256, 256])) * GI,
            pods=draw(st.sampled_from([3, 5, 16, 110])), labels=labels, taints=taints,
            unschedulable=condition == "unschedulable",
            ready={"notready": "False", "unknown": "Unknown"}.get(condition, "True"),
            pressure="MemoryPressure" if condition == "pressure" else None,
            extended={EXTENDED: "2"} if _chance(draw, 15) else None))
    return out


def _draw_resources(draw) -> dict[str, dict]:
    """Quotas -1 (unlimited), 0, small or large (fractional GPUs too); limits on about a quarter
    of the queues, tight ones included; over-quota weights 0-3."""
    limited = _chance(draw, 20)

    def limit(choices: list) -> float | int:
        return draw(st.sampled_from([-1] + choices)) if limited else -1

    return {
        "gpu": resource(draw(st.sampled_from([-1, -1, 0, 0.5, 1, 1.5, 2, 4, 8])),
                        limit([0, 1, 1.5, 2, 4, 6, 12]), draw(st.sampled_from([1, 0, 1, 2, 3]))),
        "cpu": resource(draw(st.sampled_from([-1, -1, -1, -1, 0, 4_000, 16_000, 64_000])),
                        limit([2_000, 8_000, 32_000]), draw(st.sampled_from([1, 0, 2]))),
        "memory": resource(draw(st.sampled_from([-1, -1, -1, -1, 0, 16_000, 64_000, 256_000])),
                           limit([16_000, 128_000, 512_000]), draw(st.sampled_from([1, 0, 2]))),
    }


def _draw_queues(draw) -> tuple[list[dict], list[str], list[str]]:
    """(queue objects, leaf names, non-leaf names)."""
    depth = draw(st.integers(1, 3))
    out: list[dict] = []
    leaves: list[str] = []
    inner: list[str] = []
    counter = [0]

    def make(parent: str | None, level: int) -> None:
        name = f"q{counter[0]}"
        counter[0] += 1
        res = _draw_resources(draw)
        prio = draw(st.sampled_from([None, None, None, 50, 150]))
        out.append(queue(name, parent, gpu=res["gpu"], cpu=res["cpu"], memory=res["memory"], priority=prio,
                         created=-30 * 86400 + counter[0] * 60))
        if level < depth and (level == 1 or _chance(draw, 60)):
            inner.append(name)
            for _ in range(draw(st.integers(1, 2))):
                make(name, level + 1)
        else:
            leaves.append(name)

    for _ in range(draw(st.integers(1, 2))):
        make(None, 1)
    return out, leaves, inner


class _Room:
    """Free capacity per node while running pods are laid out (so no node starts over-committed)."""

    def __init__(self, nodes: list[dict]):
        self.free = {}
        for n in nodes:
            a = n["status"]["allocatable"]
            self.free[n["metadata"]["name"]] = [
                int(a["cpu"]) * 1000 if not a["cpu"].endswith("m") else int(a["cpu"][:-1]),
                int(a["memory"][:-2]) * GI, int(a.get(GPU, "0")), int(a["pods"]),
                1]                 # one host port (contended_clusters' 29500): a vector may ask for it
        self.names = [n["metadata"]["name"] for n in nodes]

    def take(self, start: int, vec: list[int]) -> str | None:
        for k in range(len(self.names)):
            name = self.names[(start + k) % len(self.names)]
            free = self.free[name]
            if all(f >= v for f, v in zip(free, vec)):
                for i, v in enumerate(vec):
                    free[i] -= v
                return name
        return None


POD_STATES = ["Pending", "Running", "Running", "Releasing", "Bound", "Binding", "Succeeded"]


@st.composite
def clusters(draw, max_nodes: int = 10, max_jobs: int = 8) -> dict[str, Any]:
    """A small, consistent KAI snapshot document (see the module docstring)."""
    nodes = _draw_nodes(draw, max_nodes)
    queues, leaves, inner = _draw_queues(draw)
    room = _Room(nodes)
    pods: list[dict] = []
    groups: list[dict] = []
    binds: list[dict] = []
    claims: list[dict] = [claim("scratch", "default")]       # some claim: the snapshot holds claims
    for j in range(draw(st.integers(1, max_jobs))):
        name = f"job{j}"
        ns = draw(st.sampled_from(["default", "team-a"]))
        qname = draw(st.sampled_from(inner)) if inner and _chance(draw, 4) else draw(st.sampled_from(leaves))
        if _chance(draw, 2):
            qname = "no-such-queue"
        pclass = draw(st.sampled_from([None, "train", "train", "build-preemptible", "build", "inference"]))
        preempt = draw(st.sampled_from([None, None, None, "preemptible", "non-preemptible"]))
        created = -3600 + draw(st.integers(0, 50)) * 10
        selector = draw(st.sampled_from(NODE_SELECTORS)) if _chance(draw, 20) else None
        affinity = affinity_of(draw(st.sampled_from(AFFINITIES))) if _chance(draw, 20) else None
        peers = draw(st.sampled_from([None, "spread", "together"])) if _chance(draw, 25) else None
        if peers:                                  # pod affinity among the job's own pods
            affinity = {**(affinity or {}), **peer_affinity(name, peers)}
        tolerations = draw(st.sampled_from(TOLERATIONS)) if _chance(draw, 30) else None
        # host ports: one pod a node among all that want the same one (NodePorts)
        ports = draw(st.sampled_from([[(8080, "TCP")], [(8080, "TCP")], [(9000, "UDP")], [(8080, "UDP"), (9000, "TCP")]])) \
            if _chance(draw, 12) else []
        host_network = bool(ports) and _chance(draw, 30)
        mode = draw(st.sampled_from(["pending", "pending", "pending", "running", "mixed", "mixed", "deleting"]))
        # (sub-group name or None, minMember, pod count) per PodSet
        podsets = []
        if _chance(draw, 25):
            for sg in ("workers", "ps")[: draw(st.integers(1, 2))]:
                mm = draw(st.integers(1, 2))
                podsets.append((sg, mm, mm + draw(st.integers(0, 1))))
        else:
            mm = draw(st.integers(1, 4))
            podsets.append((None, mm, mm + draw(st.sampled_from([0, 0, 1, 2]))))
        sub_groups = [{"name": sg, "minMember": mm} for sg, mm, _ in podsets if sg]
        for g in sub_groups:
            if _chance(draw, 30):
                g["topologyConstraint"] = constraint(required=TOPOLOGY_LEVELS[1])
        topology = None
        if _chance(draw, 35):
            topology = constraint(topology="no-such-topology" if _chance(draw, 5) else TOPOLOGY,
                                  required=draw(st.sampled_from([None, *TOPOLOGY_LEVELS, "no-such-level"])),
                                  preferred=draw(st.sampled_from([None, TOPOLOGY_LEVELS[1]])))
        if sub_groups and _chance(draw, 30):          # a parent sub-group above the leaves
            sub_groups = [{"name": "all", "minMember": 1}] + [{**g, "parent": "all"} for g in sub_groups]
        groups.append(pod_group(name, qname, min_member=sum(mm for _, mm, _ in podsets), priority_class=pclass,
                                preemptibility=preempt, sub_groups=sub_groups or None, namespace=ns,
                                created=created, topology=topology))
        k = 0
        for sg, _mm, count in podsets:
            gpus = draw(st.sampled_from([0, 0, 1, 1, 1, 2, 2, 4, 8]))
            # about a third of the PodSets share GPUs: a fraction, GPU memory, or several devices
            shared = draw(st.sampled_from([None, None, None, None, ("gpu-fraction", "0.5"), ("gpu-fraction", "0.25"),
                                           ("gpu-fraction", "0.7"), ("gpu-memory", "20000"), ("gpu-memory", "60000")]))
            devices = draw(st.sampled_from([1, 1, 1, 2])) if shared else 1
            if shared:
                gpus = 0
            cpu_m = draw(st.sampled_from([250, 500, 1000, 2000, 4000, 8000]))
            mem_b = draw(st.sampled_from([1, 2, 4, 8, 16, 48])) * GI
            init = draw(st.sampled_from([None, None, None, None, 3000]))
            sidecar = draw(st.sampled_from([None, None, None, None, None, 500]))
            for _ in range(count):
                p_gpus, p_cpu = gpus, cpu_m
                if _chance(draw, 10):                 # a pod unlike its siblings: another class
                    p_gpus, p_cpu = draw(st.sampled_from([0, 1, 2])), draw(st.sampled_from([500, 2000]))
                if shared:
                    p_gpus = 0
                state = {"pending": "Pending", "running": "Running", "deleting": "Releasing"}.get(mode) or \
                    draw(st.sampled_from(POD_STATES))
                where = None
                if state not in ("Pending", "Succeeded"):
                    # a running shared pod holds its own devices (plus a reservation pod's slot each)
                    vec = [max(p_cpu, init or 0) + (sidecar or 0), mem_b, devices if shared else p_gpus,
                           1 + (devices if shared else 0)]
                    where = room.take(draw(st.integers(0, 9)), vec)
                    if where is None:
                        state = "Pending"
                pname = f"{name}-{k}"
                k += 1
                phase = {"Releasing": "Running", "Bound": "Pending", "Binding": "Pending"}.get(state, state)
                pods.append(pod(pname, name, cpu_m=p_cpu, mem_b=mem_b, gpus=p_gpus, phase=phase,
                                node_name=where if state in ("Running", "Releasing", "Bound") else None,
                                namespace=ns, queue_name=qname, subgroup=sg, node_selector=selector,
                                affinity=affinity, tolerations=tolerations, deleting=state == "Releasing",
                                labels={"app": name} if peers else None,
                                created=created + 1 + k, init_cpu_m=init, sidecar_cpu_m=sidecar,
                                host_ports=ports, host_network=host_network))
                if shared:
                    ann = pods[-1]["metadata"]["annotations"]
                    ann[shared[0]] = shared[1]
                    if devices > 1:
                        ann["gpu-fraction-num-devices"] = str(devices)
                    if where is not None:
                        ids = [f"grp-{ns}-{pname}-{d}" for d in range(devices)]
                        pods[-1]["metadata"]["labels"].update(
                            {"runai-gpu-group": ids[0], **({f"runai-gpu-group/{g}": g for g in ids} if devices > 1 else {})})
                        for g in ids:                   # KAI's reservation pod per shared GPU
                            pods.append(reservation_pod(f"res-{g}", where, g))
                if state == "Pending" and _chance(draw, 3):
                    pods[-1]["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
                if state == "Pending" and _chance(draw, 8):
                    # a volume claim, which exists (bound) or not: a pod without it is not placed
                    pods[-1]["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{pname}"}}]
                    if _chance(draw, 50):
                        claims.append(claim(f"data-{pname}", ns))
                if state == "Pending" and _chance(draw, 6):
                    # a device plugin's resource that only some nodes (or none) have: the pod's
                    # gang cannot start where it fits nowhere (a model bug let its siblings bind)
                    pods[-1]["spec"]["containers"][0]["resources"]["requests"][EXTENDED] = "1"
                if state == "Binding":
                    binds.append(bind_request(pname, ns, where))
    config = None
    if _chance(draw, 20):
        config = placement_config(gpu=draw(st.sampled_from(["binpack", "spread"])),
                                  cpu=draw(st.sampled_from(["binpack", "spread"])))
    return snapshot(nodes, queues, pods, groups, config=config, bind_requests=binds,
                    topologies=[topology_object(TOPOLOGY, TOPOLOGY_LEVELS)], claims=claims)


# ------------------------------------------------------------------------------------------------
# contended clusters: running jobs that eviction actions may move or take away
# ------------------------------------------------------------------------------------------------

LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"
#: Min-runtimes relative to BASE_EPOCH-based last starts, whatever the real clock says: "87600h"
#: (ten years) protects a job that has a last start, "1s" and "0s" never do.
MIN_RUNTIMES = [None, None, "0s", "1s", "87600h"]
EVICTING_ACTIONS = ("consolidation", "reclaim", "preempt")


def _take_all(room: _Room, start: int, vecs: list[list[int]]) -> list[str] | None:
    """Lay out a gang's pods all or nothing (a running gang never starts below its minimum)."""
    saved = {n: list(f) for n, f in room.free.items()}
    out = []
    for i, vec in enumerate(vecs):
        where = room.take(start + i, vec)
        if where is None:
            room.free = saved
            return None
        out.append(where)
    return out


@st.composite
def contended_clusters(draw, max_nodes: int = 4, max_running: int = 10, max_pending: int = 4,
                       topology: bool = False) -> dict[str, Any]:
    """A small cluster where GPUs run short: nodes of 4 or 8 whole GPUs mostly taken by running
    jobs (gangs and elastic jobs, with and without sub-groups; preemptible or not by priority class
    or explicit preemptibility; some with a last-start annotation), pending jobs wanting more than
    is free, and a queue tree (one or two departments) whose quotas, limits and weights put some
    queues over their fair share and others under it; queues may carry preemptMinRuntime and
    reclaimMinRuntime; some jobs want one host port (one pod a node). config.actions is allocate
    followed by a non-empty subset of
    consolidation, reclaim and preempt in KAI's order. No shared GPUs, taints or topology: the
    eviction rules are the subject here. With `topology`, nodes sit in zones and racks (some
    tainted or NotReady: KAI counts a domain's room by resources alone) and pending jobs may
    require or prefer a rack or a zone, and so may running ones (a growing gang is pinned to where it runs)."""
    nodes = [node(f"node-{i}", gpus=draw(st.sampled_from([4, 8])), cpu_m=64_000, mem_b=256 * GI, pods=110,
                  labels={"pool": draw(st.sampled_from(["a", "b"]))})
             for i in range(draw(st.integers(1, max_nodes)))]
    if topology:
        for n in nodes:
            n["metadata"]["labels"].update({TOPOLOGY_LEVELS[0]: draw(st.sampled_from(["z1", "z2"])),
                                            TOPOLOGY_LEVELS[1]: draw(st.sampled_from(["r1", "r2", "r3"]))})
            if _chance(draw, 15):
                n["spec"]["taints"] = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
            elif _chance(draw, 10):
                n["status"]["conditions"][-1]["status"] = "False"
    queues: list[dict] = []
    leaves: list[str] = []
    departments = draw(st.integers(1, 2))
    for d in range(departments):
        dname = f"dept{d}"
        dept = len(queues)
        queues.append(queue(dname, gpu=resource(draw(st.sampled_from([-1, 0, 4, 8])), -1,
                                                draw(st.sampled_from([1, 1, 2]))),
                            created=-30 * 86400 + d * 60))
        for i in range(draw(st.integers(1, 2))):
            name = f"q{d}{i}"
            limited = _chance(draw, 15)
            q = queue(name, dname, gpu=resource(draw(st.sampled_from([0, 0, 1, 2, 4])),
                                                draw(st.sampled_from([4, 8, 12])) if limited else -1,
                                                draw(st.sampled_from([0, 1, 1, 2]))),
                      priority=draw(st.sampled_from([None, None, 50, 150])), created=-30 * 86400 + 600 + d * 60 + i)
            for key in ("preemptMinRuntime", "reclaimMinRuntime"):
                value = draw(st.sampled_from(MIN_RUNTIMES))
                if value is not None:
                    q["spec"][key] = value
            queues.append(q)
            leaves.append(name)
        for key in ("preemptMinRuntime", "reclaimMinRuntime"):
            value = draw(st.sampled_from(MIN_RUNTIMES))
            if value is not None:                 # inherited by the leaves that set none (spec 6.7)
                queues[dept]["spec"][key] = value
    room = _Room(nodes)
    pods: list[dict] = []
    groups: list[dict] = []

    def job(j: int, running: bool) -> None:
        name = f"{'run' if running else 'pend'}{j}"
        # running jobs lean towards the first queues: those go over their share, the others stay under
        qname = draw(st.sampled_from(leaves[:1] * 2 + leaves if running else leaves))
        pclass = draw(st.sampled_from([None, "train", "train", "build-preemptible", "build", "inference"] if running
                                      else ["train", "build-preemptible", "build", "inference"]))
        preempt = draw(st.sampled_from([None, None, None, "preemptible", "non-preemptible"]))
        created = -3600 + j * 10 + (0 if running else 1800)
        podsets = []                          # (sub-group or None, minMember, pods, GPUs per pod)
        if _chance(draw, 20):
            for sg in ("workers", "ps"):
                mm = draw(st.integers(1, 2))
                podsets.append((sg, mm, mm + draw(st.integers(0, 1)), draw(st.sampled_from([1, 1, 2]))))
        else:
            mm = draw(st.integers(1, 3))
            podsets.append((None, mm, mm + draw(st.sampled_from([0, 0, 1, 2])),
                            draw(st.sampled_from([0, 1, 2, 2, 4] if running else [1, 2, 2, 4, 8]))))
        sub_groups = [{"name": sg, "minMember": mm} for sg, mm, _, _ in podsets if sg]
        constrained = None
        # running gangs carry constraints too: one that grows is pinned to the domains it runs in
        # (topology.pinned_domains), where its pods may already break the level (placed before)
        if topology and _chance(draw, 30 if running else 60):
            constrained = constraint(required=draw(st.sampled_from([None, *TOPOLOGY_LEVELS])),
                                     preferred=draw(st.sampled_from([None, TOPOLOGY_LEVELS[1]])))
        pg = pod_group(name, qname, min_member=sum(mm for _, mm, _, _ in podsets), priority_class=pclass,
                       preemptibility=preempt, sub_groups=sub_groups or None, created=created, topology=constrained)
        selector = {"pool": draw(st.sampled_from(["a", "b"]))} if _chance(draw, 10) else None
        # a host port some jobs want (one pod a node among them: as victims moved, and preemptors)
        ports = [(29500, "TCP")] if _chance(draw, 15) else []
        where: list[str | None] = []
        if running:
            # the fifth entry: the host port, one a node (what the kubelet admits)
            vecs = [[1000, GI, g, 1, 1 if ports else 0] for _, _, count, g in podsets for _ in range(count)]
            # each PodSet's first minMember pods are its core: they run together or not at all
            ranks = [(k, mm) for _, mm, count, _ in podsets for k in range(count)]
            core = [i for i, (k, mm) in enumerate(ranks) if k < mm]
            start = draw(st.integers(0, 9))
            placed = _take_all(room, start, [vecs[i] for i in core])
            if placed is None:
                running = False
            else:
                at = dict(zip(core, placed))
                for i in range(len(vecs)):
                    where.append(at[i] if i in at else (room.take(start + i, vecs[i]) if _chance(draw, 70) else None))
                if _chance(draw, 60):
                    pg["metadata"]["annotations"] = {LAST_START_ANNOTATION: ts(-draw(st.sampled_from([60, 600, 7200])))}
        groups.append(pg)
        i = 0
        for sg, _mm, count, g in podsets:
            for _ in range(count):
                w = where[i] if running else None
                pods.append(pod(f"{name}-{i}", name, cpu_m=1000, mem_b=GI, gpus=g,
                                phase="Running" if w else "Pending", node_name=w, queue_name=qname, subgroup=sg,
                                node_selector=selector, created=created + 1 + i, host_ports=ports))
                i += 1

    for j in range(draw(st.integers(2 * len(nodes), max(2 * len(nodes), max_running)))):
        job(j, True)
    for j in range(draw(st.integers(1, max_pending))):
        job(j, False)
    chosen = [a for a in EVICTING_ACTIONS if _chance(draw, 70)] or [draw(st.sampled_from(EVICTING_ACTIONS))]
    config: dict[str, Any] = {"actions": ", ".join(["allocate", *chosen])}
    if _chance(draw, 30):                    # explicit tiers: min-runtime protection only with the plugin
        tiers = placement_config()["tiers"]
        if _chance(draw, 80):
            args = {}
            if _chance(draw, 30):
                args["defaultPreemptMinRuntime"] = draw(st.sampled_from(["0s", "87600h"]))
            if _chance(draw, 30):
                args["defaultReclaimMinRuntime"] = draw(st.sampled_from(["0s", "87600h"]))
            if _chance(draw, 30):
                args["reclaimResolveMethod"] = draw(st.sampled_from(["lca", "queue"]))
            tiers[0]["plugins"].append({"name": "minruntime", **({"arguments": args} if args else {})})
        config["tiers"] = tiers
    return snapshot(nodes, queues, pods, groups, config=config,
                    topologies=[topology_object(TOPOLOGY, TOPOLOGY_LEVELS)] if topology else None)
