"""A snapshot to look at and change: what-if edits return a new `Cluster`, the original stays.

Why edits work on the snapshot document rather than on the engine's state: fair share, queue
accounting, topology trees and shared-GPU ledgers are all derived from the objects, so a
changed quota or node must go through the same loader and state builder as a real snapshot,
or the what-if would answer a question the engine never sees.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterable

import pandas as pd

from kai_cp.cycle import CycleSettings, run_cycle
from kai_cp.defaults import DEFAULT_SEED, DEFAULT_TIME_LIMIT, DEFAULT_WORKERS
from kai_cp.explore import tables
from kai_cp.loader import LoadedSnapshot, dump_snapshot, load_snapshot, load_snapshot_dict
from kai_cp.state import POD_GROUP_ANNOTATION, ClusterState, build_cluster_state

QUEUE_FIELDS = {"quota": "quota", "limit": "limit", "weight": "overQuotaWeight"}


@dataclass
class Cluster:
    """One snapshot (the document KAI's `/get-snapshot` serves, parsed)."""

    doc: dict[str, Any]
    name: str = "<snapshot>"

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Cluster":
        """A ZIP from `/get-snapshot` or its `snapshot.json` (also the in-cluster endpoint's)."""
        loaded = load_snapshot(path)
        c = cls(dump_snapshot(loaded.snapshot, loaded.raw_invalid), os.fspath(path))
        c.__dict__["loaded"] = loaded
        return c

    @classmethod
    def from_document(cls, doc: dict[str, Any], name: str = "<snapshot>") -> "Cluster":
        return cls(copy.deepcopy(doc), name)

    @cached_property
    def loaded(self) -> LoadedSnapshot:
        return load_snapshot_dict(self.doc, self.name)

    @property
    def state(self) -> ClusterState:
        """A fresh cluster state (a cycle consumes its state, so each caller gets its own)."""
        return build_cluster_state(self.loaded)

    @cached_property
    def _view(self) -> ClusterState:
        return self.state

    def warnings(self) -> pd.DataFrame:
        rows = [w.to_json() for w in self._view.warnings]
        return pd.DataFrame(rows, columns=sorted({k for r in rows for k in r}) or ["object", "field", "reason"])

    # ------------------------------------------------------------------ tables

    def queues(self, resource: str = "gpu") -> pd.DataFrame:
        """Deserved (quota), limit, over-quota weight, fair share, allocated and requested."""
        return tables.queues_table(self._view, resource)

    def jobs(self) -> pd.DataFrame:
        return tables.jobs_table(self._view)

    def nodes(self) -> pd.DataFrame:
        levels = [lv for t in self._view.topologies.values() for lv in t.levels]
        return tables.nodes_table(self._view, dict.fromkeys(levels))

    def shared_devices(self) -> pd.DataFrame:
        return tables.shared_devices_table(self._view)

    def domains(self, topology: str | None = None) -> pd.DataFrame:
        return tables.domains_table(self._view, topology)

    def capacity(self) -> dict[str, float]:
        """What fair share divides: the cluster's schedulable GPUs, cores and GiB."""
        return {r: tables.human(v, r) for r, v in self._view.total.items()}

    # ------------------------------------------------------------------ cycles

    def cycle(self, engine: str = "cp-sat", time_limit: float = DEFAULT_TIME_LIMIT, seed: int = DEFAULT_SEED,
              workers: int = DEFAULT_WORKERS, now: float | None = None, log: bool = False):
        """One scheduling cycle, as `kai-cp solve` runs it."""
        from kai_cp.explore.cycle import Cycle
        settings = CycleSettings(engine=engine, time_limit=time_limit, seed=seed, workers=workers, log=log, now=now)
        return Cycle(run_cycle(self.state, settings))

    def simulate(self, cycles: int, engine: str = "cp-sat", time_limit: float = DEFAULT_TIME_LIMIT,
                 arrivals: Callable[[int], Iterable[dict]] | None = None, runtime: int | None = None,
                 now: float | None = None, progress: bool = True, seed: int = DEFAULT_SEED):
        """Cycles in a row on a copy of this cluster (see `kai_cp.explore.simulation`)."""
        from kai_cp.explore.simulation import Simulation
        settings = CycleSettings(engine=engine, time_limit=time_limit, seed=seed, now=now)
        return Simulation.run(self, cycles, settings, arrivals=arrivals, runtime=runtime, progress=progress)

    # ------------------------------------------------------------------ what-if edits

    def copy(self) -> "Cluster":
        return Cluster(copy.deepcopy(self.doc), self.name)

    def _edited(self, edit: Callable[[dict[str, Any]], None], what: str) -> "Cluster":
        c = self.copy()
        edit(c.doc["rawObjects"])
        c.name = f"{self.name} [{what}]"
        return c

    def with_queue(self, name: str, resource: str = "gpu", *, quota: float | None = None,
                   limit: float | None = None, weight: float | None = None, priority: int | None = None) -> "Cluster":
        """The cluster with one queue changed (quota/limit in GPUs, cores or MB as in the Queue
        object; -1 for unlimited)."""
        if resource not in tables.UNITS:
            raise ValueError(f"resource must be one of {', '.join(tables.UNITS)}, not {resource!r}")

        def edit(raw: dict[str, Any]) -> None:
            q = _find(raw.get("queues", []), name, "queue")
            spec = q.setdefault("spec", {})
            if priority is not None:
                spec["priority"] = int(priority)
            res = spec.setdefault("resources", {}).setdefault(resource, {})
            for arg, value in (("quota", quota), ("limit", limit), ("weight", weight)):
                if value is not None:
                    res[QUEUE_FIELDS[arg]] = value
        changes = ", ".join(f"{k}={v}" for k, v in (("quota", quota), ("limit", limit), ("weight", weight),
                                                      ("priority", priority)) if v is not None)
        return self._edited(edit, f"{name}: {changes}")

    def with_job(self, name: str, *, queue: str | None = None, priority_class: str | None = None,
                 preemptible: bool | None = None, min_member: int | None = None, delete: bool = False) -> "Cluster":
        """The cluster with one PodGroup changed, or deleted with its pods."""
        def edit(raw: dict[str, Any]) -> None:
            pg = _find(raw.get("podGroups", []), name, "PodGroup")
            if delete:
                raw["podGroups"] = [g for g in raw["podGroups"] if g is not pg]
                raw["pods"] = [p for p in raw.get("pods", [])
                               if (p.get("metadata", {}).get("annotations") or {}).get(POD_GROUP_ANNOTATION) != name]
                return
            spec = pg.setdefault("spec", {})
            if queue is not None:
                spec["queue"] = queue
            if priority_class is not None:
                spec["priorityClassName"] = priority_class
            if preemptible is not None:
                spec["preemptibility"] = "preemptible" if preemptible else "non-preemptible"
            if min_member is not None:
                spec["minMember"] = int(min_member)
        return self._edited(edit, f"job {name}" + (" deleted" if delete else " changed"))

    def with_nodes(self, names: Iterable[str], *, cordon: bool | None = None, remove: bool = False,
                   labels: dict[str, str | None] | None = None) -> "Cluster":
        """The cluster with nodes cordoned, relabelled (None removes a label) or removed (their
        pods go back to pending, as after a node failure)."""
        wanted = set(names)

        def edit(raw: dict[str, Any]) -> None:
            nodes = [n for n in raw.get("nodes", []) if n.get("metadata", {}).get("name") in wanted]
            missing = wanted - {n["metadata"]["name"] for n in nodes}
            if missing:
                raise KeyError(f"no node named {', '.join(sorted(missing))}")
            if remove:
                raw["nodes"] = [n for n in raw["nodes"] if n["metadata"]["name"] not in wanted]
                for p in raw.get("pods", []):
                    spec = p.get("spec") or {}
                    if spec.get("nodeName") in wanted:
                        spec.pop("nodeName", None)
                        p.setdefault("status", {})["phase"] = "Pending"
                return
            for n in nodes:
                if cordon is not None:
                    n.setdefault("spec", {})["unschedulable"] = cordon
                if labels:
                    lab = n["metadata"].setdefault("labels", {})
                    for k, v in labels.items():
                        if v is None:
                            lab.pop(k, None)
                        else:
                            lab[k] = v
        return self._edited(edit, f"{len(wanted)} node(s) changed")

    def with_node_pool(self, value: str, label_key: str | None = None) -> "Cluster":
        """The cluster seen by the scheduler of one node pool (KAI's partition: nodes, queues and
        PodGroups carrying the pool label)."""
        c = self.copy()
        params = c.doc.setdefault("schedulerParams", {}) or {}
        c.doc["schedulerParams"] = params
        part = params.setdefault("partitionParams", {})
        part["NodePoolLabelValue"] = value
        if label_key is not None:
            part["NodePoolLabelKey"] = label_key
        c.name = f"{self.name} [node pool {value}]"
        return c

    def with_actions(self, *actions: str) -> "Cluster":
        """The cluster scheduled with another action list (e.g. allocate only: no evictions)."""
        c = self.copy()
        config = c.doc.get("config") or {}
        c.doc["config"] = {**config, "actions": ", ".join(actions)}
        c.name = f"{self.name} [actions {', '.join(actions)}]"
        return c

    def with_jobs(self, objects: Iterable[dict[str, Any]]) -> "Cluster":
        """The cluster with more objects (a PodGroup and its pods, see `job_objects`)."""
        objs = list(objects)
        return self._edited(lambda raw: add_objects(raw, objs), f"{len(objs)} object(s) added")


def _find(objs: list[dict[str, Any]], name: str, kind: str) -> dict[str, Any]:
    for o in objs:
        if o.get("metadata", {}).get("name") == name:
            return o
    raise KeyError(f"no {kind} named {name!r}")


def add_objects(raw: dict[str, Any], objs: Iterable[dict[str, Any]]) -> None:
    """Append PodGroups and Pods (by their `kind`) to a snapshot's rawObjects."""
    for o in objs:
        kind = o.get("kind")
        key = {"PodGroup": "podGroups", "Pod": "pods"}.get(kind)
        if key is None:
            raise ValueError(f"only PodGroup and Pod objects can be added, not {kind!r}")
        raw.setdefault(key, []).append(copy.deepcopy(o))


def job_objects(name: str, queue: str, pods: int = 1, gpus: float = 1, *, namespace: str | None = None,
                min_member: int | None = None, priority_class: str | None = None, cpu: str = "4",
                memory: str = "16Gi", topology: str | None = None, required_level: str | None = None,
                preferred_level: str | None = None, created: str = "2025-06-02T12:00:00Z",
                scheduler_name: str = "kai-scheduler") -> list[dict[str, Any]]:
    """A PodGroup and its pending pods, as a workload controller would create them. `gpus` below
    1 asks for a fraction of one GPU (the `gpu-fraction` annotation), otherwise whole GPUs."""
    ns = namespace or f"runai-{queue}"
    spec: dict[str, Any] = {"minMember": pods if min_member is None else min_member, "queue": queue}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if topology:
        spec["topologyConstraint"] = {"topology": topology,
                                      **({"requiredTopologyLevel": required_level} if required_level else {}),
                                      **({"preferredTopologyLevel": preferred_level} if preferred_level else {})}
    meta = {"namespace": ns, "creationTimestamp": created, "labels": {"kai.scheduler/queue": queue}}
    out = [{"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "uid": f"pg-{ns}-{name}", **meta}, "spec": spec}]
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    annotations = {POD_GROUP_ANNOTATION: name}
    if 0 < gpus < 1:
        annotations["gpu-fraction"] = str(gpus)
    elif gpus >= 1:
        requests["nvidia.com/gpu"] = str(int(gpus))
    for i in range(pods):
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-{i}", "uid": f"pod-{ns}-{name}-{i}",
                                 **{**meta, "annotations": dict(annotations)}},
                    "spec": {"schedulerName": scheduler_name,
                             **({"priorityClassName": priority_class} if priority_class else {}),
                             "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                             "containers": [{"name": "main", "resources": {"requests": requests,
                                                                           **({"limits": {"nvidia.com/gpu": requests["nvidia.com/gpu"]}}
                                                                              if "nvidia.com/gpu" in requests else {})}}]},
                    "status": {"phase": "Pending"}})
    return out
