#!/usr/bin/env python3
"""Benchmark snapshot loading (file read + JSON parse + validation) on generated clusters.

Why: a 10,000-node snapshot is ~250 MB of JSON and ~160,000 objects; loading it must stay a
small part of a scheduling cycle's budget. This script generates clusters with
bench/generate.py, writes them as JSON, and times ``kai_cp.loader`` on them. It is a
measurement tool, not a test.

    python bench/bench_load.py [SIZES ...] [--repeats 3] [--seed 2] [--cache-dir DIR]
                               [--gc-on] [--json out.json]
    python bench/bench_load.py --file snapshot.json      # an existing file

SIZES are node counts (default 1000 10000). Pending/running pods per size: 100 -> 500/1,000,
1,000 -> 5,000/10,000, 10,000 -> 5,000/100,000; any other N -> min(5N, 5000)/10N.

Every repeat runs in a fresh Python process (a load pauses the garbage collector and freezes
what it loaded, so a second load in the same process would not be representative). The
child reproduces ``load_snapshot`` step by step and times each step:

* read:     ``open().read()`` of the file;
* parse:    ``kai_cp.loader._parse_json`` (msgspec, the standard library for what it refuses);
* validate: ``kai_cp.loader.load_snapshot_dict`` (pydantic validation of every object, with
  per-object warnings), including freeing the parsed document afterwards;
* total:    the three together, all under the loader's GC pause, as ``load_snapshot`` runs.

Objects/second is the number of objects in rawObjects divided by the validation time. CPU
seconds (``time.process_time``) are printed too: on a shared machine the wall time also
counts waiting for a CPU. ``--gc-on`` times the same steps with the garbage collector left
running (the loader's pause switched off), i.e. how loading behaved before the pause.
The table shows the best repeat (lowest total wall time); ``--json`` writes every repeat.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: nodes -> (pending pods, running pods); the same presets as bench_cycle.py
SIZE_PRESETS: dict[int, tuple[int, int]] = {100: (500, 1000), 1000: (5000, 10_000),
                                            10000: (5000, 100_000)}


def preset(nodes: int) -> tuple[int, int]:
    return SIZE_PRESETS.get(nodes, (min(5 * nodes, 5000), 10 * nodes))


def snapshot_file(nodes: int, seed: int, folder: str) -> str:
    """Generate (or reuse) the JSON snapshot of one size, written like `json.dump` does."""
    pending, running = preset(nodes)
    path = os.path.join(folder, f"bench-load-{nodes}n-{pending}p-{running}r-s{seed}.json")
    if not os.path.exists(path):
        sys.path.insert(0, HERE)
        from generate import generate_cluster  # bench/ is a folder of scripts

        t0 = time.perf_counter()
        doc = generate_cluster(nodes=nodes, pending_pods=pending, running_pods=running, seed=seed)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
        del doc
        print(f"generated {path} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return path


# ------------------------------------------------------------------------- child process


def measure(path: str, gc_on: bool) -> dict[str, Any]:
    """Time one load of `path` in this (fresh) process; returns the figures."""
    sys.path.insert(0, ROOT)
    from kai_cp import loader

    gc_paused = not gc_on and hasattr(loader, "_gc_paused")  # (absent before the pause)
    if not gc_paused:
        loader._gc_paused = contextlib.nullcontext  # type: ignore[attr-defined]
    wall, cpu = time.perf_counter, time.process_time
    t0, c0 = wall(), cpu()
    with open(path, "rb") as f:
        data = f.read()
    t1, c1 = wall(), cpu()
    with loader._gc_paused():
        doc = loader._parse_json(data, path)
        del data
        t2, c2 = wall(), cpu()
        objects = sum(len(v) for v in (doc.get("rawObjects") or {}).values() if isinstance(v, list))
        loaded = loader.load_snapshot_dict(doc, path)
        del doc  # freeing the parsed document is part of a load's cost
        t3, c3 = wall(), cpu()
    warnings = len(loaded.warnings)
    return {
        "file": path, "bytes": os.path.getsize(path), "objects": objects, "warnings": warnings,
        "gc_paused": gc_paused,
        "read_s": t1 - t0, "parse_s": t2 - t1, "validate_s": t3 - t2, "total_s": t3 - t0,
        "read_cpu_s": c1 - c0, "parse_cpu_s": c2 - c1, "validate_cpu_s": c3 - c2,
        "total_cpu_s": c3 - c0,
        "objects_per_s": objects / (t3 - t2) if t3 > t2 else float("inf"),
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_child(path: str, gc_on: bool) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--measure", path] + (["--gc-on"] if gc_on else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------- report


HEADER = (f"{'snapshot':>26} {'size MB':>8} {'objects':>8} {'read s':>7} {'parse s':>8} "
          f"{'valid. s':>9} {'total s':>8} {'cpu s':>6} {'objects/s':>10} {'RSS MB':>7}")


def row(label: str, r: dict[str, Any]) -> str:
    return (f"{label:>26} {r['bytes'] / 1e6:8.1f} {r['objects']:8d} {r['read_s']:7.2f} "
            f"{r['parse_s']:8.2f} {r['validate_s']:9.2f} {r['total_s']:8.2f} "
            f"{r['total_cpu_s']:6.2f} {r['objects_per_s']:10,.0f} {r['max_rss_mb']:7.0f}"
            + ("" if r["gc_paused"] else "  (GC on)"))


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Benchmark kai-cp snapshot loading.")
    ap.add_argument("sizes", nargs="*", type=int, help="node counts (default 1000 10000)")
    ap.add_argument("--file", action="append", default=[], help="benchmark an existing snapshot file")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--cache-dir", default=None,
                    help="keep generated snapshots here and reuse them (default: a temp folder)")
    ap.add_argument("--gc-on", action="store_true", help="leave the garbage collector running")
    ap.add_argument("--json", default=None, help="write every repeat's figures to this file")
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args(argv)

    if args.measure:
        print(json.dumps(measure(args.measure, args.gc_on)))
        return 0

    sizes = args.sizes or ([] if args.file else [1000, 10000])
    results: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        folder = args.cache_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-load-"))
        os.makedirs(folder, exist_ok=True)
        targets = [(f"{n} nodes", snapshot_file(n, args.seed, folder)) for n in sizes]
        targets += [(os.path.basename(p)[-26:], p) for p in args.file]
        print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, best of {args.repeats}")
        print(HEADER)
        for label, path in targets:
            runs = [run_child(path, args.gc_on) for _ in range(max(1, args.repeats))]
            for r in runs:
                r["label"] = label
            results.extend(runs)
            print(row(label, min(runs, key=lambda r: r["total_s"])), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
