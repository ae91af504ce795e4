"""Greedy's evictions stay possible in the model without a candidate pair beside them, but only
while their preemptor is placed (`kai_cp/model/evictions.py` `kai_preemptor_placed`).

Why: where KAI moved victims, the jobs its eviction actions started are not kept started
(`kai_cp/model/order.py` `kept_started`). A solution that dropped such a preemptor but kept its
victims' eviction evicted for nobody: decoding found no preemptor and raised ("eviction of ... has
no preemptor placed on its nodes"), which ended a cycle of notebooks/05-simulate.ipynb on the
showcase cluster under load. Here every KAI preemptor is released from `kept_started` and kept
from placing anything while its victims' evictions are forced: the model must then be
infeasible, or justify each eviction by another placed job.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_cp.actions.pipeline import run_greedy
from kai_cp.cycle import pair_budget
from kai_cp.loader import load_snapshot
from kai_cp.model import build, order
from kai_cp.model.decode import decode
from kai_cp.model.solve import solve
from kai_cp.state import build_cluster_state

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "evictions").glob("*.json"))
NOW = 1_750_000_000.0


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_no_kept_eviction_without_its_preemptor(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = build_cluster_state(load_snapshot(path))
    greedy = run_greedy(state, NOW, bounded=True)
    evictions = greedy.session.evictions
    if not evictions:
        pytest.skip(reason="KAI's actions evict nothing here")
    monkeypatch.setattr(order, "kept_started", lambda ctx: set())
    ctx = build.build_model(state, greedy, pair_budget=pair_budget(state, greedy, 4.0))
    units = ctx.extensions.get("eviction-units", [])
    forced = 0
    for _, plan in units:
        for ts, var, _ in plan:
            kept = ctx.hinted(var)
            if kept:
                ctx.model.add(var >= kept)
                forced += 1
    if not forced:
        pytest.skip(reason="the model has no variables for KAI's evictions here (not modelled)")
    preemptors = {e.for_job for e in evictions.values()}
    for i, c in enumerate(ctx.pair_class.tolist()):
        if ctx.classes[c].job.name in preemptors:
            ctx.model.add(ctx.x[i] == 0)
    outcome = solve(ctx, 10.0, 0, 1, deterministic_limit=5.0)
    if outcome.counts is None:
        assert outcome.status == "INFEASIBLE", outcome.status
        return
    session = decode(ctx, outcome.counts)          # raised before: no preemptor to name
    for ev in session.evictions.values():
        assert ev.for_job not in preemptors
        assert any(t.key in session.placements for t in state.jobs[ev.for_job].tasks)
