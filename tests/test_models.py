"""Tests for the `models` package: exact JSON round trips, unknown fields, quantities.

Fixtures in tests/fixtures/snapshots are KAI-Scheduler test scenarios (Apache-2.0,
pkg/scheduler/actions/**/*_test.go at commit 72de64fc) rendered as snapshots by
kai-scenarios/build_snapshot.py, copied here so the tests do not depend on ../shared.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from pydantic import ValidationError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import models  # noqa: E402
from models import (  # noqa: E402
    BindRequest,
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    Queue,
    Snapshot,
    Topology,
    cpu_millis,
    duration_seconds,
    to_decimal,
    to_fraction,
    to_int_ceil,
)

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"
FIXTURE_FILES = sorted(FIXTURES.glob("*.json"))


def _dump(model) -> dict:
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _same_json(a, b) -> bool:
    """Equal as JSON text, so 1 vs 1.0 and key sets both count."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _validate(cls, doc):
    return cls.model_validate(doc, by_alias=True, by_name=False)


# ---------------------------------------------------------------------------- round trips


def test_fixtures_present():
    assert len(FIXTURE_FILES) >= 5


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_snapshot_round_trip_is_exact(path):
    doc = json.loads(path.read_text())
    snap = _validate(Snapshot, doc)
    assert _same_json(snap.to_json(), doc)
    # A second pass through the model is a fixed point as well.
    assert _same_json(_validate(Snapshot, snap.to_json()).to_json(), doc)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_fixture_objects_are_typed(path):
    doc = json.loads(path.read_text())
    snap = _validate(Snapshot, doc)
    raw = doc["rawObjects"]
    ro = snap.raw_objects
    assert len(ro.pods) == len(raw.get("pods", []))
    assert all(isinstance(p, Pod) for p in ro.pods)
    assert all(isinstance(n, Node) for n in ro.nodes)
    assert all(isinstance(q, Queue) for q in ro.queues)
    assert all(isinstance(g, PodGroup) for g in ro.pod_groups)
    for pod in ro.pods:
        assert pod.metadata.name and pod.metadata.namespace
        for c in pod.spec.containers:
            for q in c.resources.requests.values():
                to_fraction(q)  # every quantity is exact-parseable
    for node in ro.nodes:
        assert cpu_millis(node.status.allocatable["cpu"]) > 0


def test_fixture_attribute_paths():
    topo = _validate(Snapshot, json.loads((FIXTURES / "allocate.allocateTopology_test__009.json").read_text()))
    assert isinstance(topo.raw_objects.topologies[0], Topology)
    assert topo.raw_objects.topologies[0].spec.levels[0].node_label == "k8s.io/zone"
    groups = [g for g in topo.raw_objects.pod_groups if g.spec.sub_groups]
    assert groups
    sg = groups[0].spec.sub_groups[0]
    assert sg.name and (sg.min_member is None or isinstance(sg.min_member, int))

    reclaim = _validate(Snapshot, json.loads((FIXTURES / "reclaim.reclaimGpuMemory_test__003.json").read_text()))
    gpu_quotas = [q.spec.resources.gpu.quota for q in reclaim.raw_objects.queues]
    assert 0.5 in gpu_quotas
    limits = [q.spec.resources.cpu.limit for q in reclaim.raw_objects.queues]
    assert all(type(x) is int for x in limits)  # ints stay ints

    aff = _validate(Snapshot, json.loads((FIXTURES / "allocate.interpod_affinity_test__001.json").read_text()))
    terms = [
        p.spec.affinity.pod_affinity or p.spec.affinity.pod_anti_affinity
        for p in aff.raw_objects.pods
        if p.spec.affinity
    ]
    assert terms and terms[0].required_during_scheduling_ignored_during_execution[0].topology_key


HAND_MADE_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "futureTopLevel": {"x": [1, 2.5, None, True]},
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "creationTimestamp": "2024-05-06T07:08:09.123456789Z",
        "deletionTimestamp": "2024-05-06T09:08:09+02:00",
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "extraRef": 1}],
    },
    "spec": {
        "unknownSpecField": "kept",
        "node_name": "snake-case key is not nodeName",
        "containers": [
            {
                "name": "c",
                "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "claims": [{"name": "gpu"}]},
                "ports": [{"containerPort": 80, "hostPort": 8080, "hostIP": "0.0.0.0", "x": 1}],
                "weird": None,
            }
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "k", "operator": "In", "values": ["a"], "z": 0}],
                         "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": []}}
                ],
            },
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
            ]},
        },
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5, "q": 1}],
        "schedulingGates": [{"name": "gate"}],
        "overhead": {"cpu": "10m"},
    },
    "status": {"phase": "Pending", "newStatusThing": {"a": "b"}},
}


