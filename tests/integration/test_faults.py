"""Faults against a live `kai-cp run`: 409 on bind (a real conflicting binding by another actor),
lost answers, timeouts, 5xx, watch drops, 410 Gone (API server restart after an etcd
compaction), and leader loss with two replicas. Counted, and checked on what the API server
holds: no pod bound twice or to two nodes, no gang left partly placed, no write by a replica
that was not leading, and the scheduler recovers by itself."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time

from integration.kube import object_path
from integration.testing.apiserver import ADMIN_TOKEN
from integration.testing.cluster import create, create_node, node, pod, podgroup, queue
from integration.testing.fakes import Binder, Kubelet, wait_for
from integration.testing.proxy import FaultProxy, Rule
from integration.testing.workload import Churn, gang_report, partial_gangs, successful_bindings_per_pod

from .conftest import wait_ready

SUMMARY = os.environ.get("KAI_CP_FAULT_SUMMARY")   # write the figures here (bench/README use)


def _binding(m, p, q):
    return m == "POST" and p.endswith("/binding") and q.get("dryRun") != "All"


def _allocate_only(tmp_path) -> list[str]:
    """These tests measure binding under API faults with workload stand-ins that recreate no
    pod: KAI's eviction actions (consolidation moving running pods, stale gangs) would delete gang
    members nobody brings back, which is not what is under test (stale-gang eviction in a live
    cluster is tested in test_run_e2e.py)."""
    conf = tmp_path / "allocate-only.yaml"
    conf.write_text("actions: allocate\n")
    return ["--scheduler-conf", str(conf)]


def _summary(name: str, doc: dict) -> None:
    print(f"\n[{name}] " + json.dumps(doc, sort_keys=True))
    if SUMMARY:
        with open(SUMMARY, "a") as f:
            f.write(json.dumps({"test": name, **doc}, sort_keys=True) + "\n")


def test_bind_mode_survives_api_faults(apiserver, shard, start_scheduler, tmp_path):
    kube = apiserver.kube
    nodes = [f"{shard}-n{i}" for i in range(8)]
    for n in nodes:
        create_node(kube, node(n, gpus=8, pool=shard))
    create(kube, queue(f"{shard}-q", pool=shard))
    # A gang that can never fit (80 GPUs > 64): not one of its pods may ever be bound.
    create(kube, podgroup("huge", shard, f"{shard}-q", 80, pool=shard))
    for i in range(80):
        create(kube, pod(f"huge-{i}", shard, "huge", gpus=1))

    rng = random.Random(7)
    proxy = FaultProxy(apiserver.url, ADMIN_TOKEN, seed=1)
    proxy.rules = [
        Rule("conflict_bind", _binding, rate=0.2, chooser=lambda doc: doc["target"]["name"] if rng.random() < 0.7
             else rng.choice(nodes)),
        Rule("status", _binding, rate=0.08, status=500),
        Rule("lose_answer", _binding, rate=0.12),
        Rule("timeout", _binding, rate=0.05, seconds=3.5),
        Rule("status", lambda m, p, q: m == "POST" and p.endswith("/binding") and q.get("dryRun") == "All",
             rate=0.05, status=503),
        Rule("status", lambda m, p, q: m in ("PATCH", "POST") and (p.endswith("/status") or p.endswith("/events")),
             rate=0.15, status=500),
        Rule("status", lambda m, p, q: m == "GET" and q.get("watch") not in ("1", "true"), rate=0.05, status=503),
        Rule("delay", lambda m, p, q: m != "GET", rate=0.05, seconds=0.5),
    ]
    kc = apiserver.write_kubeconfig(tmp_path / "via-proxy", proxy.url)
    sched = start_scheduler("--bind", "--v=4", *_allocate_only(tmp_path), kubeconfig=kc)
    wait_ready(sched)
    kubelet = Kubelet(kube, shard).start()
    churn = Churn(kube, shard, f"{shard}-q", shard, seed=3, every=0.25, sizes=(1, 4), run_seconds=0.5).start()
    restarts = 0
    cuts = 0
    t_end = time.monotonic() + 45
    next_restart = time.monotonic() + 11
    while time.monotonic() < t_end:
        time.sleep(1.2)
        cuts += 1 if proxy.cut_watches() else 0
        if time.monotonic() > next_restart and restarts < 2:
            apiserver.restart_apiserver(compact=True)
            restarts += 1
            next_restart = time.monotonic() + 11
    churn.stop_creating()
    proxy.enabled = False
    sizes = dict(churn.created, huge=80)

    def settled():
        rep = gang_report(kube, shard, sizes)
        pending = [g for g, r in rep.items() if g != "huge" and r["placed"] < r["pods"]]
        return rep if not pending else None
    report = wait_for(settled, 60, what="every finite gang placed after the faults stop")
    churn.stop()
    bindings = successful_bindings_per_pod(proxy.log)
    rogue_nodes: dict[str, set] = {}
    for e in proxy.log:
        if e.method == "POST" and e.path.endswith("/binding") and e.status in (200, 201) and e.body \
                and e.query.get("dryRun") != "All":
            rogue_nodes.setdefault(e.path, set()).add(e.body["target"]["name"])
    faults = dict(proxy.injected, apiserver_restart_with_compaction=restarts)
    logs = sched.logs()
    _summary("bind-mode-faults", {"injected": faults, "injectedTotal": sum(faults.values()),
                                  "gangs": len(churn.created), "podsBound": len(bindings),
                                  "doubleBinds": sum(1 for n in bindings.values() if n > 1),
                                  "podsOnTwoNodes": sum(1 for s in rogue_nodes.values() if len(s) > 1),
                                  "partialGangs": len(partial_gangs(report, sizes, set(churn.finished))),
                                  "relistsAfter410": logs.count("watch expired")})
    assert sum(faults.values()) >= 200, faults
    assert faults.get("conflict_bind", 0) > 0 and faults.get("lose_answer", 0) > 0 and faults.get("timeout", 0) > 0
    assert all(n == 1 for n in bindings.values()), "a pod was bound twice"
    assert all(len(s) == 1 for s in rogue_nodes.values()), "a pod was bound to two nodes"
    assert partial_gangs(report, sizes, set(churn.finished)) == [], report
    assert report.get("huge", {}).get("placed", 0) == 0
    assert logs.count("watch expired") > 0, "the compactions must have made the watches re-list"
    assert sched.alive()
    kubelet.stop()
    proxy.stop()


def test_bind_requests_survive_api_faults(apiserver, shard, start_scheduler, tmp_path):
    """BindRequest mode: a gang whose request cannot be written is withdrawn as a whole."""
    kube = apiserver.kube
    for i in range(4):
        create_node(kube, node(f"{shard}-n{i}", gpus=8, pool=shard))
    create(kube, queue(f"{shard}-q", pool=shard))
    br = lambda m, p, q: m == "POST" and p.endswith("/bindrequests")   # noqa: E731
    proxy = FaultProxy(apiserver.url, ADMIN_TOKEN, seed=2)
    proxy.rules = [Rule("status", br, rate=0.15, status=500), Rule("lose_answer", br, rate=0.1),
                   Rule("timeout", br, rate=0.03, seconds=3.5), Rule("status", br, rate=0.05, status=429)]
    kc = apiserver.write_kubeconfig(tmp_path / "via-proxy", proxy.url)
    sched = start_scheduler(*_allocate_only(tmp_path), kubeconfig=kc)
    wait_ready(sched)
    binder, kubelet = Binder(kube, shard).start(), Kubelet(kube, shard).start()
    churn = Churn(kube, shard, f"{shard}-q", shard, seed=5, every=0.3, sizes=(2, 4), run_seconds=0.5).start()
    time.sleep(25)
    churn.stop_creating()
    proxy.enabled = False

    def settled():
        rep = gang_report(kube, shard, churn.created)
        return rep if all(r["placed"] == r["pods"] for r in rep.values()) else None
    report = wait_for(settled, 60, what="every gang placed after the faults stop")
    churn.stop()
    binder.stop(), kubelet.stop()
    _summary("bindrequest-mode-faults", {"injected": proxy.injected, "injectedTotal": proxy.total(),
                                         "gangs": len(churn.created), "binderDoubleBinds": binder.conflicts,
                                         "partialGangs": len(partial_gangs(report, churn.created, set(churn.finished)))})
    assert proxy.total() >= 20
    assert binder.conflicts == 0, "a BindRequest named a pod already bound elsewhere"
    assert partial_gangs(report, churn.created, set(churn.finished)) == []
    assert sched.alive()
    proxy.stop()


def test_leader_loss_two_replicas(apiserver, shard, start_scheduler, tmp_path):
    """Two replicas, each behind its own proxy. The leader is killed, or cut off from the API
    server (its lease renewals fail), again and again; the other takes over. Every write of a
    decision (binding) is checked against the lease history recorded by the proxies."""
    kube = apiserver.kube
    for i in range(6):
        create_node(kube, node(f"{shard}-n{i}", gpus=8, pool=shard))
    create(kube, queue(f"{shard}-q", pool=shard))
    lease = ("--leader-elect", "--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s",
             "--leader-elect-retry-period=300ms", "--api-timeout=0.8s")
    proxies = [FaultProxy(apiserver.url, ADMIN_TOKEN, seed=10 + i) for i in range(2)]
    kcs = [apiserver.write_kubeconfig(tmp_path / f"kc{i}", p.url) for i, p in enumerate(proxies)]
    conf = _allocate_only(tmp_path)
    replicas = [start_scheduler("--bind", f"--identity=r{i}", *lease, *conf, kubeconfig=kcs[i]) for i in range(2)]
    for r in replicas:
        wait_ready(r)
    kubelet = Kubelet(kube, shard).start()
    churn = Churn(kube, shard, f"{shard}-q", shard, seed=9, every=0.3, sizes=(1, 3), run_seconds=0.5).start()
    lease_path = object_path("coordination.k8s.io/v1", "leases", shard, "kai-scheduler")

    def holder():
        try:
            return kube.get(lease_path)["spec"].get("holderIdentity")
        except Exception:
            return None
    kills = partitions = 0
    end = time.monotonic() + 40
    while time.monotonic() < end:
        h = wait_for(holder, 15, what="a leader")
        i = int(h[1:]) if h and h[1:].isdigit() else 0
        time.sleep(2.0)
        if (kills + partitions) % 2 == 0:
            replicas[i].stop(signal.SIGKILL)                       # the leader dies
            kills += 1
            wait_for(lambda: holder() not in (None, h), 15, what="the other replica to take over")
            replicas[i] = start_scheduler("--bind", f"--identity=r{i}", *lease, *conf, kubeconfig=kcs[i])
            wait_ready(replicas[i])
        else:
            # The leader loses the API server for its lease (renewals fail) but keeps running.
            rule = Rule("status", lambda m, p, q: "/leases" in p, rate=1.0, status=503)
            proxies[i].rules.append(rule)
            partitions += 1
            wait_for(lambda: holder() not in (None, h), 15, what="the other replica to take over")
            time.sleep(1.0)
            proxies[i].rules.remove(rule)
    churn.stop_creating()

    def settled():
        rep = gang_report(kube, shard, churn.created)
        return rep if all(r["placed"] == r["pods"] for r in rep.values()) else None
    report = wait_for(settled, 60, what="every gang placed")
    churn.stop()
    kubelet.stop()

    # Lease history from the proxies: (time, replica) of each successful acquire/renew.
    renewals = sorted((e.t, i) for i, p in enumerate(proxies) for e in p.log
                      if "/leases" in e.path and e.method in ("PUT", "POST") and e.status in (200, 201)
                      and (e.body or {}).get("spec", {}).get("holderIdentity") == f"r{i}")
    violations = 0
    writes = 0
    for i, p in enumerate(proxies):
        for e in p.log:
            if not (e.method == "POST" and e.path.endswith("/binding") and e.query.get("dryRun") != "All"):
                continue
            writes += 1
            own = [t for t, r in renewals if r == i and t <= e.t]
            other = [t for t, r in renewals if r != i and t <= e.t]
            # Legitimate: this replica renewed within the lease before the write, and no other
            # replica wrote the lease after that renewal.
            if not own or e.t - own[-1] > 3.0 or (other and other[-1] > own[-1]):
                violations += 1
    bindings = {}
    for p in proxies:
        for uid, n in successful_bindings_per_pod(p.log).items():
            bindings[uid] = bindings.get(uid, 0) + n
    _summary("leader-loss", {"kills": kills, "leasePartitions": partitions, "bindingWrites": writes,
                             "writesByNonLeader": violations, "doubleBinds": sum(1 for n in bindings.values() if n > 1),
                             "partialGangs": len(partial_gangs(report, churn.created, set(churn.finished))), "gangs": len(churn.created)})
    assert kills >= 2 and partitions >= 2
    assert writes > 0 and violations == 0
    assert all(n == 1 for n in bindings.values())
    assert partial_gangs(report, churn.created, set(churn.finished)) == []
    for p in proxies:
        p.stop()
