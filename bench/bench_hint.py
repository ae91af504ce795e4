#!/usr/bin/env python3
"""Is KAI's decision a solution of the model? Per generated cluster, what greedy's own hint breaks.

Why: a cycle whose hint (KAI's actions' decisions) breaks one constraint gets nothing from the
solver in a 1 s cycle and falls back (or the model is infeasible: KAI's started jobs stay
started). On bench/bench_cycle.py's contended 100-node clusters that was every seed whose KAI
evicted (stop 38); what is left is mostly KAI's moved victims, which the model has no variables
for. This prints, per seed, KAI's evictions and moved victims and the constraints greedy's hint
breaks, by the concern that wrote them. A measurement tool, not a test.

    python bench/bench_hint.py [--nodes 100] [--pending 500] [--seeds 0 1 2 ...] [--time-limit 1.0]

Clusters are bench/generate.py's (bench_cycle's presets: fragmentation 0.6); greedy runs as the
cp-sat cycle runs it (bounded eviction search), the model is built with the cycle's pair budget
and without the constructive hint (greedy's own decisions are checked).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate  # noqa: E402  (bench/ is a folder of scripts)


def check(nodes: int, pending: int, seed: int, time_limit: float) -> dict:
    """One cluster: KAI's evictions, its moved victims, and the broken constraints by concern."""
    import re

    import kai_cp.model.build as build
    from kai_cp.actions.pipeline import run_greedy, unmodelled_evictions
    from kai_cp.actions.victims import moved_victims
    from kai_cp.cycle import pair_budget
    from kai_cp.loader import load_snapshot_dict
    from kai_cp.model.hint_check import broken_by_hint
    from kai_cp.state import build_cluster_state

    state = build_cluster_state(load_snapshot_dict(generate.generate_cluster(nodes, pending, seed=seed,
                                                                            fragmentation=0.6)))
    greedy = run_greedy(state, time.time(), bounded=True)
    s = greedy.session
    out = {"seed": seed, "evictions": len(s.evictions), "moved": len(moved_victims(s)),
           "unmodelled": unmodelled_evictions(greedy), "broken": Counter()}
    if out["unmodelled"]:         # the cycle then builds the model on allocate's decisions alone
        greedy = run_greedy(state, time.time(), bounded=True, evictions=False)
    spans: list[tuple[int, int, str]] = []
    concerns = build.CONSTRAINTS + tuple(c for level in build.OBJECTIVE_LEVELS for c in level)
    originals = {id(c): c.contribute for c in concerns}
    own = {id(c) for c in concerns if "contribute" in vars(c)}      # (an instance's own, restored as it was)

    def recorded(concern):
        def contribute(ctx):
            first = len(ctx.model.proto.constraints)
            originals[id(concern)](ctx)
            spans.append((first, len(ctx.model.proto.constraints), type(concern).__name__))
        return contribute
    saved = (build.improve_hint, build.walk_hint)
    try:
        for c in concerns:
            c.contribute = recorded(c)
        build.improve_hint, build.walk_hint = (lambda ctx: 0), (lambda ctx: False)
        ctx = build.build_model(state, greedy, pair_budget=pair_budget(state, greedy, time_limit),
                                evictions=not out["unmodelled"])
    finally:
        for c in concerns:
            if id(c) in own:
                c.contribute = originals[id(c)]
            else:
                del c.contribute
        build.improve_hint, build.walk_hint = saved
    for line in broken_by_hint(ctx.model.proto):
        m = re.match(r"constraint (\d+)", line)
        k = int(m.group(1)) if m else -1
        out["broken"][next((name for a, z, name in spans if a <= k < z), "domain" if k < 0 else "?")] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--pending", type=int, default=500)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(20)))
    ap.add_argument("--time-limit", type=float, default=1.0, help="the cycle limit whose pair budget is used")
    args = ap.parse_args(argv)
    print(f"{'seed':>4} {'evictions':>9} {'moved':>5}  hint")
    rows = [check(args.nodes, args.pending, seed, args.time_limit) for seed in args.seeds]
    for r in rows:
        what = ("model built on allocate's decisions: " + r["unmodelled"]) if r["unmodelled"] else \
            ("a solution" if not r["broken"] else "breaks " + ", ".join(f"{n} {k}" for k, n in sorted(r["broken"].items())))
        print(f"{r['seed']:>4} {r['evictions']:>9} {r['moved']:>5}  {what}")
    evicting = [r for r in rows if r["evictions"] and not r["unmodelled"]]
    print(f"KAI's hint a solution on {sum(1 for r in evicting if not r['broken'])} of {len(evicting)} clusters "
          f"where KAI's reclaim or preempt evicted; {sum(1 for r in evicting if r['broken'] and r['moved'])} of the "
          f"others with moved victims")
    return 0


if __name__ == "__main__":
    sys.exit(main())
