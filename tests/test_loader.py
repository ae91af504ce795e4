"""Tests for kai_cp.loader: format by content, file-level errors, object-level warnings,
atomic write-back, and fuzzing (anything but a SnapshotError escaping is a bug)."""

from __future__ import annotations

import copy
import io
import json
import os
import stat
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kai_cp import loader  # noqa: E402
from kai_cp.errors import ObjectWarning, SnapshotError  # noqa: E402
from kai_cp.loader import (  # noqa: E402
    LoadedSnapshot,
    dump_snapshot,
    load_snapshot,
    load_snapshot_bytes,
    load_snapshot_dict,
    render_field_path,
    write_json_atomic,
    write_snapshot,
)
from models import RAW_OBJECT_KINDS, PodGroup  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"
FIXTURE_FILES = sorted(FIXTURES.glob("*.json"))
BASIC = FIXTURES / "allocate.allocate_test__001.json"


def _doc(path: Path = BASIC) -> dict:
    return json.loads(path.read_text())


def _zip_bytes(members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _same_json(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


# ------------------------------------------------------------------------ happy paths


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_fixtures_load_without_warnings_and_round_trip(path):
    loaded = load_snapshot(path)
    assert isinstance(loaded, LoadedSnapshot)
    assert loaded.warnings == []
    assert all(v == [] for v in loaded.raw_invalid.values())
    assert set(loaded.raw_invalid) == {k.key for k in RAW_OBJECT_KINDS}
    assert _same_json(dump_snapshot(loaded.snapshot), json.loads(path.read_text()))


def test_json_and_zip_chosen_by_content(tmp_path):
    doc = _doc()
    raw = json.dumps(doc).encode()
    zipped = _zip_bytes({"snapshot.json": raw})
    (tmp_path / "really-a-zip.json").write_bytes(zipped)
    (tmp_path / "really-json.zip").write_bytes(raw)
    (tmp_path / "no-extension").write_bytes(zipped)
    for name in ("really-a-zip.json", "really-json.zip", "no-extension"):
        loaded = load_snapshot(tmp_path / name)
        assert _same_json(dump_snapshot(loaded.snapshot), doc), name
    # str paths work too; stored (uncompressed) ZIPs as well
    (tmp_path / "stored.bin").write_bytes(_zip_bytes({"snapshot.json": raw}, zipfile.ZIP_STORED))
    assert len(load_snapshot(str(tmp_path / "stored.bin")).snapshot.raw_objects.pods) == len(doc["rawObjects"]["pods"])


def test_zip_member_in_a_folder_and_extra_members():
    raw = json.dumps(_doc()).encode()
    assert load_snapshot_bytes(_zip_bytes({"snap/snapshot.json": raw}), "a.zip").snapshot.raw_objects.pods
    both = _zip_bytes({"README": b"x", "snapshot.json": raw})
    assert load_snapshot_bytes(both, "b.zip").snapshot.raw_objects.pods


def test_missing_keys_and_nulls_mean_empty():
    for doc in ({}, {"rawObjects": None}, {"rawObjects": {}}, {"config": None, "schedulerParams": None},
                {"rawObjects": {"pods": None, "nodes": []}}):
        loaded = load_snapshot_dict(doc, "x.json")
        assert loaded.snapshot.raw_objects.pods == [] and loaded.snapshot.raw_objects.nodes == []
        assert loaded.snapshot.config is None and loaded.snapshot.scheduler_params is None
        assert loaded.warnings == []


def test_bom_is_accepted():
    data = b"\xef\xbb\xbf" + json.dumps(_doc()).encode()
    assert load_snapshot_bytes(data, "bom.json").snapshot.raw_objects.pods


# ------------------------------------------------------------------- file-level errors


def _expect_error(data: bytes, *fragments: str, name: str = "snap.json") -> str:
    with pytest.raises(SnapshotError) as exc:
        load_snapshot_bytes(data, name)
    msg = str(exc.value)
    assert name in msg, msg
    for frag in fragments:
        assert frag.lower() in msg.lower(), msg
    assert "\n" not in msg
    return msg


def test_missing_and_unreadable_files(tmp_path):
    for path in (tmp_path / "nope.json", tmp_path):
        with pytest.raises(SnapshotError) as exc:
            load_snapshot(path)
        assert str(path) in str(exc.value) and "cannot read" in str(exc.value)


def test_empty_files(tmp_path):
    (tmp_path / "empty.json").write_bytes(b"")
    with pytest.raises(SnapshotError, match="empty"):
        load_snapshot(tmp_path / "empty.json")
    _expect_error(b"  \n\t ", "empty")


def test_not_json_says_where():
    msg = _expect_error(b'{"rawObjects": {\n  "pods": [,]}}', "not valid json", "line 2", "column")
    assert "line 2, column 12" in msg
    _expect_error(b"\xff\xfe{}", "utf-8")
    _expect_error(b'{"a": NaN}', "not valid json", "nan")
    _expect_error(b'{"a": 1e999}', "out of range")
    _expect_error(b'{"a": ' + b"1" * 5000 + b"}", "not valid json")
    _expect_error(b"[" * 100000 + b"]" * 100000, "json")
    _expect_error(b"\x1f\x8b\x08\x00rest", "gzip")


@pytest.mark.parametrize("views", [False, True])
def test_json_nested_too_deeply_inside_an_object_says_so(tmp_path, views):
    """As at the top level: a pod's annotation nested 100,000 deep ended `kai-cp solve`'s load
    (pod views) in an internal RecursionError."""
    doc = {"rawObjects": {"pods": [{"metadata": {"name": "p", "annotations": {"x": "@"}}}]}}
    data = json.dumps(doc).replace('"@"', "[" * 100000 + "]" * 100000).encode()
    (tmp_path / "snap.json").write_bytes(data)
    with pytest.raises(SnapshotError, match="nested too deeply"):
        load_snapshot(tmp_path / "snap.json", views=views)


@pytest.mark.parametrize("doc, fragment", [
    (b"[]", "is a list"),
    (b'"snapshot"', "is a string"),
    (b"42", "is a number"),
    (b"null", "is null"),
    (b'{"rawObjects": []}', "rawObjects must be an object"),
    (b'{"rawObjects": "x"}', "rawObjects must be an object"),
    (b'{"rawObjects": {"pods": {}}}', "rawObjects.pods must be a list"),
    (b'{"rawObjects": {"nodes": "n"}}', "rawObjects.nodes must be a list"),
    (b'{"rawObjects": {"topologies": 3}}', "rawObjects.topologies must be a list"),
    (b'{"config": []}', "config must be an object"),
    (b'{"schedulerParams": "x"}', "schedulerParams must be an object"),
])
def test_wrong_shapes(doc, fragment):
    _expect_error(doc, fragment)


def test_zip_errors():
    raw = json.dumps(_doc()).encode()
    _expect_error(_zip_bytes({"other.json": raw}), "no snapshot.json", "other.json", name="s.zip")
    _expect_error(_zip_bytes({}), "no snapshot.json", name="s.zip")  # empty archive (PK\x05\x06)
    good = _zip_bytes({"snapshot.json": raw})
    _expect_error(good[: len(good) // 2], "corrupt zip", name="s.zip")
    _expect_error(good[:10], "corrupt zip", name="s.zip")
    _expect_error(_zip_bytes({"snapshot.json": b"\xff\xfe\x00"}), "utf-8", name="s.zip")
    _expect_error(_zip_bytes({"snapshot.json": b"{not json"}), "not valid json", "line 1", name="s.zip")
    _expect_error(_zip_bytes({"snapshot.json": b""}), "not valid json", name="s.zip")
    _expect_error(_zip_bytes({"snapshot.json": b"[1]"}), "is a list", name="s.zip")
    # a flipped byte inside the compressed data fails the CRC or inflate
    bad = bytearray(good)
    bad[60] ^= 0xFF
    _expect_error(bytes(bad), name="s.zip")


def test_zip_bomb_refused(monkeypatch):
    monkeypatch.setattr(loader, "MAX_UNCOMPRESSED_BYTES", 4096)
    bomb = _zip_bytes({"snapshot.json": b'{"config": {"x": "' + b"a" * 100_000 + b'"}}'})
    assert len(bomb) < 4096
    _expect_error(bomb, "limit", "zip bomb", name="bomb.zip")


def test_zip_header_understating_the_size_is_not_trusted(monkeypatch):
    """A member whose header claims a small size is never inflated past that size:
    zipfile stops at the declared size and the CRC check fails -> corrupt archive."""
    monkeypatch.setattr(loader, "MAX_UNCOMPRESSED_BYTES", 4096)
    data = _zip_bytes({"snapshot.json": b'{"config": {"x": "' + b"a" * 100_000 + b'"}}'})
    real_find = loader._find_member

    def find(infos):
        found = real_find(infos)
        found.file_size = 10  # the lie
        return found

    monkeypatch.setattr(loader, "_find_member", find)
    _expect_error(data, "corrupt zip", name="liar.zip")


def test_snapshot_error_is_one_line_and_carries_parts():
    err = SnapshotError("f.json", "what")
    assert str(err) == "f.json: what" and err.source == "f.json" and err.problem == "what"
    assert str(SnapshotError("plain message")) == "plain message"


# ----------------------------------------------------------------- object-level problems


def _bad_cpu_doc() -> tuple[dict, dict]:
    doc = _doc()
    bad = doc["rawObjects"]["pods"][0]
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "12Gx"
    return doc, bad


def test_bad_quantity_drops_only_that_pod():
    doc, bad = _bad_cpu_doc()
    loaded = load_snapshot_dict(copy.deepcopy(doc), "x.json")
    name, ns = bad["metadata"]["name"], bad["metadata"]["namespace"]
    pods = loaded.snapshot.raw_objects.pods
    assert name not in {p.metadata.name for p in pods}
    assert len(pods) == len(doc["rawObjects"]["pods"]) - 1
    assert len(loaded.snapshot.raw_objects.pod_groups) == len(doc["rawObjects"]["podGroups"])
    assert len(loaded.snapshot.raw_objects.nodes) == len(doc["rawObjects"]["nodes"])
    (w,) = loaded.warnings
    assert w.object == f"Pod/{ns}/{name}"
    assert w.field.endswith("requests.cpu")
    assert w.field == "spec.containers[0].resources.requests.cpu"
    assert "12Gx" in w.reason
    assert w.to_json() == {"object": w.object, "field": w.field, "reason": w.reason}
    assert loaded.raw_invalid["pods"] == [bad]
    # the engine can still find the PodGroup of the invalid pod
    assert loaded.raw_invalid["pods"][0]["metadata"]["annotations"]["pod-group-name"] in {
        g.metadata.name for g in loaded.snapshot.raw_objects.pod_groups
    }


def test_bad_object_via_file_and_zip(tmp_path):
    doc, _ = _bad_cpu_doc()
    (tmp_path / "s.zip").write_bytes(_zip_bytes({"snapshot.json": json.dumps(doc).encode()}))
    loaded = load_snapshot(tmp_path / "s.zip")
    assert [w.field for w in loaded.warnings] == ["spec.containers[0].resources.requests.cpu"]


def test_kind_is_inferred_from_the_key_for_informer_objects():
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "two"}}}
    queue = {"metadata": {"name": "q"}, "spec": {"resources": {"gpu": {"quota": "lots"}}}}
    pg = {"metadata": {"name": "pg", "namespace": "ns"}, "spec": {"minMember": "2"}}
    ok_pg = {"metadata": {"name": "pg2", "namespace": "ns"}, "spec": {"minMember": 2}}
    loaded = load_snapshot_dict({"rawObjects": {"nodes": [node], "queues": [queue], "podGroups": [pg, ok_pg]}})
    got = {(w.object, w.field) for w in loaded.warnings}
    assert got == {
        ("Node/n1", "status.allocatable[nvidia.com/gpu]"),
        ("Queue/q", "spec.resources.gpu.quota"),
        ("PodGroup/ns/pg", "spec.minMember"),
    }
    assert [g.metadata.name for g in loaded.snapshot.raw_objects.pod_groups] == ["pg2"]
    assert isinstance(loaded.snapshot.raw_objects.pod_groups[0], PodGroup)
    assert loaded.raw_invalid["nodes"] == [node] and loaded.raw_invalid["podGroups"] == [pg]


def test_unnamed_non_dict_and_wrong_kind_objects():
    doc = {"rawObjects": {"pods": [
        {"metadata": {"namespace": "ns"}},           # no name
        "not an object",                              # not a dict
        {"kind": "Node", "metadata": {"name": "x"}},  # wrong kind in the list
        {"metadata": {"name": "ok", "namespace": "ns"}},
        None,
    ]}}
    loaded = load_snapshot_dict(doc, "x.json")
    assert [p.metadata.name for p in loaded.snapshot.raw_objects.pods] == ["ok"]
    objs = [(w.object, w.field) for w in loaded.warnings]
    assert objs == [
        ("Pod/rawObjects.pods[0]", "metadata.name"),
        ("Pod/rawObjects.pods[1]", ""),
        ("Pod/x", "kind"),
        ("Pod/rawObjects.pods[4]", ""),
    ]
    assert len(loaded.raw_invalid["pods"]) == 2  # only dicts are kept there


def test_duplicates_keep_the_first():
    a = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "first"}}
    b = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "second"}}
    c = {"metadata": {"name": "p", "namespace": "other"}}
    loaded = load_snapshot_dict({"rawObjects": {"pods": [a, b, c]}})
    pods = loaded.snapshot.raw_objects.pods
    assert [(p.metadata.namespace, p.spec.node_name) for p in pods] == [("ns", "first"), ("other", None)]
    (w,) = loaded.warnings
    assert w.object == "Pod/ns/p" and "duplicate" in w.reason
    assert loaded.raw_invalid["pods"] == []


