"""Invariants of one scheduling cycle, on generated clusters, for both engines.

Why: each engine (KAI's greedy allocate and the CP-SAT model warm-started from it) must keep
the rules a real cluster relies on, whatever the cluster looks like. The checks below read the
raw snapshot document and the cycle's JSON decisions (interfaces.md section 2) and re-derive
everything themselves (quantities, pod states, predicates, queue trees, priorities), sharing no
code with the engine; kai_cp.validate.violations is asserted as well, as a second opinion.

Checked on every generated cluster, for `--engine greedy` and `--engine cp-sat`:
- node capacity (cpu, memory, nvidia.com/gpu, pods): running/bound/binding/releasing pods plus
  new binds fit allocatable, and so do non-releasing pods plus binds plus pipelined pods
  (a pipelined pod may count on capacity that releasing pods are giving back, spec 1.5; with no
  releasing pod on a node this is "everything placed fits allocatable");
- every placed pod was pending with no node, is placed once, and its node is in the node pool,
  Ready, schedulable, without pressure, matches its nodeSelector and required node affinity, and
  has no NoSchedule/NoExecute taint it does not tolerate;
- gangs: each PodGroup with a pod placed this cycle has at least minMember pods (per leaf
  sub-group) allocated after the cycle;
- queue limits and the non-preemptible quota at every level of the queue tree;
- no evictions (allocation only: the cycle runs the allocate action alone); every PodGroup left
  with pending pods is explained;
- cp-sat is never worse than greedy: objective >= greedy objective, every job greedy starts is
  started, at least as many GPUs placed; and the greedy engine's decisions equal the greedy
  baseline inside the cp-sat cycle.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, example, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clustergen import EXTENDED, clusters  # noqa: E402

from kai_cp.cycle import CycleSettings, run_cycle  # noqa: E402
from kai_cp.loader import load_snapshot_dict  # noqa: E402
from kai_cp.state import build_cluster_state  # noqa: E402
from kai_cp.validate import violations  # noqa: E402

TIME_LIMIT = 0.5
RES = ("cpu", "memory", "gpu", "pods", EXTENDED)
QRES = ("cpu", "memory", "gpu")
_SUFFIX = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9,
           "T": 10 ** 12, "m": Fraction(1, 1000)}
PRESSURE = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


# ------------------------------------------------------------------------------------------------
# an independent reading of the raw snapshot
# ------------------------------------------------------------------------------------------------

def quantity(text: str | int | float) -> Fraction:
    text = str(text).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            return Fraction(text[: -len(suffix)]) * _SUFFIX[suffix]
    return Fraction(text)


def pod_request(p: dict) -> dict[str, Fraction]:
    """Containers summed, init containers max'ed in (sidecars summed too); cpu in millicores, memory in bytes."""
    def one(reqs: dict) -> dict[str, Fraction]:
        return {"cpu": quantity(reqs.get("cpu", "0")) * 1000, "memory": quantity(reqs.get("memory", "0")),
                "gpu": quantity(reqs.get("nvidia.com/gpu", "0")), EXTENDED: quantity(reqs.get(EXTENDED, "0"))}
    spec = p["spec"]
    total = {"cpu": Fraction(0), "memory": Fraction(0), "gpu": Fraction(0), EXTENDED: Fraction(0)}
    for c in spec.get("containers", []):
        for k, v in one(c.get("resources", {}).get("requests", {})).items():
            total[k] += v
    # init containers one at a time, each beside the sidecars (restartPolicy Always) started
    # before it; a sidecar also runs beside the containers (Kubernetes' PodRequests)
    sidecars, peak = dict.fromkeys(total, Fraction(0)), dict.fromkeys(total, Fraction(0))
    for c in spec.get("initContainers", []) or []:
        own = one(c.get("resources", {}).get("requests", {}))
        if c.get("restartPolicy") == "Always":
            for k, v in own.items():
                total[k] += v
                sidecars[k] += v
            own = dict(sidecars)
        else:
            own = {k: v + sidecars[k] for k, v in own.items()}
        for k, v in own.items():
            peak[k] = max(peak[k], v)
    for k, v in peak.items():
        total[k] = max(total[k], v)
    total["memory"] = Fraction(math.ceil(total["memory"]))
    total["pods"] = Fraction(1)
    return total


def key(p: dict) -> str:
    return f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}"


