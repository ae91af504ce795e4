#!/usr/bin/env python3
"""An upper bound on the FGD benchmark's figure (bench/bench_fgd.py): the GPU allocation ratio no
engine can exceed at 100 % arrived demand, per trace and seed.

Why: the issue asks for 96.5 % on the default trace, 1.3 points above FGD; this says how much
room the trace leaves at all. The bound relaxes everything but the shared GPUs' packing: nodes,
CPU, memory, GPU models and the arrival order are ignored, every whole-GPU pod is assumed placed.
What remains is bin packing of the arrived fractional pods into GPUs of 1,000 milli-GPU:

    allocated = min(whole GPUs arrived, capacity - GPUs holding fractions) + fractions placed
              = capacity - max(fractions dropped, free milli-GPU on the GPUs holding fractions)

so the ratio is at most 1 - min over which fractions are placed and how of max(dropped, wasted),
solved exactly per seed with CP-SAT on an arc-flow model (one integer flow per (fill level,
fraction size): a GPU is a path from 0 to 1,000 milli-GPU).

That bound may drop any fraction, and dropping the 810-milli pods (each strands 190 milli-GPU
that only the trace's rare small pods can use) is most of what it gains. A scheduler refuses no
pod that fits while the cluster has room, so `--placed-before P` adds that premise: the
fractions that arrive before P % of the capacity has arrived are all placed (kai-cp's first
failed fractions come at 87 % on gpushare100, 96 % on default, seed 42), the later ones may be
dropped. Everything else stays relaxed, so no scheduler that places those pods can exceed it.

    python bench/bench_fgd_bound.py [--traces default ...] [--seeds 42 ... 51] [--time-limit 60]
                                    [--placed-before 96]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

from ortools.sat.python import cp_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fgd  # noqa: E402  (the benchmark's own trace reading and sampling)

FULL = 1000


def arrived_fractions(pods: list, capacity: int, seed: int, placed_before: float = 0.0) -> tuple[Counter, Counter]:
    """Fractional pods (milli-GPU -> count) among those arrived when demand reaches capacity:
    those arrived before `placed_before` % of the capacity, and the others."""
    total, early, late = 0, Counter(), Counter()
    for p in bench_fgd.sample(pods, capacity, seed):
        if total >= capacity * FULL:
            break
        if p.gpus == 1 and p.milli < FULL:
            (early if total * 100 < placed_before * capacity * FULL else late)[p.milli] += 1
        total += p.gpu_demand
    return early, late


def least_loss(n: Counter, time_limit: float, kept: Counter | None = None,
               gpus_at_most: int | None = None) -> tuple[int | None, bool]:
    """min over packings into at most `gpus_at_most` GPUs of max(dropped, wasted) milli-GPU,
    where the `kept` fractions (also in n) may not be dropped; True when proven optimal (else the
    solver's lower bound, still a valid bound). None when the kept fractions fit no packing."""
    sizes = sorted(n)
    reach = {0}
    for i in range(FULL):
        if i in reach:
            reach.update(i + s for s in sizes if i + s <= FULL)
    m = cp_model.CpModel()
    flow = {(i, s): m.new_int_var(0, n[s], "") for i in sorted(reach) for s in sizes if i + s <= FULL}
    into: dict[int, list] = {}
    for (i, s), f in flow.items():
        into.setdefault(i + s, []).append(f)
    for i in sorted(reach):
        if 0 < i < FULL:     # a GPU may end at any fill level: what enters i leaves it or stops there
            m.add(sum(into.get(i, [])) >= sum(flow[i, s] for s in sizes if (i, s) in flow))
    gpus = sum(flow[0, s] for s in sizes if (0, s) in flow)
    if gpus_at_most is not None:
        m.add(gpus <= gpus_at_most)
    kept = kept or Counter()
    dropped = {s: m.new_int_var(0, n[s] - kept[s], "") for s in sizes}
    for s in sizes:
        m.add(sum(f for (i, t), f in flow.items() if t == s) == n[s] - dropped[s])
    lost = sum(s * dropped[s] for s in sizes)
    placed = sum(s * n[s] for s in sizes) - lost
    z = m.new_int_var(0, 10 ** 9, "")
    m.add(z >= gpus * FULL - placed)
    m.add(z >= lost)
    m.minimize(z)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    status = solver.solve(m)
    if status == cp_model.INFEASIBLE:
        return None, True
    return int(solver.best_objective_bound), status == cp_model.OPTIMAL


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=bench_fgd.ROOT / ".." / "shared" / "data" / "fgd-openb")
    ap.add_argument("--traces", nargs="+", default=list(bench_fgd.TRACES))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(bench_fgd.SEEDS))
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--placed-before", type=float, default=0.0, metavar="P",
                    help="fractions that arrive before P %% of the capacity are all placed (default 0: any may drop)")
    a = ap.parse_args()
    nodes = bench_fgd.read_nodes(a.data)
    capacity = sum(int(r["gpu"]) for r in nodes)
    print(f"upper bound on the GPU allocation ratio at 100 % arrived ({capacity} GPUs; nodes, CPU, "
          f"memory, GPU models and arrival order relaxed"
          + (f"; fractions arrived before {a.placed_before:g} % all placed)" if a.placed_before else ")"))
    print(f"{'trace':<12} {'mean %':>7} {'min':>6} {'max':>6}  per seed")
    for trace in a.traces:
        pods = bench_fgd.read_pods(a.data, trace)
        ratios = []
        for seed in a.seeds:
            early, late = arrived_fractions(pods, capacity, seed, a.placed_before)
            loss, exact = least_loss(early + late, a.time_limit, kept=early, gpus_at_most=capacity)
            if loss is None:
                print(f"  {trace} seed {seed}: the fractions arrived before {a.placed_before:g} % do not fit "
                      f"{capacity} GPUs (no scheduler places them all)")
                continue
            if not exact:
                print(f"  {trace} seed {seed}: not proven optimal in {a.time_limit:g} s (the solver's bound is used)")
            ratios.append(100.0 * (capacity * FULL - loss) / (capacity * FULL))
        if not ratios:
            continue
        print(f"{trace:<12} {statistics.mean(ratios):7.2f} {min(ratios):6.2f} {max(ratios):6.2f}  "
              + " ".join(f"{r:.2f}" for r in ratios), flush=True)


if __name__ == "__main__":
    main()
