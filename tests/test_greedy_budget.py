"""The greedy engine's eviction search keeps to the cycle's time limit (kai_cp/actions/pipeline.py
`cycle_budget`): a deterministic work budget that grows with `--time-limit`, never below the
CP-SAT cycle's hint bound.

Why: `--time-limit` is the whole cycle's, but the greedy engine replayed KAI's searches to the
end: 127 s on bench_scale's contended 1,000-node cluster and over 8 minutes at 10,000 nodes,
with a 1 s limit. The rates are shrunk here so a 48-node example shows what a 10,000-node
cluster does."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_cp.actions import pipeline
from kai_cp.actions.pipeline import run_greedy
from kai_cp.cycle import CycleSettings, run_cycle
from kai_cp.loader import load_snapshot
from kai_cp.state import build_cluster_state

SHOWCASE = Path(__file__).resolve().parent.parent / "examples" / "showcase-cluster.zip"
NOW = 1_750_000_000.0


@pytest.fixture(scope="module")
def state():
    return build_cluster_state(load_snapshot(SHOWCASE))


def evictions(session) -> list[tuple[str, str, str]]:
    return sorted((k, e.action, e.for_job) for k, e in session.evictions.items())


def placements(session) -> list[tuple[str, int, bool]]:
    return sorted((k, p.node, p.pipelined) for k, p in session.placements.items())


@pytest.fixture
def small_rates(monkeypatch) -> None:
    """A 48-node cluster's search, bounded as a 10,000-node one's is."""
    monkeypatch.setattr(pipeline, "HINT_WORK_SMALL", 1_000)
    monkeypatch.setattr(pipeline, "WORK_PER_SECOND", 1_000)


def test_a_short_limit_stops_the_greedy_search_and_says_so(state, small_rates) -> None:
    short = run_cycle(state, CycleSettings(engine="greedy", time_limit=0.01, now=NOW))
    assert any(o.budget_spent for o in short.actions.values())
    why = [m for o in short.actions.values() for m in o.failed.values() if "work budget" in m]
    assert why and all("the cycle's time limit bounds it" in m for m in why)
    # a longer limit searches further: more preemptors tried, more of KAI's evictions found
    longer = run_cycle(state, CycleSettings(engine="greedy", time_limit=5.0, now=NOW))
    tried = lambda r: sum(o.attempts for o in r.actions.values())     # noqa: E731
    assert tried(longer) > tried(short)
    assert len(longer.session.evictions) > len(short.session.evictions)


def test_a_limit_long_enough_gives_kai_s_whole_search(state, small_rates) -> None:
    whole = run_greedy(state, NOW)
    cycle = run_cycle(state, CycleSettings(engine="greedy", time_limit=100.0, now=NOW))
    assert not any(o.budget_spent for o in cycle.actions.values())
    assert evictions(cycle.session) == evictions(whole.session)
    assert placements(cycle.session) == placements(whole.session)


def test_the_budget_is_the_hint_bound_plus_what_the_limit_leaves(state) -> None:
    jobs = 40
    hint = pipeline.hint_budget(state).left
    assert pipeline.cycle_budget(state, jobs, 0.0).left == hint       # never below the CP-SAT fallback's search
    spare = 1.0 - pipeline.estimated_greedy_seconds(state, jobs)
    assert pipeline.cycle_budget(state, jobs, 1.0).left == hint + int(pipeline.WORK_PER_SECOND * spare)
    assert pipeline.cycle_budget(state, jobs, 3.0).left > pipeline.cycle_budget(state, jobs, 1.0).left
