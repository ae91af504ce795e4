#!/usr/bin/env python3
"""kai-cp next to KAI's whole default cycle on the `-full` differential snapshots
(../shared/kai-differential/small-s*-full: KAI allocated, consolidated, reclaimed and preempted).

Why: ../shared/kai-differential/compare.py counts GPUs *bound*; after eviction actions most of
what a cycle decides is *pipelined* (preemptors waiting for their victims to leave), so the
figure to hold next to KAI is GPUs bound + pipelined, with the pods evicted for it, and whether
an independent check of the decisions (kai_cp.validate) passes. The acceptance is: kai-cp
(cp-sat) binds plus pipelines at least KAI's GPUs and evicts no more pods than KAI.

    python3 bench/differential_full.py [--root ../shared/kai-differential] [--cases small-s1-full,...]
                                       [--engines greedy,cp-sat] [--time-limit 1] [--json OUT]

GPUs are counted as compare.py counts them (whole GPUs, gpu-fraction, gpu-memory over the
node's GPU memory), for binds, pipelined pods (moved victims included) and evicted pods (on the
node they ran on).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from kai_cp.cycle import CycleSettings, run_cycle
from kai_cp.loader import load_snapshot
from kai_cp.state import build_cluster_state
from kai_cp.validate import violations

ROOT = Path(__file__).resolve().parent.parent


def _compare(root: Path):
    """../shared/kai-differential/compare.py, for its snapshot reader and GPU counting."""
    spec = importlib.util.spec_from_file_location("kai_differential_compare", root / "compare.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"no compare.py under {root}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def figures(cmp, snap: dict, decisions: dict) -> dict:
    where = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["spec"].get("nodeName")
             for p in snap["rawObjects"]["pods"]}
    evicted = [dict(e, node=e.get("node") or where.get(e["pod"])) for e in decisions.get("evictions") or []]
    bound = cmp.placed(snap, {"binds": decisions.get("binds") or []})["gpus"]
    piped = cmp.placed(snap, {"binds": decisions.get("pipelined") or []})["gpus"]
    return {"gpusBound": round(bound, 2), "gpusPipelined": round(piped, 2), "gpusBoundPlusPipelined": round(bound + piped, 2),
            "binds": len(decisions.get("binds") or []), "pipelined": len(decisions.get("pipelined") or []),
            "evicted": len(evicted), "gpusEvicted": round(cmp.placed(snap, {"binds": evicted})["gpus"], 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(ROOT.parent / "shared" / "kai-differential"))
    ap.add_argument("--cases", default="small-s1-full,small-s2-full,small-s3-full")
    ap.add_argument("--engines", default="greedy,cp-sat")
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    root = Path(a.root)
    cmp = _compare(root)
    rows = []
    print(f"{'case':<15}{'side':<8}{'bound':>9}{'piped':>8}{'b+p':>9}{'binds':>7}{'piped':>7}{'evict':>7}"
          f"{'ev GPUs':>9}  valid / acceptance")
    for case in a.cases.split(","):
        folder = root / case
        snap = cmp.load_snapshot(folder / "snapshot.zip")
        kai = figures(cmp, snap, json.loads((folder / "kai-decisions.json").read_text()))
        print(f"{case:<15}{'KAI':<8}{kai['gpusBound']:>9.2f}{kai['gpusPipelined']:>8.2f}{kai['gpusBoundPlusPipelined']:>9.2f}"
              f"{kai['binds']:>7}{kai['pipelined']:>7}{kai['evicted']:>7}{kai['gpusEvicted']:>9.2f}")
        for engine in a.engines.split(","):
            state = build_cluster_state(load_snapshot(folder / "snapshot.zip"))
            result = run_cycle(state, CycleSettings(engine=engine, time_limit=a.time_limit))
            own = figures(cmp, snap, json.loads(json.dumps(result.to_json())))
            bad = violations(result.state, result.session)
            ok = own["gpusBoundPlusPipelined"] >= kai["gpusBoundPlusPipelined"] and own["evicted"] <= kai["evicted"]
            print(f"{case:<15}{engine:<8}{own['gpusBound']:>9.2f}{own['gpusPipelined']:>8.2f}"
                  f"{own['gpusBoundPlusPipelined']:>9.2f}{own['binds']:>7}{own['pipelined']:>7}{own['evicted']:>7}"
                  f"{own['gpusEvicted']:>9.2f}  {'valid' if not bad else f'{len(bad)} violations'} / "
                  f"{'meets' if ok else 'misses'} KAI")
            rows.append({"case": case, "engine": engine, "kai": kai, "own": own, "violations": bad[:20],
                         "meetsKai": ok})
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
