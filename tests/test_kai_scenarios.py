"""KAI-Scheduler's own allocation test scenarios, run through `kai-cp simulate`.

Why: KAI users rely on KAI's behaviour; these scenarios are KAI's tests of its allocate action
(gangs, sub-groups, elastic jobs, quotas, limits, priorities, predicates) rendered as data
(tests/fixtures/kai-scenarios/, the `engine` set of the shared scenario suite). Each is turned
into a snapshot, simulated in-process for the scenario's number of cycles (harness.cycles), and
judged by check.py exactly as ../shared/kai-scenarios/run_all.py does (default options:
mock limits checked, GPU-group rule as a warning, unit statuses mapped).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kai_cp.cli import main

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "kai-scenarios"
TOOLS = HERE / "kai_scenarios_tools"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


build_snapshot = _load("kai_scenarios_build_snapshot", TOOLS / "build_snapshot.py")
check = _load("kai_scenarios_check", TOOLS / "check.py")

SCENARIOS = sorted(p for p in FIXTURES.glob("*.json") if not p.name.startswith("_"))
TOPOLOGY = sorted((FIXTURES / "topology").glob("*.json"))
# Where kai-cp decides differently from KAI on purpose, and the test of its own that shows why.
DIFFERS = {
    "allocate.allocateTopology_test__016": "tests/test_topology.py::test_subgroups_keep_their_preferred_rack_where_"
                                           "kai_splits_them (each sub-group in its preferred rack; KAI splits them)",
}


def test_fixture_set_is_complete() -> None:
    assert len(SCENARIOS) == 29


def _run(path: Path, tmp_path: Path):
    scen = json.loads(path.read_text())
    snap, _notes = build_snapshot.build(scen)
    snap_path = tmp_path / "snapshot.json"
    res_path = tmp_path / "result.json"
    snap_path.write_text(json.dumps(snap))
    cycles = scen["harness"]["cycles"]
    rc = main(["simulate", str(snap_path), "--cycles", str(cycles), "--output", str(res_path)])
    assert rc == 0
    result = json.loads(res_path.read_text())
    assert isinstance(result, dict)
    return scen, check.check(scen, result, stability=False, strict_gpu_groups=False, mock_check=True, raw_unit=False)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_kai_scenario(path: Path, tmp_path: Path) -> None:
    scen, verdict = _run(path, tmp_path)
    assert not scen.get("unsupported"), "the engine set has no unsupported scenarios"
    assert verdict.ok, verdict.render(verbose=True)


@pytest.mark.parametrize("path", TOPOLOGY, ids=[p.stem for p in TOPOLOGY])
def test_kai_topology_scenario(path: Path, tmp_path: Path) -> None:
    """KAI's topology and pod-affinity allocation scenarios (the `topology` set)."""
    _, verdict = _run(path, tmp_path)
    if path.stem in DIFFERS:
        text = verdict.render(verbose=True)
        assert not verdict.ok and "expected node" in text and "status" not in text.split("expected node")[0], text
    else:
        assert verdict.ok, verdict.render(verbose=True)


def test_topology_fixture_set_is_complete() -> None:
    assert len(TOPOLOGY) == 15


def test_judge_rejects_a_result_that_schedules_nothing() -> None:
    """check.py must be able to fail: a scenario expecting a running job is not met by a result
    that leaves every pod pending."""
    path = FIXTURES / "integration_tests.allocate.allocate_test__015.json"
    scen = json.loads(path.read_text())
    snap, _ = build_snapshot.build(scen)
    pods = [{"namespace": p["metadata"]["namespace"], "name": p["metadata"]["name"],
             "podGroup": p["metadata"]["annotations"].get("pod-group-name"), "status": "Pending", "node": None,
             "gpuGroups": []} for p in snap["rawObjects"]["pods"]]
    verdict = check.check(scen, {"pods": pods, "cycles": []})
    assert not verdict.ok
