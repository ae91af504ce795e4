"""Views of nodes, queues, PodGroups, BindRequests, PriorityClasses, ConfigMaps and Topologies
(kai_cp/objectviews.py) against the pydantic models: every typed field typed under its JSON
name; generated objects, some broken at one or two places, load the same way (same objects and
typed values, same warnings and left-out objects, same cluster state); `kai-cp solve` on a
snapshot the views accept whole never imports pydantic; a PodGroup backed off in its node pool
is skipped on both paths."""

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
from kai_cp.objectviews import VIEW_TYPES  # noqa: E402
from models import RAW_OBJECT_KINDS  # noqa: E402
from view_checks import BAD, assert_same_load, assert_same_typed, assert_view_types_the_model, load_both, put  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "cluster-snapshot.zip"


@pytest.mark.parametrize("key", sorted(VIEW_TYPES))
def test_views_type_every_field_of_the_model_under_its_json_name(key):
    """A field the model types but the view does not would let a view accept what the model
    refuses; a different JSON name would read another key."""
    assert_view_types_the_model(next(info.model for info in RAW_OBJECT_KINDS if info.key == key), VIEW_TYPES[key])


def test_every_modelled_kind_has_a_view():
    assert {info.key for info in RAW_OBJECT_KINDS if info.modelled} == set(VIEW_TYPES)


# Where a draw may put one of the BAD values, per rawObjects key (paths into the object).
_SPOTS = {
    "nodes": [("kind",), ("metadata", "name"), ("metadata", "labels"), ("metadata", "labels", "zone"),
              ("metadata", "creationTimestamp"), ("spec",), ("spec", "unschedulable"), ("spec", "taints"),
              ("spec", "taints", 0, "key"), ("spec", "taints", 0, "effect"), ("spec", "taints", 0, "value"),
              ("status",), ("status", "allocatable"), ("status", "allocatable", "cpu"),
              ("status", "allocatable", "nvidia.com/gpu"), ("status", "capacity"), ("status", "conditions"),
              ("status", "conditions", 0, "type"), ("status", "conditions", 0, "status")],
    "queues": [("metadata", "name"), ("spec",), ("spec", "parentQueue"), ("spec", "priority"),
               ("spec", "displayName"), ("spec", "resources"), ("spec", "resources", "gpu"),
               ("spec", "resources", "gpu", "quota"), ("spec", "resources", "gpu", "limit"),
               ("spec", "resources", "cpu", "overQuotaWeight"), ("spec", "preemptMinRuntime"),
               ("spec", "reclaimMinRuntime"), ("status",)],
    "podGroups": [("metadata", "name"), ("metadata", "namespace"), ("metadata", "annotations"), ("spec",),
                  ("spec", "minMember"), ("spec", "queue"), ("spec", "priorityClassName"), ("spec", "preemptibility"),
                  ("spec", "markUnschedulable"), ("spec", "schedulingBackoff"), ("spec", "topologyConstraint"),
                  ("spec", "topologyConstraint", "topology"), ("spec", "subGroups"), ("spec", "subGroups", 0, "name"),
                  ("spec", "subGroups", 0, "minMember"), ("spec", "stalenessGracePeriod"), ("spec", "parallelism"),
                  ("status",), ("status", "schedulingConditions")],
    "bindRequests": [("metadata", "name"), ("spec",), ("spec", "podName"), ("spec", "selectedNode"),
                     ("spec", "selectedGPUGroups"), ("spec", "receivedGPU"), ("spec", "receivedGPU", "count"),
                     ("spec", "resourceClaimAllocations"), ("spec", "backoffLimit"), ("status",), ("status", "phase"),
                     ("status", "failedAttempts")],
    "priorityClasses": [("metadata", "name"), ("value",), ("globalDefault",), ("preemptionPolicy",), ("description",)],
    "configMaps": [("metadata", "name"), ("data",), ("data", "k"), ("binaryData",)],
    "topologies": [("metadata", "name"), ("spec",), ("spec", "levels"), ("spec", "levels", 0, "nodeLabel")],
}