def test_many_errors_in_one_object_are_capped():
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [
        {"resources": {"requests": {f"r{i}": "bad!"}}} for i in range(12)]}}
    loaded = load_snapshot_dict({"rawObjects": {"pods": [pod]}})
    assert len(loaded.warnings) == 5
    assert "7 more" in loaded.warnings[-1].reason


def test_untyped_lists_are_kept_verbatim():
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": {"x": 1}}
    loaded = load_snapshot_dict({"rawObjects": {"resourceClaims": [claim, 5]}})
    assert loaded.snapshot.raw_objects.resource_claims == [claim]
    assert loaded.warnings == [ObjectWarning("ResourceClaim/rawObjects.resourceClaims[1]", "", "expected an object, got a number")]


def test_unknown_keys_are_kept_and_reported():
    doc = {"rawObjects": {"pods": [], "widgets": [1]}, "discovery": {"serverVersion": {"major": "1"}}, "extraTop": 1}
    loaded = load_snapshot_dict(copy.deepcopy(doc))
    assert _same_json(dump_snapshot(loaded.snapshot), doc)
    assert {w.field for w in loaded.warnings} == {"rawObjects.widgets", "extraTop"}
    assert loaded.snapshot.discovery == {"serverVersion": {"major": "1"}}
    bad = load_snapshot_dict({"discovery": [1]})
    assert [w.field for w in bad.warnings] == ["discovery"]


