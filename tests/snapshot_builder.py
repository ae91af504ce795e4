"""A tiny builder of KAI snapshot documents for unit tests.

Objects are plain dicts shaped like the ones ../shared/kai-scenarios/build_snapshot.py
produces (Kubernetes JSON, camelCase). Every helper returns a new dict; `snapshot()` wraps
lists of them into the document `solve` reads.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Iterable

from kai_cp.loader import load_snapshot_dict
from kai_cp.state import build_cluster_state

TS = "2026-01-01T00:00:00Z"

DEFAULT_CONFIG = {
    "actions": "allocate, consolidation, reclaim, preempt, stalegangeviction",
    "tiers": [{"plugins": [{"name": "predicates"}, {"name": "proportion"}, {"name": "priority"},
                           {"name": "elastic"}, {"name": "taskorder"},
                           {"name": "nodeplacement", "arguments": {"cpu": "binpack", "gpu": "binpack"}}]}],
}
DEFAULT_PARAMS = {
    "schedulerName": "kai-scheduler",
    "partitionParams": {"NodePoolLabelKey": "kai.scheduler/node-pool", "NodePoolLabelValue": ""},
    "maxNumberConsolidationPreemptees": 16,
    "useSchedulingSignatures": True,
    "fullHierarchyFairness": True,
    "allowConsolidatingReclaim": True,
    "queueLabelKey": "kai.scheduler/queue",
}
PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


def ts(seconds: int = 0) -> str:
    """An RFC 3339 timestamp `seconds` after 2026-01-01T00:00:00Z (seconds < 86400)."""
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"2026-01-01T{h:02d}:{m:02d}:{s:02d}Z"


def node(name: str, cpu: str = "8", memory: str = "32Gi", gpu: int | str = 0, pods: str = "110", *,
         labels: dict | None = None, taints: list | None = None, unschedulable: bool = False,
         conditions: dict[str, str] | None = None, extra: dict[str, str] | None = None) -> dict:
    alloc = {"cpu": str(cpu), "memory": str(memory), "pods": str(pods)}
    if gpu:
        alloc["nvidia.com/gpu"] = str(gpu)
    alloc.update(extra or {})
    conds = {"Ready": "True"}
    if conditions:
        conds.update(conditions)
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    lab = {"kubernetes.io/hostname": name}
    if gpu:
        lab["nvidia.com/gpu.memory"] = "40000"
    lab.update(labels or {})
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-node-{name}", "creationTimestamp": TS, "labels": lab},
        "spec": spec,
        "status": {"capacity": dict(alloc), "allocatable": alloc,
                   "conditions": [{"type": t, "status": s} for t, s in conds.items()]},
    }


def resources(quota=-1, limit=-1, weight=1) -> dict:
    return {"quota": quota, "limit": limit, "overQuotaWeight": weight}


def queue(name: str, parent: str | None = None, *, gpu=None, cpu=None, memory=None, priority: int | None = None,
          display: str | None = None, labels: dict | None = None, created: int = 0, raw_resources: dict | None = None) -> dict:
    spec: dict[str, Any] = {}
    if raw_resources is not None:
        spec["resources"] = raw_resources
    else:
        spec["resources"] = {"gpu": gpu or resources(), "cpu": cpu or resources(), "memory": memory or resources()}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    if display:
        spec["displayName"] = display
    meta: dict[str, Any] = {"name": name, "uid": f"uid-queue-{name}", "creationTimestamp": ts(created)}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": meta, "spec": spec, "status": {}}


def podgroup(name: str, queue: str = "q", min_member: int | None = 1, *, namespace: str = "default",
             priority_class: str | None = "train", preemptibility: str | None = None, created: int = 0,
             sub_groups: list | None = None, labels: dict | None = None, spec_extra: dict | None = None) -> dict:
    spec: dict[str, Any] = {"queue": queue}
    if min_member is not None:
        spec["minMember"] = min_member
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if preemptibility is not None:
        spec["preemptibility"] = preemptibility
    if sub_groups is not None:
        spec["subGroups"] = sub_groups
    spec.update(spec_extra or {})
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-pg-{name}",
                            "creationTimestamp": ts(created)}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": meta, "spec": spec,
            "status": {}}


def pod(name: str, group: str | None = None, cpu: str | None = "1", memory: str | None = "1Gi", gpu: int | None = None, *,
        namespace: str = "default", phase: str = "Pending", node: str | None = None, labels: dict | None = None,
        annotations: dict | None = None, scheduler: str = "kai-scheduler", created: int = 0,
        deleting: bool = False, gates: list | None = None, node_selector: dict | None = None,
        affinity: dict | None = None, tolerations: list | None = None, containers: list | None = None,
        init_containers: list | None = None, overhead: dict | None = None, uid: str | None = None) -> dict:
    if containers is None:
        req: dict[str, str] = {}
        if cpu is not None:
            req["cpu"] = cpu
        if memory is not None:
            req["memory"] = memory
        if gpu:
            req["nvidia.com/gpu"] = str(gpu)
        containers = [{"name": "main", "image": "busybox", "resources": {"requests": req}}]
    spec: dict[str, Any] = {"containers": containers, "schedulerName": scheduler}
    if init_containers:
        spec["initContainers"] = init_containers
    if overhead:
        spec["overhead"] = overhead
    if node:
        spec["nodeName"] = node
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = tolerations
    ann = dict(annotations or {})
    if group is not None:
        ann["pod-group-name"] = group
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-pod-{namespace}-{name}",
                            "creationTimestamp": ts(created), "labels": dict(labels or {}), "annotations": ann}
    if deleting:
        meta["deletionTimestamp"] = TS
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def container(name: str = "c", **requests: str) -> dict:
    return {"name": name, "image": "busybox", "resources": {"requests": dict(requests)}}


def priority_class(name: str, value: int, global_default: bool = False) -> dict:
    d = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
         "metadata": {"name": name, "uid": f"uid-pc-{name}", "creationTimestamp": TS}, "value": value}
    if global_default:
        d["globalDefault"] = True
    return d


def bind_request(pod_name: str, node_name: str, *, namespace: str = "default", phase: str | None = None) -> dict:
    d: dict[str, Any] = {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
                         "metadata": {"name": f"br-{pod_name}", "namespace": namespace, "uid": f"uid-br-{pod_name}",
                                      "creationTimestamp": TS},
                         "spec": {"podName": pod_name, "selectedNode": node_name}, "status": {}}
    if phase:
        d["status"] = {"phase": phase}
    return d


def snapshot(nodes: Iterable[dict] = (), queues: Iterable[dict] | None = None, podgroups: Iterable[dict] = (),
             pods: Iterable[dict] = (), *, priority_classes: Iterable[dict] | None = None,
             bind_requests: Iterable[dict] = (), config: dict | None = None, params: Any = "default") -> dict:
    """The snapshot document. `queues=None` gives one top-level unlimited queue `q`;
    `params="default"` gives a KAI-like schedulerParams, None leaves the key out."""
    if queues is None:
        queues = [queue("q")]
    if priority_classes is None:
        priority_classes = [priority_class(n, v) for n, v in PRIORITY_CLASSES.items()]
    doc: dict[str, Any] = {
        "config": copy.deepcopy(config if config is not None else DEFAULT_CONFIG),
        "rawObjects": {
            "pods": list(pods), "nodes": list(nodes), "queues": list(queues), "podGroups": list(podgroups),
            "bindRequests": list(bind_requests), "priorityClasses": list(priority_classes),
            "configMaps": [], "persistentVolumeClaims": [], "csiStorageCapacities": [], "storageClasses": [],
            "csiDrivers": [], "resourceClaims": [], "resourceSlices": [], "deviceClasses": [], "topologies": [],
        },
    }
    if params == "default":
        doc["schedulerParams"] = copy.deepcopy(DEFAULT_PARAMS)
    elif params is not None:
        doc["schedulerParams"] = params
    return doc


def state_of(doc: dict):
    """build_cluster_state of a snapshot document."""
    return build_cluster_state(load_snapshot_dict(copy.deepcopy(doc), "test.json"))


def write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def solve_doc(doc: dict, engine: str = "greedy", time_limit: float = 1.0) -> dict:
    """Run one cycle in-process and return the `solve` output document."""
    from kai_cp.cycle import CycleSettings, run_cycle
    result = run_cycle(state_of(doc), CycleSettings(engine=engine, time_limit=time_limit))
    return json.loads(json.dumps(result.to_json()))
