"""crds/ against a real API server: objects shaped as KAI writes them (every field of spec
section 1, status through the status subresource as KAI's controllers write it) are accepted and
read back unchanged (nothing pruned), parse in kai-cp's models and dump back the same; objects
KAI's CRDs reject (spec 1.3, 1.6) are rejected here too."""

from __future__ import annotations

import copy

import pytest

from integration.kube import ApiError, object_path
from models import BindRequest, PodGroup, Queue, Topology

T = "2025-01-02T03:04:05Z"
QTY = {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": "2"}
PG, Q, BR, TOPO = "scheduling.run.ai/v2alpha2", "scheduling.run.ai/v2", "scheduling.run.ai/v1alpha2", "kai.scheduler/v1alpha1"


def _pg_spec(queue: str, topology: str) -> dict:
    tc = {"topology": topology, "requiredTopologyLevel": "block", "preferredTopologyLevel": "rack"}
    return {"minMember": 4, "queue": queue, "priorityClassName": "train", "preemptibility": "non-preemptible",
            "markUnschedulable": True, "schedulingBackoff": 1, "topologyConstraint": tc,
            "parallelism": 0, "completions": 0, "backoffLimit": 0,
            "subGroups": [{"name": "workers", "minMember": 3, "topologyConstraint": dict(tc)},
                          {"name": "leader-0", "minMember": 1, "parent": "workers"}]}


def _kai_objects(ns: str) -> list[tuple[str, str, dict, dict | None]]:
    """(group/version, plural, object without status, status) as KAI writes them."""
    res = {"gpu": {"quota": 2, "overQuotaWeight": 1, "limit": 4}, "cpu": {"quota": 8000, "overQuotaWeight": 1, "limit": -1},
           "memory": {"quota": 32000.5, "overQuotaWeight": 0.5, "limit": -1}}
    queue = {"apiVersion": Q, "kind": "Queue", "metadata": {"name": f"{ns}-q"},
             "spec": {"displayName": "Team A", "parentQueue": f"{ns}-parent", "priority": 100,
                      "preemptMinRuntime": "10m", "reclaimMinRuntime": "30m", "resources": res}}
    qstatus = {"childQueues": ["sub"], "allocated": QTY, "allocatedNonPreemptible": {"cpu": "0"}, "requested": QTY,
               "conditions": [{"type": "OverQuota", "status": "False", "lastProbeTime": T, "lastTransitionTime": T,
                               "reason": "UnderQuota", "message": "m"}]}
    details = {"queueDetails": {"name": f"{ns}-q", **{k: QTY for k in (
        "queueRequestedResources", "queueDeservedResources", "queueAllocatedResources",
        "queueAllocatedNonPreemptibleResources", "queueResourceLimits", "podGroupRequestedResources",
        "podGroupRequestedNonPreemptibleResources")}}}
    pg = {"apiVersion": PG, "kind": "PodGroup", "metadata": {"name": "pg-train-1", "namespace": ns},
          "spec": _pg_spec(f"{ns}-q", f"{ns}-topo")}
    pgstatus = {"schedulingConditions": [{"type": "UnschedulableOnNodePool", "nodePool": "default",
                                          "reason": "Unschedulable", "message": "m", "status": "True",
                                          "transitionID": "3", "lastTransitionTime": T,
                                          "reasons": [{"reason": "OverLimit", "message": "over", "details": details}]}],
                "resourcesStatus": {"allocated": QTY, "allocatedNonPreemptible": {}, "requested": QTY},
                "phase": "Running", "running": 2, "succeeded": 0, "failed": 0, "pending": 1,
                "conditions": [{"type": "Ready", "status": "True", "reason": "r", "message": "m",
                                "transitionID": "1", "lastTransitionTime": T}]}
    topo = {"apiVersion": TOPO, "kind": "Topology", "metadata": {"name": f"{ns}-topo"},
            "spec": {"levels": [{"nodeLabel": "cloud.provider.com/topology-block"},
                                {"nodeLabel": "cloud.provider.com/topology-rack"}, {"nodeLabel": "kubernetes.io/hostname"}]}}
    alloc = {"allocationTimestamp": T,
             "devices": {"results": [{"device": "gpu-0", "driver": "gpu.nvidia.com", "pool": "n1", "request": "gpu",
                                      "consumedCapacity": {"memory": "10Gi"}}],
                         "config": [{"source": "FromClaim", "requests": ["gpu"],
                                     "opaque": {"driver": "gpu.nvidia.com", "parameters": {"a": [1, "x"]}}}]},
             "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                      "values": ["n1"]}]}]}}
    br = {"apiVersion": BR, "kind": "BindRequest", "metadata": {"name": "p1", "namespace": ns},
          "spec": {"podName": "p1", "selectedNode": "n1", "receivedResourceType": "Fraction",
                   "receivedGPU": {"count": 1, "portion": "0.50"}, "selectedGPUGroups": ["g1"],
                   "resourceClaimAllocations": [{"name": "gpu-claim", "allocation": alloc}], "backoffLimit": 3}}
    return [(Q, "queues", queue, qstatus), (PG, "podgroups", pg, pgstatus), (TOPO, "topologies", topo, None),
            (BR, "bindrequests", br, {"phase": "Failed", "reason": "boom", "failedAttempts": 2})]


def test_kai_shaped_objects_are_kept_whole(apiserver, shard):
    kube = apiserver.kube
    models = {"Queue": Queue, "PodGroup": PodGroup, "Topology": Topology, "BindRequest": BindRequest}
    for gv, plural, body, status in _kai_objects(shard):
        ns, name = body["metadata"].get("namespace"), body["metadata"]["name"]
        got = kube.create(object_path(gv, plural, ns), copy.deepcopy(body))
        assert got["spec"] == body["spec"], body["kind"]
        if status is not None:
            got = kube.patch(object_path(gv, plural, ns, name, "status"), {"status": copy.deepcopy(status)})
            assert got["status"] == status, body["kind"]
        back = models[body["kind"]].model_validate(got).model_dump(mode="json", by_alias=True, exclude_unset=True)
        assert (back["spec"], back.get("status")) == (got["spec"], got.get("status")), body["kind"]


def _pg(ns: str, name: str, **spec) -> dict:
    return {"apiVersion": PG, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns}, "spec": {"queue": "q", **spec}}


def _topo(name: str, body: dict) -> dict:
    return {"apiVersion": TOPO, "kind": "Topology", "metadata": {"name": name}, **body}


@pytest.mark.parametrize("case", [
    "minMember 0", "preemptibility", "subGroup no name", "subGroup name", "subGroup minMember", "subGroup parent",
    "parallelism type", "topology no spec", "topology no levels", "topology 17 levels", "topology duplicate",
    "topology hostname not last", "topology level no nodeLabel", "topology label",
])
def test_what_kais_crds_reject_is_rejected(apiserver, shard, case):
    ns = shard
    bodies = {
        "minMember 0": _pg(ns, "a", minMember=0),
        "preemptibility": _pg(ns, "b", preemptibility="sometimes"),
        "subGroup no name": _pg(ns, "c", subGroups=[{"minMember": 1}]),
        "subGroup name": _pg(ns, "d", subGroups=[{"name": "Workers"}]),
        "subGroup minMember": _pg(ns, "e", subGroups=[{"name": "w", "minMember": 0}]),
        "subGroup parent": _pg(ns, "f", subGroups=[{"name": "w", "parent": "-x"}]),
        "parallelism type": _pg(ns, "g", parallelism="2"),
        "topology no spec": _topo(f"{ns}-a", {}),
        "topology no levels": _topo(f"{ns}-b", {"spec": {"levels": []}}),
        "topology 17 levels": _topo(f"{ns}-c", {"spec": {"levels": [{"nodeLabel": f"l{i}"} for i in range(17)]}}),
        "topology duplicate": _topo(f"{ns}-d", {"spec": {"levels": [{"nodeLabel": "a"}, {"nodeLabel": "a"}]}}),
        "topology hostname not last": _topo(f"{ns}-e", {"spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"},
                                                                           {"nodeLabel": "rack"}]}}),
        "topology level no nodeLabel": _topo(f"{ns}-f", {"spec": {"levels": [{}]}}),
        "topology label": _topo(f"{ns}-g", {"spec": {"levels": [{"nodeLabel": "not a label"}]}}),
    }
    body = bodies[case]
    plural = "podgroups" if body["kind"] == "PodGroup" else "topologies"
    with pytest.raises(ApiError) as e:
        apiserver.kube.create(object_path(body["apiVersion"], plural, body["metadata"].get("namespace")), body)
    assert e.value.status == 422