class Raw:
    """What the snapshot says, read without the engine."""

    def __init__(self, doc: dict[str, Any]):
        raw = doc["rawObjects"]
        self.nodes = {n["metadata"]["name"]: n for n in raw["nodes"]}
        self.pool = {name for name, n in self.nodes.items()
                     if "kai.scheduler/node-pool" not in n["metadata"].get("labels", {})}
        self.alloc = {name: {"cpu": quantity(n["status"]["allocatable"].get("cpu", "0")) * 1000,
                             "memory": quantity(n["status"]["allocatable"].get("memory", "0")),
                             "gpu": quantity(n["status"]["allocatable"].get("nvidia.com/gpu", "0")),
                             "pods": quantity(n["status"]["allocatable"].get("pods", "0")),
                             EXTENDED: quantity(n["status"]["allocatable"].get(EXTENDED, "0"))}
                      for name, n in self.nodes.items()}
        self.pods = {key(p): p for p in raw["pods"]}
        self.request = {k: pod_request(p) for k, p in self.pods.items()}
        self.gpu_memory = {name: int(n["metadata"].get("labels", {}).get("nvidia.com/gpu.memory", "100")) // 100 * 100
                           for name, n in self.nodes.items()}
        # shared GPUs: (portion or None, MiB or None, devices) per fractional pod; the groups a pod is in
        self.shared: dict[str, tuple[Fraction | None, int | None, int]] = {}
        self.groups_of: dict[str, list[str]] = {}
        for k, p in self.pods.items():
            ann = p["metadata"].get("annotations", {})
            labels = p["metadata"].get("labels", {})
            if labels.get("app") == "kai-resource-reservation":
                self.request[k]["gpu"] = Fraction(0)       # its GPU is the shared group's (counted per group)
            if "gpu-fraction" in ann or "gpu-memory" in ann:
                self.shared[k] = (Fraction(ann["gpu-fraction"]) if "gpu-fraction" in ann else None,
                                  int(ann["gpu-memory"]) if "gpu-memory" in ann else None,
                                  int(ann.get("gpu-fraction-num-devices", "1")))
            self.groups_of[k] = sorted({v for lk, v in labels.items()
                                        if lk == "runai-gpu-group" or lk.startswith("runai-gpu-group/")})
        binding = {(b["metadata"]["namespace"], b["spec"]["podName"]): b["spec"]["selectedNode"]
                   for b in raw.get("bindRequests", []) if (b.get("status") or {}).get("phase") != "Failed"}
        # state per pod: (state, node); state in pending/allocated/releasing/done
        self.state: dict[str, tuple[str, str | None]] = {}
        for k, p in self.pods.items():
            phase = p.get("status", {}).get("phase", "Pending")
            node_name = p["spec"].get("nodeName")
            deleting = bool(p["metadata"].get("deletionTimestamp"))
            if phase in ("Succeeded", "Failed"):
                self.state[k] = ("done", node_name)
            elif phase == "Running" or (phase == "Pending" and node_name):
                self.state[k] = ("releasing" if deleting else "allocated", node_name)
            elif (p["metadata"].get("namespace"), p["metadata"]["name"]) in binding and not deleting:
                self.state[k] = ("allocated", binding[(p["metadata"]["namespace"], p["metadata"]["name"])])
            else:
                self.state[k] = ("pending", None)
        self.groups = {g["metadata"]["name"]: g for g in raw["podGroups"]}
        self.group_of = {k: p["metadata"].get("annotations", {}).get("pod-group-name") for k, p in self.pods.items()}
        self.queues = {q["metadata"]["name"]: q for q in raw["queues"]}
        self.prio = {pc["metadata"]["name"]: pc["value"] for pc in raw.get("priorityClasses", [])}
        self.topologies = raw.get("topologies", [])
        self.claims = raw.get("persistentVolumeClaims") or []

    # -- queues ------------------------------------------------------------------------------
    def queue_path(self, name: str) -> list[str]:
        out, seen = [], set()
        while name in self.queues and name not in seen:
            seen.add(name)
            out.append(name)
            name = self.queues[name]["spec"].get("parentQueue")
        return out

    def queue_value(self, q: str, r: str, field: str) -> Fraction:
        v = Fraction(str(self.queues[q]["spec"]["resources"][r][field]))
        return v * 1_000_000 if r == "memory" and v != -1 else v

    def non_preemptible(self, group: str) -> bool:
        spec = self.groups[group]["spec"]
        prio = self.prio.get(spec.get("priorityClassName"), 50) if spec.get("priorityClassName") else 50
        mode = spec.get("preemptibility")
        if mode == "preemptible":
            return False
        return mode == "non-preemptible" or prio >= 100

    def queue_usage(self, extra: list[str] = (), nodes: dict[str, str] | None = None) -> tuple[dict, dict]:
        """(allocated, non-preemptible allocated) per queue of the tree, from allocated pods and `extra` placements."""
        alloc: dict[str, dict[str, Fraction]] = defaultdict(lambda: dict.fromkeys(QRES, Fraction(0)))
        alloc_np: dict[str, dict[str, Fraction]] = defaultdict(lambda: dict.fromkeys(QRES, Fraction(0)))
        nodes = nodes or {}
        pods = [k for k, (s, _) in self.state.items() if s == "allocated"] + list(extra)
        for k in pods:
            g = self.group_of.get(k)
            if g not in self.groups:
                continue
            q = self.groups[g]["spec"].get("queue")
            np_ = self.non_preemptible(g)
            amount = dict(self.request[k])
            amount["gpu"] += self.shared_gpus(k, nodes.get(k) or self.state[k][1])
            for name in self.queue_path(q):
                for r in QRES:
                    alloc[name][r] += amount[r]
                    if np_:
                        alloc_np[name][r] += amount[r]
        return alloc, alloc_np

    def mib(self, k: str, node_name: str) -> int:
        """Per-device MiB of a shared pod on a node (KAI: gpu-memory, or floor(portion x M))."""
        portion, mem, _ = self.shared[k]
        m = self.gpu_memory.get(node_name, 100)
        return mem if mem is not None else math.floor(portion * m)

    def shared_gpus(self, k: str, node_name: str | None) -> Fraction:
        """GPUs a shared pod counts for its queue (spec 3.2.2): portion rounded to hundredths, or
        gpu-memory over the node's GPU memory rounded up to hundredths; times its devices."""
        if k not in self.shared:
            return Fraction(0)
        portion, mem, devices = self.shared[k]
        if portion is not None:
            return Fraction(round(portion * 100), 100) * devices
        m = self.gpu_memory.get(node_name, 100) if node_name else 100
        return Fraction(math.ceil(Fraction(100 * mem, m)), 100) * devices

    # -- predicates --------------------------------------------------------------------------
    def predicate_failure(self, pod_key: str, node_name: str) -> str | None:
        if node_name not in self.nodes:
            return "unknown node"
        if node_name not in self.pool:
            return "node of another node pool"
        n = self.nodes[node_name]
        spec = self.pods[pod_key]["spec"]
        labels = n["metadata"].get("labels", {})
        if n["spec"].get("unschedulable"):
            return "node is cordoned"
        conds = {c["type"]: c["status"] for c in n["status"].get("conditions", [])}
        if conds.get("Ready") != "True":
            return "node is not Ready"
        if any(conds.get(c) == "True" for c in PRESSURE):
            return "node has a pressure condition"
        for k, v in (spec.get("nodeSelector") or {}).items():
            if labels.get(k) != v:
                return f"nodeSelector {k}={v}"
        terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
        if terms is not None and not any(self._term(t, labels) for t in terms):
            return "required node affinity"
        for t in n["spec"].get("taints", []) or []:
            if t.get("effect") not in ("NoSchedule", "NoExecute"):
                continue
            if not any(self._tolerates(tol, t) for tol in spec.get("tolerations") or []):
                return f"untolerated taint {t}"
        return None

    @staticmethod
    def _term(term: dict, labels: dict[str, str]) -> bool:
        exprs = term.get("matchExpressions") or []
        if not exprs:
            return False
        for e in exprs:
            k, op, vals = e["key"], e["operator"], e.get("values") or []
            ok = {"In": k in labels and labels[k] in vals, "NotIn": labels.get(k) not in vals or k not in labels,
                  "Exists": k in labels, "DoesNotExist": k not in labels}[op]
            if not ok:
                return False
        return True

    @staticmethod
    def _tolerates(tol: dict, taint: dict) -> bool:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            return False
        if tol.get("operator", "Equal") == "Exists":
            return not tol.get("key") or tol["key"] == taint.get("key")
        return tol.get("key") == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or "")

    # -- gangs -------------------------------------------------------------------------------
    def host_ports(self, k: str) -> list[tuple[str, int]]:
        """(protocol, port) of the pod's containers' and sidecars' host ports; with hostNetwork
        every container port."""
        spec = self.pods[k]["spec"]
        net = spec.get("hostNetwork")
        out = set()
        for c in list(spec.get("containers") or []) + [c for c in spec.get("initContainers") or []
                                                        if c.get("restartPolicy") == "Always"]:
            for p in c.get("ports") or []:
                port = p.get("hostPort") or (p.get("containerPort") if net else None)
                if port:
                    out.add(((p.get("protocol") or "TCP").upper(), int(port)))
        return sorted(out)

    def podsets(self, group: str) -> dict[str | None, int]:
        spec = self.groups[group]["spec"]
        subs = spec.get("subGroups") or []
        if not subs:
            return {None: max(1, spec.get("minMember") or 0)}
        parents = {s.get("parent") for s in subs}
        return {s["name"]: max(1, s.get("minMember") or 0) for s in subs if s["name"] not in parents}

    def podset_of(self, pod_key: str) -> str | None:
        g = self.group_of[pod_key]
        if not self.groups[g]["spec"].get("subGroups"):
            return None
        return self.pods[pod_key]["metadata"].get("labels", {}).get("kai.scheduler/subgroup-name")


