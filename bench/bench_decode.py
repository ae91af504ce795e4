#!/usr/bin/env python3
"""What the cp-sat cycle does after its solver, beside the time it keeps back for it.

Why: the cycle stops its solver early enough to decode the answer, check it (kai_cp/validate.py),
run KAI's last action and check the result against KAI's before its time limit (`kai_cp/cycle.py` `decode_reserve`). Kept
too large, the solver loses time it could search with (a 1,000-node shared-GPU cycle fell back
with 0.14 s of a 0.19 s reserve unused); too small, cycles run past their limit. This measures
both on real cycles, so the reserve's constants can be set again on a new machine. A
measurement tool, not a test.

    python bench/bench_decode.py SNAPSHOT [SNAPSHOT ...] [--time-limit 3.0]

Per snapshot: the cycle's status, its time after the solver (`tail`: decoding, KAI's eviction
actions where the model decides the allocation alone, the check against KAI's actions, the rules'
check of the answer, KAI's last action, the result), each of those five, the reserve the cycle kept,
and what the reserve counts (greedy's placements, the pods of the victims the model can evict)
beside what the answer holds (placements, evictions). A limit above the default lets the
solver end at its deterministic limit, so the answer is the one the cycle's settings give.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kai_cp.cycle as cycle  # noqa: E402
from kai_cp.cli import _load, _state  # noqa: E402
from step_timer import timed  # noqa: E402  (bench/, beside this script)


def measure(path: str, time_limit: float) -> dict:
    """One cp-sat cycle on the snapshot, with the steps after its solver timed."""
    import kai_cp.model.decode as decode_module
    seen: dict = {}
    originals = {"decode_reserve": cycle.decode_reserve, "short_of_kai": cycle.short_of_kai,
                 "violations": cycle.violations, "run_after_actions": cycle.run_after_actions}
    real_decode = decode_module.decode

    def reserve(ctx):
        seen["reserve"] = originals["decode_reserve"](ctx)
        seen["placements"] = len(ctx.greedy.session.placements)
        seen["victims"] = sum(len(u.tasks) for u, _ in ctx.extensions.get("eviction-units", ()))
        return seen["reserve"]

    cycle.decode_reserve = reserve
    cycle.short_of_kai = timed(seen, "short", originals["short_of_kai"])
    cycle.violations = timed(seen, "check", originals["violations"])
    cycle.run_after_actions = timed(seen, "after", originals["run_after_actions"])
    decode_module.decode = timed(seen, "decode", real_decode)
    try:
        state = _state(_load(path, views=True))
        result = cycle.run_cycle(state, cycle.CycleSettings(engine="cp-sat", time_limit=time_limit))
    finally:
        for name, inner in originals.items():
            setattr(cycle, name, inner)
        decode_module.decode = real_decode
    stats = result.stats
    solved = sum(stats.get(k, 0.0) for k in ("greedySeconds", "buildSeconds", "solveSeconds"))
    return {"status": result.status, "tail": result.wall_seconds - solved, "decode": seen.get("decode", 0.0),
            "evict": stats.get("evictSeconds", 0.0),
            "short": seen.get("short", 0.0), "check": seen.get("check", 0.0), "after": seen.get("after", 0.0),
            "reserve": seen.get("reserve"),
            "placements": seen.get("placements"), "victims": seen.get("victims"),
            "out_placements": len(result.session.placements), "out_evictions": len(result.session.evictions)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("snapshots", nargs="+")
    ap.add_argument("--time-limit", type=float, default=3.0)
    args = ap.parse_args(argv)
    # seconds to 0.1 ms: the check and the actions after the model take under a millisecond on
    # the examples, which three decimals printed as 0.000
    print(f"{'snapshot':40s} {'status':9s} {'tail':>7s} {'decode':>7s} {'evict':>7s} {'short':>7s} {'check':>7s} {'after':>7s} {'reserve':>7s} "
          f"{'greedy placements':>17s} {'victims':>7s} {'placements':>10s} {'evictions':>9s}")
    worst = 0.0
    for path in args.snapshots:
        m = measure(path, args.time_limit)
        name = "/".join(Path(path).parts[-2:])[-40:]
        if m["reserve"] is None:          # no model was solved: nothing was decoded
            print(f"{name:40s} {m['status']:9s} (no model solved)")
            continue
        worst = max(worst, m["tail"] / m["reserve"])
        print(f"{name:40s} {m['status']:9s} {m['tail']:7.4f} {m['decode']:7.4f} {m['evict']:7.4f} {m['short']:7.4f} {m['check']:7.4f} {m['after']:7.4f} "
              f"{m['reserve']:7.3f} {m['placements']:17d} {m['victims']:7d} {m['out_placements']:10d} "
              f"{m['out_evictions']:9d}", flush=True)
    print(f"largest share of the reserve used: {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
