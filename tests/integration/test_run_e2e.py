"""`kai-cp run` against a real kube-apiserver: gangs all-or-nothing as KAI's BindRequests and as
Bindings (--bind), KAI's reasons in PodGroup status, pod conditions, events once per change,
queue status, metrics, and /get-snapshot replayed by `kai-cp solve`."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import zipfile

from integration.kube import object_path
from integration.testing.cluster import create, create_node, node, pod, podgroup, queue
from integration.testing.fakes import Binder, Kubelet, wait_for

from .conftest import REPO, wait_ready

BR = "scheduling.run.ai/v1alpha2"
PG = "scheduling.run.ai/v2alpha2"


def _setup(kube, shard, nodes=2, gpus=4):
    for i in range(nodes):
        create_node(kube, node(f"{shard}-n{i}", gpus=gpus, pool=shard))
    create(kube, queue(f"{shard}-q", pool=shard))


def _gang(kube, shard, name, size, gpus, min_member=None):
    create(kube, podgroup(name, shard, f"{shard}-q", min_member or size, pool=shard))
    for i in range(size):
        create(kube, pod(f"{name}-{i}", shard, name, gpus=gpus))


def _items(kube, gv, plural, ns):
    return kube.get(object_path(gv, plural, ns)).get("items") or []


def test_bind_requests_gangs_status_metrics_snapshot(apiserver, shard, start_scheduler, tmp_path):
    kube = apiserver.kube
    _setup(kube, shard)
    _gang(kube, shard, "a", 4, 2)            # 8 GPUs: fills both nodes
    _gang(kube, shard, "b", 3, 2)            # does not fit after a
    sched = start_scheduler()
    wait_ready(sched)

    brs = wait_for(lambda: [b for b in _items(kube, BR, "bindrequests", shard)] if
                   len(_items(kube, BR, "bindrequests", shard)) >= 4 else None, 30, what="4 BindRequests")
    time.sleep(1.0)     # several more cycles: nothing more may be written
    brs = _items(kube, BR, "bindrequests", shard)
    assert sorted(b["spec"]["podName"] for b in brs) == ["a-0", "a-1", "a-2", "a-3"]   # the whole gang, no b pod
    pods = {p["metadata"]["name"]: p for p in _items(kube, "v1", "pods", shard)}
    per_node: dict[str, int] = {}
    for b in brs:
        p = pods[b["spec"]["podName"]]
        assert b["metadata"]["name"] == p["metadata"]["name"]
        assert b["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"],
                                                     "uid": p["metadata"]["uid"]}]
        assert b["metadata"]["labels"] == {"selected-node": b["spec"]["selectedNode"],
                                           "kai.scheduler/node-pool": shard}
        assert b["spec"]["receivedResourceType"] == "Regular"
        assert b["spec"]["receivedGPU"] == {"count": 2, "portion": "1.00"}
        per_node[b["spec"]["selectedNode"]] = per_node.get(b["spec"]["selectedNode"], 0) + 2
    assert all(v <= 4 for v in per_node.values())

    # Pending gang: KAI's condition on the PodGroup, PodScheduled=False on its pods.
    def b_condition():
        pg = kube.get(object_path(PG, "podgroups", shard, "b"))
        return (pg.get("status") or {}).get("schedulingConditions")
    conds = wait_for(b_condition, 15, what="PodGroup b condition")
    assert len(conds) == 1
    c = conds[0]
    assert c["type"] == "UnschedulableOnNodePool" and c["nodePool"] == shard and c["reason"] == "Unschedulable"
    assert c["status"] == "True" and c["transitionID"] == "1"
    assert "GPU" in c["message"], c["message"]
    assert c["reasons"] and all(r["reason"] == "PodSchedulingErrors" for r in c["reasons"])
    for i in range(3):
        p = kube.get(object_path("v1", "pods", shard, f"b-{i}"))
        ps = [x for x in p["status"].get("conditions", []) if x["type"] == "PodScheduled"]
        assert ps and ps[0]["status"] == "False" and ps[0]["reason"] == "Unschedulable"
        assert ps[0]["message"] == c["message"]
    time.sleep(1.0)
    events = _items(kube, "v1", "events", shard)
    unsched = [e for e in events if e["reason"] == "Unschedulable" and e["involvedObject"]["name"] == "b-0"]
    assert len(unsched) == 1, "an unchanged reason is written once, not every cycle"
    assert b_condition()[0]["transitionID"] == "1"
    scheduled = [e for e in events if e["reason"] == "Scheduled"]
    assert sorted(e["involvedObject"]["name"] for e in scheduled) == ["a-0", "a-1", "a-2", "a-3"]
    assert all(f"at node-pool {shard}" in e["message"] for e in scheduled)

    # Queue status: pending BindRequests count as allocated.
    q = wait_for(lambda: (kube.get(object_path("scheduling.run.ai/v2", "queues", None, f"{shard}-q")).get("status") or {})
                 .get("allocated"), 10, what="queue status")
    assert q["nvidia.com/gpu"] == "8"
    qs = kube.get(object_path("scheduling.run.ai/v2", "queues", None, f"{shard}-q"))["status"]
    assert qs["requested"]["nvidia.com/gpu"] == "14" and qs["fairShare"]["nvidia.com/gpu"] == "8"

    # Metrics under KAI's names.
    text = sched.metrics()
    for name in ("kai_e2e_scheduling_latency_milliseconds", "kai_open_session_latency_milliseconds",
                 "kai_action_scheduling_latency_milliseconds{action=\"allocate\"}",
                 "kai_podgroups_scheduled_by_action{action=\"allocate\"} 1.0",
                 f"kai_queue_fair_share_gpu{{queue_display_name=\"\",queue_metadata_name=\"{shard}-q\",queue_name=\"{shard}-q\"}} 8.0",
                 "kai_task_bind_latency_milliseconds_bucket", "kai_cp_solver_status", "kai_cp_is_leader 1.0"):
        assert name in text, name
    assert "# TYPE kai_e2e_scheduling_latency_milliseconds gauge" in text
    assert "# TYPE kai_podgroups_scheduled_by_action counter" in text

    # /get-snapshot?cycle=last replays the decision; /get-snapshot loads in kai-cp solve.
    raw = sched.get(sched.plugin_port, "/get-snapshot?cycle=last")
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        assert set(zf.namelist()) == {"snapshot.json", "decisions.json"}
        live = json.loads(zf.read("decisions.json"))
        (tmp_path / "last.json").write_bytes(zf.read("snapshot.json"))
    out = subprocess.run([sys.executable, "-m", "kai_cp", "solve", str(tmp_path / "last.json"), "--time-limit=0.5"],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    replay = json.loads(out.stdout)
    assert replay["binds"] == live["binds"] and len(replay["binds"]) == 4
    fresh = sched.get(sched.plugin_port, "/get-snapshot")
    (tmp_path / "now.zip").write_bytes(fresh)
    with zipfile.ZipFile(io.BytesIO(fresh)) as zf:
        assert zf.namelist() == ["snapshot.json"]
    out = subprocess.run([sys.executable, "-m", "kai_cp", "solve", str(tmp_path / "now.zip"), "--time-limit=0.5"],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    now = json.loads(out.stdout)
    assert now["binds"] == []          # a's requests are pending: its pods count as allocated
    pending = [u["podGroup"] for u in now["unschedulable"]]
    assert "b" in pending and "a" not in pending     # (other tests' shards may add their own pods)

    # KAI's binder and a kubelet take it from there; b stays pending, nothing else is written.
    binder, kubelet = Binder(kube, shard).start(), Kubelet(kube, shard).start()
    try:
        wait_for(lambda: all(p["status"].get("phase") == "Running" for p in _items(kube, "v1", "pods", shard)
                             if p["metadata"]["name"].startswith("a-")), 20, what="gang a running")
        time.sleep(1.0)
        assert not any(p["spec"].get("nodeName") for p in _items(kube, "v1", "pods", shard)
                       if p["metadata"]["name"].startswith("b-"))
        assert len(_items(kube, BR, "bindrequests", shard)) == 4
    finally:
        binder.stop(), kubelet.stop()
    assert sched.alive()


def test_bind_mode_binds_whole_gangs_only(apiserver, shard, start_scheduler):
    kube = apiserver.kube
    _setup(kube, shard, nodes=2, gpus=1)
    _gang(kube, shard, "big", 3, 1)          # needs 3 GPUs, the pool has 2: must bind nothing
    _gang(kube, shard, "small", 2, 1)
    sched = start_scheduler("--bind")
    wait_ready(sched)
    bound = wait_for(lambda: [p for p in _items(kube, "v1", "pods", shard) if p["spec"].get("nodeName")]
                     if len([p for p in _items(kube, "v1", "pods", shard) if p["spec"].get("nodeName")]) >= 2 else None,
                     30, what="small gang bound")
    time.sleep(1.0)
    pods = _items(kube, "v1", "pods", shard)
    bound = sorted((p["metadata"]["name"], p["spec"].get("nodeName")) for p in pods if p["spec"].get("nodeName"))
    assert [b[0] for b in bound] == ["small-0", "small-1"]
    assert len({b[1] for b in bound}) == 2
    assert _items(kube, BR, "bindrequests", shard) == []     # --bind writes no BindRequests
    pg = kube.get(object_path(PG, "podgroups", shard, "big"))
    conds = (pg.get("status") or {}).get("schedulingConditions") or []
    assert conds and conds[-1]["reason"] == "Unschedulable"
    small = kube.get(object_path(PG, "podgroups", shard, "small"))
    assert "kai.scheduler/last-start-timestamp" in small["metadata"].get("annotations", {})
    assert sched.alive()


def test_unknown_kai_flag_is_a_warning(apiserver, shard, start_scheduler):
    kube = apiserver.kube
    _setup(kube, shard, nodes=1, gpus=2)
    _gang(kube, shard, "one", 1, 1)
    sched = start_scheduler("--pyroscope-address=http://x", "--some-future-kai-flag=3", "--leader-elect=false")
    wait_ready(sched)
    wait_for(lambda: _items(kube, BR, "bindrequests", shard), 20, what="a BindRequest")
    assert "unknown flag --some-future-kai-flag ignored" in sched.logs()
    assert sched.alive()


def test_run_help_documents_every_flag():
    out = subprocess.run([sys.executable, "-m", "kai_cp", "run", "--help"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0
    from integration.run import parser
    for action in parser()._actions:
        for opt in action.option_strings:
            assert opt in out.stdout
        if action.option_strings and action.dest != "help":
            assert action.help, action.option_strings


def _stale_gang(kube, shard: str) -> None:
    """Gang `s` of 3 one-GPU pods on a 2-GPU pool, its pod s-0 bound by someone else: below its
    minimum with a pod running, i.e. stale."""
    _setup(kube, shard, nodes=1, gpus=2)
    _gang(kube, shard, "s", 3, 1)
    p = kube.get(object_path("v1", "pods", shard, "s-0"))
    kube.create(object_path("v1", "pods", shard, "s-0", "binding"),
                {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "s-0", "uid": p["metadata"]["uid"]},
                 "target": {"apiVersion": "v1", "kind": "Node", "name": f"{shard}-n0"}})


def test_stale_gang_annotation_set_and_cleared(apiserver, shard, start_scheduler):
    """A gang below its minimum with some pods running (here: one bound by someone else) carries
    KAI's stale-podgroup-timestamp annotation; it is removed when the gang is no longer stale."""
    kube = apiserver.kube
    _stale_gang(kube, shard)
    sched = start_scheduler("--bind")
    wait_ready(sched)
    ann = lambda: kube.get(object_path(PG, "podgroups", shard, "s"))["metadata"].get("annotations") or {}  # noqa: E731
    stamp = wait_for(lambda: ann().get("kai.scheduler/stale-podgroup-timestamp"), 15, what="stale annotation")
    assert stamp.endswith("Z")
    time.sleep(1.0)
    assert ann().get("kai.scheduler/stale-podgroup-timestamp") == stamp      # set once, not moved every cycle
    kube.delete(object_path("v1", "pods", shard, "s-0"), gracePeriodSeconds=0)
    wait_for(lambda: "kai.scheduler/stale-podgroup-timestamp" not in ann(), 15, what="stale annotation removed")
    assert sched.alive()