def test_render_field_path():
    obj = {"spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "x"}}}]}}
    assert render_field_path(obj, ("spec", "containers", 0, "resources", "requests", "nvidia.com/gpu")) == \
        "spec.containers[0].resources.requests[nvidia.com/gpu]"
    assert render_field_path({"metadata": {}}, ("metadata", "name")) == "metadata.name"
    assert render_field_path({"a": 1}, ("a", "int", "tag")) == "a"


# ----------------------------------------------------------------- speed machinery


def _mixed_pods() -> list:
    """Good pods with, spread over many chunks, every kind of problem the loader reports."""
    base = _doc()["rawObjects"]["pods"][0]
    pods = []
    for i in range(40):
        pod = copy.deepcopy(base)
        pod["metadata"]["name"] = f"p{i}"
        pods.append(pod)
    pods[3]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "12Gx"  # invalid
    pods[7] = "not an object"
    pods[11]["kind"] = "Node"                                                   # wrong kind, valid
    pods[12]["kind"] = "Node"
    pods[12]["metadata"]["name"] = 5                                           # wrong kind, invalid
    pods[15]["metadata"]["name"] = "p1"                                        # duplicate of p1
    pods[22]["metadata"]["name"] = "p22"
    pods[23] = copy.deepcopy(pods[22])                                         # duplicate, same chunk
    pods[30]["status"] = None                                                  # null: still valid
    pods[31]["metadata"]["labels"] = None
    return pods


def _outcome(loaded: LoadedSnapshot):
    return (loaded.warnings, loaded.raw_invalid, dump_snapshot(loaded.snapshot),
            [p.metadata.name for p in loaded.snapshot.raw_objects.pods])


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1000])
@pytest.mark.parametrize("max_failed", [0, 1, 8])
def test_chunked_validation_matches_object_by_object(monkeypatch, chunk, max_failed):
    """Validating a chunk of objects per pydantic call must give the same models, warnings
    (in the same order) and raw_invalid as validating each object alone."""
    doc = {"rawObjects": {"pods": _mixed_pods()}}
    monkeypatch.setattr(loader, "_MAX_FAILED_CHUNKS", 0)  # object by object only
    expected = _outcome(load_snapshot_dict(copy.deepcopy(doc)))
    monkeypatch.setattr(loader, "_CHUNK", chunk)
    monkeypatch.setattr(loader, "_MAX_FAILED_CHUNKS", max_failed)
    assert _outcome(load_snapshot_dict(copy.deepcopy(doc))) == expected
    assert [(w.object, w.field) for w in expected[0]] == [
        ("Pod/default/p3", "spec.containers[0].resources.requests.cpu"),
        ("Pod/rawObjects.pods[7]", ""),
        ("Pod/default/p11", "kind"),
        ("Pod/rawObjects.pods[12]", "kind"),
        ("Pod/default/p1", "metadata.name"),
        ("Pod/default/p22", "metadata.name"),
    ]
    assert [len(v) for v in expected[1].values() if v] == [3]  # p3, p11, pods[12]
    assert len(expected[3]) == 40 - 6