def test_topology_levels_are_immutable(apiserver, shard):
    kube = apiserver.kube
    kube.create(object_path(TOPO, "topologies"), _topo(f"{shard}-t", {"spec": {"levels": [{"nodeLabel": "rack"}]}}))
    with pytest.raises(ApiError) as e:
        kube.patch(object_path(TOPO, "topologies", None, f"{shard}-t"), {"spec": {"levels": [{"nodeLabel": "zone"}]}})
    assert e.value.status == 422


def test_informer_finds_the_version_the_api_server_serves(apiserver, shard):
    """A newer KAI may serve Topology under another version only: the informer tries the kind's
    versions in turn (here the first is served by no API group) and lists the served one."""
    import threading

    from integration.cache import Informer, Kind

    kube = apiserver.kube
    name = f"{shard}-versions"
    kube.create(object_path(TOPO, "topologies"), _topo(name, {"spec": {"levels": [{"nodeLabel": "topo/rack"}]}}))
    informer = Informer(kube, Kind("topologies", "kai-cp-test.example/v1", "topologies", alternatives=(TOPO,)))
    informer.start()
    try:
        assert informer.synced.wait(30)
        assert informer.kind.group_version == TOPO
        for _ in range(100):
            if informer.store.get(name) is not None:
                break
            threading.Event().wait(0.1)
        assert informer.store.get(name) is not None
    finally:
        informer.stop()