def test_stale_gang_is_evicted_after_the_grace_period(apiserver, shard, start_scheduler):
    """Past `--default-staleness-grace-period` (counted from the annotation, across cycles) the
    stale gang's remaining pod is evicted; the pods that never ran are left alone."""
    kube = apiserver.kube
    _stale_gang(kube, shard)
    sched = start_scheduler("--bind", "--default-staleness-grace-period=3s")
    wait_ready(sched)
    ann = lambda: kube.get(object_path(PG, "podgroups", shard, "s"))["metadata"].get("annotations") or {}  # noqa: E731
    stamp = wait_for(lambda: ann().get("kai.scheduler/stale-podgroup-timestamp"), 15, what="stale annotation")
    assert not kube.get(object_path("v1", "pods", shard, "s-0"))["metadata"].get("deletionTimestamp")
    wait_for(lambda: kube.get(object_path("v1", "pods", shard, "s-0"))["metadata"].get("deletionTimestamp"), 20,
             what="stale pod evicted")
    assert ann().get("kai.scheduler/stale-podgroup-timestamp") == stamp
    for name in ("s-1", "s-2"):
        pod_now = kube.get(object_path("v1", "pods", shard, name))
        assert not pod_now["metadata"].get("deletionTimestamp") and not pod_now["spec"].get("nodeName")
    assert sched.alive()
