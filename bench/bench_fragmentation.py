#!/usr/bin/env python3
"""Fragmented, GPU-bound clusters: does one CP-SAT cycle place more GPUs than KAI's greedy?

Why: the acceptance point "on fragmented clusters cp-sat places at least as many GPUs as
greedy in every case and more in most" can only be measured where GPUs are what binds. The
default generator scenario is ~10x oversubscribed (greedy fills every free GPU), so this
script uses bench/generate.py's GPU-bound scenario instead: free GPUs scattered over many
nodes (fragmentation 0.9, utilisation 0.55: most nodes have 1-7 of 8 GPUs free), pending
gangs of 1-16 pods of 1/2/3/4/6/8 GPUs with 4 cores and 32 GiB per GPU (CPU and memory do
not bind), and pending GPU demand of 0.9-1.3x the free GPUs (drawn per seed).

    python bench/bench_fragmentation.py [--seeds 20] [--sizes 50 200 1000] [--time-limit 1.0]
                                        [--bound] [--json out.json]

Per size and seed: generate, load (``kai_cp.loader.load_snapshot_dict``), build the state
(``kai_cp.state.build_cluster_state``) and run ``kai_cp.cycle.run_cycle`` once per engine,
each on a freshly built state. GPUs placed = sum of ``p.task.request.gpus`` over
``result.session.placements``; gangs placed = jobs with a pod placed this cycle; the wall
time is ``time.perf_counter`` around ``run_cycle``.

Upper bounds on the GPUs an engine can place, each in two kinds: ``keep`` keeps every job
greedy started (the cycle's model must, so it bounds what kai-cp can reach) and
``free`` does not (pure packing under the same gang and queue rules):

* ``trivial`` (always): min(pending GPU demand of schedulable jobs, idle GPUs on nodes that
  pass the static predicates of at least one pending GPU pod);
* ``relaxed`` (always, ~10-50 ms): CP-SAT on a relaxation with one count variable per pod
  class, the cycle's gang and queue constraints, and node capacity aggregated by pod size
  (see ``relaxed_bound``); solved to optimality, it is a proven bound;
* ``exact`` (``--bound``): the cycle's constraints over *every* statically feasible node (no
  candidate pruning), maximising GPUs only, for ``--bound-time`` seconds; its best bound.
  Costs seconds per seed and is rarely proven from 200 nodes on, so it is off by default.

The per-seed bound reported is the tightest of those computed. A seed where greedy reaches
it cannot be improved by any engine: "more in most" is judged against the seeds with room.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate import generate_cluster  # noqa: E402  (bench/ is a folder of scripts)

from kai_cp.cycle import CycleSettings, run_cycle  # noqa: E402
from kai_cp.loader import load_snapshot_dict  # noqa: E402
from kai_cp.state import build_cluster_state  # noqa: E402

ENGINES = ("greedy", "cp-sat")
DEFAULT_SIZES = (50, 200, 1000)
FRAGMENTATION = 0.9
UTILIZATION = 0.55
RATIO_RANGE = (0.9, 1.3)


@dataclass
class EngineRun:
    gpus: int
    pods: int
    gangs: int
    wall: float
    status: str
    solver_status: Optional[str] = None
    variables: Optional[int] = None
    solve_seconds: Optional[float] = None


@dataclass
class SeedRun:
    nodes: int
    seed: int
    ratio: float
    free_gpus: int
    pending_gpus: int
    pending_pods: int
    pending_jobs: int
    trivial_bound: int
    engines: dict[str, EngineRun] = field(default_factory=dict)
    bounds: dict[str, dict[str, Any]] = field(default_factory=dict)


def seed_ratio(seed: int, lo: float, hi: float) -> float:
    """Pending demand / free GPUs for one seed, fixed by the seed alone."""
    return random.Random(f"ratio/{seed}").uniform(lo, hi)


def scenario(nodes: int, seed: int, args: argparse.Namespace) -> tuple[dict[str, Any], float]:
    """The seed's snapshot; pending pods are sized by GPU demand (64 per node only caps them)."""
    ratio = seed_ratio(seed, *args.ratio)
    doc = generate_cluster(nodes, 64 * nodes, None, seed=seed, fragmentation=args.fragmentation,
                           utilization=args.utilization, pending_gpu_ratio=ratio,
                           cpu_per_gpu=args.cpu_per_gpu, mem_per_gpu=args.mem_per_gpu,
                           topology_share=args.topology_share)
    if args.queue_limits == "none":
        for q in doc["rawObjects"]["queues"]:
            for r in q["spec"].get("resources", {}).values():
                r["limit"] = -1
    return doc, ratio


