"""Checks of bench/generate.py, the seeded generator of realistic cluster snapshots.

Why: benchmarks and the shipped example are only meaningful when a seed always yields the
same cluster and that cluster is a consistent one (every reference resolves, no node is
over-committed by its running pods).
"""

from __future__ import annotations

import collections
import importlib.util
import json
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_generator() -> ModuleType:
    """Import bench/generate.py by path: bench/ is a folder of scripts, not a package."""
    spec = importlib.util.spec_from_file_location("bench_generate", ROOT / "bench" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gen = _load_generator()

SUFFIXES = {"Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4, "k": 1000, "M": 10 ** 6,
            "G": 10 ** 9, "m": 0.001}


def quantity(text: str) -> float:
    """The few Kubernetes quantity forms the generator writes."""
    for suffix, factor in SUFFIXES.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return gen.generate_cluster(60, 300, 500, seed=7)


def raw(d: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return d["rawObjects"]


def test_same_seed_same_document() -> None:
    a = json.dumps(gen.generate_cluster(30, 80, 200, seed=3), sort_keys=True)
    b = json.dumps(gen.generate_cluster(30, 80, 200, seed=3), sort_keys=True)
    assert a == b


def test_other_seed_other_document() -> None:
    a = json.dumps(gen.generate_cluster(30, 80, 200, seed=3), sort_keys=True)
    b = json.dumps(gen.generate_cluster(30, 80, 200, seed=4), sort_keys=True)
    assert a != b


def test_top_level_shape(doc: dict[str, Any]) -> None:
    assert doc["config"]["actions"] == "allocate, consolidation, reclaim, preempt, stalegangeviction"
    assert doc["schedulerParams"]["schedulerName"] == "kai-scheduler"
    keys = {"pods", "nodes", "queues", "podGroups", "bindRequests", "priorityClasses", "configMaps",
            "persistentVolumeClaims", "csiStorageCapacities", "storageClasses", "csiDrivers",
            "resourceClaims", "resourceSlices", "deviceClasses", "topologies"}
    assert set(raw(doc)) == keys
    assert {p["metadata"]["name"]: p["value"] for p in raw(doc)["priorityClasses"]} == {
        "train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


def test_names_and_uids_unique(doc: dict[str, Any]) -> None:
    uids: list[str] = []
    for kind, objects in raw(doc).items():
        names = [o["metadata"]["name"] for o in objects]
        assert len(names) == len(set(names)), kind
        uids += [o["metadata"]["uid"] for o in objects if "uid" in o["metadata"]]
    assert len(uids) == len(set(uids))


def test_references_resolve(doc: dict[str, Any]) -> None:
    queues = {q["metadata"]["name"]: q for q in raw(doc)["queues"]}
    groups = {(g["metadata"]["namespace"], g["metadata"]["name"]): g for g in raw(doc)["podGroups"]}
    for q in queues.values():
        parent = q["spec"].get("parentQueue")
        assert parent is None or parent in queues
    leaves = {q["spec"]["parentQueue"] for q in queues.values() if "parentQueue" in q["spec"]}
    for g in groups.values():
        assert g["spec"]["queue"] in queues
        assert g["spec"]["queue"] not in leaves, "jobs must live in leaf queues"
        assert g["metadata"]["labels"]["kai.scheduler/queue"] == g["spec"]["queue"]
    members = collections.Counter()
    for p in raw(doc)["pods"]:
        key = (p["metadata"]["namespace"], p["metadata"]["annotations"]["pod-group-name"])
        assert key in groups
        assert p["metadata"]["labels"]["kai.scheduler/queue"] == groups[key]["spec"]["queue"]
        assert p["spec"]["schedulerName"] == "kai-scheduler"
        members[key] += 1
    assert set(members) == set(groups), "every PodGroup has pods"


def test_running_pods_fit_their_nodes(doc: dict[str, Any]) -> None:
    nodes = {n["metadata"]["name"]: n for n in raw(doc)["nodes"]}
    used: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    running = 0
    for p in raw(doc)["pods"]:
        node = p["spec"].get("nodeName")
        if p["status"]["phase"] == "Running":
            running += 1
            assert node in nodes
            requests = p["spec"]["containers"][0]["resources"]["requests"]
            for r in ("cpu", "memory", "nvidia.com/gpu"):
                used[node][r] += quantity(requests.get(r, "0"))
            used[node]["pods"] += 1
        else:
            assert node is None
    assert running == 500
    for name, u in used.items():
        alloc = nodes[name]["status"]["allocatable"]
        for r, amount in u.items():
            assert amount <= quantity(alloc[r]), (name, r)


def test_pending_gangs(doc: dict[str, Any]) -> None:
    groups = {g["metadata"]["name"]: g for g in raw(doc)["podGroups"]}
    sizes = collections.Counter(p["metadata"]["annotations"]["pod-group-name"]
                                for p in raw(doc)["pods"] if p["status"]["phase"] == "Pending")
    assert sum(sizes.values()) == 300
    for name, size in sizes.items():
        assert 1 <= size <= 64
        assert 1 <= groups[name]["spec"]["minMember"] <= size


def test_large_sizes_have_large_gangs() -> None:
    d = gen.generate_cluster(300, 2000, 100, seed=1)
    sizes = collections.Counter(p["metadata"]["annotations"]["pod-group-name"]
                                for p in raw(d)["pods"] if p["status"]["phase"] == "Pending")
    assert max(sizes.values()) <= 64
    assert any(s >= 32 for s in sizes.values()) and sum(1 for s in sizes.values() if s == 1) > 10


def test_fragmentation_zero_leaves_whole_free_nodes() -> None:
    d = gen.generate_cluster(60, 10, 200, seed=2, fragmentation=0.0)
    busy = collections.Counter()
    for p in raw(d)["pods"]:
        if p["spec"].get("nodeName"):
            busy[p["spec"]["nodeName"]] += int(p["spec"]["containers"][0]["resources"]["requests"].get(
                "nvidia.com/gpu", "0"))
    for n in raw(d)["nodes"]:
        assert busy[n["metadata"]["name"]] in (0, int(n["status"]["allocatable"]["nvidia.com/gpu"]))


def test_example_zip_holds_snapshot_json() -> None:
    path = ROOT / "examples" / "cluster-snapshot.zip"
    assert path.stat().st_size < 300_000
    with zipfile.ZipFile(path) as zf:
        assert zf.namelist() == ["snapshot.json"]
        example = json.loads(zf.read("snapshot.json"))
    assert len(raw(example)["nodes"]) == 48


def test_example_zip_is_reproducible(tmp_path: Path) -> None:
    out = tmp_path / "snap.zip"
    gen.main(["--nodes", "48", "--pending", "120", "--running", "300", "--seed", "6", "-o", str(out)])
    with zipfile.ZipFile(out) as fresh, zipfile.ZipFile(ROOT / "examples" / "cluster-snapshot.zip") as shipped:
        # compare the JSON, not the ZIP bytes: another zlib may compress differently; the shipped
        # example predates topology constraints, which change nothing else (see below)
        assert without_topology(json.loads(fresh.read("snapshot.json"))) == \
            without_topology(json.loads(shipped.read("snapshot.json")))


def without_topology(d: dict[str, Any]) -> dict[str, Any]:
    for g in raw(d)["podGroups"]:
        g["spec"].pop("topologyConstraint", None)
    return d


def gang_facts(d: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Pending gang name -> (pods, GPUs per pod)."""
    out: dict[str, tuple[int, int]] = {}
    for p in raw(d)["pods"]:
        if p["status"]["phase"] == "Pending":
            name = p["metadata"]["annotations"]["pod-group-name"]
            gpus = int(p["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu", "0"))
            out[name] = (out.get(name, (0, 0))[0] + 1, gpus)
    return out


@pytest.mark.parametrize("kwargs", [{}, {"pending_gpu_ratio": 1.1, "fragmentation": 0.9, "utilization": 0.55}])
def test_topology_share_only_adds_constraints(kwargs: dict[str, Any]) -> None:
    """With and without topology the seed names the same cluster: figures stay comparable."""
    plain = gen.generate_cluster(80, 600, None, seed=5, topology_share=0, **kwargs)
    topo = gen.generate_cluster(80, 600, None, seed=5, **kwargs)
    assert not any("topologyConstraint" in g["spec"] for g in raw(plain)["podGroups"])
    assert any("topologyConstraint" in g["spec"] for g in raw(topo)["podGroups"])
    assert json.dumps(without_topology(topo), sort_keys=True) == json.dumps(plain, sort_keys=True)


def test_topology_constraints_are_valid_and_sized() -> None:
    d = gen.generate_cluster(1000, 5000, None, seed=0)
    (topology,) = raw(d)["topologies"]
    levels = [lv["nodeLabel"] for lv in topology["spec"]["levels"]]
    for n in raw(d)["nodes"]:
        assert all(k in n["metadata"]["labels"] for k in levels), "every node belongs to the topology"
    rack_gpus = collections.Counter()
    for n in raw(d)["nodes"]:
        labels = n["metadata"]["labels"]
        rack_gpus[tuple(labels[k] for k in levels[:3])] += int(n["status"]["allocatable"]["nvidia.com/gpu"])
    facts = gang_facts(d)
    multi = {name for name, (pods, gpus) in facts.items() if pods >= 2 and gpus}
    constrained = {g["metadata"]["name"]: g["spec"]["topologyConstraint"] for g in raw(d)["podGroups"]
                   if "topologyConstraint" in g["spec"]}
    assert set(constrained) <= multi
    assert 0.25 <= len(constrained) / len(multi) <= 0.42        # about a third
    kinds = collections.Counter()
    for name, tc in constrained.items():
        assert tc["topology"] == topology["metadata"]["name"]
        req, pref = tc.get("requiredTopologyLevel"), tc.get("preferredTopologyLevel")
        assert req in (None, *levels[:3]) and pref in (None, levels[2]) and (req or pref)
        if req == levels[2]:                   # a required rack holds the gang when the rack is empty
            pods, gpus = facts[name]
            assert pods * gpus <= max(rack_gpus.values())
        kinds[req] += 1
    assert set(kinds) == {None, *levels[:3]}, kinds   # preferred-only and each required level occur


SHOWCASE = ["--nodes", "48", "--pending", "120", "--running", "300", "--seed", "6", "--contention",
            "--utilization", "0.9", "--fractional-share", "0.7"]     # as examples/README.md documents


@pytest.mark.parametrize("options", [[], ["--contention"], ["--topology-share", "0"],
                                     ["--contention", "--utilization", "0.9"]])
def test_fractional_share_zero_is_the_plain_cluster(tmp_path: Path, options: list[str]) -> None:
    """--fractional-share 0 writes byte for byte the document written without the option."""
    base = ["--nodes", "48", "--pending", "120", "--running", "300", "--seed", "6", *options]
    gen.main([*base, "-o", str(tmp_path / "plain.json")])
    gen.main([*base, "--fractional-share", "0", "-o", str(tmp_path / "zero.json")])
    assert (tmp_path / "plain.json").read_bytes() == (tmp_path / "zero.json").read_bytes()


def test_fractional_share_changes_only_gpu_requests_and_groups() -> None:
    """Sharing rewrites how some 1-GPU pods ask for their GPU and adds reservation pods: every
    other object of the seed stays the same (its own random stream)."""
    plain = gen.generate_cluster(48, 120, 300, seed=6, contention=True, utilization=0.9)
    shared = gen.generate_cluster(48, 120, 300, seed=6, contention=True, utilization=0.9, fractional_share=0.7)
    assert {k: v for k, v in raw(shared).items() if k != "pods"} == {k: v for k, v in raw(plain).items() if k != "pods"}
    pods = [p for p in raw(shared)["pods"] if p["metadata"]["namespace"] != "kai-resource-reservation"]
    assert [p["metadata"]["uid"] for p in pods] == [p["metadata"]["uid"] for p in raw(plain)["pods"]]
    changed = [(a, b) for a, b in zip(raw(plain)["pods"], pods) if a != b]
    assert changed
    for before, after in changed:
        assert before["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"
        assert {"gpu-fraction", "gpu-memory"} & set(after["metadata"]["annotations"])
        assert before["spec"].get("nodeName") == after["spec"].get("nodeName")


def shared_gpu_facts(doc: dict[str, Any]) -> tuple[list[dict], list[dict], dict[str, list[dict]]]:
    """(pending fractional pods, reservation pods, running pods by GPU group)."""
    pods = raw(doc)["pods"]
    pending = [p for p in pods if p["status"]["phase"] == "Pending"
               and {"gpu-fraction", "gpu-memory"} & set(p["metadata"]["annotations"])]
    reservations = [p for p in pods if p["metadata"]["namespace"] == "kai-resource-reservation"]
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for p in pods:
        group = p["metadata"].get("labels", {}).get("runai-gpu-group")
        if group and p not in reservations:
            groups[group].append(p)
    return pending, reservations, groups


def test_fractional_share_shares_devices_consistently() -> None:
    from kai_cp.loader import load_snapshot_dict
    from kai_cp.state import build_cluster_state

    doc = gen.generate_cluster(48, 120, 300, seed=6, contention=True, utilization=0.9, fractional_share=0.7)
    pending, reservations, groups = shared_gpu_facts(doc)
    assert {p["metadata"]["annotations"].get("gpu-fraction", "memory") for p in pending} >= {"0.25", "0.5", "memory"}
    assert len(reservations) >= 3 and any(len(members) == 2 for members in groups.values())
    # One running reservation pod per shared device, on the node of the device's pods, holding one GPU.
    by_group = {r["metadata"]["labels"]["runai-gpu-group"]: r for r in reservations}
    assert len(by_group) == len(reservations) and set(by_group) == set(groups)
    for group, members in groups.items():
        r = by_group[group]
        assert r["status"]["phase"] == "Running" and r["metadata"]["labels"]["app"] == "kai-resource-reservation"
        assert r["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}
        assert {m["spec"]["nodeName"] for m in members} == {r["spec"]["nodeName"]}
        assert sum(float(m["metadata"]["annotations"]["gpu-fraction"]) for m in members) <= 1
    for p in raw(doc)["pods"]:
        assert not ({"gpu-fraction", "gpu-memory"} & set(p["metadata"]["annotations"] if "annotations" in p["metadata"] else {})
                    and "nvidia.com/gpu" in p["spec"]["containers"][0]["resources"].get("requests", {}))
    memory = {int(n["metadata"]["labels"]["nvidia.com/gpu.memory"]) for n in raw(doc)["nodes"]}
    for p in pending:
        mib = p["metadata"]["annotations"].get("gpu-memory")
        assert mib is None or int(mib) <= min(memory), "a gpu-memory request fits every device"
    state = build_cluster_state(load_snapshot_dict(doc))
    assert not state.warnings, [w.to_json() for w in state.warnings][:3]
    gpu = state.table.col["gpu"]
    assert (state.table.idle[:, gpu] >= 0).all(), "a node's GPUs are over-used"
    shared = {(n.name, g) for n in state.nodes for g, grp in n.gpu_groups.items() if grp.used > 0}
    assert {(by_group[g]["spec"]["nodeName"], g) for g in groups} == shared
    for n in state.nodes:
        for grp in n.gpu_groups.values():
            assert grp.used <= n.gpu_memory


def test_showcase_example_is_reproducible(tmp_path: Path) -> None:
    out = tmp_path / "showcase.zip"
    gen.main([*SHOWCASE, "-o", str(out)])
    with zipfile.ZipFile(out) as fresh, zipfile.ZipFile(ROOT / "examples" / "showcase-cluster.zip") as shipped:
        assert json.loads(fresh.read("snapshot.json")) == json.loads(shipped.read("snapshot.json"))


def test_fragmented_example_is_reproducible(tmp_path: Path) -> None:
    out = tmp_path / "fragmented.zip"
    gen.main(["--nodes", "48", "--pending", "400", "--seed", "1", "--fragmentation", "0.9", "--utilization", "0.55",
              "--pending-gpu-ratio", "1.1", "-o", str(out)])
    with zipfile.ZipFile(out) as fresh, zipfile.ZipFile(ROOT / "examples" / "fragmented-cluster.zip") as shipped:
        assert json.loads(fresh.read("snapshot.json")) == json.loads(shipped.read("snapshot.json"))
