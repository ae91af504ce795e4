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
from kai_cp.records import parse_rfc3339  # noqa: E402
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