def test_unknown_fields_are_kept_everywhere():
    pod = _validate(Pod, HAND_MADE_POD)
    assert _same_json(_dump(pod), HAND_MADE_POD)
    assert pod.spec.node_name is None  # Kubernetes ignores a snake_case key; so do we
    assert pod.spec.containers[0].resources.requests == {"cpu": "250m", "memory": "1Gi"}
    assert pod.model_extra["futureTopLevel"] == {"x": [1, 2.5, None, True]}
    assert pod.spec.model_extra["unknownSpecField"] == "kept"
    term = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms[0]
    assert term.match_expressions[0].values == ["a"]
    assert term.match_fields[0].key == "metadata.name"
    assert pod.spec.tolerations[0].toleration_seconds == 5
    assert pod.spec.scheduling_gates[0].name == "gate"
    assert pod.spec.overhead == {"cpu": "10m"}
    assert pod.spec.containers[0].ports[0].host_port == 8080


def test_numeric_quantity_is_written_as_string():
    """The API server always writes quantities as strings; a hand-made number is
    normalised to its decimal text (the only non-identical write-back)."""
    pod = _validate(Pod, {"metadata": {"name": "a"}, "spec": {"containers": [{"resources": {"requests": {"memory": 1024, "cpu": 0.5}}}]}})
    assert pod.spec.containers[0].resources.requests == {"memory": "1024", "cpu": "0.5"}
    assert to_int_ceil(pod.spec.containers[0].resources.requests["memory"]) == 1024
    assert cpu_millis(pod.spec.containers[0].resources.requests["cpu"]) == 500


def test_times_are_aware_and_round_trip_exactly():
    pod = _validate(Pod, HAND_MADE_POD)
    ct = pod.metadata.creation_timestamp
    assert ct == datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)
    dt_ = pod.metadata.deletion_timestamp
    assert dt_ == datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
    assert _dump(pod)["metadata"]["creationTimestamp"] == "2024-05-06T07:08:09.123456789Z"
    assert _dump(pod)["metadata"]["deletionTimestamp"] == "2024-05-06T09:08:09+02:00"
    # A new value is written in Kubernetes' canonical form.
    pod.metadata.deletion_timestamp = ct + timedelta(seconds=1)
    assert _dump(pod)["metadata"]["deletionTimestamp"] == "2024-05-06T07:08:10.123456Z"
    naive = _validate(Pod, {"metadata": {"name": "a", "creationTimestamp": "2024-01-01T00:00:00"}})
    assert naive.metadata.creation_timestamp.tzinfo is not None
    with pytest.raises(ValidationError):
        _validate(Pod, {"metadata": {"name": "a", "creationTimestamp": "yesterday"}})
    with pytest.raises(ValidationError):
        _validate(Pod, {"metadata": {"name": "a", "creationTimestamp": "2024-02-30T00:00:00Z"}})


def test_defaults_are_not_written_back():
    pod = _validate(Pod, {"metadata": {"name": "a"}})
    assert pod.metadata.labels == {} and pod.metadata.annotations == {}
    assert pod.metadata.namespace is None
    assert pod.spec.containers == [] and pod.spec.node_selector == {}
    assert pod.status.phase is None
    assert _dump(pod) == {"metadata": {"name": "a"}}
    # Assignment marks a field as set, so the engine's changes are written back.
    pod.spec.node_name = "n1"
    pod.metadata.labels = {"a": "b"}
    assert _dump(pod) == {"metadata": {"name": "a", "labels": {"a": "b"}}, "spec": {"nodeName": "n1"}}


def test_in_place_changes_of_defaults_are_written_back():
    """The simulator changes objects in place; collections and structs that were absent
    in the input must still be written back once they hold something."""
    pod = _validate(Pod, {"metadata": {"name": "a"}})
    pod.status.phase = "Running"
    pod.metadata.annotations["k"] = "v"
    pod.spec.containers.append(models.Container(name="c"))
    assert _dump(pod) == {
        "metadata": {"name": "a", "annotations": {"k": "v"}},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }
    snap = _validate(Snapshot, {})
    snap.raw_objects.nodes.append(Node(metadata={"name": "n"}))
    assert snap.to_json() == {"rawObjects": {"nodes": [{"metadata": {"name": "n"}}]}}
    assert _validate(Snapshot, {}).to_json() == {}


