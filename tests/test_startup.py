"""Start-up and loading paths of issue 9: what each command imports, the msgspec parse against
the standard library's, the fast process exit of the `kai-cp` script, and shared pod requests.

Import checks run in fresh interpreters (this process has long imported everything)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_cp import loader
from kai_cp.arrays import distinct
from kai_cp.resources import cached_pod_request, pod_request
from models import Pod

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "cluster-snapshot.zip"


def _python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_help_imports_no_engine():
    loaded = _python(
        "import sys, contextlib, io\n"
        "from kai_cp.cli import parser\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    parser().parse_args(['--help'])\n"
        "print([m for m in ('kai_cp.state', 'pydantic', 'numpy', 'ortools', 'pandas', 'kubernetes') if m in sys.modules])")
    assert loaded == "[]"


def test_greedy_solve_imports_neither_ortools_nor_kubernetes(tmp_path):
    out = tmp_path / "out.json"
    loaded = _python(
        "import sys\n"
        "from kai_cp.cli import main\n"
        f"assert main(['solve', {str(EXAMPLE)!r}, '--engine', 'greedy', '-o', {str(out)!r}]) == 0\n"
        "print([m for m in ('ortools', 'pandas', 'kubernetes') if m in sys.modules])")
    assert loaded == "[]"
    assert json.loads(out.read_text())["cycle"]["engine"] == "greedy"


def test_load_engine_imports_what_each_engine_needs_and_no_more():
    """A long-running caller loads the engine at its own start (first cycle not late by the
    OR-Tools import); greedy needs none of it."""
    got = _python(
        "import sys\n"
        "from kai_cp.cycle import load_engine\n"
        "load_engine('greedy'); print('ortools' in sys.modules)\n"
        "load_engine('cp-sat'); print(all(m in sys.modules for m in ('ortools', 'kai_cp.model.build', "
        "'kai_cp.model.solve', 'kai_cp.model.decode')))")
    assert got.splitlines() == ["False", "True"]


def test_cp_model_works_without_pandas_and_real_pandas_stays_importable():
    got = _python(
        "import sys\n"
        "import kai_cp.model\n"
        "from ortools.sat.python import cp_model\n"
        "print('pandas' in sys.modules)\n"
        "m = cp_model.CpModel(); x = m.new_int_var(0, 5, 'x'); m.add(x <= 3); m.maximize(x)\n"
        "s = cp_model.CpSolver(); print(s.solve(m) == cp_model.OPTIMAL, s.value(x))\n"
        "import pandas\n"
        "print(hasattr(pandas, 'DataFrame'))")
    assert got.splitlines() == ["False", "True 3", "True"]


def test_script_exits_fast_with_complete_output(tmp_path):
    """The `kai-cp` entry point skips freeing the cluster: its output must still be whole,
    on a file and on a pipe, and equal to the in-process command's."""
    out = tmp_path / "out.json"
    script = [sys.executable, "-c", "from kai_cp.cli import console_main; console_main()"]
    run = subprocess.run(script + ["solve", str(EXAMPLE), "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    piped = subprocess.run(script + ["solve", str(EXAMPLE)], capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr
    a, b = json.loads(out.read_text()), json.loads(piped.stdout)
    for doc in (a, b):
        doc["cycle"] = {k: v for k, v in doc["cycle"].items() if not k.endswith("Seconds")}
    assert a == b and a["binds"]
    bad = subprocess.run(script + ["solve", str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "missing.json" in bad.stderr


def test_solve_script_searches_no_pydantic_plugins_and_models_still_validate():
    got = _python(
        "import sys, contextlib, io\n"
        "from kai_cp import cli\n"
        f"sys.argv = ['kai-cp', 'solve', {str(EXAMPLE)!r}]\n"
        "out = io.StringIO()\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(out):\n"
        "    cli._FAST_EXIT = False\n"
        "    from kai_cp.pydantic_plugins import skip_plugin_search\n"
        "    print(skip_plugin_search(), skip_plugin_search(), file=sys.stderr)\n"
        "    cli.main()\n"
        "import json\n"
        "from models import Pod\n"
        "print('importlib.metadata' in sys.modules, bool(json.loads(out.getvalue())['binds']))\n"
        "try:\n"
        "    Pod.model_validate({'metadata': {'name': 1}}, by_alias=True, by_name=False)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n")
    assert got.splitlines() == ["False True", "ValidationError"]


def test_a_user_setting_for_pydantic_plugins_is_kept():
    out = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom kai_cp.pydantic_plugins import skip_plugin_search\n"
                               "print(skip_plugin_search(), 'pydantic.plugin._loader' in sys.modules)"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "PYDANTIC_DISABLE_PLUGINS": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-5, 40), max_size=60), st.sampled_from([np.int64, np.int32, np.float64]))
def test_distinct_equals_numpy_unique(values, dtype):
    a = np.array(values, dtype=dtype)
    got = distinct(a)
    assert got.dtype == np.unique(a).dtype and np.array_equal(got, np.unique(a))
    assert np.array_equal(distinct(a.reshape(-1, 1)), np.unique(a.reshape(-1, 1)))


def test_msgspec_and_standard_library_parse_the_same(monkeypatch):
    data = EXAMPLE.read_bytes()
    fast = loader.load_snapshot_bytes(data, "x.zip")
    monkeypatch.setattr(loader, "_msgspec_decode", None)
    slow = loader.load_snapshot_bytes(data, "x.zip")
    assert fast.snapshot.to_json() == slow.snapshot.to_json()
    assert fast.warnings == slow.warnings


@pytest.mark.parametrize("text", [
    b'\xef\xbb\xbf{"rawObjects": {}}',                 # BOM: msgspec refuses, the standard library accepts
    b'{"rawObjects": {}, "discovery": {"a": "\\ud800"}}',  # lone surrogate, likewise
])
def test_what_msgspec_refuses_goes_through_the_standard_library(text):
    assert loader.load_snapshot_bytes(text, "x.json").snapshot is not None


def test_a_callers_document_is_left_whole():
    doc = {"rawObjects": {"pods": [{"metadata": {"name": f"p{i}", "namespace": "ns"}} for i in range(2500)]}}
    loaded = loader.load_snapshot_dict(doc)
    assert len(loaded.snapshot.raw_objects.pods) == 2500
    assert all(isinstance(p, dict) for p in doc["rawObjects"]["pods"])    # a caller's document is left alone


def _spec(requests: dict, init: dict | None = None, overhead: dict | None = None):
    doc = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}}
    if init is not None:
        doc["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": init}}]
    if overhead is not None:
        doc["spec"]["overhead"] = overhead
    return Pod.model_validate(doc, by_alias=True, by_name=False).spec


