"""bench/bench_build.py measures the model the cycle builds: the same snapshot and pair budget
give it the model `build_model` gives, and it names the steps the build spends its time in.

Why: its figures (the build's cost and its largest steps) guide the scale work (issue 9); a tool
that timed another model than the cycle's, or lost a step, would point at the wrong place."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from kai_cp.actions.pipeline import run_greedy
from kai_cp.cli import _load, _state
from kai_cp.cycle import pair_budget
from kai_cp.model.build import build_model

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "examples" / "showcase-cluster.zip"


def test_bench_build_times_the_model_the_cycle_builds() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_build.py"), str(SNAPSHOT), "--repeats", "1",
                          "--top", "40"], capture_output=True, text=True, check=True).stdout
    head = re.search(r"KAI's actions ([\d.]+) s, build ([\d.]+) s .*; (\d+) pairs, (\d+) variables, (\d+) constraints",
                     out)
    assert head is not None, out
    state = _state(_load(str(SNAPSHOT), views=True))
    greedy = run_greedy(state, time.time(), bounded=True)
    ctx = build_model(state, greedy, pair_budget=pair_budget(state, greedy, 1.0))
    assert [int(x) for x in head.groups()[2:]] == [len(ctx.pair_ub), len(ctx.model.proto.variables),
                                                  len(ctx.model.proto.constraints)]
    steps = dict(re.findall(r"^  (.+?)\s+([\d.]+) ms$", out, re.M))
    for name in ("build_pool", "select_pairs", "select_pairs: class_rows", "Evictions", "NodeCapacity", "KaiOrder"):
        assert name in steps, (name, out)
    assert float(steps["select_pairs: class_rows"]) <= float(steps["select_pairs"])
    assert sum(float(steps[k]) for k in steps if k != "select_pairs: class_rows") <= 1000 * float(head.group(2)) + 1


def test_bench_build_lean_times_the_lean_model_the_cycle_would_build() -> None:
    """`--lean`: the lean model (kai_cp/model/scope.py) on allocate's decisions, as the cycle
    builds it where the full one cannot be built in time: no victim pool, no fragmentation rows."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_build.py"), str(SNAPSHOT), "--repeats", "1",
                          "--top", "40", "--lean"], capture_output=True, text=True, check=True).stdout
    head = re.search(r"; (\d+) pairs, (\d+) variables, (\d+) constraints", out)
    assert head is not None, out
    state = _state(_load(str(SNAPSHOT), views=True))
    greedy = run_greedy(state, time.time(), evictions=False)
    ctx = build_model(state, greedy, pair_budget=pair_budget(state, greedy, 1.0), evictions=False, lean=True)
    assert [int(x) for x in head.groups()] == [len(ctx.pair_ub), len(ctx.model.proto.variables),
                                              len(ctx.model.proto.constraints)]
    steps = dict(re.findall(r"^  (.+?)\s+([\d.]+) ms$", out, re.M))
    assert "select_pairs" in steps and "build_pool" not in steps and "select_pairs: class_rows" not in steps
    assert "Fragmentation" not in steps