def test_construct_by_python_names():
    pod = Pod(metadata={"name": "a", "namespace": "ns"}, spec={"node_name": "n", "scheduler_name": "kai-scheduler"})
    assert pod.spec.node_name == "n"
    assert pod.key == "ns/a" and pod.ref == "Pod/ns/a"
    assert _dump(pod)["spec"] == {"nodeName": "n", "schedulerName": "kai-scheduler"}
    assert Node(metadata={"name": "n"}).ref == "Node/n"


def test_null_collections_mean_empty():
    pod = _validate(Pod, {"metadata": {"name": "a", "labels": None}, "spec": {"containers": None, "tolerations": None}, "status": None})
    assert pod.metadata.labels == {} and pod.spec.containers == [] and pod.status.phase is None


def test_queue_model():
    q = _validate(Queue, {
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": {"parentQueue": "d", "priority": 7, "preemptMinRuntime": "1h30m",
                 "resources": {"gpu": {"quota": 1.5, "limit": -1}, "cpu": {"quota": 8000, "overQuotaWeight": 2}}},
        "status": {"childQueues": []},
    })
    gpu, cpu = q.spec.resources.gpu, q.spec.resources.cpu
    assert gpu.quota == 1.5 and type(gpu.limit) is int and gpu.over_quota_weight is None
    assert type(cpu.quota) is int and q.spec.resources.memory is None
    assert q.spec.priority == 7 and q.spec.parent_queue == "d"
    assert duration_seconds(q.spec.preempt_min_runtime) == 5400
    assert q.spec.reclaim_min_runtime is None
    assert _dump(q)["spec"]["resources"]["cpu"] == {"quota": 8000, "overQuotaWeight": 2}
    assert _validate(Queue, {"metadata": {"name": "q"}}).spec.resources is None
    for bad in ({"resources": {"gpu": {"quota": "1"}}}, {"resources": {"gpu": {"limit": True}}},
                {"priority": "1"}, {"preemptMinRuntime": "10 minutes"}):
        with pytest.raises(ValidationError):
            _validate(Queue, {"metadata": {"name": "q"}, "spec": bad})


def test_podgroup_model():
    pg = _validate(PodGroup, {
        "metadata": {"name": "pg", "namespace": "ns"},
        "spec": {"minMember": 3, "queue": "q", "priorityClassName": "train", "preemptibility": "preemptible",
                 "markUnschedulable": False, "schedulingBackoff": -1,
                 "topologyConstraint": {"topology": "t", "requiredTopologyLevel": "rack"},
                 "subGroups": [{"name": "a", "minMember": 2, "topologyConstraint": {"topology": "t", "preferredTopologyLevel": "host"}},
                               {"name": "b", "parent": "a"}]},
    })
    s = pg.spec
    assert (s.min_member, s.queue, s.priority_class_name, s.preemptibility) == (3, "q", "train", "preemptible")
    assert s.mark_unschedulable is False and s.scheduling_backoff == -1
    assert s.topology_constraint.required_topology_level == "rack"
    assert s.topology_constraint.preferred_topology_level is None
    assert [g.name for g in s.sub_groups] == ["a", "b"] and s.sub_groups[1].parent == "a"
    assert s.sub_groups[0].topology_constraint.preferred_topology_level == "host"
    assert _validate(PodGroup, {"metadata": {"name": "x"}}).spec.min_member is None
    with pytest.raises(ValidationError):
        _validate(PodGroup, {"metadata": {"name": "x"}, "spec": {"minMember": "3"}})


def test_bindrequest_node_priorityclass_models():
    br_doc = {
        "apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"podName": "p", "selectedNode": "n", "receivedResourceType": "Fraction",
                 "receivedGPU": {"count": 1, "portion": "0.50"}, "selectedGPUGroups": ["g1"], "backoffLimit": 3},
        "status": {"phase": "Failed", "reason": "x", "failedAttempts": 1},
    }
    br = _validate(BindRequest, br_doc)
    assert br.spec.received_gpu.portion == "0.50" and br.spec.selected_gpu_groups == ["g1"]
    assert br.status.failed_attempts == 1 and br.spec.backoff_limit == 3
    assert _same_json(_dump(br), br_doc)

    node = _validate(Node, {
        "metadata": {"name": "n"},
        "spec": {"unschedulable": True, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "4", "nvidia.com/gpu": "8"}, "capacity": {"cpu": "4"},
                   "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "x"}]},
    })
    assert node.spec.unschedulable is True and node.spec.taints[0].effect == "NoSchedule"
    assert node.status.conditions[0].status == "True"
    assert to_int_ceil(node.status.allocatable["nvidia.com/gpu"]) == 8

    pc = _validate(PriorityClass, {"metadata": {"name": "train"}, "value": 50, "globalDefault": True})
    assert pc.value == 50 and pc.global_default is True and pc.preemption_policy is None
    with pytest.raises(ValidationError):
        _validate(PriorityClass, {"metadata": {"name": "train"}})


