"""Builders for the objects tests and benches create: nodes, queues, PodGroups, pods."""

from __future__ import annotations

from integration.kube import ApiError, Kube, object_path

POOL_KEY = "kai.scheduler/node-pool"


def node(name: str, cpu: str = "8", memory: str = "32Gi", gpus: int = 0, pool: str | None = None,
         labels: dict | None = None) -> dict:
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    lab = {"kubernetes.io/hostname": name, **(labels or {})}
    if pool:
        lab[POOL_KEY] = pool
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lab},
            "status": {"allocatable": alloc, "capacity": alloc,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}]}}


def create_node(kube: Kube, body: dict) -> None:
    """Nodes carry their status in the create (the API server keeps it for nodes); patch it to be sure."""
    try:
        kube.create("/api/v1/nodes", body)
    except ApiError as e:
        if e.status != 409:
            raise
    name = body["metadata"]["name"]
    kube.patch(f"/api/v1/nodes/{name}/status", {"status": body["status"]})
    # The NodeRestriction/TaintNodesByCondition admission adds node.kubernetes.io/not-ready at creation;
    # with no node lifecycle controller to lift it, the test lifts it (the node is Ready).
    kube.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": (body.get("spec") or {}).get("taints")}})


def queue(name: str, parent: str | None = None, gpu_quota: float = -1, pool: str | None = None,
          gpu_limit: float = -1, priority: int | None = None) -> dict:
    res = {"gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": 1},
           "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
           "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}
    spec = {"resources": res}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    meta = {"name": name}
    if pool:
        meta["labels"] = {POOL_KEY: pool}
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": meta, "spec": spec}


def podgroup(name: str, namespace: str, queue_name: str, min_member: int, pool: str | None = None,
             priority_class: str | None = None) -> dict:
    meta = {"name": name, "namespace": namespace}
    if pool:
        meta["labels"] = {POOL_KEY: pool}
    spec = {"minMember": min_member, "queue": queue_name}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": meta, "spec": spec}


def pod(name: str, namespace: str, group: str, cpu: str = "1", memory: str = "1Gi", gpus: int = 0,
        scheduler: str = "kai-scheduler") -> dict:
    req = {"cpu": cpu, "memory": memory}
    if gpus:
        req["nvidia.com/gpu"] = str(gpus)
    res = {"requests": req, **({"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {})}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {"pod-group-name": group}},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "busybox", "resources": res}]}}


def create(kube: Kube, body: dict) -> dict:
    gv = body["apiVersion"]
    plural = {"Queue": "queues", "PodGroup": "podgroups", "Pod": "pods", "Namespace": "namespaces",
              "Node": "nodes", "PriorityClass": "priorityclasses", "PersistentVolumeClaim": "persistentvolumeclaims",
              "StorageClass": "storageclasses"}[body["kind"]]
    return kube.create(object_path(gv, plural, body["metadata"].get("namespace")), body)


def namespace(kube: Kube, name: str) -> None:
    try:
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except ApiError as e:
        if e.status != 409:
            raise
