"""Fractional GPUs for generated snapshots (``generate.py --fractional-share``).

Why a step over the rendered document: sharing changes only how some 1-GPU pods ask for their
GPU and which device they sit on, so the rest of a seed's cluster stays exactly the same, and a
stream of its own (``fractional/<seed>``) keeps the choice independent of every other option.

- Pending: a share of the single-pod, 1-GPU jobs ask for part of a GPU instead
  (``gpu-fraction`` 0.25 / 0.5 / 0.75, or ``gpu-memory`` in MiB), as KAI's request forms do.
- Running: on a share of the nodes running single-pod 1-GPU jobs, pairs of them move onto one
  shared device (both become half-GPU pods; one whole GPU frees up) and a lone one keeps a
  device of its own at a quarter to three quarters (room left for others to join). Each shared
  device is a GPU group (``runai-gpu-group`` label on its pods) held by one KAI reservation pod
  with one GPU (spec 7.6), so node GPU accounting stays exact.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

GPU = "nvidia.com/gpu"
GROUP_LABEL = "runai-gpu-group"
RESERVATION_NS = "kai-resource-reservation"
POD_GROUP_ANNOTATION = "pod-group-name"
FRACTIONS = ("0.25", "0.5", "0.5", "0.75")


def _single_gpu_pods(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Pods of single-pod jobs asking for exactly one GPU in one container, by job name."""
    by_job: dict[str, list[dict[str, Any]]] = {}
    for p in raw["pods"]:
        by_job.setdefault(p["metadata"]["annotations"].get(POD_GROUP_ANNOTATION), []).append(p)
    out = {}
    for job, pods in by_job.items():
        if len(pods) != 1 or len(pods[0]["spec"]["containers"]) != 1:
            continue
        if pods[0]["spec"]["containers"][0]["resources"].get("requests", {}).get(GPU) == "1":
            out[job] = pods[0]
    return out


def _share(pod: dict[str, Any], annotation: str, value: str) -> None:
    res = pod["spec"]["containers"][0]["resources"]
    res["requests"].pop(GPU, None)
    res.get("limits", {}).pop(GPU, None)
    if "limits" in res and not res["limits"]:
        del res["limits"]
    pod["metadata"]["annotations"][annotation] = value
    if "received-resource-type" in pod["metadata"]["annotations"]:
        pod["metadata"]["annotations"]["received-resource-type"] = "Fraction"


def _reservation_pod(node: str, group: str, rng: random.Random, template: dict[str, Any]) -> dict[str, Any]:
    name = f"gpu-reservation-{node}-{group[:5]}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": RESERVATION_NS, "uid": str(uuid.UUID(int=rng.getrandbits(128))),
                         "resourceVersion": "1", "creationTimestamp": template["metadata"]["creationTimestamp"],
                         "labels": {"app": RESERVATION_NS, GROUP_LABEL: group}},
            "spec": {"containers": [{"name": "reservation", "image": "ghcr.io/nvidia/kai-scheduler/resource-reservation",
                                     "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}}}],
                     "nodeName": node, "schedulerName": "kai-scheduler", "restartPolicy": "Always",
                     "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]},
            "status": template["status"]}


def apply_gpu_sharing(doc: dict[str, Any], seed: int, share: float) -> None:
    """Turn a share of the 1-GPU single-pod jobs fractional (see the module docstring)."""
    if share <= 0:
        return
    rng = random.Random(f"fractional/{seed}")
    raw = doc["rawObjects"]
    memory = {n["metadata"]["name"]: int(n["metadata"]["labels"].get("nvidia.com/gpu.memory", "0")) for n in raw["nodes"]}
    singles = _single_gpu_pods(raw)
    running_on: dict[str, list[dict[str, Any]]] = {}
    for job in sorted(singles):
        p = singles[job]
        node = p["spec"].get("nodeName")
        if node is None:
            if rng.random() < share:
                if rng.random() < 0.2 and memory:
                    mib = max(memory.values()) // 4
                    _share(p, "gpu-memory", str(mib - mib % 1000))
                else:
                    _share(p, "gpu-fraction", rng.choice(FRACTIONS))
        else:
            running_on.setdefault(node, []).append(p)
    reservations = []
    for node in sorted(running_on):
        if rng.random() >= share:
            continue
        pods = running_on[node]
        rng.shuffle(pods)
        groups = [pods[i:i + 2] for i in range(0, len(pods), 2)]
        for members in groups:
            group = str(uuid.UUID(int=rng.getrandbits(128)))
            for p in members:
                _share(p, "gpu-fraction", "0.5" if len(members) == 2 else rng.choice(("0.25", "0.5", "0.75")))
                p["metadata"].setdefault("labels", {})[GROUP_LABEL] = group
            reservations.append(_reservation_pod(node, group, rng, members[0]))
    raw["pods"].extend(reservations)