def fresh_state(doc: dict[str, Any]):
    return build_cluster_state(load_snapshot_dict(doc))


def usable_nodes(state, predicate_keys) -> np.ndarray:
    """Nodes that pass the static predicates of at least one of these keys."""
    usable = np.zeros(len(state.nodes), dtype=bool)
    for key in predicate_keys:
        usable |= state.predicates.mask(key)
    return usable


def cluster_facts(state) -> tuple[int, int, int, int, int]:
    """(idle GPUs, pending GPUs, pending pods, pending jobs, trivial GPU bound)."""
    jobs = state.schedulable_jobs()
    pending = [t for j in jobs for ps in j.podsets.values() for t in ps.pending]
    gpu_tasks = [t for t in pending if t.request.gpus > 0]
    demand = int(sum(t.request.gpus for t in gpu_tasks))
    idle = state.table.idle[:, state.table.col["gpu"]]
    usable = usable_nodes(state, {t.predicate_key for t in gpu_tasks})
    return int(idle.sum()), demand, len(pending), len(jobs), int(min(demand, idle[usable].sum()))


def run_engine(doc: dict[str, Any], engine: str, time_limit: float, workers: Optional[int]) -> EngineRun:
    state = fresh_state(doc)
    settings = CycleSettings(engine=engine, time_limit=time_limit) if workers is None else \
        CycleSettings(engine=engine, time_limit=time_limit, workers=workers)
    t0 = time.perf_counter()
    result = run_cycle(state, settings)
    wall = time.perf_counter() - t0
    placements = list(result.session.placements.values())
    return EngineRun(gpus=int(sum(p.task.request.gpus for p in placements)), pods=len(placements),
                     gangs=len({p.task.job for p in placements}), wall=wall, status=result.status,
                     solver_status=result.stats.get("solverStatus"), variables=result.stats.get("variables"),
                     solve_seconds=result.stats.get("solveSeconds"))


# --------------------------------------------------------------------------------------------
# upper bounds on GPUs: the relaxation (always) and the unpruned GPU-max model (--bound)
# --------------------------------------------------------------------------------------------

@contextlib.contextmanager
def unpruned_candidates() -> Iterator[None]:
    """Make select_pairs keep every statically feasible node (read at call time)."""
    from kai_cp.model import candidates
    saved = candidates.CAPACITY_MULTIPLE
    candidates.CAPACITY_MULTIPLE = 1 << 40
    try:
        yield
    finally:
        candidates.CAPACITY_MULTIPLE = saved


class MaxGpus:
    """The only objective level of the bound model: GPUs placed; optionally greedy's jobs stay started."""

    name = "max-gpus"

    def __init__(self, keep_greedy_jobs: bool) -> None:
        self.keep = keep_greedy_jobs

    def contribute(self, ctx) -> None:
        from kai_cp.model.stability import KeepGreedyNodes
        KeepGreedyNodes().contribute(ctx)         # fills ctx.greedy_counts, so greedy is the hint
        ctx.terms.clear()
        if self.keep:
            for job in ctx.greedy.started_jobs:
                if job in ctx.starts:
                    ctx.model.add(ctx.starts[job] == 1)
        gpus = [ctx.classes[c].gpus for c in ctx.pair_class.tolist()]
        ctx.add_term(self.name, ctx.x, gpus)
        ctx.levels.added(sum(c.size * c.gpus for c in ctx.classes))


