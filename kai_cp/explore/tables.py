"""A cluster state as pandas tables, in the units people read (GPUs, cores, GiB).

Why a module of its own: the same tables describe a snapshot before a cycle and, with the
cycle's decisions applied (`kai_cp.explore.cycle`), after it; both read the engine's state
and never recompute what the engine decided.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Iterable

import numpy as np
import pandas as pd

from kai_cp.gpu_sharing import task_memory
from kai_cp.jobs import ACTIVE_ALLOCATED, PENDING, PIPELINED, RELEASING, JobInfo, TaskInfo, queue_gpu_of_accepted
from kai_cp.queues import UNLIMITED, QueueInfo, ancestors
from kai_cp.state import ClusterState

#: Display unit per resource: (column suffix, divisor of the engine's unit).
UNITS = {"gpu": ("gpu", 1), "cpu": ("cores", 1000), "memory": ("GiB", 2 ** 30)}


def human(value: Fraction | int, resource: str) -> float:
    """Engine units to display units; the -1 of "unlimited" becomes infinity."""
    if value == UNLIMITED:
        return math.inf
    return float(Fraction(value) / UNITS[resource][1])


def queue_depth(queues: dict[str, QueueInfo], name: str) -> int:
    return len(ancestors(queues, name)) - 1


def queues_table(state: ClusterState, resource: str = "gpu",
                 allocated: dict[str, Fraction] | None = None) -> pd.DataFrame:
    """One row per queue (tree order: parents before their children). `allocated` overrides
    the snapshot's allocation per queue (a cycle's result)."""
    if resource not in UNITS:
        raise ValueError(f"resource must be one of {', '.join(UNITS)}, not {resource!r}")
    qs = state.queues
    rows = []
    for q in _tree_order(qs):
        alloc = q.allocated[resource] if allocated is None else allocated.get(q.name, q.allocated[resource])
        rows.append({
            "queue": q.name, "parent": q.parent, "depth": queue_depth(qs, q.name), "leaf": q.is_leaf,
            "priority": q.priority,
            "deserved": human(q.deserved[resource], resource), "limit": human(q.limit[resource], resource),
            "weight": float(q.weight[resource]),
            "fair_share": human(q.fair_share[resource], resource),
            "allocated": human(alloc, resource),
            "requested": human(q.request[resource], resource),
        })
    df = pd.DataFrame(rows).set_index("queue")
    df.attrs["unit"] = UNITS[resource][0]
    return df


def _tree_order(qs: dict[str, QueueInfo]) -> list[QueueInfo]:
    out: list[QueueInfo] = []

    def visit(q: QueueInfo) -> None:
        out.append(q)
        for c in sorted(q.children):
            if c in qs:
                visit(qs[c])

    for q in sorted((q for q in qs.values() if q.parent is None or q.parent not in qs), key=lambda q: q.name):
        visit(q)
    return out


def task_gpus(state: ClusterState, task: TaskInfo, node: str | None = None) -> float:
    """GPUs a pod counts for (shared GPUs as their fraction, GPU memory by the node's device)."""
    node = node or task.node
    info = state.nodes[state.table.index[node]] if node in state.table.index else None
    return float(queue_gpu_of_accepted(task, info.gpu_memory if info else None))


def job_status(job: JobInfo) -> str:
    running = sum(1 for t in job.tasks if t.status in ACTIVE_ALLOCATED)
    pending = sum(1 for t in job.tasks if t.status == PENDING)
    if pending and running:
        return "partly running"
    if pending:
        return "pending"
    if running:
        return "running"
    return "other"


def jobs_table(state: ClusterState) -> pd.DataFrame:
    rows = []
    for job in sorted(state.jobs.values(), key=lambda j: j.name):
        tasks = job.tasks
        c = job.topology_constraint
        rows.append({
            "job": job.name, "namespace": job.namespace, "queue": job.queue, "priority": job.priority,
            "preemptible": job.preemptible, "pods": len(tasks),
            "min_member": sum(ps.min_available for ps in job.podsets.values()),
            "gpus": sum(float(t.request.pending_gpus(state.gpu_memory_divisor)) for t in tasks),
            "shared_gpu": any(t.request.is_shared_gpu for t in tasks),
            "status": job_status(job),
            "required_level": getattr(c, "required_topology_level", None) if c is not None else None,
            "preferred_level": getattr(c, "preferred_topology_level", None) if c is not None else None,
            "problems": "; ".join(job.problems),
        })
    return pd.DataFrame(rows).set_index("job") if rows else pd.DataFrame(columns=["job"]).set_index("job")


def nodes_table(state: ClusterState, levels: Iterable[str] = ()) -> pd.DataFrame:
    """Per node: GPUs (whole devices), idle and releasing; CPU and memory left; shared devices;
    the label of each given topology level."""
    t = state.table
    col = t.col
    rows = []
    for n in state.nodes:
        i = n.index
        rows.append({
            "node": n.name, "ready": bool(t.ready[i]), "reason": n.not_ready_reason,
            "gpus": int(t.allocatable[i, col["gpu"]]), "gpus_idle": int(t.idle[i, col["gpu"]]),
            "gpus_releasing": int(t.releasing[i, col["gpu"]]),
            "shared_devices": sum(1 for g in n.gpu_groups.values() if g.used > 0),
            "cores_idle": float(t.idle[i, col["cpu"]]) / 1000, "memory_idle_GiB": float(t.idle[i, col["memory"]]) / 2 ** 30,
            "gpu_memory_MiB": n.gpu_memory,
            **{lv: n.labels.get(lv) for lv in levels},
        })
    columns = ["node", "ready", "reason", "gpus", "gpus_idle", "gpus_releasing", "shared_devices", "cores_idle",
               "memory_idle_GiB", "gpu_memory_MiB", *levels]
    return pd.DataFrame(rows, columns=columns).set_index("node")


def shared_devices_table(state: ClusterState) -> pd.DataFrame:
    """One row per pod on a shared GPU: its node, device (GPU group), the share of the device's
    memory it holds and whether it is releasing; what stacked-fraction plots draw."""
    rows = []
    by_key = {t.key: t for t in state.tasks}
    for n in state.nodes:
        for gid, grp in sorted(n.gpu_groups.items()):
            for key in grp.tasks:
                task = by_key.get(key)
                if task is None:
                    continue
                mem = task_memory(task.request, n.gpu_memory)
                rows.append({"node": n.name, "device": gid, "pod": key, "job": task.job,
                             "memory_MiB": mem, "fraction": mem / n.gpu_memory if n.gpu_memory else np.nan,
                             "state": "releasing" if task.status == RELEASING else
                             ("pipelined" if task.status == PIPELINED else "running")})
    return pd.DataFrame(rows, columns=["node", "device", "pod", "job", "memory_MiB", "fraction", "state"])


def domains_table(state: ClusterState, topology: str | None = None) -> pd.DataFrame:
    """Every domain of a topology tree (one row per level and domain): its parent, nodes, GPUs
    and idle GPUs, so a tree can be drawn or filtered by level."""
    if not state.topologies:
        return pd.DataFrame(columns=["level", "domain", "parent", "nodes", "gpus", "gpus_idle"])
    name = topology or sorted(state.topologies)[0]
    tree = state.topologies[name]
    gcol = state.table.col["gpu"]
    alloc = state.table.allocatable[:, gcol]
    idle = state.table.idle[:, gcol]
    rows = []
    for lv, label in enumerate(tree.levels):
        dom = tree.domain[lv]
        for d, dname in enumerate(tree.names[lv]):
            mask = dom == d
            parent = tree.names[lv - 1][int(tree.parent[lv][d])] if lv > 0 else None
            rows.append({"level": label, "depth": lv, "domain": dname, "parent": parent, "nodes": int(mask.sum()),
                         "gpus": int(alloc[mask].sum()), "gpus_idle": int(idle[mask].sum())})
    df = pd.DataFrame(rows)
    df.attrs["topology"] = name
    return df