def test_model_instances_in_a_document_are_not_objects():
    pod = _doc()["rawObjects"]["pods"][0]
    model = loader.load_snapshot_dict({"rawObjects": {"pods": [pod]}}).snapshot.raw_objects.pods[0]
    loaded = load_snapshot_dict({"rawObjects": {"pods": [pod, model]}})
    assert len(loaded.snapshot.raw_objects.pods) == 1
    assert [(w.object, w.field) for w in loaded.warnings] == [("Pod/rawObjects.pods[1]", "")]


def test_gc_is_paused_during_a_load_and_restored(monkeypatch):
    import gc

    states = []
    real = loader._load_list

    def spy(*args):
        states.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(loader, "_load_list", spy)
    assert gc.isenabled()
    load_snapshot_bytes(json.dumps(_doc()).encode(), "x.json")
    assert states and not any(states) and gc.isenabled()
    with pytest.raises(SnapshotError):
        load_snapshot_bytes(b'{"rawObjects": []}', "x.json")
    assert gc.isenabled()
    gc.disable()  # a caller that manages the collector itself keeps it off
    try:
        load_snapshot_dict(_doc())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_big_loads_freeze_what_they_loaded(monkeypatch):
    import gc

    # What earlier tests' loads froze leaves the permanent generation as it is freed, which would
    # lower the count under this test's feet: start from an empty one.
    gc.unfreeze()
    before = gc.get_freeze_count()
    load_snapshot_dict(_doc())  # small: below the threshold, nothing is frozen
    assert gc.get_freeze_count() == before
    monkeypatch.setattr(loader, "_FREEZE_MIN_OBJECTS", 0)
    loaded = load_snapshot_dict(_doc())
    try:
        assert gc.get_freeze_count() > before and gc.isenabled()
        assert gc.is_tracked(loaded.snapshot.raw_objects.pods[0])
    finally:
        gc.unfreeze()


