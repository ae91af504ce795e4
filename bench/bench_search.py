#!/usr/bin/env python3
"""KAI's actions at a fixed work bound, timed, with a hash of what they decided.

Why: allocate and the eviction search are most of every cycle at scale (issue 9), and the
greedy engine's eviction search stops on the clock as well as on its work bound, so a cycle's
decisions depend on the machine's speed. Here the search runs to a work bound alone (no clock):
the decisions are the same on any machine, so a change that only speeds them up must print the
same hash, and its times compare with another tree's in one run (the machines are shared and
noisy: compare ratios, interleaved). A measurement tool, not a test.

    python bench/bench_search.py SNAPSHOT [SNAPSHOT ...] [--work 40000] [--repeats 3] [--now EPOCH]

Per snapshot: allocate's CPU seconds (the least of --repeats runs on the same state), the
eviction search's CPU seconds after it (consolidation, reclaim and preempt in the configured
order, one run, bounded by --work units: victims queued plus placements simulated,
actions/preemptors.py `Budget`), the work it spent, the pods placed and evicted, and a hash of
the placements, the evictions (with their messages) and every pending job's reasons. --now fixes
the clock of min-runtime protection (the default is a fixed instant, so runs agree). To compare
two trees, run it from each (PYTHONPATH=TREE) and diff the hashes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kai_cp.actions.allocate import run_allocate  # noqa: E402
from kai_cp.actions.pipeline import EvictionSearch  # noqa: E402
from kai_cp.actions.preemptors import Budget  # noqa: E402
from kai_cp.cli import _load, _state  # noqa: E402
from kai_cp.reasons import unschedulable  # noqa: E402

NOW = 1.8e9      # a fixed clock for min-runtime protection: the same decisions on every run


def measure(path: str, work: int, repeats: int = 3, now: float = NOW) -> dict:
    """Allocate (timed `repeats` times on one state), then the eviction search on its session."""
    state = _state(_load(path, views=True))
    times = []
    for _ in range(max(1, repeats)):
        t = time.process_time()
        greedy = run_allocate(state)
        times.append(time.process_time() - t)
    budget = Budget(work)
    t = time.process_time()
    greedy.actions = EvictionSearch(state, greedy.session, now).run(budget)
    search = time.process_time() - t
    s = greedy.session
    decided = [sorted((p.task.key, p.node, p.pipelined, list(p.gpu_groups)) for p in s.placements.values()),
               sorted((e.task.key, e.action, e.for_job, e.node, e.message) for e in s.evictions.values()),
               unschedulable(state, greedy, s, "greedy")]
    digest = hashlib.sha256(json.dumps(decided, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return {"allocate": min(times), "search": search, "spent": work - max(budget.left, 0),
            "placed": len(s.placements), "evicted": len(s.evictions), "hash": digest}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("snapshots", nargs="+")
    ap.add_argument("--work", type=int, default=40_000, help="the eviction search's work bound (units)")
    ap.add_argument("--repeats", type=int, default=3, help="allocate runs, the least CPU time kept")
    ap.add_argument("--now", type=float, default=NOW, help="the clock of min-runtime protection (epoch seconds)")
    args = ap.parse_args(argv)
    print(f"{'snapshot':50} {'allocate':>9} {'search':>8} {'spent':>8} {'placed':>7} {'evicted':>8}  hash")
    for path in args.snapshots:
        m = measure(path, args.work, args.repeats, args.now)
        print(f"{path[-50:]:50} {m['allocate']:9.3f} {m['search']:8.3f} {m['spent']:8d} {m['placed']:7d} "
              f"{m['evicted']:8d}  {m['hash']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
