"""The greedy engine's eviction search keeps to the cycle's time limit (kai_cp/actions/pipeline.py
`cycle_budget`): a deterministic work budget that grows with `--time-limit`, never below the
CP-SAT cycle's hint bound, and the limit's clock behind it (`Budget.deadline`).

Why: `--time-limit` is the whole cycle's, but the greedy engine replayed KAI's searches to the
end: 127 s on bench_scale's contended 1,000-node cluster and over 8 minutes at 10,000 nodes,
with a 1 s limit. The rates are shrunk here so a 48-node example shows what a 10,000-node
cluster does."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_cp.actions import pipeline, preemptors
from kai_cp.actions.pipeline import run_greedy
from kai_cp.cycle import CLOCKED, CycleSettings, run_cycle
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


def test_the_work_bound_stops_the_greedy_search_and_says_so(state, small_rates) -> None:
    # the greedy engine's search without the clock (no deadline): the work bound stops it
    short = run_greedy(state, NOW, time_limit=0.01)
    assert any(o.budget_spent for o in short.actions.values()) and not short.search_clocked
    why = [m for o in short.actions.values() for m in o.failed.values() if "work budget" in m]
    assert why and all("the cycle's time limit bounds it" in m for m in why)
    # a longer limit searches further: more preemptors tried, more of KAI's evictions found
    longer = run_greedy(state, NOW, time_limit=5.0)
    tried = lambda r: sum(o.attempts for o in r.actions.values())     # noqa: E731
    assert tried(longer) > tried(short)
    assert len(longer.session.evictions) > len(short.session.evictions)


class TickingClock:
    """perf_counter for the eviction search's budget: one second per reading, so a deadline
    falls after a known number of budget checks whatever the machine's speed."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


def test_the_clock_stops_the_search_where_the_work_bound_would_not(state, monkeypatch) -> None:
    """Why: the work bound's cost per unit varies several-fold between clusters and machines; a 1 s
    greedy cycle ran 3.8 s on a contended 100-node cluster (bench/bench_cycle.py seed 0)."""
    whole = run_greedy(state, NOW, bounded=True)
    assert not whole.search_clocked and whole.session.evictions
    clock = TickingClock()
    monkeypatch.setattr(preemptors, "time", clock)
    cut = run_greedy(state, NOW, bounded=True, deadline=12.0)      # a dozen budget checks
    assert cut.search_clocked
    tried = lambda g: sum(o.attempts for o in g.actions.values())    # noqa: E731
    assert 0 < tried(cut) < tried(whole)
    why = [m for o in cut.actions.values() for m in o.failed.values() if "stopped" in m]
    assert len(why) == 1 and "the cycle's time limit" in why[0]
    # what was found before the clock stopped it is kept, as KAI's decisions so far
    assert set(cut.session.evictions) <= set(whole.session.evictions)
    # past its deadline no action searches at all
    gone = run_greedy(state, NOW, bounded=True, deadline=clock.now - 1)
    assert gone.search_clocked and tried(gone) == 0 and not gone.session.evictions
    assert all(o.budget_spent for o in gone.actions.values())


def test_a_cycle_says_when_the_clock_stopped_the_search(state, monkeypatch) -> None:
    monkeypatch.setattr(preemptors, "time", TickingClock(1e12))       # every deadline passed at once
    for engine in ("greedy", "cp-sat"):
        out = run_cycle(state, CycleSettings(engine=engine, time_limit=1.0, now=NOW))
        assert out.to_json()["cycle"]["evictionSearch"] == CLOCKED, engine
        # KAI's actions searched nothing (the model may still evict: its own search)
        assert not out.greedy.session.evictions, engine
        assert all(o.budget_spent and not o.attempts for o in out.greedy.actions.values()), engine


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


def outcomes(actions) -> dict[str, tuple]:
    """Per action what it decided: preemptors served, preemptors failed and why, attempts."""
    return {a: (sorted(o.solved), sorted(o.failed.items()), o.attempts, o.skipped) for a, o in actions.items()}


# 400 and 1,200 stop the showcase's search partway; with the scenario filter 2,500 finishes it
@pytest.mark.parametrize("more", [400, 1_200, 10**9])
def test_a_search_resumed_decides_what_one_longer_search_decides(state, small_rates, more) -> None:
    """Why: the CP-SAT cycle stops KAI's search at half its limit for the model, and where it then
    falls back to KAI's decisions it resumes that search (cycle.py `resume_search`). Resumed from where
    the bound stopped it (the stopped preemptor tried again whole), it must decide what one search
    with the larger bound decides: the same evictions, placements and per-action outcomes."""
    cut = run_greedy(state, NOW, bounded=True)               # the hint's bound: 1,000 (small_rates)
    assert cut.search is not None and not cut.search.finished
    assert any(o.budget_spent for o in cut.actions.values())
    budget = cut.search.budget
    budget.resume(more, None, pipeline.CYCLE_NOTE)
    resumed = cut.search.run(budget)
    once = run_greedy(state, NOW, evictions=False)
    search = pipeline.EvictionSearch(state, once.session, NOW)
    whole = search.run(preemptors.Budget(pipeline.hint_budget(state).left + more, pipeline.CYCLE_NOTE))
    assert evictions(cut.session) == evictions(once.session) and cut.session.evictions
    assert placements(cut.session) == placements(once.session)
    assert outcomes(resumed) == outcomes(whole)
    assert cut.search.finished == search.finished == (more == 10**9)
    # resumed twice, in smaller steps, it still decides the same
    again = run_greedy(state, NOW, bounded=True)
    for _ in range(3):
        again.search.budget.resume(more // 3 + (more % 3 > 0), None, pipeline.CYCLE_NOTE)
        again.search.run(again.search.budget)
    if more % 3 == 0:
        assert evictions(again.session) == evictions(once.session)


def test_a_cp_sat_cycle_that_falls_back_searched_as_the_greedy_engine_does(state, small_rates, monkeypatch) -> None:
    """bench_cycle's 100-node clusters: the CP-SAT cycle fell back at 0.53 s of a 1 s limit with KAI's
    search of half the limit (3 of 20 seeds), and admitted fewer GPUs than the greedy engine on 10 of
    20. Its fallback now resumes KAI's search until the cycle's end with the greedy engine's bound:
    where no clock stops either search, it decides what `--engine greedy` decides."""
    from kai_cp import cycle as cycle_mod
    monkeypatch.setattr(cycle_mod, "BUILD_SECONDS_PER_JOB", 1e6)       # no model: the cycle falls back
    settings = dict(time_limit=30.0, now=NOW)
    greedy = run_cycle(state, CycleSettings(engine="greedy", **settings))
    cp = run_cycle(state, CycleSettings(engine="cp-sat", **settings))
    assert cp.status == "FALLBACK" and "searchResumedSeconds" in cp.stats and "evictionSearch" not in cp.stats
    assert not greedy.greedy.search_clocked and not cp.greedy.search_clocked
    assert evictions(cp.session) == evictions(greedy.session) and cp.session.evictions
    assert placements(cp.session) == placements(greedy.session)
    assert outcomes(cp.actions) == outcomes(greedy.actions)
    # what the hint's search alone (the fallback before) decided is less
    hint = run_greedy(state, NOW, bounded=True)
    assert len(hint.session.evictions) < len(cp.session.evictions)