# ------------------------------------------------------------------------------------------------
# the checks
# ------------------------------------------------------------------------------------------------

def check_decisions(raw: Raw, out: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    binds = {b["pod"]: b["node"] for b in out["binds"]}
    pipelined = {b["pod"]: b["node"] for b in out["pipelined"]}
    placed_list = [b["pod"] for b in out["binds"]] + [b["pod"] for b in out["pipelined"]]
    if len(placed_list) != len(set(placed_list)):
        errors.append(f"a pod is placed twice: {sorted(placed_list)}")
    placed = {**binds, **pipelined}
    if out["evictions"]:
        errors.append(f"evictions in an allocation-only cycle: {out['evictions']}")

    # Placed pods: pending before, predicates hold.
    for k, n in placed.items():
        if k not in raw.pods:
            errors.append(f"{k}: placed but not in the snapshot")
            continue
        if raw.state[k][0] != "pending":
            errors.append(f"{k}: placed on {n} but it was {raw.state[k]} already")
        why = raw.predicate_failure(k, n)
        if why:
            errors.append(f"{k} placed on {n}: {why}")
        if raw.pods[k]["spec"].get("schedulingGates"):
            errors.append(f"{k}: placed but it has scheduling gates")
        if raw.pods[k]["spec"].get("schedulerName") != "kai-scheduler":
            errors.append(f"{k}: placed but it is not a kai-scheduler pod")

    # Node capacity.
    zero = dict.fromkeys(RES, Fraction(0))
    used_all = defaultdict(lambda: dict(zero))
    used_live = defaultdict(lambda: dict(zero))
    for k, (s, n) in raw.state.items():
        if s in ("allocated", "releasing") and n:
            for r in RES:
                used_all[n][r] += raw.request[k][r]
                if s == "allocated":
                    used_live[n][r] += raw.request[k][r]
    for k, n in placed.items():
        if k not in raw.pods:
            continue
        for r in RES:
            if k in binds:
                used_all[n][r] += raw.request[k][r]
            used_live[n][r] += raw.request[k][r]
    for n in set(placed.values()):
        if n not in raw.alloc:
            continue
        for r in RES:
            if used_all[n][r] > raw.alloc[n][r]:
                errors.append(f"node {n}: {r} of running, releasing and bound pods {used_all[n][r]} > "
                              f"allocatable {raw.alloc[n][r]}")
            if used_live[n][r] > raw.alloc[n][r]:
                errors.append(f"node {n}: {r} of running, bound and pipelined pods {used_live[n][r]} > "
                              f"allocatable {raw.alloc[n][r]}")

    # Volume claims: a pod whose claim the snapshot lacks is not placed.
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in raw.claims}
    for k in placed:
        p = raw.pods.get(k)
        for v in (p["spec"].get("volumes") or []) if p else []:
            name = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if name and claims and (p["metadata"]["namespace"], name) not in claims:
                errors.append(f"{k} placed although its claim {name} does not exist")

    # Host ports: one pod a node per (protocol, port), placed or there at cycle start.
    held: dict[tuple[str, str, int], str] = {}
    for k, (s, n) in raw.state.items():
        if s in ("allocated", "releasing") and n:
            for proto, port in raw.host_ports(k):
                held.setdefault((n, proto, port), k)
    for k, n in placed.items():
        for proto, port in raw.host_ports(k) if k in raw.pods else ():
            other = held.setdefault((n, proto, port), k)
            if other != k:
                errors.append(f"{k} placed on {n}: host port {proto}/{port} held by {other}")

    # Shared GPUs: each group on one node, within its device's memory; whole GPUs plus shared
    # devices in use (each once) within the node's GPUs, with and without releasing pods.
    groups_placed = {b["pod"]: b.get("gpuGroups") or [] for b in out["binds"] + out["pipelined"]}
    group_node: dict[str, str] = {}
    group_mib: dict[str, int] = defaultdict(int)         # running, bound and placed pods
    group_mib_all: dict[str, int] = defaultdict(int)     # also releasing pods, not pipelined ones
    group_live: dict[str, bool] = defaultdict(bool)     # held by a running, bound or newly placed pod
    group_all: dict[str, bool] = defaultdict(bool)      # held by any pod but a pipelined one
    users = [(k, n, s == "allocated", True) for k, (s, n) in raw.state.items() if s in ("allocated", "releasing") and n]
    users += [(k, n, True, k in binds) for k, n in placed.items()]
    for k, n, live, counted in users:
        if k not in raw.shared:
            continue
        gs = groups_placed.get(k) if k in placed else raw.groups_of.get(k)
        if not gs and k in placed:
            errors.append(f"{k}: a shared-GPU pod placed without GPU groups")
        if k in placed and len(set(gs)) != raw.shared[k][2]:
            errors.append(f"{k}: {len(set(gs))} distinct GPU groups for {raw.shared[k][2]} devices")
        for g in gs:
            if group_node.setdefault(g, n) != n:
                errors.append(f"GPU group {g} on two nodes: {group_node[g]} and {n}")
            if live:
                group_mib[g] += raw.mib(k, n)
            if counted:
                group_mib_all[g] += raw.mib(k, n)
            group_live[g] |= live
            group_all[g] |= counted
    for g in group_node:
        cap = raw.gpu_memory.get(group_node[g], 100)
        for m in (group_mib[g], group_mib_all[g]):
            if m > cap:
                errors.append(f"GPU group {g} on {group_node[g]}: {m} MiB > {cap} MiB")
    for n in set(placed.values()):
        if n not in raw.alloc:
            continue
        shared_all = sum(1 for g, gn in group_node.items() if gn == n and group_all[g])
        shared_live = sum(1 for g, gn in group_node.items() if gn == n and group_live[g])
        if used_all[n]["gpu"] + shared_all > raw.alloc[n]["gpu"]:
            errors.append(f"node {n}: {used_all[n]['gpu']} whole GPUs and {shared_all} shared GPUs > "
                          f"{raw.alloc[n]['gpu']} GPUs")
        if used_live[n]["gpu"] + shared_live > raw.alloc[n]["gpu"]:
            errors.append(f"node {n}: {used_live[n]['gpu']} whole GPUs and {shared_live} live shared GPUs > "
                          f"{raw.alloc[n]['gpu']} GPUs")

    # Gangs.
    for g in {raw.group_of[k] for k in placed if k in raw.pods}:
        if g not in raw.groups:
            errors.append(f"pod of PodGroup {g!r}, which does not exist, was placed")
            continue
        sets = raw.podsets(g)
        count = dict.fromkeys(sets, 0)
        for k, grp in raw.group_of.items():
            if grp != g:
                continue
            ps = raw.podset_of(k)
            if ps not in count:
                if k in placed:
                    errors.append(f"{k} placed but belongs to no leaf sub-group of {g}")
                continue
            if raw.state[k][0] == "allocated" or k in placed:
                count[ps] += 1
        for ps, need in sets.items():
            if count[ps] < need:
                errors.append(f"gang {g} podset {ps}: {count[ps]} pods allocated after the cycle < minMember {need}")
        q = raw.groups[g]["spec"].get("queue")
        if q not in raw.queues or any(raw.queues[c]["spec"].get("parentQueue") == q for c in raw.queues):
            errors.append(f"job {g} of queue {q!r}, which is missing or not a leaf, was placed")

    # Queue limits and the non-preemptible quota at every level. KAI's job-level check counts a
    # GPU-memory pod as no GPU, and its per-task check counts a whole-GPU pod as one GPU whatever
    # its count (spec 3.6, quirk): a gang of 2 GPUs and a 0.25-GPU memory pod may end at 2.25 in
    # a queue limited to 2. What always holds is the limit with GPU-memory pods counted as none.
    before, before_np = raw.queue_usage()
    after, after_np = raw.queue_usage(extra=[k for k in placed if k in raw.pods], nodes=placed)
    # Each GPU-memory pod also passed the per-task check beside what the queue held at cycle start.
    memory_gpus: dict[str, Fraction] = defaultdict(Fraction)     # per queue: the placed GPU-memory pods' GPUs
    largest_memory_pod: dict[str, Fraction] = defaultdict(Fraction)
    for k, n in placed.items():
        if k in raw.shared and raw.shared[k][0] is None and raw.group_of.get(k) in raw.groups:
            portion = raw.shared_gpus(k, n)
            for name in raw.queue_path(raw.groups[raw.group_of[k]]["spec"].get("queue")):
                memory_gpus[name] += portion
                largest_memory_pod[name] = max(largest_memory_pod[name], portion)
    for q in raw.queues:
        for r in QRES:
            added = after[q][r] - before[q][r]
            limit = raw.queue_value(q, r, "limit")
            counted = after[q][r] - (memory_gpus[q] if r == "gpu" else 0)
            if r == "gpu" and limit != -1 and largest_memory_pod[q] and before[q][r] + largest_memory_pod[q] > limit:
                errors.append(f"queue {q}: a GPU-memory pod of {largest_memory_pod[q]} GPU placed beside "
                              f"{before[q][r]} over limit {limit}")
            if added > 0 and limit != -1 and counted > max(limit, before[q][r]):
                errors.append(f"queue {q}: {r} allocated {before[q][r]} -> {after[q][r]} over limit {limit}")
            added_np = after_np[q][r] - before_np[q][r]
            quota = raw.queue_value(q, r, "quota")
            if added_np > 0 and quota != -1 and after_np[q][r] > max(quota, before_np[q][r]):
                errors.append(f"queue {q}: non-preemptible {r} {before_np[q][r]} -> {after_np[q][r]} "
                              f"over quota {quota}")

    errors += topology_errors(raw, placed)
    errors += peer_affinity_errors(raw, placed)

    # Every PodGroup left with pending pods is explained.
    explained = {u["podGroup"]: u["reasons"] for u in out["unschedulable"]}
    for g in raw.groups:
        left = [k for k, grp in raw.group_of.items() if grp == g and raw.state[k][0] == "pending" and k not in placed]
        if left and not explained.get(g):
            errors.append(f"PodGroup {g} keeps pending pods {left} but has no unschedulable reason")
    return errors