def test_metadata_name_is_required():
    for meta in ({}, {"name": ""}, {"name": 5}):
        with pytest.raises(ValidationError) as exc:
            _validate(Pod, {"metadata": meta})
        assert exc.value.errors()[0]["loc"][:2] == ("metadata", "name")
    with pytest.raises(ValidationError):
        _validate(Pod, {"spec": {}})


def test_strict_scalars():
    for bad in ({"spec": {"priority": "5"}}, {"spec": {"nodeName": 5}}, {"metadata": {"name": "a", "labels": {"a": 1}}}):
        doc = {"metadata": {"name": "a"}, **bad}
        with pytest.raises(ValidationError):
            _validate(Pod, doc)


def test_all_classes_exported():
    for name in models.__all__:
        assert hasattr(models, name), name


# ------------------------------------------------------------------------------ quantities


@pytest.mark.parametrize(
    "q, millis",
    [("500m", 500), ("1", 1000), ("0.5", 500), ("1.0001", 1001), ("100n", 1), ("2k", 2_000_000),
     ("0", 0), ("1e3", 1_000_000), ("1E-3", 1), ("+1", 1000), ("20000", 20_000_000), (3, 3000)],
)
def test_cpu_millis(q, millis):
    assert cpu_millis(q) == millis


@pytest.mark.parametrize(
    "q, value",
    [("1Gi", 1073741824), ("1G", 10**9), ("1Ki", 1024), ("1.5Ki", 1536), ("1M", 10**6), ("1Mi", 2**20),
     ("1Ei", 2**60), ("30G", 30 * 10**9), ("0.5", 1), ("1.0001", 2), ("110", 110), ("1e2", 100),
     ("-1.5", -2), ("100m", 1)],
)
def test_to_int_ceil(q, value):
    assert to_int_ceil(q) == value


def test_fractions_are_exact():
    assert to_fraction("1.5") == Fraction(3, 2)
    assert to_fraction("0.1") + to_fraction("0.2") == Fraction(3, 10)
    assert to_fraction("250m") == Fraction(1, 4)
    assert to_fraction("1Ki") == 1024
    assert to_decimal("0.1") + to_decimal("0.2") == Decimal("0.3")
    long = "0.1234567890123456789012345678901234567"  # beyond a 28-digit Decimal context
    assert to_decimal(long) == Decimal(long)
    assert to_fraction(long) == Fraction(long)
    assert Fraction(to_decimal("1.000000000000000000000000000001Gi")) == Fraction("1.000000000000000000000000000001") * 2**30
    assert to_int_ceil("1.000000000000000000000000000001Gi") == 2**30 + 1
    assert isinstance(to_fraction("3"), Fraction) and to_decimal(7) == 7


@pytest.mark.parametrize(
    "bad",
    ["12Gx", "", " 1", "1 ", "NaN", "Infinity", "inf", "1_000", "\u0661", "1e", "Gi", "1.2.3", "1ki", "1Mb",
     "1e99999", "1e-99999", "9" * 30, "0x10", "--1", "1.5.", ".", "e3"],
)
def test_invalid_quantities_rejected(bad):
    with pytest.raises(ValueError):
        models.validate_quantity(bad)
    with pytest.raises(ValueError):
        to_fraction(bad)


@pytest.mark.parametrize("bad", [True, None, [], {}, float("nan"), float("inf")])
def test_invalid_quantity_types_rejected(bad):
    with pytest.raises(ValueError):
        models.validate_quantity(bad)


def test_quantity_numbers_accepted():
    assert models.validate_quantity(2) == "2"
    assert models.validate_quantity(0.25) == "0.25"
    assert cpu_millis(models.validate_quantity(0.25)) == 250
    with pytest.raises(TypeError):
        to_fraction(0.25)  # floats are refused by the arithmetic helpers


