"""Reclaim and preempt against a real kube-apiserver: `kai-cp run --bind` evicts the victims
(through the Eviction API, or deleting them as KAI does with `--evict-with-delete`, then with KAI's
DisruptionTarget condition when `--update-pod-eviction-condition` asks for it), writes KAI's
`Evict` event on each victim's PodGroup with the evictor in its annotations, counts the evicted
pods in `pod_group_evicted_pods`, and binds the preemptor whole once the victims are gone. Gangs
spread over two nodes, as victims (reclaimed whole) and as preemptors: each victim pod evicted
exactly once (counted on the scheduler's requests), no pod bound twice, no partial gang.

There is no kubelet behind the test API server: an evicted pod stays terminating until someone
finishes it, so the test does what the kubelet would (delete it with grace 0) once it has checked
the eviction."""

from __future__ import annotations

import re
import time

from integration.kube import object_path
from integration.testing.apiserver import ADMIN_TOKEN
from integration.testing.cluster import create, create_node, node, pod, podgroup, queue
from integration.testing.fakes import Kubelet, wait_for
from integration.testing.proxy import FaultProxy
from integration.testing.workload import successful_bindings_per_pod

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


def _nominated(kube, shard, job, node, n):
    ps = _pods(kube, shard, job)
    return ps if len(ps) == n and all((p.get("status") or {}).get("nominatedNodeName") == node
                                      for p in ps.values()) else None


def _cycles(sched) -> float:
    """Cycles the scheduler has run (its `kai_cp_cycles_total` counter)."""
    m = re.search(r"^kai_cp_cycles_total (\S+)$", sched.metrics(), re.M)
    return float(m.group(1)) if m else 0.0


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
    # The preemptor's pods are nominated to the node their victims leave (kube-scheduler's
    # nominatedNodeName), so the next cycles serve them first there, and stay nominated while the
    # victims are still terminating: several cycles later (200 ms each) it is still there.
    # (45 s: an outcome a loaded 2-core machine reaches late, not a speed claim)
    wait_for(lambda: _nominated(kube, shard, "w", f"{shard}-n0", 2), 45, what="the gang nominated to n0")
    before = _cycles(sched)
    wait_for(lambda: _cycles(sched) >= before + 3, 45, what="three more cycles")
    assert _nominated(kube, shard, "w", f"{shard}-n0", 2), "the nomination stays while the victims leave"
    events = wait_for(lambda: _evict_events(kube, shard, "r0") or None, 45, what="Evict event on r0")
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
    events = wait_for(lambda: _evict_events(kube, shard, "low") or None, 45, what="Evict event on low")
    ann = events[0]["metadata"]["annotations"]
    assert ann["evictor-action-type"] == "preempt" and ann["evictor-pod-group-name"] == "high"
    assert ann["num-evicted-pods"] == "2"
    assert f"was preempted by higher priority workload {shard}/high" in events[0]["message"]
    _finish(kube, shard, victims)
    wait_for(lambda: _bound(kube, shard, "high", 1), 30, what="high bound")
    assert sched.alive()
    kubelet.stop()


# -- gangs as victims and as preemptors, spread over two nodes -------------------------------------
def _evictions_per_pod(proxy, shard) -> dict[str, int]:
    """Evictions the scheduler sent, per pod name (pods/eviction, or DELETE with --evict-with-delete)."""
    out: dict[str, int] = {}
    for e in proxy.log:
        if f"/namespaces/{shard}/pods/" not in e.path:
            continue
        if (e.method == "POST" and e.path.endswith("/eviction")) or (e.method == "DELETE" and e.path.count("/") == 6):
            name = e.path.split("/pods/", 1)[1].split("/", 1)[0]
            out[name] = out.get(name, 0) + 1
    return out


def _partial_gangs_metric(sched) -> float:
    m = re.search(r"^kai_cp_partial_gangs_total ([0-9.e+-]+)$", sched.metrics(), re.M)
    assert m, "kai_cp_partial_gangs_total not exposed"
    return float(m.group(1))


def _via_proxy(apiserver, tmp_path):
    proxy = FaultProxy(apiserver.url, ADMIN_TOKEN)       # no faults: it records what the scheduler sends
    return proxy, apiserver.write_kubeconfig(tmp_path / "via-proxy", proxy.url)