def _objects(pick) -> dict:
    """One of each kind (two nodes, queues, groups), all valid before the draw breaks some;
    `pick(options)` chooses among variants."""
    zone = "topology.example/zone"
    nodes = [sb.node("n0", gpu=4, labels={zone: "z0"}, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
             sb.node("n1", gpu=4, labels={zone: "z1"})]
    queues = [sb.queue("q", priority=pick([None, 2])),
              sb.queue("q1", "q", gpu=sb.resources(2, 4, 1.5), display="one")]
    queues[1]["spec"]["preemptMinRuntime"] = pick(["10m", "1h30m"])
    constraint = {"topologyConstraint": {"topology": "t", "requiredTopologyLevel": zone}}
    groups = [sb.podgroup("g0", "q1", 1, spec_extra=constraint),
              sb.podgroup("g1", "q1", 2, spec_extra={"stalenessGracePeriod": pick(["30s", "-1s"]),
                                                    "schedulingBackoff": pick([-1, 1])})]
    groups[1]["status"] = {"schedulingConditions": [{"type": "UnschedulableOnNodePool", "nodePool": "default",
                                                     "transitionID": pick(["1", "2"])}]}
    bind = sb.bind_request("g0-1", "n1")
    bind["spec"]["selectedGPUGroups"] = ["x"]
    bind["spec"]["receivedGPU"] = {"count": 1, "portion": "0.50"}
    topology = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
                "spec": {"levels": [{"nodeLabel": zone}, {"nodeLabel": "kubernetes.io/hostname"}]}}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"},
                  "data": {"k": "v"}}
    pods = [sb.pod("g0-0", "g0", gpu=1), sb.pod("g0-1", "g0"), sb.pod("g1-0", "g1", node="n0", phase="Running"),
            sb.pod("g1-1", "g1", gpu=1)]
    doc = sb.snapshot(nodes=nodes, queues=queues, podgroups=groups, pods=pods, bind_requests=[bind])
    raw = doc["rawObjects"]
    raw["topologies"], raw["configMaps"] = [topology], [config_map]
    return doc


@st.composite
def broken_snapshots(draw) -> dict:
    doc = _objects(lambda options: draw(st.sampled_from(options)))
    raw = doc["rawObjects"]
    for _ in range(draw(st.sampled_from([0, 1, 1, 2, 3]))):
        key = draw(st.sampled_from(sorted(_SPOTS)))
        if raw[key]:
            obj = raw[key][draw(st.integers(0, len(raw[key]) - 1))]
            put(obj, draw(st.sampled_from(_SPOTS[key])), copy.deepcopy(draw(st.sampled_from(BAD))))
    if draw(st.integers(0, 4)) == 0:           # a duplicate, another kind, or not an object
        key = draw(st.sampled_from(sorted(_SPOTS)))
        extra = draw(st.sampled_from(["duplicate", "kind", "scalar"]))
        if extra == "duplicate" and raw[key]:
            raw[key].append(copy.deepcopy(raw[key][0]))
        elif extra == "kind" and raw[key]:
            raw[key].append({**copy.deepcopy(raw[key][0]), "kind": "Widget"})
        else:
            raw[key].append(draw(st.sampled_from([None, 3, "x", []])))
    return doc


