"""Evictions as the apply step sends them, on the real API server: through pods/eviction with the
pod's UID as precondition, so a PodDisruptionBudget that allows no disruption answers 429 and the
pod stays (decided again next cycle); `--evict-with-delete` deletes as KAI does."""

from __future__ import annotations

from integration.apply import Applier
from integration.cache import Cache
from integration.kube import object_path
from integration.testing.cluster import create, create_node, node, pod
from integration.testing.fakes import wait_for


def _bound_pod(kube, ns, name, node_name, labels=None):
    body = pod(name, ns, "g")
    body["metadata"]["labels"] = labels or {}
    p = create(kube, body)
    kube.create(object_path("v1", "pods", ns, name, "binding"),
                {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "uid": p["metadata"]["uid"]},
                 "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}})
    # Running (a Pending pod may always be evicted, whatever its budget says).
    kube.patch(object_path("v1", "pods", ns, name, "status"), {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}})


def test_eviction_api_respects_pdbs_and_delete_mode(apiserver, shard):
    kube = apiserver.kube
    create_node(kube, node(f"{shard}-n0", pool=shard))
    _bound_pod(kube, shard, "free", f"{shard}-n0")
    _bound_pod(kube, shard, "guarded", f"{shard}-n0", {"app": "guarded"})
    pdb = kube.create(object_path("policy/v1", "poddisruptionbudgets", shard),
                      {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guard"},
                       "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    # No disruption controller runs here: write the status it would compute (nothing may be disrupted).
    kube.patch(object_path("policy/v1", "poddisruptionbudgets", shard, "guard", "status"),
               {"status": {"currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1, "disruptionsAllowed": 0,
                           "observedGeneration": pdb["metadata"]["generation"]}})
    cache = Cache(kube, shard)
    cache.start()
    assert cache.wait_synced(30)
    wait_for(lambda: cache.informers["pods"].get(f"{shard}/guarded"), 10, what="pods in the cache")
    evictions = [{"pod": f"{shard}/free", "podGroup": "g", "action": "reclaim"},
                 {"pod": f"{shard}/guarded", "podGroup": "g", "action": "reclaim"}]

    out = Applier(kube, cache, bind_mode=True)._evict_all(evictions)
    assert out.evicted == [f"{shard}/free"] and out.evictions_retry == [f"{shard}/guarded"]
    free = kube.get(object_path("v1", "pods", shard, "free"))
    assert free["metadata"].get("deletionTimestamp")              # graceful: the kubelet would stop it
    assert not kube.get(object_path("v1", "pods", shard, "guarded"))["metadata"].get("deletionTimestamp")

    out = Applier(kube, cache, bind_mode=True, evict_with_delete=True)._evict_all(evictions[1:])
    assert out.evicted == [f"{shard}/guarded"]
    g = wait_for(lambda: (lambda d: d or None)(kube.get(object_path("v1", "pods", shard, "guarded"))["metadata"]
                                               .get("deletionTimestamp")), 10, what="deleted")
    assert g
    cache.stop()
