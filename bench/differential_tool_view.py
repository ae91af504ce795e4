#!/usr/bin/env python3
"""kai-cp next to KAI on the allocate-only differential snapshots, twice: on the snapshot as it
is, and on the snapshot as KAI's snapshot tool evidently saw it (no pod terminating).

Why: a running pod with `metadata.deletionTimestamp` is Releasing for KAI (spec 1.x pod status
table): its resources are "releasing", a task that fits only with them is pipelined, not bound.
KAI's decisions in ../shared/kai-differential/ do not show that: on small-s2 KAI binds 7 GPUs of
work on gpu-e8624f, whose only releasing pod would have pipelined train-000240 (8 GPUs) there
first, and its run reports no pipelined pod at all. Dropping the deletion timestamps makes
kai-cp's decisions agree with KAI's far more closely (small-s2: every pod KAI binds, and only
those), so the figures "as the tool saw it" are the like-for-like comparison of placement, and
the figures as-is are what KAI-Scheduler itself, which sees the timestamps, would face.

    python3 bench/differential_tool_view.py [--root ../shared/kai-differential]
                                            [--cases small-s1,small-s2,small-s3,medium-s1,topo-512-s1]
                                            [--engines greedy,cp-sat] [--time-limit 1]

Per case and view: GPUs bound and pipelined (counted as compare.py counts them), pods bound,
pods KAI bound that kai-cp did not (KAI-only) and the reverse (own-only), and the pods both bound
on the same node.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from differential_full import ROOT, _compare
from kai_cp.cycle import CycleSettings, run_cycle
from kai_cp.loader import load_snapshot_dict
from kai_cp.state import build_cluster_state


def as_tool_saw_it(snap: dict) -> tuple[dict, int]:
    """The snapshot without deletion timestamps on pods, and how many there were."""
    out = copy.deepcopy(snap)
    n = 0
    for pod in out["rawObjects"]["pods"]:
        if pod["metadata"].pop("deletionTimestamp", None) is not None:
            n += 1
    return out, n


def agreement(kai: dict, own: dict) -> tuple[int, int, int]:
    k = {b["pod"]: b["node"] for b in kai.get("binds") or []}
    o = {b["pod"]: b["node"] for b in own.get("binds") or []}
    return len(k.keys() - o.keys()), len(o.keys() - k.keys()), sum(k[p] == o[p] for p in k.keys() & o.keys())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(ROOT.parent / "shared" / "kai-differential"))
    ap.add_argument("--cases", default="small-s1,small-s2,small-s3,medium-s1,topo-512-s1")
    ap.add_argument("--engines", default="greedy,cp-sat")
    ap.add_argument("--time-limit", type=float, default=1.0)
    a = ap.parse_args(argv)
    root = Path(a.root)
    cmp = _compare(root)
    print(f"{'case':<13}{'view':<9}{'side':<8}{'GPUs bound':>11}{'piped':>7}{'pods':>6}{'KAI-only':>9}"
          f"{'own-only':>9}{'same node':>10}  status")
    for case in a.cases.split(","):
        folder = root / case
        snap = cmp.load_snapshot(folder / "snapshot.zip")
        kai = json.loads((folder / "kai-decisions.json").read_text())
        print(f"{case:<13}{'':<9}{'KAI':<8}{cmp.placed(snap, kai)['gpus']:>11.2f}{len(kai.get('pipelined') or []):>7}"
              f"{len(kai.get('binds') or []):>6}")
        tool, dropped = as_tool_saw_it(snap)
        for view, doc in (("as-is", snap), (f"tool({dropped})", tool)):
            for engine in a.engines.split(","):
                state = build_cluster_state(load_snapshot_dict(copy.deepcopy(doc)))
                result = run_cycle(state, CycleSettings(engine=engine, time_limit=a.time_limit))
                own = json.loads(json.dumps(result.to_json()))
                ko, oo, same = agreement(kai, own)
                print(f"{case:<13}{view:<9}{engine:<8}{cmp.placed(snap, own)['gpus']:>11.2f}"
                      f"{len(own['pipelined']):>7}{len(own['binds']):>6}{ko:>9}{oo:>9}{same:>10}  {result.status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