@pytest.mark.parametrize("key", sorted(_SPOTS))
def test_every_bad_value_at_every_spot_loads_the_same(tmp_path, key):
    """Exhaustive over this kind's spots and the BAD values (the generated test below mixes
    them): the same objects kept or left out, the same warnings, the same typed values."""
    base = _objects(lambda options: options[0])
    for spot in _SPOTS[key]:
        for value in BAD:
            doc = copy.deepcopy(base)
            put(doc["rawObjects"][key][0], spot, copy.deepcopy(value))
            path = sb.write(tmp_path / "snap.json", doc)
            models, views = load_both(path)
            assert views.warnings == models.warnings, (spot, value)
            assert views.raw_invalid == models.raw_invalid, (spot, value)
            m_objs, v_objs = getattr(models.snapshot.raw_objects, _attr(key)), getattr(views.snapshot.raw_objects, _attr(key))
            assert len(m_objs) == len(v_objs), (spot, value)
            for m, v in zip(m_objs, v_objs):
                assert_same_typed(m, v, f"{key}{spot}={value!r}")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=broken_snapshots())
def test_generated_objects_load_the_same(tmp_path, doc):
    assert_same_load(sb.write(tmp_path / "snap.json", doc))


def test_the_generated_objects_are_read_as_views_when_valid(tmp_path):
    """The valid draw is all views (the equivalence above is not only the fallback's)."""
    path = sb.write(tmp_path / "snap.json", _objects(lambda options: options[-1]))
    _, views = load_both(path)
    for info in RAW_OBJECT_KINDS:
        for obj in getattr(views.snapshot.raw_objects, _attr(info.key)):
            assert type(obj).__name__.endswith("View"), (info.key, type(obj))
    assert views.warnings == []


def _attr(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def test_solve_imports_no_pydantic_where_the_views_accept_every_object(tmp_path):
    out = tmp_path / "out.json"
    code = ("import sys\nfrom kai_cp.cli import main\n"
            f"assert main(['solve', {str(EXAMPLE)!r}, '-o', {str(out)!r}]) == 0\n"
            "print([m for m in ('pydantic', 'pydantic_core', 'models.base', 'pandas') if m in sys.modules])")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
    assert json.loads(out.read_text())["binds"]


def test_a_refused_object_brings_in_pydantic_for_itself_only(tmp_path):
    """A queue whose priority is a string: the view refuses it, pydantic reports it, and the
    other objects stay views."""
    doc = _objects(lambda options: options[0])
    doc["rawObjects"]["queues"][1]["spec"]["priority"] = "high"
    models, views = load_both(sb.write(tmp_path / "snap.json", doc))
    assert views.warnings == models.warnings
    assert [(w.object, w.field) for w in views.warnings][:1] == [("Queue/q1", "spec.priority")]
    assert [type(q).__name__ for q in views.snapshot.raw_objects.queues] == ["QueueView"]


@pytest.mark.parametrize("views", [False, True])
@pytest.mark.parametrize("pool,skipped", [("default", True), ("other", False)])
def test_a_podgroup_backed_off_in_its_node_pool_is_skipped(tmp_path, views, pool, skipped):
    """Spec 2.2 step 7: schedulingBackoff 1 and the latest scheduling condition (highest
    transitionID) in the PodGroup's own pool: the group is not this cycle's (its pods wait)."""
    group = sb.podgroup("g", spec_extra={"schedulingBackoff": 1})
    group["status"] = {"schedulingConditions": [
        {"type": "UnschedulableOnNodePool", "nodePool": "other" if pool == "default" else "default", "transitionID": "1"},
        {"type": "UnschedulableOnNodePool", "nodePool": pool, "transitionID": "2"}]}
    path = sb.write(tmp_path / "snap.json", sb.snapshot(nodes=[sb.node("n0")], podgroups=[group],
                                                        pods=[sb.pod("g-0", "g")]))
    from kai_cp.cycle import CycleSettings, run_cycle
    from kai_cp.loader import load_snapshot
    from kai_cp.state import build_cluster_state

    state = build_cluster_state(load_snapshot(path, views=views))
    assert ("g" not in state.jobs) == skipped
    binds = run_cycle(state, CycleSettings(engine="greedy")).to_json()["binds"]
    assert [b["pod"] for b in binds] == ([] if skipped else ["default/g-0"])