def topology_errors(raw: Raw, placed: dict[str, str]) -> list[str]:
    """Required levels (spec 8.2, 8.3): a constrained scope's new pods share one domain (the label
    path down to the level), or go to domains its running pods are in, and sit on nodes carrying
    every level label of the topology. After evictions (eviction_checks.post_eviction_view: the
    evicted pods are `raw.evicted`) the rule holds at each placement, which the final decisions
    cannot order: a pod may have been placed beside a running pod that a later eviction took, so
    new pods may be in any domain the scope ran in at cycle start, and in one more only where
    none of its running pods is kept (it lost them all first). kai_cp/validate.py replays the
    order exactly."""
    errors: list[str] = []
    levels = {t["metadata"]["name"]: [lv["nodeLabel"] for lv in t["spec"]["levels"]] for t in raw.topologies}
    for g, pg in raw.groups.items():
        spec = pg["spec"]
        scopes = [(None, spec.get("topologyConstraint"))] + [
            (sg["name"], sg.get("topologyConstraint")) for sg in spec.get("subGroups") or []]
        parents = {sg["name"]: sg.get("parent") for sg in spec.get("subGroups") or []}

        def under(leaf: str | None, scope: str | None) -> bool:
            while leaf is not None:
                if leaf == scope:
                    return True
                leaf = parents.get(leaf)
            return scope is None
        members = [k for k, grp in raw.group_of.items() if grp == g]
        if not any(k in placed for k in members):
            continue
        for scope, c in scopes:
            if not c or not c.get("topology") or not c.get("requiredTopologyLevel"):
                continue
            names = levels.get(c["topology"], [])
            if c["requiredTopologyLevel"] not in names:
                errors.append(f"{g}: placed although its constraint names a missing topology or level")
                continue
            depth = names.index(c["requiredTopologyLevel"]) + 1
            def path(n: str, new: bool) -> tuple | None:
                labels = raw.nodes[n]["metadata"].get("labels", {})
                if any(lv not in labels for lv in names):
                    if new:
                        errors.append(f"{g}: pod placed on {n}, which lacks a level label of topology {c['topology']}")
                    return None              # outside the topology: invisible to constrained placement
                return tuple(labels.get(lv) for lv in names[:depth])
            mine = [k for k in members if under(raw.podset_of(k), scope)]
            new = {path(placed[k], True) for k in mine if k in placed} - {None}
            evicted = getattr(raw, "evicted", set())
            ran = {k: raw.state[k][1] for k in mine if k not in placed and raw.state[k][1] in raw.pool and (
                raw.state[k][0] == "allocated" or k in evicted)}          # nodes of another pool are not seen
            running = {path(n, False) for n in ran.values()} - {None}
            kept = {path(n, False) for k, n in ran.items() if k not in evicted} - {None}
            if (len(new - running) > (0 if kept else 1)) if running else len(new) > 1:   # running in two: may grow in either
                errors.append(f"{g} scope {scope or 'job'}: required {c['requiredTopologyLevel']}: new pods in "
                              f"{sorted(new)}, running in {sorted(running)}")
    return errors


