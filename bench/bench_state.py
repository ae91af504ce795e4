#!/usr/bin/env python3
"""State time per cycle over many cycles, as `kai-cp simulate` runs them: the state built from
scratch every cycle vs kept by a StateBuilder (kai_cp/state_cache.py) that re-derives only the
objects the last cycle's decisions replaced (issue 9: "the cluster state derived once and
updated, not rebuilt"; issue 10's in-cluster loop uses the same builder).

    python bench/bench_state.py [--nodes 1000] [--pending 5000] [--cycles 8] [--profile]
    python bench/bench_state.py --snapshot examples/cluster-snapshot.zip --cycles 4

Per mode, the loop of kai_cp.simulate: state -> `run_cycle` (greedy by default) -> decisions
applied (kai_cp.simulate.apply_decisions). Printed per mode: the first cycle's state time
(everything derived), the median and max over the later cycles, and how many objects' records
were reused / derived anew per cycle. The decisions of the two modes are compared cycle by
cycle (they must be equal). `--profile`: cProfile's top entries of one later-cycle build per
mode. `--mode fresh` runs on trees without kai_cp/state_cache.py (for a before/after on the
same machine). Clusters come from bench/generate.py (written once under --cache-dir). A
measurement tool, not a test; timings on a shared machine are noisy: compare ratios in one run.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from kai_cp.cycle import CycleSettings, run_cycle  # noqa: E402
from kai_cp.loader import load_snapshot  # noqa: E402
from kai_cp.simulate import apply_decisions  # noqa: E402
from kai_cp.state import build_cluster_state  # noqa: E402

TIMINGS = {"wallSeconds", "greedySeconds", "buildSeconds", "solveSeconds", "evictSeconds"}


class Fresh:
    """Every cycle's state from scratch (what simulate and `kai-cp run` did before the builder)."""

    def build(self, loaded):
        return build_cluster_state(loaded)

    def stats(self) -> dict:
        return {}


def _snapshot(cache: str, nodes: int, pending: int, seed: int) -> str:
    path = os.path.join(cache, f"state-{nodes}-{pending}-s{seed}.json")
    if not os.path.exists(path):
        sys.path.insert(0, HERE)
        from generate import generate_cluster, write_snapshot
        doc = generate_cluster(nodes, pending, 10 * nodes, seed=seed)
        write_snapshot(doc, path + ".tmp")
        os.replace(path + ".tmp", path)
    return path


def _strip(doc):
    if isinstance(doc, dict):
        return {k: _strip(v) for k, v in doc.items() if k not in TIMINGS}
    if isinstance(doc, list):
        return [_strip(v) for v in doc]
    return doc


def run(path: str, builder, cycles: int, settings: CycleSettings, profile: bool) -> dict:
    loaded = load_snapshot(path)
    times, counts, docs = [], [], []
    gone: set[str] = set()
    report = ""
    for i in range(cycles):
        prof = cProfile.Profile() if profile and i == cycles - 1 else None
        t = time.perf_counter()
        if prof:
            prof.enable()
        state = builder.build(loaded)
        if prof:
            prof.disable()
        times.append(time.perf_counter() - t)
        counts.append(builder.stats())
        result = run_cycle(state, settings)
        docs.append(_strip(json.loads(json.dumps(result.to_json()))))
        gone = apply_decisions(loaded, result, gone)
        if prof:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
            report = out.getvalue()
    return {"times": times, "counts": counts, "docs": docs, "profile": report}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snapshot", help="a snapshot file instead of a generated cluster")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pending", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cycles", type=int, default=8)
    ap.add_argument("--engine", default="greedy", choices=("greedy", "cp-sat"))
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--mode", choices=("both", "fresh", "builder"), default="both")
    ap.add_argument("--profile", action="store_true", help="cProfile top entries of the last cycle's build")
    ap.add_argument("--cache-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "kai-cp-bench-state"))
    args = ap.parse_args(argv)
    if args.snapshot:
        path = args.snapshot
    else:
        os.makedirs(args.cache_dir, exist_ok=True)
        path = _snapshot(args.cache_dir, args.nodes, args.pending, args.seed)
    settings = CycleSettings(engine=args.engine, time_limit=args.time_limit, now=1748865600.0)
    modes = ("fresh", "builder") if args.mode == "both" else (args.mode,)
    print(f"{path}: {args.cycles} cycles, engine {args.engine}")
    results = {}
    for mode in modes:
        if mode == "fresh":
            builder = Fresh()
        else:
            from kai_cp.state_cache import StateBuilder
            builder = StateBuilder()
        r = results[mode] = run(path, builder, args.cycles, settings, args.profile)
        later = r["times"][1:] or r["times"]
        binds = sum(len(d["binds"]) for d in r["docs"])
        print(f"{mode:>8}: state first cycle {r['times'][0]:.3f} s; later cycles median {statistics.median(later):.3f} s, "
              f"max {max(later):.3f} s ({binds} binds in all)")
        print(f"{'':>8}  per cycle: " + ", ".join(f"{t:.3f}" for t in r["times"]))
        if r["counts"][-1]:
            print(f"{'':>8}  records reused/derived per cycle: "
                  + ", ".join(f"{c['reused']}/{c['derived']}" for c in r["counts"]))
        if r["profile"]:
            print(r["profile"])
    if len(results) == 2:
        same = results["fresh"]["docs"] == results["builder"]["docs"]
        print(f"decisions of the two modes equal in every cycle: {same}")
        a, b = (statistics.median(results[m]["times"][1:] or results[m]["times"]) for m in ("fresh", "builder"))
        print(f"later-cycle state time: {a:.3f} s -> {b:.3f} s ({a / max(b, 1e-9):.1f}x)")
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
