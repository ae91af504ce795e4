#!/usr/bin/env python3
"""The CP-SAT model's build, step by step, without the cycle's deadline.

Why: at scale a 1 s cycle falls back before its build ends (bench/bench_scale.py shows only that
it fell back), so the build's own cost, and which step of it grew, is measured here: KAI's
actions as the cycle runs them (bounded eviction search), then `build_model` with the 1 s
limit's pair budget and no deadline. Each repeat is a fresh Python process (the state's caches,
the fragmentation index among them, are built once per cycle). A measurement tool, not a test.

    python bench/bench_build.py SNAPSHOT [SNAPSHOT ...] [--repeats 3] [--time-limit 1.0] [--top 12] [--lean]

Prints per snapshot the medians of KAI's actions, the whole build and its steps (the victim pool,
the candidate selection and in it the fragmentation rows, each concern, the hint), largest first,
and the model's size. `--lean`: the lean model the cycle builds where the full one cannot be
built in time (kai_cp/model/scope.py), with allocate's decisions as KAI's actions (its hint).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import step_timer   # bench/, beside this script


def _child(path: str, time_limit: float, lean: bool) -> None:
    from kai_cp.actions.pipeline import run_greedy
    from kai_cp.cli import _load, _state
    from kai_cp.cycle import pair_budget
    from kai_cp.gcpause import gc_paused
    import kai_cp.model.build as build
    import kai_cp.model.candidates as candidates

    steps: dict[str, float] = {}

    def timed(owner, name: str, label: str) -> None:
        setattr(owner, name, step_timer.timed(steps, label, getattr(owner, name)))

    for name in ("build_classes", "compact", "build_pool", "select_pairs", "improve_hint", "walk_hint", "_hint"):
        timed(build, name, name)
    timed(candidates, "class_rows", "select_pairs: class_rows")
    for concern in build.CONSTRAINTS + tuple(c for level in build.OBJECTIVE_LEVELS for c in level):
        timed(concern, "contribute", type(concern).__name__)
    state = _state(_load(path, views=True))
    with gc_paused():
        t = time.perf_counter()
        # the lean model is built on allocate's decisions (kai_cp/cycle.py)
        greedy = run_greedy(state, time.time(), bounded=True, evictions=not lean)
        t_greedy = time.perf_counter() - t
        t = time.perf_counter()
        ctx = build.build_model(state, greedy, pair_budget=pair_budget(state, greedy, time_limit),
                                evictions=not lean, lean=lean)
        t_build = time.perf_counter() - t
    proto = ctx.model.proto
    print(json.dumps({"greedy": t_greedy, "build": t_build, "steps": steps, "pairs": len(ctx.pair_ub),
                      "variables": len(proto.variables), "constraints": len(proto.constraints)}))
    sys.stdout.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("snapshots", nargs="+")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=1.0, help="the cycle limit whose pair budget is used")
    ap.add_argument("--top", type=int, default=12, help="steps shown, largest first")
    ap.add_argument("--lean", action="store_true",
                    help="the lean model (kai_cp/model/scope.py) on allocate's decisions, instead of the full one")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.snapshots[0], args.time_limit, args.lean)
        return 0
    for path in args.snapshots:
        runs = []
        for _ in range(args.repeats):
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", path,
                                   "--time-limit", str(args.time_limit)] + ["--lean"] * args.lean,
                                  capture_output=True, text=True, check=True)
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        med = {k: statistics.median(r[k] for r in runs) for k in ("greedy", "build")}
        last = runs[-1]
        print(f"{path}: KAI's actions {med['greedy']:.3f} s, build {med['build']:.3f} s "
              f"(runs {', '.join('%.3f' % r['build'] for r in runs)}); {last['pairs']} pairs, "
              f"{last['variables']} variables, {last['constraints']} constraints")
        names = sorted(last["steps"], key=lambda k: -statistics.median(r["steps"].get(k, 0.0) for r in runs))
        for name in names[:args.top]:
            print(f"  {name:28s} {1000 * statistics.median(r['steps'].get(name, 0.0) for r in runs):8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
