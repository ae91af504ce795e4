"""How kai_cp/model/solve.py hands its wall budget to CP-SAT.

Why: CP-SAT gives up after its presolve when that took about half of `max_time_in_seconds`,
dropping the complete hint it has just checked (measured on bench_scale's 1,000-node lean model:
load and presolve ~0.05 s; a 0.10 s limit answered UNKNOWN, "Stopped after presolve", a 0.12 s
one FEASIBLE with the hint at 0.05 s). The cycle's solver often gets ~0.1 s there, so its
nominal limit is kept well past twice the budget and a timer (stop_search) ends the search at
the budget instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ortools.sat.python import cp_model

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_cycle import fragmented_cluster  # noqa: E402

import kai_cp.model.build as build  # noqa: E402
from kai_cp.actions.pipeline import run_greedy  # noqa: E402
from kai_cp.loader import load_snapshot_dict  # noqa: E402
from kai_cp.model import solve as solve_mod  # noqa: E402
from kai_cp.state import build_cluster_state  # noqa: E402


def _lean_model():
    state = build_cluster_state(load_snapshot_dict(fragmented_cluster(), "fragmented"))
    greedy = run_greedy(state, 0.0, evictions=False)
    return build.build_model(state, greedy, evictions=False, lean=True, pair_budget=6000)


def _record(monkeypatch) -> tuple[list[tuple[float, float]], list[float]]:
    """Per CpSolver.solve call its (max_time_in_seconds, max_deterministic_time), and every
    timer's interval, in order."""
    seen: list[tuple[float, float]] = []
    timers: list[float] = []
    real_solve, real_timer = cp_model.CpSolver.solve, solve_mod.threading.Timer

    def recording(self, model, callback=None):
        seen.append((self.parameters.max_time_in_seconds, self.parameters.max_deterministic_time))
        return real_solve(self, model, callback)

    def recording_timer(interval, function, *args, **kwargs):
        timers.append(interval)
        return real_timer(interval, function, *args, **kwargs)
    monkeypatch.setattr(cp_model.CpSolver, "solve", recording)
    monkeypatch.setattr(solve_mod.threading, "Timer", recording_timer)
    return seen, timers


def test_cp_sat_gets_more_than_twice_the_budget_and_the_timer_ends_it(monkeypatch) -> None:
    seen, timers = _record(monkeypatch)
    out = solve_mod.solve(_lean_model(), 0.25, 0, 1, deterministic_limit=0.2)
    assert out.counts is not None                  # the hint at least: a solution, not UNKNOWN
    (nominal, deterministic), = seen
    assert nominal > 2 * 0.25                       # presolve never reaches half of it before the timer
    assert timers == [0.25]                         # the wall budget itself is the timer's
    assert deterministic == 0.2                     # what normally ends the search is unchanged


def test_each_pass_of_two_workers_gets_the_same_rule(monkeypatch) -> None:
    """Two workers: a single-worker pass first, then the interleaved one with what is left."""
    seen, timers = _record(monkeypatch)
    ctx = _lean_model()
    # a deterministic limit the first pass cannot prove optimality in, so both passes run
    solve_mod.solve(ctx, 2.0, 0, 2, deterministic_limit=1e-4)
    assert len(seen) == len(timers) >= 1
    for (nominal, _), budget in zip(seen, timers):
        assert nominal > 2 * budget
    assert timers[0] == 2.0 and all(b < 2.0 for b in timers[1:])
