"""A pod's PersistentVolumeClaims (spec 5.3: Kubernetes' VolumeBinding pre-filter): a missing,
deleted, lost or foreign claim, or one unbound in a class that binds at once, keeps the pod
pending with Kubernetes' reason, for both engines and through the command line; claims that
bind when the pod is placed, and bound ones, pass; a snapshot without any claims is not read
as "every claim is missing".

Why: kai-cp read no claims at all, so it bound pods whose volumes could never be mounted (they
wait on the node forever, holding what they were given)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clustergen as cg  # noqa: E402

from kai_cp.cli import main  # noqa: E402
from kai_cp.cycle import CycleSettings, run_cycle  # noqa: E402
from kai_cp.loader import load_snapshot_dict  # noqa: E402
from kai_cp.state import build_cluster_state  # noqa: E402
from kai_cp.validate import violations  # noqa: E402
from kai_cp.volumes import IMMEDIATE_UNBOUND  # noqa: E402

ENGINES = ["cp-sat", "greedy"]


def pvc(name: str, namespace: str = "default", *, cls: str | None = "fast", volume: str | None = None,
        phase: str | None = None, deleting: bool = False, owner_uid: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-pvc-{name}"}
    if deleting:
        meta["deletionTimestamp"] = cg.ts(-5)
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": owner_uid, "controller": True}]
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    if cls is not None:
        spec["storageClassName"] = cls
    if volume:
        spec["volumeName"] = volume
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec,
            "status": {"phase": phase or ("Bound" if volume else "Pending")}}


def storage_class(name: str, mode: str) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": "ebs.csi.aws.com", "volumeBindingMode": mode}


def with_claim(p: dict[str, Any], claim: str | None = None, ephemeral: str | None = None) -> dict[str, Any]:
    vols = p["spec"].setdefault("volumes", [])
    if claim:
        vols.append({"name": "data", "persistentVolumeClaim": {"claimName": claim}})
    if ephemeral:
        vols.append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    vols.append({"name": "cfg", "configMap": {"name": "c"}})        # not a claim: ignored
    return p


def _doc(pods: list[dict], groups: list[dict], claims: list[dict], classes: list[dict] | None = None) -> dict:
    doc = cg.snapshot([cg.node("n0", gpus=8), cg.node("n1", gpus=8)], [cg.queue("q")], pods, groups)
    doc["rawObjects"]["persistentVolumeClaims"] = claims
    doc["rawObjects"]["storageClasses"] = classes if classes is not None else [
        storage_class("fast", "WaitForFirstConsumer"), storage_class("now", "Immediate")]
    return doc


def _cycle(doc: dict, engine: str) -> dict[str, Any]:
    res = run_cycle(build_cluster_state(load_snapshot_dict(copy.deepcopy(doc))), CycleSettings(engine=engine))
    assert violations(res.state, res.session) == []
    return res.to_json()


def _one_pod(claim_kw: dict, **pvc_kw) -> dict:
    p = with_claim(cg.pod("web-0", "web", gpus=1, queue_name="q"), **claim_kw)
    claims = [pvc(**pvc_kw)] if pvc_kw else []
    other = cg.pod("other-0", "other", gpus=1, queue_name="q")        # keeps the claim list non-empty
    return _doc([p, other], [cg.pod_group("web", "q"), cg.pod_group("other", "q")],
                claims + [pvc("unrelated")])


CASES = {
    "missing": ({"claim": "data-0"}, {}, 'persistentvolumeclaim "data-0" not found'),
    "deleting": ({"claim": "data-0"}, {"name": "data-0", "volume": "pv-1", "deleting": True},
                 'persistentvolumeclaim "data-0" is being deleted'),
    "lost": ({"claim": "data-0"}, {"name": "data-0", "volume": "pv-1", "phase": "Lost"},
             'persistentvolumeclaim "data-0" bound to non-existent persistentvolume "pv-1"'),
    "immediate-unbound": ({"claim": "data-0"}, {"name": "data-0", "cls": "now"}, IMMEDIATE_UNBOUND),
    "no-class-unbound": ({"claim": "data-0"}, {"name": "data-0", "cls": ""}, IMMEDIATE_UNBOUND),
    "class-missing": ({"claim": "data-0"}, {"name": "data-0", "cls": "gone"},
                      'storageclass.storage.k8s.io "gone" not found'),
    "ephemeral-not-made": ({"ephemeral": "scratch"}, {},
                           'waiting for ephemeral volume controller to create the persistentvolumeclaim "web-0-scratch"'),
    "ephemeral-foreign": ({"ephemeral": "scratch"}, {"name": "web-0-scratch", "owner_uid": "someone-else"},
                          "PVC default/web-0-scratch was not created for pod default/web-0 (pod is not owner)"),
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_claim_that_stops_the_pod_keeps_it_pending_with_kubernetes_reason(engine: str, case: str) -> None:
    claim_kw, pvc_kw, reason = CASES[case]
    out = _cycle(_one_pod(claim_kw, **pvc_kw), engine)
    assert [b["pod"] for b in out["binds"]] == ["default/other-0"]
    (why,) = [u["reasons"] for u in out["unschedulable"] if u["podGroup"] == "web"]
    text = " ".join(why)
    assert f"VolumeBinding: {reason}" in text and "Scheduling conditions were not met for pod default/web-0" in text, why


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", ["bound", "delayed", "ephemeral-owned"])
def test_claims_that_bind_or_are_bound_pass(engine: str, case: str) -> None:
    claim_kw, pvc_kw = {
        "bound": ({"claim": "data-0"}, {"name": "data-0", "volume": "pv-1", "cls": "now"}),
        "delayed": ({"claim": "data-0"}, {"name": "data-0", "cls": "fast"}),
        "ephemeral-owned": ({"ephemeral": "scratch"}, {"name": "web-0-scratch", "owner_uid": "uid-pod-default-web-0"}),
    }[case]
    out = _cycle(_one_pod(claim_kw, **pvc_kw), engine)
    assert sorted(b["pod"] for b in out["binds"]) == ["default/other-0", "default/web-0"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_gang_with_one_pods_claim_missing_starts_no_pod(engine: str) -> None:
    pods = [with_claim(cg.pod(f"db-{i}", "db", gpus=1, queue_name="q"), claim=f"data-db-{i}") for i in range(3)]
    doc = _doc(pods, [cg.pod_group("db", "q", min_member=3)], [pvc("data-db-0"), pvc("data-db-1")])
    out = _cycle(doc, engine)
    assert out["binds"] == [] and out["pipelined"] == []
    (why,) = [u["reasons"] for u in out["unschedulable"] if u["podGroup"] == "db"]
    assert 'persistentvolumeclaim "data-db-2" not found' in " ".join(why), why
    doc["rawObjects"]["persistentVolumeClaims"].append(pvc("data-db-2"))
    assert len(_cycle(doc, engine)["binds"]) == 3


def test_a_snapshot_without_claims_checks_none_and_says_so(tmp_path: Path, capsys) -> None:
    """Through the command line (its lean views): no claims at all is data the snapshot lacks."""
    p = with_claim(cg.pod("web-0", "web", gpus=1, queue_name="q"), claim="data-0")
    doc = _doc([p], [cg.pod_group("web", "q")], [])
    f = tmp_path / "snap.json"
    f.write_text(json.dumps(doc))
    assert main(["solve", str(f), "--engine", "greedy"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [b["pod"] for b in out["binds"]] == ["default/web-0"]
    assert any(w["object"] == "Pod/default/web-0" and "no PersistentVolumeClaims" in w["reason"] for w in out["warnings"])
    doc["rawObjects"]["persistentVolumeClaims"] = [pvc("unrelated")]
    f.write_text(json.dumps(doc))
    assert main(["solve", str(f), "--engine", "greedy"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["binds"] == [] and not any("PersistentVolumeClaims" in w["reason"] for w in out["warnings"])


def test_the_validator_catches_a_pod_placed_with_a_missing_claim() -> None:
    from kai_cp.actions.allocate import run_allocate
    state = build_cluster_state(load_snapshot_dict(_one_pod({"claim": "data-0"})))
    greedy = run_allocate(state)
    task = next(t for t in state.tasks if t.key == "default/web-0")
    assert task.key not in greedy.session.placements
    greedy.session.place(task, 0, pipelined=False)
    assert any("volumes stop it" in v for v in violations(state, greedy.session))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_job_alike_but_for_its_claims_is_tried_on_its_own(engine: str) -> None:
    """Found by the API-server test: allocate reuses a failure for the next job of the same
    shape, and a missing claim was not part of the shape, so a job whose claim was fine failed
    with the other job's claim as its reason."""
    pods = [with_claim(cg.pod("a-0", "a", gpus=1, queue_name="q"), claim="missing"),
            with_claim(cg.pod("b-0", "b", gpus=1, queue_name="q"), claim="there"),
            with_claim(cg.pod("c-0", "c", gpus=1, queue_name="q"), claim="also-missing")]
    doc = _doc(pods, [cg.pod_group(g, "q") for g in "abc"], [pvc("there")])
    out = _cycle(doc, engine)
    assert [b["pod"] for b in out["binds"]] == ["default/b-0"]
    why = {u["podGroup"]: " ".join(u["reasons"]) for u in out["unschedulable"]}
    assert '"missing" not found' in why["a"] and '"also-missing" not found' in why["c"], why