# ----------------------------------------------------------------------------- writing


def test_dump_with_raw_invalid_loses_nothing():
    doc, bad = _bad_cpu_doc()
    loaded = load_snapshot_dict(copy.deepcopy(doc))
    out = dump_snapshot(loaded.snapshot, loaded.raw_invalid)
    assert bad in out["rawObjects"]["pods"]
    assert len(out["rawObjects"]["pods"]) == len(doc["rawObjects"]["pods"])
    again = load_snapshot_dict(out)
    assert [w.object for w in again.warnings] == [w.object for w in loaded.warnings]


def test_write_snapshot_is_atomic(tmp_path):
    target = tmp_path / "out.json"
    doc = _doc()
    write_snapshot(target, doc)
    assert json.loads(target.read_text()) == doc
    write_snapshot(target, load_snapshot(target).snapshot)  # a Snapshot model works too
    assert _same_json(json.loads(target.read_text()), doc)
    before = target.read_bytes()
    with pytest.raises(ValueError):
        write_json_atomic(target, {"x": float("nan")})
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "new.json", {"x": object()})
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no partial or temp file


def test_write_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}")
    real.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and link.resolve() == real
    assert json.loads(real.read_text()) == {"a": 1}
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX only")
def test_write_to_a_fifo_writes_in_place_and_leaves_it_a_fifo(tmp_path):
    """`-o /dev/null` or a pipe: renaming a temp file over it would replace the device with a
    regular file (as root, /dev/null for the whole machine)."""
    fifo = tmp_path / "out.pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_json_atomic(fifo, {"a": [1, 2]})
    reader.join(timeout=10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert json.loads(got[0]) == {"a": [1, 2]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.pipe"]


def test_write_to_a_device_keeps_the_device():
    before = os.stat(os.devnull)
    write_json_atomic(os.devnull, {"a": 1})
    after = os.stat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_a_bad_value_writes_nothing_to_a_device_either(tmp_path):
    fifo = tmp_path / "out.pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError):   # raised before the pipe is opened: no reader is needed
        write_json_atomic(fifo, {"x": float("nan")})


def test_write_to_a_folder_fails_cleanly(tmp_path):
    with pytest.raises(IsADirectoryError):
        write_json_atomic(tmp_path, {})
    assert list(tmp_path.iterdir()) == []


def test_write_into_missing_folder_fails_cleanly(tmp_path):
    with pytest.raises(OSError):
        write_snapshot(tmp_path / "missing" / "out.json", {})


# ------------------------------------------------------------------------------ fuzzing

_VALID_JSON = json.dumps(_doc(FIXTURES / "allocate.allocateTopology_test__009.json")).encode()
_VALID_ZIP = _zip_bytes({"snapshot.json": _VALID_JSON})


def _check_loads_or_snapshot_error(data: bytes) -> None:
    try:
        loaded = load_snapshot_bytes(data, "fuzz.bin")
    except SnapshotError as exc:
        assert "fuzz.bin" in str(exc)
        return
    assert isinstance(loaded, LoadedSnapshot)
    # whatever loaded can be written back and read again identically
    out = dump_snapshot(loaded.snapshot)
    json.dumps(out, allow_nan=False)
    assert _same_json(dump_snapshot(load_snapshot_dict(out).snapshot), out)


@st.composite
def _mutated(draw, base: bytes) -> bytes:
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "set", "delete", "insert", "truncate"]))
        if not data:
            break
        pos = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            data[pos] = draw(st.integers(0, 255))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[pos:]
    return bytes(data)


