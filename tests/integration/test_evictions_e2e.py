"""Reclaim and preempt against a real kube-apiserver: `kai-cp run --bind` evicts the victims
(through the Eviction API, or deleting them as KAI does with `--evict-with-delete`, then with KAI's
DisruptionTarget condition when `--update-pod-eviction-condition` asks for it), writes KAI's
`Evict` event on each victim's PodGroup with the evictor in its annotations, counts the evicted
pods in `pod_group_evicted_pods`, and binds the preemptor whole once the victims are gone.

There is no kubelet behind the test API server: an evicted pod stays terminating until someone
finishes it, so the test does what the kubelet would (delete it with grace 0) once it has checked
the eviction."""

from __future__ import annotations

from integration.kube import object_path
from integration.testing.cluster import create, create_node, node, pod, podgroup, queue
from integration.testing.fakes import Kubelet, wait_for

from .conftest import wait_ready

PG = "scheduling.run.ai/v2alpha2"


def _items(kube, gv, plural, ns):
    return kube.get(object_path(gv, plural, ns)).get("items") or []


def _job(kube, shard, name, queue_name, size, gpus, priority_class=None):
    create(kube, podgroup(name, shard, queue_name, size, pool=shard, priority_class=priority_class))
    for i in range(size):
        create(kube, pod(f"{name}-{i}", shard, name, gpus=gpus))


def _pods(kube, shard, job):
    return {p["metadata"]["name"]: p for p in _items(kube, "v1", "pods", shard)
            if (p["metadata"].get("annotations") or {}).get("pod-group-name") == job}


def _bound(kube, shard, job, n):
    ps = _pods(kube, shard, job)
    return ps if len(ps) == n and all(p["spec"].get("nodeName") for p in ps.values()) else None


def _terminating(kube, shard, job, n):
    ps = _pods(kube, shard, job)
    done = [p for p in ps.values() if p["metadata"].get("deletionTimestamp")]
    return done if len(done) == n else None


def _finish(kube, shard, pods) -> None:
    """What the kubelet does once an evicted pod's containers have stopped."""
    for p in pods:
        kube.delete(object_path("v1", "pods", shard, p["metadata"]["name"]), gracePeriodSeconds=0)


def _evict_events(kube, shard, job):
    return [e for e in _items(kube, "v1", "events", shard)
            if e["reason"] == "Evict" and e["involvedObject"]["name"] == job]


def test_reclaim_evicts_an_over_share_queue_for_a_starved_one(apiserver, shard, start_scheduler):
    kube = apiserver.kube
    create_node(kube, node(f"{shard}-n0", gpus=4, pool=shard))
    create(kube, queue(f"{shard}-over", gpu_quota=0, pool=shard))
    create(kube, queue(f"{shard}-under", gpu_quota=4, pool=shard))
    kubelet = Kubelet(kube, shard).start()
    sched = start_scheduler("--bind", "--evict-with-delete", "--update-pod-eviction-condition")
    wait_ready(sched)
    # Queue `over` (no quota) takes the idle node first: 4 one-GPU single-pod jobs, preemptible.
    for i in range(4):
        _job(kube, shard, f"r{i}", f"{shard}-over", 1, 1)
    for i in range(4):
        wait_for(lambda i=i: _bound(kube, shard, f"r{i}", 1), 30, what=f"r{i} bound")
    # Queue `under` (quota 4) now wants the whole node for a 2 x 2-GPU gang.
    _job(kube, shard, "w", f"{shard}-under", 2, 2)
    victims = []
    for i in range(4):
        victims += wait_for(lambda i=i: _terminating(kube, shard, f"r{i}", 1), 30, what=f"r{i} reclaimed")
    for p in victims:
        conds = {c["type"]: c for c in p["status"].get("conditions", [])}
        assert conds["DisruptionTarget"]["status"] == "True"
        assert conds["DisruptionTarget"]["reason"] == "PreemptionByScheduler"
        assert f"was preempted by workload {shard}/w" in conds["DisruptionTarget"]["message"]
    assert not any(p["spec"].get("nodeName") for p in _pods(kube, shard, "w").values()), \
        "the gang waits for its victims to leave (pipelined, not bound)"
    events = wait_for(lambda: _evict_events(kube, shard, "r0") or None, 15, what="Evict event on r0")
    ann = events[0]["metadata"]["annotations"]
    assert ann == {"num-evicted-pods": "1", "evictor-pod-group-name": "w", "evictor-pod-group-namespace": shard,
                   "evictor-action-type": "reclaim"}
    assert "was preempted by workload" in events[0]["message"]
    text = sched.metrics()
    assert f'kai_pod_group_evicted_pods_total{{action="reclaim",namespace="{shard}",nodepool="{shard}",podgroup="r0"' \
        in text, [line for line in text.splitlines() if "evicted" in line]
    _finish(kube, shard, victims)
    w = wait_for(lambda: _bound(kube, shard, "w", 2), 30, what="the gang bound whole")
    assert {p["spec"]["nodeName"] for p in w.values()} == {f"{shard}-n0"}
    assert sched.alive()
    kubelet.stop()


def test_preempt_evicts_lower_priority_work_of_the_same_queue(apiserver, shard, start_scheduler):
    kube = apiserver.kube
    create_node(kube, node(f"{shard}-n0", gpus=2, pool=shard))
    create(kube, queue(f"{shard}-q", pool=shard))
    for name, value in ((f"{shard}-low", 40), (f"{shard}-high", 90)):
        create(kube, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                      "value": value})
    kubelet = Kubelet(kube, shard).start()
    sched = start_scheduler("--bind")
    wait_ready(sched)
    _job(kube, shard, "low", f"{shard}-q", 2, 1, priority_class=f"{shard}-low")
    wait_for(lambda: _bound(kube, shard, "low", 2), 30, what="low bound")
    _job(kube, shard, "high", f"{shard}-q", 1, 2, priority_class=f"{shard}-high")
    victims = wait_for(lambda: _terminating(kube, shard, "low", 2), 30, what="low preempted")
    for p in victims:       # the Eviction API's own condition (it replaces KAI's, which is not asked for here)
        conds = {c["type"]: c for c in p["status"].get("conditions", [])}
        assert conds["DisruptionTarget"]["reason"] == "EvictionByEvictionAPI"
    events = wait_for(lambda: _evict_events(kube, shard, "low") or None, 15, what="Evict event on low")
    ann = events[0]["metadata"]["annotations"]
    assert ann["evictor-action-type"] == "preempt" and ann["evictor-pod-group-name"] == "high"
    assert ann["num-evicted-pods"] == "2"
    assert f"was preempted by higher priority workload {shard}/high" in events[0]["message"]
    _finish(kube, shard, victims)
    wait_for(lambda: _bound(kube, shard, "high", 1), 30, what="high bound")
    assert sched.alive()
    kubelet.stop()
