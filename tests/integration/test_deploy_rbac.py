"""deploy/'s least-privilege RBAC, checked on the real API server: `kai-cp run` with leader
election works under the ServiceAccount's own token, and the role grants nothing it does not
need (no pods/binding in BindRequest mode, only its own Lease)."""

from __future__ import annotations

from pathlib import Path

import yaml

from integration.kube import ApiError, Kube, load_api_client, object_path
from integration.testing.cluster import create, create_node, node, pod, podgroup, queue
from integration.testing.fakes import wait_for

from .conftest import REPO, wait_ready

PATHS = {"ServiceAccount": ("v1", "serviceaccounts"), "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles"),
         "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings"),
         "Role": ("rbac.authorization.k8s.io/v1", "roles"), "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings")}


def _apply(kube: Kube, files: list[str], ns: str) -> None:
    for f in files:
        text = (REPO / "deploy" / f).read_text().replace("namespace: kai-scheduler", f"namespace: {ns}")
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            if doc["kind"].startswith("Cluster"):
                doc["metadata"]["name"] += f"-{ns}"
                if "roleRef" in doc and doc["roleRef"]["kind"] == "ClusterRole":
                    doc["roleRef"]["name"] += f"-{ns}"
            gv, plural = PATHS[doc["kind"]]
            namespaced = not doc["kind"].startswith("Cluster")
            kube.create(object_path(gv, plural, ns if namespaced else None), doc)


def test_scheduler_runs_under_least_privilege(apiserver, shard, start_scheduler, tmp_path):
    kube = apiserver.kube
    _apply(kube, ["serviceaccount.yaml", "rbac.yaml"], shard)
    tok = kube.create(object_path("v1", "serviceaccounts", shard, "kai-cp", "token"),
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": 3600}})["status"]["token"]
    kc = apiserver.write_kubeconfig(tmp_path / "sa", apiserver.url, token=tok)
    sa = Kube(load_api_client(str(kc)))

    for i in range(2):
        create_node(kube, node(f"{shard}-n{i}", gpus=2, pool=shard))
    create(kube, queue(f"{shard}-q", pool=shard))
    create(kube, podgroup("g", shard, f"{shard}-q", 3, pool=shard))
    for i in range(3):
        create(kube, pod(f"g-{i}", shard, "g", gpus=1))
    create(kube, podgroup("big", shard, f"{shard}-q", 5, pool=shard))
    for i in range(5):                        # 5 GPUs > 4: never placed
        create(kube, pod(f"big-{i}", shard, "big", gpus=1))

    sched = start_scheduler("--leader-elect", "--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s",
                            "--leader-elect-retry-period=500ms", kubeconfig=kc)
    wait_ready(sched)
    try:
        brs = wait_for(lambda: (lambda items: items if len(items) == 3 else None)(
            kube.get(object_path("scheduling.run.ai/v1alpha2", "bindrequests", shard))["items"]), 30, what="3 BindRequests")
    except AssertionError:
        sched.stop(dump=True)
        raise AssertionError(sched.logs()[-6000:])
    assert sorted(b["spec"]["podName"] for b in brs) == ["g-0", "g-1", "g-2"]
    lease = kube.get(object_path("coordination.k8s.io/v1", "leases", shard, "kai-scheduler"))
    assert lease["spec"]["holderIdentity"] and lease["spec"]["leaseDurationSeconds"] == 3
    wait_for(lambda: (kube.get(object_path("scheduling.run.ai/v2alpha2", "podgroups", shard, "big")).get("status") or {})
             .get("schedulingConditions"), 15, what="status written under the role")
    wait_for(lambda: (kube.get(object_path("scheduling.run.ai/v2", "queues", None, f"{shard}-q")).get("status") or {})
             .get("allocated"), 15, what="queue status written under the role")
    log = sched.logs()
    assert " 403 " not in log and "forbidden" not in log.lower(), log[-2000:]

    # What the role does not grant.
    p = kube.get(object_path("v1", "pods", shard, "big-0"))
    denied = [
        lambda: sa.create(object_path("v1", "pods", shard, "big-0", "binding"),
                          {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "big-0", "uid": p["metadata"]["uid"]},
                           "target": {"apiVersion": "v1", "kind": "Node", "name": f"{shard}-n0"}}),
        lambda: sa.delete(object_path("v1", "pods", shard, "big-0")),
        lambda: sa.get(object_path("coordination.k8s.io/v1", "leases", shard, "another-lease")),
        lambda: sa.request("PUT", object_path("v1", "pods", shard, "big-0"), p),
        lambda: sa.get(object_path("v1", "secrets", shard)),
    ]
    for attempt in denied:
        try:
            attempt()
        except ApiError as e:
            assert e.status == 403, e
        else:
            raise AssertionError("the role allowed more than it should")
    sched.stop()