_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(_mutated(_VALID_JSON))
def test_fuzz_json_bytes(data):
    _check_loads_or_snapshot_error(data)


@_FUZZ
@given(_mutated(_VALID_ZIP))
def test_fuzz_zip_bytes(data):
    _check_loads_or_snapshot_error(data)


@_FUZZ
@given(st.binary(max_size=64).map(lambda b: b"PK\x03\x04" + b))
def test_fuzz_zip_headers(data):
    _check_loads_or_snapshot_error(data)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12) | st.sampled_from(["12Gx", "1Gi", "500m", "2025-01-01T00:00:00Z", "-1", ""]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


_BASE_DOC = json.loads(_VALID_JSON)
_ALL_PATHS = list(_paths(_BASE_DOC))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_ALL_PATHS), _json_values), min_size=1, max_size=4))
def test_fuzz_structure(replacements):
    """Replace random subtrees with random JSON: a file-level error or a load, never a crash."""
    doc = copy.deepcopy(_BASE_DOC)
    for path, value in replacements:
        if not path:
            doc = value
            continue
        node = doc
        try:
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    _check_loads_or_snapshot_error(json.dumps(doc).encode())


def test_fuzz_via_files():
    """load_snapshot on files: same contract as for bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.json")
        for data in (_VALID_JSON[:100], _VALID_ZIP[:-5], _VALID_ZIP, b"\x00" * 10):
            with open(path, "wb") as f:
                f.write(data)
            try:
                assert isinstance(load_snapshot(path), LoadedSnapshot)
            except SnapshotError as exc:
                assert path in str(exc)
