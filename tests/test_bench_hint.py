"""bench/bench_hint.py reports what greedy's own hint breaks in the model, per generated cluster.

Why: its counts (how many contended clusters' KAI decisions are a solution of the model, and
which concern's rows break where they are not) guide the work on the eviction model; a tool that
checked another model than the cycle's, or put a broken row under the wrong concern, would point
at the wrong rule."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

from kai_cp.actions.pipeline import run_greedy
from kai_cp.cycle import pair_budget
from kai_cp.loader import load_snapshot_dict
from kai_cp.model import build
from kai_cp.model.hint_check import broken_by_hint
from kai_cp.state import build_cluster_state

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("bench_hint", ROOT / "bench" / "bench_hint.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_tool_counts_what_the_cycles_model_counts_and_restores_the_build() -> None:
    tool = _tool()
    improve, walk = build.improve_hint, build.walk_hint
    solved, moved = tool.check(100, 500, 1, 1.0), tool.check(100, 500, 6, 1.0)
    assert (build.improve_hint, build.walk_hint) == (improve, walk)          # the build is as it was
    assert not any("contribute" in vars(c) for c in build.CONSTRAINTS)    # the concerns' own methods again
    assert solved["evictions"] > 0 and not solved["broken"]
    # seed 6: KAI moves 34 victims, which the model has no variables for: the capacity rows of
    # the nodes its moves made room on break (its classes keep their pairs there: no gang row)
    assert moved["moved"] > 0 and moved["broken"] and "Gang" not in moved["broken"]
    state = build_cluster_state(load_snapshot_dict(tool.generate.generate_cluster(100, 500, seed=6, fragmentation=0.6)))
    greedy = run_greedy(state, time.time(), bounded=True)
    build.improve_hint, build.walk_hint = (lambda ctx: 0), (lambda ctx: False)
    try:
        direct = broken_by_hint(build.build_model(state, greedy, pair_budget=pair_budget(state, greedy, 1.0)).model.proto)
    finally:
        build.improve_hint, build.walk_hint = improve, walk
    assert len(direct) == sum(moved["broken"].values())