@pytest.mark.parametrize("requests,init,overhead,annotations", [
    ({"cpu": "1", "memory": "1Gi"}, None, None, {}),
    ({"cpu": "1", "memory": "1Gi"}, {"cpu": "3"}, None, {}),
    ({"cpu": "1", "memory": "1Gi"}, None, {"cpu": "250m"}, {}),
    ({"cpu": "1", "nvidia.com/gpu": "2"}, None, None, {}),
    ({"cpu": "1"}, None, None, {"gpu-fraction": "0.5"}),
    ({"cpu": "1"}, None, None, {"gpu-fraction": "0.25", "gpu-fraction-num-devices": "2"}),
    ({"cpu": "1"}, None, None, {"gpu-memory": "2000"}),
    ({"cpu": "1"}, None, None, {"gpu-fraction": "2"}),          # invalid: a problem, like pod_request
    ({"cpu": "1", "nvidia.com/mig-1g.5gb": "1"}, None, None, {}),
])
def test_cached_pod_request_equals_pod_request(requests, init, overhead, annotations):
    spec = _spec(requests, init, overhead)
    first = cached_pod_request(spec, annotations)
    assert first == pod_request(spec, annotations) and first.problems == pod_request(spec, annotations).problems
    again = cached_pod_request(_spec(requests, init, overhead), dict(annotations, other="x"))
    assert again is first                       # shared between pods asking the same
