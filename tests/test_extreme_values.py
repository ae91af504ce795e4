"""Numbers past any real cluster, in every kind of numeric field of a snapshot: `kai-cp solve`
ends with decisions (exit 0) or one clear message (exit 2), never an internal error.

Why: int64 node vectors, CP-SAT's int64 coefficients and Python floats each have a ceiling, and
values past them (9.2e15 cores, a -1e20 GPU quota, a 1e302 MB memory quota, a GPU count label of
1e20) each ended a cycle for every job in an internal error until they were bounded where they
are read (kai_cp/resources.py, kai_cp/queues.py, kai_cp/nodes.py, kai_cp/state.py, the model's
quota and eviction rows). The hypothesis fuzz of tests/test_cli.py finds such values only
by chance; this walks every kind of field of a generated cluster with departments, shared GPUs,
topology and contention, setting every field of that kind at once (pending and running pods,
departments and leaf queues alike).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kai_cp.cli import main
from test_bench_generator import gen
from test_cli import _paths

# Past float, past int64, past int64 once in millicores or MB -> bytes, an exabyte quantity.
EXTREMES = [1.7976931348623157e308, -1.7976931348623157e308, 2 ** 63, "-9223372036854775808",
            "99999999999999999999", "9223372036854776", "-1e18", "7Ei"]


def _numeric(v: object) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    if isinstance(v, str):
        try:
            float(v.rstrip("KMGTPEimnuk"))
            return True
        except ValueError:
            return False
    return False


def _at(doc: object, path: tuple) -> object:
    for k in path:
        doc = doc[k]        # type: ignore[index]
    return doc


DOC = gen.generate_cluster(6, 12, 14, seed=3, topology_share=0.5, fractional_share=0.5, contention=True)
KINDS: dict[tuple, list[tuple]] = {}
for _path in _paths(DOC):
    if _numeric(_at(DOC, _path)):
        KINDS.setdefault(tuple("*" if isinstance(k, int) else k for k in _path), []).append(_path)


def test_the_walk_covers_the_fields_the_scheduler_reads() -> None:
    """The generated cluster has the kinds of fields whose extremes broke cycles."""
    names = {".".join(map(str, k)) for k in KINDS}
    for field in ("rawObjects.pods.*.spec.containers.*.resources.requests.cpu",
                  "rawObjects.nodes.*.status.allocatable.cpu",
                  "rawObjects.nodes.*.metadata.labels.nvidia.com/gpu.count",
                  "rawObjects.queues.*.spec.resources.gpu.quota",
                  "rawObjects.queues.*.spec.resources.memory.quota",
                  "rawObjects.podGroups.*.spec.minMember"):
        assert field in names, field


@pytest.mark.parametrize("kind", sorted(KINDS), ids=lambda k: ".".join(map(str, k[1:])))
def test_extreme_numbers_in_each_kind_of_field_never_end_the_cycle(kind: tuple, tmp_path: Path, capsys) -> None:
    for value in EXTREMES:
        doc = json.loads(json.dumps(DOC))
        for path in KINDS[kind]:
            _at(doc, path[:-1])[path[-1]] = value     # type: ignore[index]
        f, out = tmp_path / "snap.json", tmp_path / "out.json"
        f.write_text(json.dumps(doc))
        rc = main(["solve", str(f), "-o", str(out)])
        err = capsys.readouterr().err
        assert rc in (0, 2) and "Traceback" not in err and "internal error" not in err, (value, err)
        if rc == 0:
            assert json.loads(out.read_text())["cycle"]["status"] in ("OPTIMAL", "FEASIBLE", "FALLBACK")
        out.unlink(missing_ok=True)


def _plugin_arguments(doc: dict, name: str, args: dict) -> None:
    plugins = doc["config"]["tiers"][0]["plugins"]
    entry = next((p for p in plugins if p["name"] == name), None)
    if entry is None:
        plugins.append(entry := {"name": name})
    entry["arguments"] = args


CONFIG_KNOBS = {
    "proportion.kValue": lambda doc, v: _plugin_arguments(doc, "proportion", {"kValue": str(v)}),
    "proportion.relcaimerSaturationMultiplier": lambda doc, v: _plugin_arguments(
        doc, "proportion", {"relcaimerSaturationMultiplier": str(v)}),
    "minruntime.defaults": lambda doc, v: _plugin_arguments(
        doc, "minruntime", {"defaultPreemptMinRuntime": f"{v}s", "defaultReclaimMinRuntime": str(v)}),
    "queueDepthPerAction": lambda doc, v: doc["config"].__setitem__("queueDepthPerAction", {"allocate": v, "reclaim": v}),
    "globalDefaultStalenessGracePeriod": lambda doc, v: doc["schedulerParams"].__setitem__(
        "globalDefaultStalenessGracePeriod", v),
    "maxNumberConsolidationPreemptees": lambda doc, v: doc["schedulerParams"].__setitem__(
        "maxNumberConsolidationPreemptees", v),
}


@pytest.mark.parametrize("knob", sorted(CONFIG_KNOBS))
def test_extreme_numbers_in_the_scheduler_configuration_never_end_the_cycle(knob: str, tmp_path: Path, capsys) -> None:
    """The same for the configuration's numbers (a reclaimer saturation multiplier of 1e20 put
    gate 3's coefficients past int64)."""
    for value in EXTREMES + ["1e999", "nan"]:
        doc = json.loads(json.dumps(DOC))
        CONFIG_KNOBS[knob](doc, value)
        f, out = tmp_path / "snap.json", tmp_path / "out.json"
        f.write_text(json.dumps(doc))
        rc = main(["solve", str(f), "-o", str(out)])
        err = capsys.readouterr().err
        assert rc in (0, 2) and "Traceback" not in err and "internal error" not in err, (value, err)


@pytest.mark.parametrize("annotation", ["gpu-fraction", "gpu-memory", "gpu-fraction-num-devices"])
@pytest.mark.parametrize("running", [False, True], ids=["pending", "running"])
def test_extreme_gpu_sharing_annotations_never_end_the_cycle(annotation: str, running: bool, tmp_path: Path,
                                                             capsys) -> None:
    """The same for the GPU-sharing annotations of every pending (or running) pod: a fraction of
    1e-300 or 0.9999999999999999999999 (exact, its denominator times a device's memory was past
    int64)."""
    for value in EXTREMES + ["1e-300", "0.9999999999999999999999", "1e999", "nan"]:
        doc = json.loads(json.dumps(DOC))
        for p in doc["rawObjects"]["pods"]:
            if (p["status"].get("phase") == "Running") == running:
                annotations = p["metadata"].setdefault("annotations", {})
                annotations[annotation] = str(value)
                if annotation == "gpu-fraction-num-devices":
                    annotations["gpu-fraction"] = "0.5"
        f, out = tmp_path / "snap.json", tmp_path / "out.json"
        f.write_text(json.dumps(doc))
        rc = main(["solve", str(f), "-o", str(out)])
        err = capsys.readouterr().err
        assert rc in (0, 2) and "Traceback" not in err and "internal error" not in err, (value, err)
