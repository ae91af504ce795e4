"""Objects trimmed to the fields the scheduler reads, before they are parsed into models.

A pod as the API server returns it carries managedFields, env, probes, volume mounts and
status details the scheduler never looks at; keeping them would double the cache's memory
and its parse time. What is kept is what kai_cp/state.py, predicates and the snapshot read.
"""

from __future__ import annotations

from typing import Any, Callable

_META_KEYS = ("name", "namespace", "uid", "resourceVersion", "labels", "annotations", "creationTimestamp",
              "deletionTimestamp", "ownerReferences", "generation")
_POD_SPEC_KEYS = ("schedulerName", "nodeName", "overhead", "nodeSelector", "affinity", "tolerations",
                  "schedulingGates", "priorityClassName", "priority", "preemptionPolicy", "resourceClaims",
                  "topologySpreadConstraints", "hostNetwork")
_CONTAINER_KEYS = ("name", "resources", "ports")
_INIT_CONTAINER_KEYS = _CONTAINER_KEYS + ("restartPolicy",)      # "Always": a sidecar, counted beside the containers
_VOLUME_KEEP = ("persistentVolumeClaim", "ephemeral")


def trim_meta(meta: dict[str, Any] | None) -> dict[str, Any]:
    meta = meta or {}
    out = {k: meta[k] for k in _META_KEYS if k in meta and meta[k] is not None}
    ann = out.get("annotations")
    if ann and "kubectl.kubernetes.io/last-applied-configuration" in ann:
        out["annotations"] = {k: v for k, v in ann.items() if k != "kubectl.kubernetes.io/last-applied-configuration"}
    return out


def _containers(items: list | None, keys: tuple[str, ...] = _CONTAINER_KEYS) -> list:
    return [{k: c[k] for k in keys if k in c} for c in (items or []) if isinstance(c, dict)]


def trim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec") or {}
    tspec = {k: spec[k] for k in _POD_SPEC_KEYS if k in spec}
    tspec["containers"] = _containers(spec.get("containers"))
    if spec.get("initContainers"):
        tspec["initContainers"] = _containers(spec.get("initContainers"), _INIT_CONTAINER_KEYS)
    vols = [v for v in spec.get("volumes") or [] if isinstance(v, dict) and any(k in v for k in _VOLUME_KEEP)]
    if vols:
        tspec["volumes"] = vols
    status = obj.get("status") or {}
    tstatus = {k: status[k] for k in ("phase", "nominatedNodeName") if k in status}
    conds = [c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "PodScheduled"]
    if conds:
        tstatus["conditions"] = conds
    return {"metadata": trim_meta(obj.get("metadata")), "spec": tspec, "status": tstatus}


def trim_node(obj: dict[str, Any]) -> dict[str, Any]:
    meta = trim_meta(obj.get("metadata"))
    meta.pop("annotations", None)   # node annotations are large (CSI, volumes) and never read
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "metadata": meta,
        "spec": {k: spec[k] for k in ("unschedulable", "taints") if k in spec},
        "status": {
            "allocatable": status.get("allocatable") or {},
            "capacity": status.get("capacity") or {},
            "conditions": [{k: c[k] for k in ("type", "status") if k in c}
                           for c in status.get("conditions") or [] if isinstance(c, dict)],
        },
    }


def trim_generic(obj: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}
    out["metadata"] = trim_meta(obj.get("metadata"))
    return out


TRIMMERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "pods": trim_pod,
    "nodes": trim_node,
}


def trimmer(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return TRIMMERS.get(key, trim_generic)