def peer_affinity_errors(raw: Raw, placed: dict[str, str]) -> list[str]:
    """Required pod (anti-)affinity to the pods of the same app label (clustergen.peer_affinity):
    one per node, or, for affinity on a key, each new pod in a domain hosting a pod it selects
    (running, or placed this cycle when none runs), never on a node without the key."""
    errors: list[str] = []
    active = {k: (placed[k] if k in placed else raw.state[k][1]) for k in raw.pods
              if k in placed or (raw.state[k][0] in ("allocated", "releasing") and raw.state[k][1] in raw.pool)}
    for k, n in placed.items():
        aff = raw.pods[k]["spec"].get("affinity") or {}
        labels_of = lambda other: raw.pods[other]["metadata"].get("labels") or {}
        ns = raw.pods[k]["metadata"]["namespace"]
        for kind, terms in (("anti", (aff.get("podAntiAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")),
                            ("affinity", (aff.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution"))):
            for t in terms or []:
                app = t["labelSelector"]["matchLabels"]["app"]
                key = t["topologyKey"]
                value = raw.nodes[n]["metadata"].get("labels", {}).get(key)
                peers = [o for o in active if o != k and labels_of(o).get("app") == app
                         and raw.pods[o]["metadata"]["namespace"] == ns]
                same = [o for o in peers if raw.nodes[active[o]]["metadata"].get("labels", {}).get(key) == value]
                if kind == "anti" and value is not None and same:
                    errors.append(f"{k} on {n}: anti-affinity {key} with {same}")
                if kind == "affinity":
                    running = [o for o in peers if o not in placed]
                    if value is None:
                        errors.append(f"{k} on {n}: affinity on {key}, which the node lacks")
                    elif running and not same:
                        errors.append(f"{k} on {n}: affinity on {key}, but no pod it selects runs there")
                    elif not running and [o for o in peers if o in placed] and not same:
                        errors.append(f"{k} on {n}: affinity on {key}, away from the pods it selects placed with it")
    return errors


def placed_gpus(raw: Raw, out: dict[str, Any]) -> Fraction:
    """Whole GPUs plus shared portions (as queue accounting counts them)."""
    return sum((raw.request[b["pod"]]["gpu"] + raw.shared_gpus(b["pod"], b["node"])
                for b in out["binds"] + out["pipelined"]), Fraction(0))


def run(doc: dict[str, Any], engine: str):
    """One allocation cycle: the eviction actions are left out here (their invariants are
    tests/test_eviction_invariants.py's), whatever the generated configuration lists."""
    doc = {**doc, "config": {**(doc.get("config") or {}), "actions": "allocate"}}
    state = build_cluster_state(load_snapshot_dict(doc))
    return run_cycle(state, CycleSettings(engine=engine, time_limit=TIME_LIMIT, seed=0))


# Found by a 800-example hunt: a gang of a 2-GPU pod and a 20,000 MiB GPU-memory pod (0.25 of a
# GPU) in a queue limited to 2 GPUs ends at 2.25, as KAI's capacity checks allow (spec 3.6).
GPU_MEMORY_AT_LIMIT = Path(__file__).resolve().parent / "fixtures" / "invariants" / \
    "gang_with_a_gpu_memory_pod_at_its_queue_limit.json"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=clusters())
@example(doc=json.loads(GPU_MEMORY_AT_LIMIT.read_text()))
def test_cycle_invariants_hold_for_both_engines(doc: dict[str, Any]) -> None:
    raw = Raw(doc)
    greedy = run(doc, "greedy")
    cpsat = run(doc, "cp-sat")
    g_out, c_out = greedy.to_json(), cpsat.to_json()
    assert g_out["cycle"]["engine"] == "greedy"

    for name, res, out in (("greedy", greedy, g_out), ("cp-sat", cpsat, c_out)):
        errors = check_decisions(raw, out)
        assert errors == [], f"{name}: {errors}"
        assert violations(res.state, res.session) == [], name
        assert set(out["fairShare"]) == set(raw.queues), name

    # The greedy engine and the greedy baseline inside the cp-sat cycle decide the same.
    baseline = {k: (p.node, p.pipelined) for k, p in cpsat.greedy.session.placements.items()}
    assert baseline == {k: (p.node, p.pipelined) for k, p in greedy.session.placements.items()}

    # cp-sat is never worse than greedy.
    cycle = c_out["cycle"]
    if cycle["engine"] == "cp-sat" and cycle.get("greedyObjective") is not None and cycle["objective"] is not None:
        assert cycle["objective"] >= cycle["greedyObjective"]
    started = {raw.group_of[k] for k in (b["pod"] for b in c_out["binds"] + c_out["pipelined"])}
    assert cpsat.greedy.started_jobs <= started, cpsat.greedy.started_jobs - started
    assert {raw.group_of[b["pod"]] for b in g_out["binds"] + g_out["pipelined"]} <= started
    assert placed_gpus(raw, c_out) >= placed_gpus(raw, g_out)

    # What the examples exercised (pytest --hypothesis-show-statistics).
    n_placed = len(c_out["binds"]) + len(c_out["pipelined"])
    event(f"cp-sat engine={cycle['engine']} status={cycle['status']}")
    event("placed: none" if not n_placed else "placed: 1-5" if n_placed <= 5 else "placed: >5")
    event(f"pipelined: {bool(c_out['pipelined'])}")
    event(f"cp-sat placed more GPUs than greedy: {placed_gpus(raw, c_out) > placed_gpus(raw, g_out)}")
    event(f"some job left pending: {bool(c_out['unschedulable'])}")
    constrained = {g for g, pg in raw.groups.items() if pg["spec"].get("topologyConstraint")
                   or any(sg.get("topologyConstraint") for sg in pg["spec"].get("subGroups") or [])}
    event(f"topology-constrained job placed: {bool(started & constrained)}")
    peers = {raw.group_of[k] for k, p in raw.pods.items() if (p["spec"].get("affinity") or {}).keys() - {"nodeAffinity"}}
    event(f"pod-affinity job placed: {bool(started & peers)}")
    event(f"shared-GPU pods placed: {any(b['gpuGroups'] for b in c_out['binds'] + c_out['pipelined'])}")


# ------------------------------------------------------------------------------------------------
# the checker itself must catch what it claims to catch
# ------------------------------------------------------------------------------------------------

def _doc_for_checker() -> dict[str, Any]:
    import clustergen as cg

    nodes = [cg.node("n1", gpus=4, pods=3), cg.node("n2", gpus=4, unschedulable=True),
             cg.node("n3", gpus=4, taints=[("dedicated", "gpu", "NoSchedule")]), cg.node("n4", gpus=4)]
    queues = [cg.queue("q", gpu=cg.resource(2, 3, 1)), cg.queue("np", gpu=cg.resource(1, -1, 1))]
    pods = [cg.pod("old-0", "old", gpus=4, phase="Running", node_name="n4", queue_name="q", deleting=True),
            cg.pod("g-0", "g", gpus=2, queue_name="q"), cg.pod("g-1", "g", gpus=2, queue_name="q"),
            cg.pod("s-0", "s", gpus=1, queue_name="q"), cg.pod("np-0", "npj", gpus=2, queue_name="np")]
    groups = [cg.pod_group("old", "q"), cg.pod_group("g", "q", min_member=2), cg.pod_group("s", "q"),
              cg.pod_group("npj", "np", priority_class="build")]
    return cg.snapshot(nodes, queues, pods, groups)


def _decided(binds: dict[str, str], pipelined: dict[str, str] | None = None, unschedulable: tuple = ("g", "s", "npj")):
    return {"binds": [{"pod": k, "node": n} for k, n in binds.items()],
            "pipelined": [{"pod": k, "node": n} for k, n in (pipelined or {}).items()],
            "evictions": [], "unschedulable": [{"podGroup": g, "reasons": ["x"]} for g in unschedulable]}


def test_checker_accepts_valid_decisions() -> None:
    raw = Raw(_doc_for_checker())
    assert check_decisions(raw, _decided({})) == []
    assert check_decisions(raw, _decided({"default/s-0": "n1"}, unschedulable=("g", "npj"))) == []
    # A pipelined pod may count on the releasing pod's GPUs on n4.
    assert check_decisions(raw, _decided({}, {"default/s-0": "n4"}, unschedulable=("g", "npj"))) == []


def test_checker_catches_each_kind_of_violation() -> None:
    raw = Raw(_doc_for_checker())

    def errors(binds, pipelined=None):
        return " | ".join(check_decisions(raw, _decided(binds, pipelined)))

    assert errors({}) == ""
    assert "gpu" in errors({"default/s-0": "n4"})                                  # bound onto releasing GPUs
    assert "cordoned" in errors({"default/s-0": "n2"})
    assert "taint" in errors({"default/s-0": "n3"})
    assert "minMember" in errors({"default/g-0": "n1"})                            # half a gang
    assert "over limit" in errors({"default/g-0": "n1", "default/g-1": "n1"})      # 4 GPUs > limit 3
    assert "non-preemptible" in errors({"default/np-0": "n1"})                     # 2 GPUs > quota 1
    assert "already" in errors({"default/old-0": "n1"})                            # not a pending pod
    four = {"default/s-0": "n1", "default/g-0": "n1", "default/g-1": "n1", "default/np-0": "n1"}
    assert "node n1: pods" in errors(four)                                         # 4 pods > 3 pod slots
    assert "no unschedulable reason" in " ".join(check_decisions(raw, _decided({}, unschedulable=())))


def test_checker_catches_host_port_conflicts() -> None:
    import clustergen as cg

    doc = _doc_for_checker()
    pods = doc["rawObjects"]["pods"]
    pods.append(cg.pod("web-0", "web", queue_name="q", phase="Running", node_name="n1", namespace="team-a",
                       host_ports=[(8080, "TCP")]))
    for name in ("p-0", "p-1"):
        pods.append(cg.pod(name, name[0] + name[-1], queue_name="q", host_ports=[(9000, "TCP")], host_network=True))
    pods.append(cg.pod("h-0", "h0", queue_name="q", host_ports=[(8080, "TCP")]))
    doc["rawObjects"]["podGroups"] += [cg.pod_group(g, "q") for g in ("web", "p0", "p1", "h0")]
    raw = Raw(doc)
    pending = ("g", "s", "npj", "h0", "p1")
    assert check_decisions(raw, _decided({"default/p-0": "n1"}, unschedulable=pending)) == []
    assert any("host port TCP/9000" in e for e in check_decisions(
        raw, _decided({"default/p-0": "n1", "default/p-1": "n1"}, unschedulable=("g", "s", "npj", "h0"))))
    assert any("host port TCP/8080 held by team-a/web-0" in e for e in check_decisions(
        raw, _decided({"default/h-0": "n1"}, unschedulable=("g", "s", "npj", "p0", "p1"))))


def test_checker_catches_a_pod_placed_without_its_claim() -> None:
    import clustergen as cg

    doc = _doc_for_checker()
    doc["rawObjects"]["persistentVolumeClaims"] = [cg.claim("there", "default")]
    for name, claim in (("v-0", "there"), ("w-0", "gone")):
        p = cg.pod(name, name[0], queue_name="q")
        p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        doc["rawObjects"]["pods"].append(p)
        doc["rawObjects"]["podGroups"].append(cg.pod_group(name[0], "q"))
    raw = Raw(doc)
    assert check_decisions(raw, _decided({"default/v-0": "n1"}, unschedulable=("g", "s", "npj", "w"))) == []
    assert any("claim gone does not exist" in e for e in check_decisions(
        raw, _decided({"default/w-0": "n1"}, unschedulable=("g", "s", "npj", "v"))))


def test_checker_counts_extended_resources() -> None:
    import clustergen as cg

    doc = _doc_for_checker()
    doc["rawObjects"]["nodes"].append(cg.node("n5", extended={EXTENDED: "1"}))
    for name in ("x-0", "x-1"):
        p = cg.pod(name, name, queue_name="q")
        p["spec"]["containers"][0]["resources"]["requests"][EXTENDED] = "1"
        doc["rawObjects"]["pods"].append(p)
        doc["rawObjects"]["podGroups"].append(cg.pod_group(name, "q"))
    raw = Raw(doc)
    pending = ("g", "s", "npj")
    assert check_decisions(raw, _decided({"default/x-0": "n5"}, unschedulable=pending + ("x-1",))) == []
    both = check_decisions(raw, _decided({"default/x-0": "n5", "default/x-1": "n5"}, unschedulable=pending))
    assert any(f"node n5: {EXTENDED}" in e for e in both), both
    assert any(f"node n1: {EXTENDED}" in e for e in check_decisions(
        raw, _decided({"default/x-0": "n1"}, unschedulable=pending + ("x-1",))))


def test_checker_catches_shared_gpu_violations() -> None:
    import clustergen as cg

    pods = [cg.pod(f"f-{i}", f"f{i}", queue_name="q", annotations={"gpu-fraction": "0.75"}) for i in range(2)]
    pods.append(cg.pod("w-0", "w", gpus=1, queue_name="q"))
    doc = cg.snapshot([cg.node("n1", gpus=1), cg.node("n2", gpus=1)], [cg.queue("q")], pods,
                      [cg.pod_group("f0", "q"), cg.pod_group("f1", "q"), cg.pod_group("w", "q")])
    raw = Raw(doc)

    def errors(binds: list[tuple[str, str, list[str]]]) -> str:
        out = {"binds": [{"pod": k, "node": n, "gpuGroups": g} for k, n, g in binds], "pipelined": [],
               "evictions": [], "unschedulable": [{"podGroup": g, "reasons": ["x"]} for g in ("f0", "f1", "w")]}
        return " | ".join(check_decisions(raw, out))

    assert errors([("default/f-0", "n1", ["a"])]) == ""
    assert "MiB" in errors([("default/f-0", "n1", ["a"]), ("default/f-1", "n1", ["a"])])        # 1.5 GPUs on one
    assert "two nodes" in errors([("default/f-0", "n1", ["a"]), ("default/f-1", "n2", ["a"])])
    assert "shared GPUs" in errors([("default/f-0", "n1", ["a"]), ("default/w-0", "n1", [])])  # given whole too
    assert "without GPU groups" in errors([("default/f-0", "n1", [])])
