"""What the fast load path shares between objects (issue 9: a 10,000-node snapshot loaded and
turned into state in seconds): decoded container and toleration lists shared by the pods whose
JSON for them is the same, the whole snapshot decoded in one pass where every object stands, and
parsed times carrying their epoch seconds. Sharing must never change what a pod reads: the
views' equivalence with the pydantic models is tests/test_podview.py's; here, that the sharing
happens, stays bounded, and falls back where it cannot hold."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

import snapshot_builder as sb  # noqa: E402
from kai_cp import loader, podview  # noqa: E402
from kai_cp.jobs import ts_key  # noqa: E402
from kai_cp.loader import load_snapshot  # noqa: E402
from kai_cp.records import group_record, parse_rfc3339, pod_record  # noqa: E402
from kai_cp.state import build_cluster_state  # noqa: E402
from kai_cp.resources import cached_pod_request, pod_request  # noqa: E402
from models.times import parse_time  # noqa: E402
from view_checks import assert_same_load  # noqa: E402


def _write(tmp_path: Path, pods: list[dict]) -> Path:
    return sb.write(tmp_path / "snap.json", sb.snapshot(
        nodes=[sb.node("n0", gpu=8)], podgroups=[sb.podgroup("a"), sb.podgroup("b")], pods=pods))


def test_pods_with_the_same_containers_share_one_decoded_list_and_one_request(tmp_path):
    pods = [sb.pod("a-0", "a", cpu="2"), sb.pod("a-1", "a", cpu="2"), sb.pod("b-0", "b", cpu="3")]
    path = _write(tmp_path, pods)
    a0, a1, b0 = load_snapshot(path, views=True).snapshot.raw_objects.pods
    assert a0.spec.containers is a1.spec.containers
    assert a0.spec.tolerations is a1.spec.tolerations
    assert a0.spec.containers is not b0.spec.containers
    assert cached_pod_request(a0.spec, {}) is cached_pod_request(a1.spec, {})
    assert cached_pod_request(b0.spec, {}).cpu == 3000 == pod_request(b0.spec, {}).cpu
    assert_same_load(path)


def test_past_the_bound_each_pod_decodes_its_own_list_and_reads_the_same(tmp_path, monkeypatch):
    monkeypatch.setattr(podview, "_SHARED_MAX", 1)
    monkeypatch.setattr(podview, "_SHARED_CONTAINERS", {})
    pods = [sb.pod("a-0", "a", cpu="1"), sb.pod("a-1", "a", cpu="2"), sb.pod("b-0", "b", cpu="2")]
    path = _write(tmp_path, pods)
    a0, a1, b0 = load_snapshot(path, views=True).snapshot.raw_objects.pods
    assert len(podview._SHARED_CONTAINERS) == 1                 # the bound held
    assert a1.spec.containers is not b0.spec.containers          # not shared past it
    assert not isinstance(a1.spec.containers, podview.SharedList)
    assert [pod_request(p.spec, {}).cpu for p in (a0, a1, b0)] == [1000, 2000, 2000]
    assert [cached_pod_request(p.spec, {}).cpu for p in (a0, a1, b0)] == [1000, 2000, 2000]
    assert_same_load(path)


def test_a_bad_container_refuses_the_pod_even_when_its_list_was_seen_good_before(tmp_path):
    """The shared list is looked up by the JSON's bytes: a pod whose bytes differ (a bad
    quantity) is decoded, and refused by its view, on its own."""
    bad = sb.pod("a-1", "a", cpu="2")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2x"
    path = _write(tmp_path, [sb.pod("a-0", "a", cpu="2"), bad, sb.pod("b-0", "b", cpu="2")])
    loaded = load_snapshot(path, views=True)
    assert [p.metadata.name for p in loaded.snapshot.raw_objects.pods] == ["a-0", "b-0"]
    assert [(w.object, w.field) for w in loaded.warnings] == [("Pod/default/a-1", "spec.containers[0].resources.requests.cpu")]
    assert_same_load(path)


def test_a_clean_snapshot_is_decoded_in_one_pass(tmp_path, monkeypatch):
    path = _write(tmp_path, [sb.pod("a-0", "a"), sb.pod("b-0", "b")])

    def list_by_list(*args, **kwargs):
        raise AssertionError("the list-by-list path ran for a snapshot whose objects all stand")

    monkeypatch.setattr(loader, "_load_views", list_by_list)
    loaded = load_snapshot(path, views=True)
    assert [p.metadata.name for p in loaded.snapshot.raw_objects.pods] == ["a-0", "b-0"]
    assert loaded.warnings == []


@pytest.mark.parametrize("edit", ["duplicate", "bad-pod", "unknown-list", "not-an-object"])
def test_where_the_one_pass_cannot_vouch_the_list_by_list_path_decides(tmp_path, monkeypatch, edit):
    pods = [sb.pod("a-0", "a"), sb.pod("b-0", "b")]
    doc = sb.snapshot(nodes=[sb.node("n0")], podgroups=[sb.podgroup("a"), sb.podgroup("b")], pods=pods)
    if edit == "duplicate":
        doc["rawObjects"]["pods"].append(sb.pod("a-0", "a", cpu="3"))
    elif edit == "bad-pod":
        doc["rawObjects"]["pods"][1]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2x"
    elif edit == "unknown-list":
        doc["rawObjects"]["widgets"] = [{}]
    else:
        doc["rawObjects"]["storageClasses"] = [{"metadata": {"name": "s"}}, 5]
    path = sb.write(tmp_path / "snap.json", doc)
    calls = []
    real = loader._decode_views_at_once
    monkeypatch.setattr(loader, "_decode_views_at_once", lambda payload: calls.append(real(payload)) or calls[-1])
    assert_same_load(path)
    assert calls and all(c is None for c in calls)
    assert load_snapshot(path, views=True).warnings      # and the list-by-list path reported it


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
       st.sampled_from(["Z", "+00:00", "+05:30", "-08:00", ".5Z", ".123456-01:00"]))
def test_a_parsed_time_carries_the_epoch_seconds_of_its_value(moment, zone):
    text = moment.isoformat(timespec="seconds") + zone
    t = parse_time(text)
    assert t.epoch == t.timestamp() == ts_key(t)
    assert ts_key(datetime(2024, 1, 1)) == datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp()   # naive: UTC
    assert ts_key(None) == 0.0


def test_annotation_times_read_the_same_on_every_call():
    for text in ("2025-05-30T15:49:32Z", "2025-05-30T15:49:32+02:00", "yesterday", "2025-13-01T00:00:00Z"):
        first = parse_rfc3339(text)
        assert parse_rfc3339(text) == first
    assert parse_rfc3339("2025-05-30T15:49:32Z") == datetime(2025, 5, 30, 15, 49, 32, tzinfo=timezone.utc).timestamp()
    assert parse_rfc3339("yesterday") is None and parse_rfc3339("2025-13-01T00:00:00Z") is None
    assert parse_rfc3339(5) is None


@pytest.mark.parametrize("views", [True, False])
def test_records_and_jobs_hold_each_value_under_its_own_name(tmp_path, views):
    """The hot records are built positionally (records.pod_record says why): each value must
    land in its own field, whatever the fields' order."""
    pg = sb.podgroup("g", queue="q", namespace="ns", preemptibility="non-preemptible", created=7,
                     spec_extra={"topologyConstraint": {"topology": "t", "requiredTopologyLevel": "rack"}})
    pg["metadata"]["annotations"] = {"kai.scheduler/last-start-timestamp": sb.ts(50),
                                     "kai.scheduler/stale-podgroup-timestamp": sb.ts(60)}
    pod = sb.pod("p", "g", namespace="ns", phase="Pending", created=9, scheduler="kai-scheduler",
                 labels={"kai.scheduler/subgroup-name": "sub", "runai-gpu-group": "gg", "app": "scaling-pod"},
                 gates=["wait"], uid="uid-p")
    pod["status"]["nominatedNodeName"] = "n0"
    path = sb.write(tmp_path / "snap.json", sb.snapshot(nodes=[sb.node("n0")], podgroups=[pg], pods=[pod]))
    loaded = load_snapshot(path, views=views)
    rec = pod_record(loaded.snapshot.raw_objects.pods[0], {})
    assert (rec.uid, rec.name, rec.namespace, rec.bind_key, rec.status, rec.node) == \
        ("uid-p", "p", "ns", ("ns", "p"), None, None)
    assert (rec.gated, rec.gpu_groups, rec.group, rec.subgroup, rec.nominated_node, rec.scheduler_name) == \
        (True, ("gg",), "g", "sub", "n0", "kai-scheduler")
    assert (rec.utility, rec.legacy_mig, rec.request.cpu, rec.order_key[3]) == (True, False, 1000, parse_time(sb.ts(9)).epoch)
    assert rec.pod is loaded.snapshot.raw_objects.pods[0] and rec.predicate_key[0] == ()
    g = group_record(loaded.snapshot.raw_objects.pod_groups[0])
    assert (g.name, g.namespace, g.uid, g.queue, g.priority_class, g.preemptibility) == \
        ("g", "ns", "uid-pg-g", "q", "train", "non-preemptible")
    assert (g.creation, g.podsets, g.problems, g.has_sub_groups, g.names_topology) == \
        (parse_time(sb.ts(7)).epoch, (("default", 1),), (), False, True)
    assert g.topology_constraint.topology == "t" and g.pod_group is loaded.snapshot.raw_objects.pod_groups[0]
    assert (g.stale_since, g.stale_annotated, g.last_start, g.warnings) == \
        (parse_time(sb.ts(60)).epoch, True, parse_time(sb.ts(50)).epoch, ())
    state = build_cluster_state(loaded)
    job = state.jobs["g"]
    assert (job.name, job.namespace, job.uid, job.queue, job.preemptible, job.creation) == \
        ("g", "ns", "uid-pg-g", "q", False, g.creation)
    assert (job.last_start, job.stale_since, job.stale_annotated, job.notes) == (g.last_start, g.stale_since, True, [])
    assert job.pod_group is g.pod_group and job.topology_constraint is g.topology_constraint
    [task] = job.podsets["default"].tasks
    assert (task.uid, task.name, task.namespace, task.job, task.podset, task.node, task.nominated_node) == \
        ("uid-p", "p", "ns", "g", "default", None, "n0")
    assert (task.status, task.request, task.gpu_groups, task.scheduler_name, task.utility, task.key) == \
        ("Gated", rec.request, ("gg",), "kai-scheduler", True, "ns/p")
