"""`kai-cp run` reads PersistentVolumeClaims and StorageClasses from the real API server: a pod
whose claim is missing stays pending with Kubernetes' VolumeBinding reason in its PodGroup's
status, and is bound once the claim exists (a class that binds when the pod is placed); an
unbound claim of a class that binds at once keeps its pod pending. Under RBAC that does not
grant the claims, scheduling goes on (the claims unchecked)."""

from __future__ import annotations

from integration.kube import object_path
from integration.testing.cluster import create, create_node, node, pod, podgroup, queue
from integration.testing.fakes import wait_for

from .conftest import wait_ready

BR = "scheduling.run.ai/v1alpha2"
PG = "scheduling.run.ai/v2alpha2"


def _claimed_pod(name: str, shard: str, group: str, claim: str) -> dict:
    body = pod(name, shard, group, gpus=1)
    body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return body


def _claim(name: str, shard: str, cls: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": shard},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                     "resources": {"requests": {"storage": "1Gi"}}}}


def _class(name: str, mode: str) -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": "example.com/none", "volumeBindingMode": mode}


def _bound(kube, shard: str) -> list[str]:
    return sorted(b["spec"]["podName"] for b in kube.get(object_path(BR, "bindrequests", shard)).get("items") or [])


def _message(kube, shard: str, group: str) -> str | None:
    pg = kube.get(object_path(PG, "podgroups", shard, group))
    conds = (pg.get("status") or {}).get("schedulingConditions") or []
    return conds[0]["message"] if conds else None


def test_a_missing_claim_keeps_its_pod_pending_until_it_exists(apiserver, shard, start_scheduler):
    kube = apiserver.kube
    create_node(kube, node(f"{shard}-n0", gpus=4, pool=shard))
    create(kube, queue(f"{shard}-q", pool=shard))
    create(kube, _class(f"{shard}-later", "WaitForFirstConsumer"))
    create(kube, _class(f"{shard}-now", "Immediate"))
    create(kube, _claim("other", shard, f"{shard}-later"))
    for name, claim in (("db", "data-db"), ("imm", "data-imm"), ("free", None)):
        create(kube, podgroup(name, shard, f"{shard}-q", 1, pool=shard))
        create(kube, _claimed_pod(f"{name}-0", shard, name, claim) if claim else pod(f"{name}-0", shard, name, gpus=1))
    create(kube, _claim("data-imm", shard, f"{shard}-now"))       # never bound: no PV controller here
    sched = start_scheduler()
    wait_ready(sched)

    wait_for(lambda: _bound(kube, shard) == ["free-0"] or None, 30, what="free-0 bound")
    msg = wait_for(lambda: _message(kube, shard, "db"), 15, what="db's condition")
    assert 'VolumeBinding: persistentvolumeclaim "data-db" not found' in msg, msg
    msg = wait_for(lambda: _message(kube, shard, "imm"), 15, what="imm's condition")
    assert "pod has unbound immediate PersistentVolumeClaims" in msg, msg

    create(kube, _claim("data-db", shard, f"{shard}-later"))
    wait_for(lambda: _bound(kube, shard) == ["db-0", "free-0"] or None, 30, what="db-0 bound once its claim exists")
    assert "imm-0" not in _bound(kube, shard)


def test_without_rbac_for_claims_scheduling_goes_on_unchecked(apiserver, shard, start_scheduler, tmp_path):
    """RBAC from before kai-cp read claims (deploy/rbac.yaml less its two new rules): the claims
    cannot be listed, so they are not checked, and every pod is still scheduled."""
    import yaml

    from .conftest import REPO
    from .test_deploy_rbac import PATHS

    kube = apiserver.kube
    for f in ("serviceaccount.yaml", "rbac.yaml"):
        text = (REPO / "deploy" / f).read_text().replace("namespace: kai-scheduler", f"namespace: {shard}")
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            if doc["kind"] == "ClusterRole":
                doc["rules"] = [r for r in doc["rules"]
                                if not {"persistentvolumeclaims", "storageclasses"} & set(r["resources"])]
            if doc["kind"].startswith("Cluster"):
                doc["metadata"]["name"] += f"-{shard}"
                if doc.get("roleRef", {}).get("kind") == "ClusterRole":
                    doc["roleRef"]["name"] += f"-{shard}"
            gv, plural = PATHS[doc["kind"]]
            kube.create(object_path(gv, plural, None if doc["kind"].startswith("Cluster") else shard), doc)
    tok = kube.create(object_path("v1", "serviceaccounts", shard, "kai-cp", "token"),
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": 3600}})["status"]["token"]
    kc = apiserver.write_kubeconfig(tmp_path / "sa", apiserver.url, token=tok)

    create_node(kube, node(f"{shard}-n0", gpus=4, pool=shard))
    create(kube, queue(f"{shard}-q", pool=shard))
    create(kube, podgroup("db", shard, f"{shard}-q", 1, pool=shard))
    create(kube, _claimed_pod("db-0", shard, "db", "nowhere"))
    sched = start_scheduler(kubeconfig=kc)
    wait_ready(sched)
    wait_for(lambda: _bound(kube, shard) == ["db-0"] or None, 30, what="db-0 bound, its claim unchecked")
    assert "not permitted to list" in sched.logs()
