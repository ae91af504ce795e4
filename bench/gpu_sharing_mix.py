"""Fractional GPUs for generated snapshots (``generate.py --fractional-share``).

Why a step over the rendered document: sharing changes only how some 1-GPU pods ask for their
GPU and which device they sit on, so the rest of a seed's cluster stays exactly the same, and a
stream of its own (``fractional/<seed>``) keeps the choice independent of every other option.

- Pending: a share of the small 1-GPU jobs (1-4 pods, each asking for one whole GPU: notebooks,
  inference replicas) ask for part of a GPU instead, every pod of a job alike (``gpu-fraction``
  0.25 / 0.5 / 0.75, or, one job in five, ``gpu-memory`` in MiB), as KAI's request forms do
  (spec 7.1); the ``nvidia.com/gpu`` request goes. The forms come in turn (``PENDING_FORMS``).
- Running: on a share of the nodes running single-pod 1-GPU jobs, pairs of them move onto one
  shared device (both become half-GPU pods; one whole GPU frees up) and a lone one keeps a
  device of its own at a quarter to three quarters (room left for others to join). Each shared
  device is a GPU group (``runai-gpu-group`` label on its pods) held by one KAI reservation pod
  with one GPU (spec 7.6, as KAI's binder creates it), so node GPU accounting stays exact.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

GPU = "nvidia.com/gpu"
GROUP_LABEL = "runai-gpu-group"
RESERVATION_NS = "kai-resource-reservation"
POD_GROUP_ANNOTATION = "pod-group-name"
#: Request forms of pending fractional jobs, taken in turn from a random start: even a small cluster
#: shows each (one job in five asks for GPU memory, a quarter of the largest device's).
PENDING_FORMS = ("0.5", "0.25", "memory", "0.75", "0.5")
SMALL_JOB_PODS = 4          # pending jobs of up to this many 1-GPU pods may turn fractional
RESERVATION_IMAGE = "ghcr.io/nvidia/kai-scheduler/resource-reservation"


def _one_gpu_jobs(raw: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Pods of the jobs whose every pod asks for exactly one whole GPU in one container, by job name."""
    by_job: dict[str, list[dict[str, Any]]] = {}
    for p in raw["pods"]:
        by_job.setdefault(p["metadata"]["annotations"].get(POD_GROUP_ANNOTATION), []).append(p)
    return {job: pods for job, pods in by_job.items()
            if all(len(p["spec"]["containers"]) == 1
                   and p["spec"]["containers"][0]["resources"].get("requests", {}).get(GPU) == "1" for p in pods)}


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
    """KAI's reservation pod of one shared GPU (spec 7.6): created by the binder with the device's
    first pod (so started with it), pinned by nodeName, one whole GPU, no CPU or memory."""
    name = f"gpu-reservation-{node}-{group[:5]}"
    started = template["status"]
    container = {"name": "resource-reservation", "image": RESERVATION_IMAGE, "imagePullPolicy": "IfNotPresent",
                 "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}},
                 "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                         {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}
    status = {"phase": "Running", "conditions": [dict(c) for c in started["conditions"]],
              "startTime": started["startTime"],
              "containerStatuses": [{**started["containerStatuses"][0], "name": container["name"],
                                     "image": RESERVATION_IMAGE}],
              "qosClass": "BestEffort"}           # QoS counts CPU and memory only
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": RESERVATION_NS, "uid": str(uuid.UUID(int=rng.getrandbits(128))),
                         "resourceVersion": "1", "creationTimestamp": template["metadata"]["creationTimestamp"],
                         "labels": {"app": RESERVATION_NS, GROUP_LABEL: group},
                         "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
            "spec": {"containers": [container], "nodeName": node, "serviceAccountName": RESERVATION_NS,
                     "runtimeClassName": "nvidia", "schedulerName": "default-scheduler", "restartPolicy": "Always",
                     "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]},
            "status": status}


def apply_gpu_sharing(doc: dict[str, Any], seed: int, share: float) -> None:
    """Turn a share of the small 1-GPU jobs fractional and share devices (see the module docstring)."""
    if share <= 0:
        return
    rng = random.Random(f"fractional/{seed}")
    raw = doc["rawObjects"]
    memory = {n["metadata"]["name"]: int(n["metadata"]["labels"].get("nvidia.com/gpu.memory", "0")) for n in raw["nodes"]}
    mib = max(memory.values(), default=0) // 4
    turn = rng.randrange(len(PENDING_FORMS))
    running_on: dict[str, list[dict[str, Any]]] = {}
    for job, pods in sorted(_one_gpu_jobs(raw).items()):
        if len(pods) == 1 and pods[0]["spec"].get("nodeName") is not None:
            running_on.setdefault(pods[0]["spec"]["nodeName"], []).append(pods[0])
        elif len(pods) <= SMALL_JOB_PODS and all(p["spec"].get("nodeName") is None for p in pods):
            if rng.random() < share:
                form = PENDING_FORMS[turn % len(PENDING_FORMS)]
                turn += 1
                if form == "memory" and mib >= 1000:
                    annotation, value = "gpu-memory", str(mib - mib % 1000)
                else:
                    annotation, value = "gpu-fraction", form if form != "memory" else "0.25"
                for p in pods:
                    _share(p, annotation, value)
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