def test_invalid_quantity_rejected_with_field_path():
    doc = {"metadata": {"name": "p", "namespace": "ns"},
           "spec": {"containers": [{"name": "a"}, {"name": "b", "resources": {"requests": {"cpu": "12Gx"}}}]}}
    with pytest.raises(ValidationError) as exc:
        _validate(Pod, doc)
    (err,) = exc.value.errors()
    assert err["loc"] == ("spec", "containers", 1, "resources", "requests", "cpu")
    assert "12Gx" in err["msg"]
    with pytest.raises(ValidationError) as exc:
        _validate(Node, {"metadata": {"name": "n"}, "status": {"allocatable": {"memory": "lots"}}})
    assert exc.value.errors()[0]["loc"] == ("status", "allocatable", "memory")


def test_quantity_cache_keeps_validation_exact(monkeypatch):
    """Accepted texts are remembered for speed; that must not change what is accepted."""
    from models import quantity

    assert models.validate_quantity("2") == "2" and models.validate_quantity("1") == "1"
    assert models.validate_quantity(2) == "2"
    for bad in (True, None, ["1"], {"1": 1}, "12Gx", "12Gx"):
        with pytest.raises(ValueError):
            models.validate_quantity(bad)
    assert "12Gx" not in quantity._KNOWN
    monkeypatch.setattr(quantity, "_KNOWN_MAX", 3)
    quantity._KNOWN.clear()
    for text in ("1", "2", "3", "4", "5"):
        assert models.validate_quantity(text) == text
    assert len(quantity._KNOWN) <= 3


@pytest.mark.parametrize("text, expected", [
    ("2025-06-01T16:38:18Z", datetime(2025, 6, 1, 16, 38, 18, tzinfo=timezone.utc)),
    ("2025-06-01t16:38:18z", datetime(2025, 6, 1, 16, 38, 18, tzinfo=timezone.utc)),
    ("2025-06-01 16:38:18Z", datetime(2025, 6, 1, 16, 38, 18, tzinfo=timezone.utc)),
    ("2025-06-01T16:38:18.5Z", datetime(2025, 6, 1, 16, 38, 18, 500000, tzinfo=timezone.utc)),
    ("2025-06-01T16:38:18", datetime(2025, 6, 1, 16, 38, 18, tzinfo=timezone.utc)),
    ("2025-06-01T18:38:18+02:00", datetime(2025, 6, 1, 16, 38, 18, tzinfo=timezone.utc)),
    ("2025-06-01T16:38:18-00:30", datetime(2025, 6, 1, 17, 8, 18, tzinfo=timezone.utc)),
])
def test_time_parsing_forms(text, expected):
    pod = _validate(Pod, {"metadata": {"name": "a", "creationTimestamp": text}})
    again = _validate(Pod, {"metadata": {"name": "b", "creationTimestamp": text}})  # cached
    for p in (pod, again):
        t = p.metadata.creation_timestamp
        assert t == expected and t.tzinfo is not None
        assert _dump(p)["metadata"]["creationTimestamp"] == text


@pytest.mark.parametrize("bad", ["2025-02-30T00:00:00Z", "0000-01-01T00:00:00Z", "2025-06-01T24:00:00Z",
                                 "2025-06-01T16:38:18+24:00", "2025-06-01T16:38:18+01:60",
                                 "\u0662025-06-01T16:38:18Z", "2025-06-01T16:38:18ZZ", "", 5, ["x"], {"a": 1}])
def test_invalid_times_rejected_every_time(bad):
    for _ in range(2):  # a rejected text is never cached
        with pytest.raises(ValidationError):
            _validate(Pod, {"metadata": {"name": "a", "creationTimestamp": bad}})


def test_time_cache_is_bounded(monkeypatch):
    from models import times

    monkeypatch.setattr(times, "_TIME_CACHE_MAX", 2)
    times._TIME_CACHE.clear()
    for second in range(10):
        _validate(Pod, {"metadata": {"name": "a", "creationTimestamp": f"2025-06-01T16:38:{second:02d}Z"}})
    assert len(times._TIME_CACHE) <= 2


# ------------------------------------------------------------------------------ durations


@pytest.mark.parametrize("text, seconds", [("10m", 600), ("1h30m", 5400), ("1.5s", Fraction(3, 2)),
                                           ("0", 0), ("-2s", -2), ("300ms", Fraction(3, 10)), ("1us", Fraction(1, 10**6))])
def test_duration_seconds(text, seconds):
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("bad", ["", "10", "m", "1d", "1.5", "-", " 1s", "1s ", "1e3s", "999999999999h"])
def test_duration_invalid(bad):
    with pytest.raises(ValueError):
        duration_seconds(bad)


def test_fixture_dir_is_inside_repo():
    # The project's tests must not depend on ../shared.
    assert os.path.commonpath([FIXTURES.resolve(), Path(__file__).resolve().parent]) == str(Path(__file__).resolve().parent)