def relaxed_bound(state, greedy, keep: bool, seconds: float = 2.0) -> dict[str, Any]:
    """Upper bound on GPUs from a small relaxation: one count variable per pod class instead
    of per (class, node), with the cycle's own gang and queue (limit, non-preemptible quota)
    constraints, and node capacity relaxed to "pods of >= t GPUs fit in the GPUs of nodes with
    >= t free": sum(gpus * pods over classes of >= t GPUs) <= sum(free GPUs over usable nodes
    with >= t free) and sum(pods over those classes) <= sum(free // t over those nodes), for
    every pod size t, over all classes and again per predicate group (its own usable nodes).
    Every placement satisfies these, so the optimum bounds any engine; the model has a few
    hundred variables and solves in milliseconds."""
    from ortools.sat.python import cp_model
    from kai_cp.model.base import ModelContext
    from kai_cp.model.candidates import build_classes
    from kai_cp.model.gang import Gang
    from kai_cp.model.quota import QueueQuota
    t0 = time.perf_counter()
    classes = [c for c in build_classes(state, greedy) if c.gpus > 0]
    for i, c in enumerate(classes):
        c.index = i
    if not classes:
        return {"best": 0, "bound": 0, "status": "OPTIMAL", "seconds": 0.0}
    model = cp_model.CpModel()
    idx = np.arange(len(classes), dtype=np.int64)
    sizes = np.array([c.size for c in classes], dtype=np.int64)
    ctx = ModelContext(state=state, greedy=greedy, model=model, classes=classes, pair_class=idx,
                       pair_node=np.zeros(len(classes), dtype=np.int64), pair_ub=sizes,
                       free=state.table.free, idle=state.table.idle)
    ctx.x = [model.new_int_var(0, int(n), "") for n in sizes.tolist()]
    Gang().contribute(ctx)
    QueueQuota().contribute(ctx)
    if keep:
        for job in greedy.started_jobs:
            if job in ctx.starts:
                model.add(ctx.starts[job] == 1)
    free0 = state.table.free[:, state.table.col["gpu"]]
    gpus = [c.gpus for c in classes]
    groups: dict[Any, list[int]] = {}
    for i, c in enumerate(classes):
        groups.setdefault(c.tasks[0].predicate_key, []).append(i)
    usable = usable_nodes(state, groups)
    # Once over all classes on the nodes any of them may use, and once per predicate group on
    # the nodes that group may use: pods of a node-selector job only fit where it may run.
    scopes = [(list(range(len(classes))), usable)] + [(m, state.predicates.mask(k)) for k, m in groups.items()]
    for members_of_scope, mask in scopes:
        free = free0[mask]
        for t in sorted({gpus[i] for i in members_of_scope}):
            members = [i for i in members_of_scope if gpus[i] >= t]
            nodes = free[free >= t]
            model.add(cp_model.LinearExpr.weighted_sum([ctx.x[i] for i in members], [gpus[i] for i in members])
                      <= int(nodes.sum()))
            model.add(cp_model.LinearExpr.sum([ctx.x[i] for i in members]) <= int((nodes // t).sum()))
    model.maximize(cp_model.LinearExpr.weighted_sum(ctx.x, gpus))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = 2
    status = solver.solve(model)
    ok = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    return {"best": int(round(solver.objective_value)) if ok else None,
            "bound": int(np.floor(solver.best_objective_bound + 1e-6)) if ok else None,
            "status": solver.status_name(status), "seconds": round(time.perf_counter() - t0, 3)}


def gpu_bound(doc: dict[str, Any], keep: bool, seconds: float, workers: int) -> dict[str, Any]:
    from kai_cp.actions.allocate import run_allocate
    from kai_cp.model.build import CONSTRAINTS, build_model
    from kai_cp.model.solve import solve
    state = fresh_state(doc)
    t0 = time.perf_counter()
    greedy = run_allocate(state)
    with unpruned_candidates():
        ctx = build_model(state, greedy, pair_budget=None, constraints=CONSTRAINTS, levels=((MaxGpus(keep),),))
    if not ctx.x:
        return {"best": 0, "bound": 0, "status": "OPTIMAL", "pairs": 0, "seconds": time.perf_counter() - t0}
    out = solve(ctx, seconds, 0, workers, deterministic_limit=seconds)
    best = None if out.objective is None else int(round(out.objective))
    bound = None if out.bound is None else int(np.floor(out.bound + 1e-6))
    return {"best": best, "bound": bound, "status": out.status, "pairs": len(ctx.x),
            "seconds": round(time.perf_counter() - t0, 3)}


# --------------------------------------------------------------------------------------------
# driver and report
# --------------------------------------------------------------------------------------------

def run_seed(nodes: int, seed: int, args: argparse.Namespace) -> SeedRun:
    from kai_cp.actions.allocate import run_allocate
    doc, ratio = scenario(nodes, seed, args)
    state = fresh_state(doc)
    free, demand, pods, jobs, trivial = cluster_facts(state)
    run = SeedRun(nodes, seed, round(ratio, 4), free, demand, pods, jobs, trivial)
    greedy = run_allocate(state)
    for keep in (True, False):
        run.bounds[f"relaxed-{'keep' if keep else 'free'}"] = relaxed_bound(state, greedy, keep)
    for engine in ENGINES:
        run.engines[engine] = run_engine(doc, engine, args.time_limit, args.workers)
    if args.bound and nodes <= args.bound_max_nodes:
        for keep in (True, False):
            run.bounds[f"exact-{'keep' if keep else 'free'}"] = gpu_bound(doc, keep, args.bound_time, args.workers or 2)
    return run


def best_bound(run: SeedRun, kind: str) -> Optional[int]:
    """The tightest GPU upper bound of this kind ("keep" or "free") the seed has. A "free" bound
    also bounds "keep" (keeping greedy's jobs only adds constraints)."""
    kinds = ("keep", "free") if kind == "keep" else ("free",)
    vals = [b["bound"] for k, b in run.bounds.items() if k.endswith(kinds) and b.get("bound") is not None]
    return min(vals) if vals else None


def summarize(runs: list[SeedRun]) -> dict[str, Any]:
    g = [r.engines["greedy"] for r in runs]
    c = [r.engines["cp-sat"] for r in runs]
    diff = [b.gpus - a.gpus for a, b in zip(g, c)]
    out: dict[str, Any] = {
        "seeds": len(runs),
        "freeGpus": sum(r.free_gpus for r in runs), "pendingGpus": sum(r.pending_gpus for r in runs),
        "trivialBound": sum(r.trivial_bound for r in runs),
        "gpus": {"greedy": sum(x.gpus for x in g), "cp-sat": sum(x.gpus for x in c)},
        "gangs": {"greedy": sum(x.gangs for x in g), "cp-sat": sum(x.gangs for x in c)},
        "pods": {"greedy": sum(x.pods for x in g), "cp-sat": sum(x.pods for x in c)},
        "cpSatVsGreedy": {"more": sum(d > 0 for d in diff), "equal": sum(d == 0 for d in diff),
                          "fewer": sum(d < 0 for d in diff)},
        "moreGangs": sum(b.gangs > a.gangs for a, b in zip(g, c)),
        "fewerGangs": sum(b.gangs < a.gangs for a, b in zip(g, c)),
        "gpuGainPerSeed": {"median": statistics.median(diff), "max": max(diff), "min": min(diff)},
        "wall": {e: {"median": statistics.median(x.wall for x in xs), "max": max(x.wall for x in xs)}
                 for e, xs in (("greedy", g), ("cp-sat", c))},
        "cpSatStatus": dict(Counter(x.status for x in c)),
    }
    for kind in ("keep", "free"):
        bounds = [best_bound(r, kind) for r in runs]
        if any(b is None for b in bounds):
            continue
        room = [r for r, b in zip(runs, bounds) if r.engines["greedy"].gpus < b]
        out[f"{kind}Bound"] = {
            "gpus": sum(bounds),
            "greedyAtBound": sum(r.engines["greedy"].gpus >= b for r, b in zip(runs, bounds)),
            "cpSatAtBound": sum(r.engines["cp-sat"].gpus >= b for r, b in zip(runs, bounds)),
            "seedsWithRoom": len(room),
            "cpSatMoreWhereRoom": sum(r.engines["cp-sat"].gpus > r.engines["greedy"].gpus for r in room),
            "boundSecondsMax": max(b["seconds"] for r in runs for k, b in r.bounds.items() if k.endswith(kind))}
    return out


def print_size(nodes: int, runs: list[SeedRun], s: dict[str, Any], verbose: bool) -> None:
    if verbose:
        print(f"  {'seed':>4} {'ratio':>5} {'free':>6} {'demand':>6} {'triv':>6} {'greedy':>6} {'cp-sat':>6} "
              f"{'gangs g/c':>9} {'status':>8} {'wall g/c':>11}  bound keep/free")
        for r in runs:
            g, c = r.engines["greedy"], r.engines["cp-sat"]
            line = (f"  {r.seed:>4} {r.ratio:>5.2f} {r.free_gpus:>6} {r.pending_gpus:>6} {r.trivial_bound:>6} "
                    f"{g.gpus:>6} {c.gpus:>6} {g.gangs:>4}/{c.gangs:<4} {c.status:>8} {g.wall:>5.2f}/{c.wall:<5.2f}")
            line += f"  {best_bound(r, 'keep')}/{best_bound(r, 'free')}"
            print(line)
    v = s["cpSatVsGreedy"]
    print(f"{nodes:>5} nodes, {s['seeds']} seeds: GPUs placed greedy {s['gpus']['greedy']}, cp-sat {s['gpus']['cp-sat']} "
          f"(free {s['freeGpus']}, pending {s['pendingGpus']}, trivial bound {s['trivialBound']}); "
          f"gangs greedy {s['gangs']['greedy']}, cp-sat {s['gangs']['cp-sat']}")
    print(f"       cp-sat vs greedy per seed: more {v['more']}, equal {v['equal']}, fewer {v['fewer']}; "
          f"GPU gain median {s['gpuGainPerSeed']['median']}, max {s['gpuGainPerSeed']['max']}; "
          f"more gangs in {s['moreGangs']}, fewer in {s['fewerGangs']}")
    w = s["wall"]
    print(f"       cycle wall: greedy median {w['greedy']['median']:.3f}s max {w['greedy']['max']:.3f}s; "
          f"cp-sat median {w['cp-sat']['median']:.3f}s max {w['cp-sat']['max']:.3f}s; "
          f"cp-sat status {', '.join(f'{k} {n}' for k, n in sorted(s['cpSatStatus'].items()))}")
    for kind, what in (("keep", "greedy's jobs kept"), ("free", "pure packing")):
        b = s.get(f"{kind}Bound")
        if b:
            print(f"       GPU upper bound ({what}): {b['gpus']}; seeds at it: greedy {b['greedyAtBound']}, "
                  f"cp-sat {b['cpSatAtBound']}; seeds where greedy is below it: {b['seedsWithRoom']}, of which "
                  f"cp-sat placed more in {b['cpSatMoreWhereRoom']} (bounds took <= {b['boundSecondsMax']:.2f}s)")


def build_parser() -> argparse.ArgumentParser:
    """The scenario's settings; bench_solver.py reads its defaults from here too."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20, help="seeds per size (seed-offset .. +N-1)")
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=None, help="CP-SAT workers (default: the cycle's default)")
    ap.add_argument("--fragmentation", type=float, default=FRAGMENTATION)
    ap.add_argument("--utilization", type=float, default=UTILIZATION)
    ap.add_argument("--ratio", type=float, nargs=2, default=list(RATIO_RANGE), metavar=("LO", "HI"),
                    help="pending GPU demand / free GPUs, drawn uniformly per seed")
    ap.add_argument("--queue-limits", choices=("generated", "none"), default="generated",
                    help="'none' lifts every queue limit (quotas, and so the non-preemptible quota, stay), "
                         "so that what leaves jobs pending is packing rather than limits")
    ap.add_argument("--topology-share", type=float, default=0.0,
                    help="share of multi-pod gangs with a topologyConstraint (default 0: a pure packing "
                         "scenario, as the README figures; the clusters are otherwise the same)")
    ap.add_argument("--cpu-per-gpu", type=float, default=4.0, help="cores per GPU of pending pods")
    ap.add_argument("--mem-per-gpu", type=float, default=32.0, help="GiB per GPU of pending pods")
    ap.add_argument("--bound", action="store_true", help="also solve the unpruned GPU-max bound models")
    ap.add_argument("--bound-time", type=float, default=5.0, help="seconds per bound model")
    ap.add_argument("--bound-max-nodes", type=int, default=200, help="skip the bound models above this size")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per seed")
    ap.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    report: dict[str, Any] = {"settings": {k: v for k, v in vars(args).items() if k != "json"},
                              "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                              "sizes": {}}
    for nodes in args.sizes:
        runs = [run_seed(nodes, seed, args) for seed in range(args.seed_offset, args.seed_offset + args.seeds)]
        s = summarize(runs)
        print_size(nodes, runs, s, args.verbose)
        sys.stdout.flush()
        report["sizes"][str(nodes)] = {"summary": s, "runs": [asdict(r) for r in runs]}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