def test_reclaim_evicts_a_victim_gang_spread_over_two_nodes_whole(apiserver, shard, start_scheduler, tmp_path):
    """A 4-pod gang of an over-quota queue runs 2 + 2 on two 4-GPU nodes; a starved queue's gang
    needs all 8 GPUs: every pod of the victim gang is evicted, each exactly once, none is left
    running, and the reclaimer is bound whole once they are gone."""
    kube = apiserver.kube
    for i in range(2):
        create_node(kube, node(f"{shard}-n{i}", gpus=4, pool=shard))
    create(kube, queue(f"{shard}-over", gpu_quota=0, pool=shard))
    create(kube, queue(f"{shard}-under", gpu_quota=8, pool=shard))
    proxy, kc = _via_proxy(apiserver, tmp_path)
    kubelet = Kubelet(kube, shard).start()
    sched = start_scheduler("--bind", "--evict-with-delete", "--idle-resync=0", kubeconfig=kc)
    try:
        wait_ready(sched)
        _job(kube, shard, "spread-victim", f"{shard}-over", 4, 2)
        victim = wait_for(lambda: _bound(kube, shard, "spread-victim", 4), 30, what="the victim gang bound")
        assert sorted(p["spec"]["nodeName"] for p in victim.values()) == [f"{shard}-n0"] * 2 + [f"{shard}-n1"] * 2
        _job(kube, shard, "spread-reclaimer", f"{shard}-under", 2, 4)
        victims = wait_for(lambda: _terminating(kube, shard, "spread-victim", 4), 30, what="the whole victim gang reclaimed")
        assert not any(p["spec"].get("nodeName") for p in _pods(kube, shard, "spread-reclaimer").values())
        events = wait_for(lambda: _evict_events(kube, shard, "spread-victim") or None, 45, what="Evict event")
        assert sum(int(e["metadata"]["annotations"]["num-evicted-pods"]) for e in events) == 4
        assert {e["metadata"]["annotations"]["evictor-action-type"] for e in events} == {"reclaim"}
        time.sleep(1.0)          # several more cycles see the victims terminating: no second eviction
        assert _evictions_per_pod(proxy, shard) == {f"spread-victim-{i}": 1 for i in range(4)}
        _finish(kube, shard, victims)
        won = wait_for(lambda: _bound(kube, shard, "spread-reclaimer", 2), 30, what="the reclaimer bound whole")
        assert sorted(p["spec"]["nodeName"] for p in won.values()) == [f"{shard}-n0", f"{shard}-n1"]
        assert all(n == 1 for n in successful_bindings_per_pod(proxy.log).values()), "a pod was bound twice"
        assert _evictions_per_pod(proxy, shard) == {f"spread-victim-{i}": 1 for i in range(4)}
        assert _partial_gangs_metric(sched) == 0
        assert sched.alive()
    finally:
        kubelet.stop()
        proxy.stop()


def test_preempt_for_a_gang_spanning_both_nodes(apiserver, shard, start_scheduler, tmp_path):
    """Low-priority single-GPU pods fill two 2-GPU nodes; a high-priority gang of two 2-GPU pods
    (one per node) preempts all of them, each exactly once, then binds whole across both nodes."""
    kube = apiserver.kube
    for i in range(2):
        create_node(kube, node(f"{shard}-n{i}", gpus=2, pool=shard))
    create(kube, queue(f"{shard}-q", pool=shard))
    for name, value in ((f"{shard}-low", 40), (f"{shard}-high", 90)):
        create(kube, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                      "value": value})
    proxy, kc = _via_proxy(apiserver, tmp_path)
    kubelet = Kubelet(kube, shard).start()
    sched = start_scheduler("--bind", "--idle-resync=0", kubeconfig=kc)
    try:
        wait_ready(sched)
        for i in range(2):
            _job(kube, shard, f"span-low{i}", f"{shard}-q", 2, 1, priority_class=f"{shard}-low")
        for i in range(2):
            wait_for(lambda i=i: _bound(kube, shard, f"span-low{i}", 2), 30, what=f"span-low{i} bound")
        on = sorted(p["spec"]["nodeName"] for i in range(2) for p in _pods(kube, shard, f"span-low{i}").values())
        assert on == [f"{shard}-n0"] * 2 + [f"{shard}-n1"] * 2
        _job(kube, shard, "span-high", f"{shard}-q", 2, 2, priority_class=f"{shard}-high")
        victims = []
        for i in range(2):
            victims += wait_for(lambda i=i: _terminating(kube, shard, f"span-low{i}", 2), 30, what=f"span-low{i} preempted")
        for i in range(2):
            events = wait_for(lambda i=i: _evict_events(kube, shard, f"span-low{i}") or None, 45, what="Evict event")
            ann = events[0]["metadata"]["annotations"]
            assert ann["evictor-action-type"] == "preempt" and ann["evictor-pod-group-name"] == "span-high"
        time.sleep(1.0)          # several more cycles: no second eviction
        expected = {f"span-low{i}-{j}": 1 for i in range(2) for j in range(2)}
        assert _evictions_per_pod(proxy, shard) == expected
        assert not any(p["spec"].get("nodeName") for p in _pods(kube, shard, "span-high").values())
        _finish(kube, shard, victims)
        high = wait_for(lambda: _bound(kube, shard, "span-high", 2), 30, what="the preemptor bound whole")
        assert sorted(p["spec"]["nodeName"] for p in high.values()) == [f"{shard}-n0", f"{shard}-n1"]
        assert all(n == 1 for n in successful_bindings_per_pod(proxy.log).values()), "a pod was bound twice"
        assert _evictions_per_pod(proxy, shard) == expected
        assert _partial_gangs_metric(sched) == 0
        assert sched.alive()
    finally:
        kubelet.stop()
        proxy.stop()
