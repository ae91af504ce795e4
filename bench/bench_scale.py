#!/usr/bin/env python3
"""Scale benchmark: one `kai-cp solve` cycle, step by step, at 1,000 / 4,000 / 10,000 nodes.

Why: issue 9's budgets (10,000 nodes: cycle <= 0.5 s greedy, <= 1 s CP-SAT and not FALLBACK,
load + state <= 5 s, the whole process <= 8 s, peak memory <= 2 GiB) hold only if every step
of the path stays small; this prints each step so a regression shows where it comes from.
A measurement tool, not a test.

    python bench/bench_scale.py [--sizes 1000 4000 10000] [--repeats 3] [--time-limit 1.0]
                                [--fractional-share 0.5] [--cache-dir DIR] [--engines cp-sat greedy]
                                [--json out.json]

Clusters come from bench/generate.py with its realistic mix (fragmented GPU nodes, a
department/project queue tree with quotas and limits, gangs of 1-64 pods, a third of the
multi-pod GPU gangs topology-constrained, and shared GPUs: with the default
``--fractional-share`` 0.5 half of the small pending 1-GPU jobs ask for a GPU fraction or GPU
memory and half of the nodes running single-pod 1-GPU jobs hold them on shared devices with
reservation pods; 0 gives the whole-GPU mix of the earlier tables): 1,000 nodes -> 5,000 pending
/ 10,000 running pods, 4,000 -> 5,000 / 40,000, 10,000 -> 5,000 / 100,000. They are written once as JSON files
(``--cache-dir``) and each (size, engine, repeat) runs in a fresh Python process, as
`kai-cp solve` does, with kai-cp's bytecode compiled beforehand (as any run after the first
finds it; `_compile_bytecode`): load (`kai_cp.cli._load`: `load_snapshot` with views, file read
included), state (`kai_cp.cli._state`: `build_cluster_state`, frozen), then `run_cycle` whose stats give greedy, build and solve; decode
is the rest of the cycle's wall time. `total` is the child's wall time from before the
imports to the end of the cycle (without writing the output); `rss` its peak resident set
(`ru_maxrss`, OR-Tools' memory included); `cpu` the child's CPU seconds (interpreter start
included), steadier than wall times on a shared machine. The table shows medians over the
repeats and the statuses of every repeat ("lean": the cycle built the lean model,
kai_cp/model/scope.py), each fallback's reason under its row; `evicted` the pods KAI's eviction
actions (or the model) evicted. The first line times a fixed Python loop and a fixed run of small
numpy operations (`machine_speed`), to read tables from different machines side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
#: nodes -> (pending pods, running pods)
SIZES: dict[int, tuple[int, int]] = {1000: (5000, 10_000), 4000: (5000, 40_000), 10000: (5000, 100_000)}
STEPS = ("load", "state", "greedy", "build", "solve", "decode", "cycle", "total", "cpu")


def _child(path: str, engine: str, time_limit: float) -> None:
    t0 = time.perf_counter()
    import resource

    from kai_cp.cli import _load, _state
    from kai_cp.cycle import CycleSettings, run_cycle

    t_imports = time.perf_counter() - t0
    t = time.perf_counter()
    loaded = _load(path, views=True)     # as `kai-cp solve`
    t_load = time.perf_counter() - t
    t = time.perf_counter()
    state = _state(loaded)     # as `kai-cp solve`
    t_state = time.perf_counter() - t
    result = run_cycle(state, CycleSettings(engine=engine, time_limit=time_limit))
    full = result.to_json()
    doc = full["cycle"]
    greedy = doc.get("greedySeconds", 0.0)
    build = doc.get("buildSeconds", 0.0)
    solve = doc.get("solveSeconds", 0.0)
    out = {"imports": t_imports, "load": t_load, "state": t_state, "greedy": greedy, "build": build,
           "solve": solve, "decode": max(0.0, doc["wallSeconds"] - greedy - build - solve),
           "cycle": doc["wallSeconds"], "total": time.perf_counter() - t0, "cpu": time.process_time(),
           "status": doc["status"] + (" lean" if doc.get("modelScope") == "lean" else ""),
           "binds": len(full.get("binds", [])), "evicted": len(full.get("evictions", [])),
           "fallbackReason": doc.get("fallbackReason"),
           "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)   # skip freeing the cluster at exit, as the CLI does


def _snapshot(cache: str, nodes: int, seed: int, fractional: float) -> str:
    pending, running = SIZES.get(nodes, (min(5 * nodes, 5000), 10 * nodes))
    shared = f"-f{fractional:g}" if fractional else ""
    path = os.path.join(cache, f"scale-{nodes}-{pending}-{running}{shared}-s{seed}.json")
    if not os.path.exists(path):
        sys.path.insert(0, HERE)
        from generate import generate_cluster, write_snapshot
        doc = generate_cluster(nodes, pending, running, seed=seed, fractional_share=fractional)
        write_snapshot(doc, path + ".tmp")
        os.replace(path + ".tmp", path)
    return path


def _compile_bytecode() -> None:
    """Byte-compile kai-cp's packages before the timed children start, as Python does on a
    package's first import (and pip on install): where PYTHONDONTWRITEBYTECODE is set (this
    project's CI machines) nothing is ever cached, and each child compiled ~80 modules from source,
    ~0.2 s of every process (the 48-node example: 0.70 s instead of 0.52 s)."""
    import compileall

    root = os.path.dirname(HERE)
    for package in ("kai_cp", "models"):
        compileall.compile_dir(os.path.join(root, package), quiet=1)


def machine_speed() -> tuple[float, float]:
    """Seconds a fixed pure-Python loop and a fixed run of small numpy operations take here, least
    of three: the machines these figures come from differ up to ~3x between sessions (allocate at
    10,000 nodes 0.35 s on one, 1.0 s on another, same code), so a table is read beside them."""
    import numpy as np

    def loop() -> None:
        total = 0
        for i in range(2_000_000):
            total += i

    a = np.arange(10_000, dtype=np.int64)

    def small() -> None:
        for _ in range(20_000):
            (a >= 5).sum()

    out = []
    for work in (loop, small):
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            work()
            best = min(best, time.perf_counter() - t)
        out.append(best)
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fractional-share", type=float, default=0.5,
                    help="share of small 1-GPU jobs asking for part of a GPU, and of nodes sharing devices (0: whole GPUs only)")
    ap.add_argument("--engines", nargs="+", default=["greedy", "cp-sat"])
    ap.add_argument("--cache-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "kai-cp-bench-scale"))
    ap.add_argument("--json", help="write every run here")
    ap.add_argument("--child", nargs=2, metavar=("SNAPSHOT", "ENGINE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child[0], args.child[1], args.time_limit)
        return 0
    os.makedirs(args.cache_dir, exist_ok=True)
    _compile_bytecode()
    runs = []
    py, numpy_ops = machine_speed()
    print(f"machine: 2M-step Python loop {py:.3f} s, 20k numpy ops on 10k elements {numpy_ops:.3f} s")
    print(f"{'nodes':>6} {'engine':>7} " + " ".join(f"{s:>7}" for s in STEPS)
          + f" {'rss MiB':>8} {'binds':>6} {'evicted':>7}  status")
    for nodes in args.sizes:
        path = _snapshot(args.cache_dir, nodes, args.seed, args.fractional_share)
        for engine in args.engines:
            got = []
            for _ in range(args.repeats):
                proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", path, engine,
                                       "--time-limit", str(args.time_limit)],
                                      capture_output=True, text=True, check=True)
                got.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            runs += [{"nodes": nodes, "engine": engine, **g} for g in got]
            med = {s: statistics.median(g[s] for g in got) for s in STEPS + ("rss_mib", "binds", "evicted")}
            print(f"{nodes:>6} {engine:>7} " + " ".join(f"{med[s]:7.2f}" for s in STEPS)
                  + f" {med['rss_mib']:8.0f} {med['binds']:6.0f} {med['evicted']:7.0f}  "
                  + ",".join(g["status"] for g in got), flush=True)
            # why a cycle fell back: which part of the cycle a machine is too slow for
            for why, n in Counter(g.get("fallbackReason") for g in got if g.get("fallbackReason")).items():
                print(f"{'':>15} FALLBACK {n}/{len(got)}: {why}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": {"pythonLoopSeconds": py, "numpyOpsSeconds": numpy_ops}, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
