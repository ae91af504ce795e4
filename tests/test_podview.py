"""Pod views (kai_cp/podview.py), the fast load path of `kai-cp solve`, against the pydantic path:
the same pods with the same typed values, the same warnings and left-out objects, the same
cluster state and decisions; a bad pod is reported exactly as before and the others are still
scheduled; documents only the ordinary parse can judge still go that way."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

import snapshot_builder as sb  # noqa: E402
from kai_cp import cli  # noqa: E402
from kai_cp.loader import dump_snapshot, load_snapshot  # noqa: E402
from kai_cp.podview import PodView  # noqa: E402
from view_checks import BAD, assert_same_load, assert_same_typed, assert_view_types_the_model, load_both, put  # noqa: E402
from models import Pod  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.zip"))


# ----------------------------------------------------------------------------------- helpers


# ----------------------------------------------------------------------------------- the types


def test_views_type_every_field_of_the_pod_model_under_its_json_name():
    """(view_checks.assert_view_types_the_model says why.)"""
    assert_view_types_the_model(Pod, PodView)


# ------------------------------------------------------------------------------- equivalence


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_load_the_same(path):
    assert_same_load(path)
    _, views = load_both(path)
    assert all(isinstance(p, PodView) for p in views.snapshot.raw_objects.pods)


# Where a draw may put one of the values above (a path into the pod; ints index lists).
_SPOTS = [
    ("kind",), ("apiVersion",), ("metadata",), ("metadata", "name"), ("metadata", "namespace"),
    ("metadata", "uid"), ("metadata", "labels"), ("metadata", "labels", "app"), ("metadata", "annotations"),
    ("metadata", "annotations", "pod-group-name"), ("metadata", "creationTimestamp"),
    ("metadata", "deletionTimestamp"), ("metadata", "ownerReferences"), ("metadata", "finalizers"),
    ("metadata", "generation"), ("metadata", "resourceVersion"), ("spec",), ("spec", "nodeName"),
    ("spec", "schedulerName"), ("spec", "containers"), ("spec", "containers", 0, "resources"),
    ("spec", "containers", 0, "resources", "requests"), ("spec", "containers", 0, "resources", "requests", "cpu"),
    ("spec", "containers", 0, "resources", "limits"), ("spec", "containers", 0, "name"),
    ("spec", "containers", 0, "ports"), ("spec", "initContainers"), ("spec", "overhead"), ("spec", "nodeSelector"),
    ("spec", "affinity"), ("spec", "tolerations"), ("spec", "tolerations", 0, "tolerationSeconds"),
    ("spec", "schedulingGates"), ("spec", "priority"), ("spec", "priorityClassName"), ("spec", "volumes"),
    ("spec", "topologySpreadConstraints"), ("status",), ("status", "phase"), ("status", "nominatedNodeName"),
    ("status", "conditions"),
]
_AFFINITY = {
    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 3, "preference": {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}}]},
    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kubernetes.io/hostname"}],
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "podAffinityTerm": {
            "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]},
            "topologyKey": "zone", "namespaces": ["default"]}}]},
    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "b"}}, "topologyKey": "zone", "unknownKey": 1}]},
}


@st.composite
def pod_lists(draw) -> list:
    """Valid pods of every shape the scheduler reads, some broken at one or two places, some
    duplicated or of another kind, now and then not an object at all."""
    pods: list = []
    for i in range(draw(st.integers(1, 8))):
        node = draw(st.sampled_from([None, "n0", "n1", "gone"]))
        p = sb.pod(f"p{draw(st.integers(0, 5))}", group=draw(st.sampled_from(["g0", "g1", None])),
                   cpu=draw(st.sampled_from(["1", "500m", "2.5"])), gpu=draw(st.sampled_from([None, 1, 2])),
                   phase="Running" if node else "Pending", node=node,
                   namespace=draw(st.sampled_from(["default", "ns"])),
                   labels=draw(st.sampled_from([{}, {"app": "a"}, {"app": "b", "runai-gpu-group": "x"}])),
                   annotations=draw(st.sampled_from([{}, {"gpu-fraction": "0.5"}, {"gpu-memory": "oops"}])),
                   deleting=draw(st.booleans()), gates=draw(st.sampled_from([None, ["wait"]])),
                   node_selector=draw(st.sampled_from([None, {"pool": "a"}])),
                   affinity=draw(st.sampled_from([None, _AFFINITY])),
                   tolerations=draw(st.sampled_from([None, [{"key": "k", "operator": "Exists"}]])),
                   init_containers=draw(st.sampled_from([None, [sb.container("i", cpu="3")]])),
                   overhead=draw(st.sampled_from([None, {"cpu": "100m"}])), created=i)
        if draw(st.booleans()):
            p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080, "hostIP": "1.2.3.4"}]
            p["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
        for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
            put(p, draw(st.sampled_from(_SPOTS)), copy.deepcopy(draw(st.sampled_from(BAD))))
        pods.append(p)
        if draw(st.integers(0, 9)) == 0:
            pods.append(draw(st.sampled_from([None, 3, "pod", []])))
    return pods


def _cluster(pods: list) -> dict:
    nodes = [sb.node("n0", gpu=4, labels={"pool": "a", "zone": "z1"}), sb.node("n1", gpu=4, labels={"zone": "z2"})]
    return sb.snapshot(nodes=nodes, podgroups=[sb.podgroup("g0"), sb.podgroup("g1", min_member=2)], pods=pods)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pods=pod_lists())
def test_generated_pods_load_the_same(tmp_path, pods):
    assert_same_load(sb.write(tmp_path / "snap.json", _cluster(pods)))


# ----------------------------------------------------------------------------- a bad pod


def _solve_cli(path: Path, out: Path) -> dict:
    assert cli.main(["solve", str(path), "--engine", "greedy", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    doc["cycle"] = {k: v for k, v in doc["cycle"].items() if not k.endswith("Seconds")}
    return doc


def test_a_bad_pod_is_reported_as_before_and_the_others_are_scheduled(tmp_path):
    pods = [sb.pod("a-0", "a"), sb.pod("b-0", "b"), sb.pod("b-1", "b")]
    pods[1]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "12Gx"     # not a quantity
    path = sb.write(tmp_path / "snap.json", sb.snapshot(
        nodes=[sb.node("n0")], podgroups=[sb.podgroup("a"), sb.podgroup("b", min_member=1)], pods=pods))
    models, views = load_both(path)
    assert views.warnings == models.warnings
    assert [(w.object, w.field) for w in views.warnings] == [("Pod/default/b-0", "spec.containers[0].resources.requests.cpu")]
    assert "12Gx" in views.warnings[0].reason
    assert views.raw_invalid["pods"] == [pods[1]]
    assert [p.metadata.name for p in views.snapshot.raw_objects.pods] == ["a-0", "b-1"]
    out = _solve_cli(path, tmp_path / "out.json")
    # The CLI (pod views) decides as the pydantic path does, and binds the readable pods.
    assert out == json.loads(json.dumps({**sb.solve_doc(json.loads(path.read_text())),
                                         "cycle": out["cycle"]}))
    assert {b["pod"] for b in out["binds"]} == {"default/a-0", "default/b-1"}
    assert any("b-0" in w["object"] for w in out["warnings"])


def test_duplicates_and_other_kinds_are_reported_as_before(tmp_path):
    pods = [sb.pod("a-0", "a"), sb.pod("a-0", "a", cpu="2"), {**sb.pod("c", "a"), "kind": "Node"}, sb.pod("a-1", "a")]
    assert_same_load(sb.write(tmp_path / "snap.json", sb.snapshot(
        nodes=[sb.node("n0")], podgroups=[sb.podgroup("a")], pods=pods)))
    _, views = load_both(tmp_path / "snap.json")
    assert [w.field for w in views.warnings] == ["metadata.name", "kind"]


@pytest.mark.parametrize("edit", [
    pytest.param(lambda text: "\ufeff" + text, id="bom"),
    pytest.param(lambda text: text.replace('"a-0"', '"a-\u00e9"'), id="non-ascii"),
    pytest.param(lambda text: text.replace('"a-0"', '"a-\\ud800"'), id="lone-surrogate"),
    pytest.param(lambda text: text[:-1] + ', "extra": 1}', id="unknown-top-level-key"),
    pytest.param(lambda text: text.replace('"rawObjects": {', '"rawObjects": {"widgets": [1], '), id="unknown-list"),
    pytest.param(lambda text: text.replace('"pods": [', '"pods": [1e999, '), id="out-of-range"),
    pytest.param(lambda text: text.replace('"pods": [', '"pods": {"x": [').replace('], "nodes"', ']}, "nodes"', 1),
                 id="pods-not-a-list"),
])
def test_documents_the_views_cannot_judge_load_as_before(tmp_path, edit):
    doc = sb.snapshot(nodes=[sb.node("n0")], podgroups=[sb.podgroup("a")], pods=[sb.pod("a-0", "a")])
    text = edit(json.dumps(doc))
    path = tmp_path / "snap.json"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        models = load_snapshot(path)
    except Exception as exc:     # a file-level error: the same one
        with pytest.raises(type(exc)) as got:
            load_snapshot(path, views=True)
        assert str(got.value) == str(exc)
        return
    views = load_snapshot(path, views=True)
    assert views.warnings == models.warnings and views.raw_invalid == models.raw_invalid
    for m, v in zip(models.snapshot.raw_objects.pods, views.snapshot.raw_objects.pods):
        assert_same_typed(m, v)


def test_a_snapshot_with_views_is_not_written_back():
    _, views = load_both(EXAMPLES[0])
    with pytest.raises(ValueError, match="views"):
        dump_snapshot(views.snapshot)


def test_loading_imports_no_views_until_asked():
    """The msgspec structs cost import time that the ordinary load path does not pay."""
    code = ("import sys; from kai_cp import loader; loader.load_snapshot(sys.argv[1]); "
            "print('kai_cp.podview' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(EXAMPLES[0])], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
