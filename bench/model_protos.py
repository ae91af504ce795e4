#!/usr/bin/env python3
"""The cp-sat model each snapshot gets, as sha256 of its proto (and optionally the CPU time of
building it), to prove a change to the model build leaves the model byte-identical (issues 8, 9).

    PYTHONHASHSEED=0 python bench/model_protos.py [--time 5] [--profile OUT] [--canon] [--lean] SNAPSHOT...

Run it from two trees (e.g. a worktree at main and a branch) and diff the output. The model is
built as kai_cp/cycle.py's run_cycle builds it (greedy with the bounded eviction search, allocate
alone when greedy's evictions are not modelled, the pair budget of --limit), with the clock fixed
by --now so time-based rules agree between runs; each build is repeated --time times and must
give the same proto. `--canon` adds a hash blind to the order of constraints (for a change that
only reorders them). `--profile OUT`: cProfile of one more build, to OUT.<snapshot>.txt.
A measurement tool, not a test; timings on a shared machine are noisy: compare in one run.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import os
import pstats
import resource
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kai_cp.actions.pipeline import run_greedy, unmodelled_evictions  # noqa: E402
from kai_cp.cli import _load  # noqa: E402
from kai_cp.cycle import pair_budget  # noqa: E402
from kai_cp.gcpause import gc_paused  # noqa: E402
from kai_cp.model.build import build_model  # noqa: E402
from kai_cp.model.linear_rows import proto_bytes  # noqa: E402
from kai_cp.state import build_cluster_state  # noqa: E402


def canon_hash(model) -> str:
    """sha256 of the proto's text with its constraints sorted (blind to their order only)."""
    blocks, cur = [], []
    for line in str(model.proto).splitlines():
        if line and not line[0].isspace() and cur:
            blocks.append("\n".join(cur))
            cur = []
        cur.append(line)
    blocks.append("\n".join(cur))
    rest = [b for b in blocks if not b.startswith("constraints")]
    cons = sorted(b for b in blocks if b.startswith("constraints"))
    return hashlib.sha256("\n".join(rest + cons).encode()).hexdigest()[:16]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshots", nargs="+")
    ap.add_argument("--time", type=int, default=0, help="builds to time (CPU seconds)")
    ap.add_argument("--profile", metavar="OUT")
    ap.add_argument("--canon", action="store_true")
    ap.add_argument("--now", type=float, default=1_795_000_000.0, help="the cycle's clock (epoch seconds)")
    ap.add_argument("--limit", type=float, default=1.0, help="time limit the pair budget is sized for")
    ap.add_argument("--lean", action="store_true",
                    help="the lean model (kai_cp/model/scope.py) on allocate's decisions, as a cycle builds it "
                         "where the full one would not end in time")
    a = ap.parse_args()
    for path in a.snapshots:
        try:
            state = build_cluster_state(_load(path))
        except Exception as e:    # not a snapshot (e.g. a scenario file)
            print(f"{path}\tLOAD-ERROR {type(e).__name__}")
            continue
        with gc_paused():
            greedy = run_greedy(state, a.now, bounded=True)
            if not state.config.may_allocate:
                print(f"{path}\tNO-ALLOCATE")
                continue
            fixed = unmodelled_evictions(greedy)
            allocate_only = bool(fixed) or a.lean      # the model then decides no evictions
            if allocate_only:
                greedy = run_greedy(state, a.now, evictions=False)
            budget = pair_budget(state, greedy, a.limit)

            def build():
                return build_model(state, greedy, pair_budget=budget, evictions=not allocate_only, lean=a.lean)

            ctx = build()
            digest = hashlib.sha256(proto_bytes(ctx.model)).hexdigest()[:16]
            if a.canon:
                digest += " canon " + canon_hash(ctx.model)
            times = []
            for _ in range(a.time):
                c0 = cpu()
                again = build()
                times.append(cpu() - c0)
                assert hashlib.sha256(proto_bytes(again.model)).hexdigest()[:16] == digest[:16], "not reproducible"
            line = (f"{path}\t{digest}\tvars {len(ctx.model.proto.variables)} cons {len(ctx.model.proto.constraints)}"
                    f" budget {budget} fixed {bool(fixed)}")
            if times:
                times.sort()
                line += f"\tbuild cpu min {times[0]:.3f} med {times[len(times) // 2]:.3f}"
            print(line, flush=True)
            if a.profile:
                prof = cProfile.Profile()
                prof.enable()
                build()
                prof.disable()
                out = io.StringIO()
                stats = pstats.Stats(prof, stream=out)
                stats.sort_stats("tottime").print_stats(30)
                stats.sort_stats("cumulative").print_stats(45)
                with open(a.profile + "." + path.replace("/", "_") + ".txt", "w") as f:
                    f.write(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
