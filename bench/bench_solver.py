#!/usr/bin/env python3
"""Which CP-SAT settings solve the cycle's own models best in the time a cycle leaves?

Why: the solver settings in kai_cp/model/solve.py (one worker, no presolve) were chosen by
this measurement; rerun it when the model or OR-Tools changes. Per seed it builds the model
the 1 s cycle would build (bench_fragmentation.py's fragmented, GPU-bound cluster), then
solves that same model once per parameter set under the same wall budget and prints how many
were proven optimal, the objective reached relative to the greedy hint, and jobs started.

    python bench/bench_solver.py [--sizes 200 1000] [--seeds 13] [--budget 0.5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_fragmentation as bf  # noqa: E402  (bench/ is a folder of scripts)

from ortools.sat.python import cp_model  # noqa: E402

from kai_cp.cycle import pair_budget  # noqa: E402
from kai_cp.actions.allocate import run_allocate  # noqa: E402
from kai_cp.model.build import build_model  # noqa: E402

COMMON: dict[str, Any] = dict(random_seed=0, cp_model_probing_level=0, symmetry_level=0)
LIGHT_PRESOLVE: dict[str, Any] = dict(max_presolve_iterations=1, merge_at_most_one_work_limit=0)
SETTINGS: dict[str, dict[str, Any]] = {
    "1 worker, no presolve, full LP (kai-cp)": dict(num_workers=1, cp_model_presolve=False, linearization_level=2),
    "1 worker, no presolve, default LP": dict(num_workers=1, cp_model_presolve=False),
    "1 worker, light presolve": dict(num_workers=1, **LIGHT_PRESOLVE),
    "2 interleaved workers, light presolve": dict(num_workers=2, interleave_search=True,
                                                  interleave_batch_size=2, **LIGHT_PRESOLVE),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--seeds", type=int, default=13)
    ap.add_argument("--budget", type=float, default=0.5, help="wall seconds per solve")
    args = ap.parse_args(argv)
    scenario_args = bf.build_parser().parse_args([])    # the fragmentation scenario's defaults
    for nodes in args.sizes:
        models = []
        for seed in range(args.seeds):
            doc, _ = bf.scenario(nodes, seed, scenario_args)
            state = bf.fresh_state(doc)
            greedy = run_allocate(state)
            ctx = build_model(state, greedy, pair_budget=pair_budget(state, greedy, 1.0))
            if ctx.x:
                models.append(ctx)
        print(f"{nodes} nodes, {len(models)} models, {args.budget}s per solve")
        for name, params in SETTINGS.items():
            optimal = jobs = 0
            ratio = walls = 0.0
            for ctx in models:
                solver = cp_model.CpSolver()
                p = solver.parameters
                for k, v in {**COMMON, **params}.items():
                    setattr(p, k, v)
                p.max_time_in_seconds = args.budget
                t0 = time.perf_counter()
                status = solver.solve(ctx.model)
                walls += time.perf_counter() - t0
                optimal += status == cp_model.OPTIMAL
                if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                    ratio += solver.objective_value / max(1, ctx.hinted_objective())
                    jobs += sum(solver.value(v) for v in ctx.starts.values())
            print(f"  {name:<40} proven optimal {optimal}/{len(models)}, objective / greedy's summed "
                  f"{ratio:.1f}, jobs started {jobs}, mean wall {walls / max(1, len(models)):.2f}s")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
