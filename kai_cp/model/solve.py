"""Solve under a deadline, deterministically.

The same snapshot, seed and worker count give the same answer: the search is interleaved
(deterministic with several workers) and bounded by deterministic time, while a wall-clock
guard stops it outright if the machine is too slow to honour the deadline.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.model.base import ModelContext

STATUS = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
          cp_model.MODEL_INVALID: "MODEL_INVALID", cp_model.UNKNOWN: "UNKNOWN"}


@dataclass
class SolveOutcome:
    status: str
    objective: float | None
    bound: float | None
    counts: np.ndarray | None         # solution value per pair, None without a solution
    wall_seconds: float
    log: str = ""
    # the search ended on the first solution better than `floor` found past `improve_by`: until
    # then none better was found, so the floor's (greedy's allocation) was the best in that time
    late: bool = False


FIRST_PASS_SHARE = 0.3     # of the deterministic time, for the single-worker pass before several workers


def _rehint(ctx: ModelContext) -> None:
    """Hint the model with the last solution (kept by the first pass on every variable)."""
    values = ctx.__dict__.get("_last_solution")
    if not values:
        return
    ctx.model.clear_hints()
    for var, value in values:
        ctx.model.add_hint(var, value)


MIN_SOLVE_SECONDS = 0.01     # less wall time than this left: the solver is not started
NOMINAL_TIME_FACTOR = 4.0    # max_time_in_seconds per second of wall budget (see solve)


class _StopOnceImproved(cp_model.CpSolverSolutionCallback):
    """Ends the search at the first solution better than `floor` found from `at` (perf_counter)
    on, or at `at` if one was found before: a solution found later than `at` could not be
    decoded in time (the lean model's solver runs past that point to prove greedy's allocation
    optimal or find nothing better, kai_cp/cycle.py)."""

    def __init__(self, solver: cp_model.CpSolver, at: float, floor: float) -> None:
        super().__init__()
        self.solver, self.at, self.floor, self.improved, self.late = solver, at, floor, False, False

    def on_solution_callback(self) -> None:
        if self.objective_value > self.floor:
            if time.perf_counter() >= self.at:
                self.late = self.late or not self.improved     # none better before `at`
                self.stop_search()
            self.improved = True

    def at_deadline(self) -> None:
        if self.improved:
            self.solver.stop_search()


def solve(ctx: ModelContext, budget: float, seed: int, workers: int, log: bool = False,
          deterministic_limit: float | None = None, keep_solution: bool = False,
          improve_by: float | None = None, floor: float | None = None) -> SolveOutcome:
    """Solve within `budget` wall seconds. `deterministic_limit` (CP-SAT deterministic time,
    fixed by the caller from its settings, never from the clock) is what normally ends the
    search, so the answer does not depend on machine speed; the wall limit is the guard.
    `improve_by` (seconds from now, with `floor`): a solution better than `floor` found after it
    ends the search at once (_StopOnceImproved)."""
    t0 = time.perf_counter()
    if budget <= MIN_SOLVE_SECONDS:
        return SolveOutcome("UNKNOWN", None, None, None, 0.0)
    if workers > 1 and deterministic_limit is not None:
        # Interleaved workers start slowly and wait on each other; a short single-worker pass
        # first improves the hint they start from (measured on a GPU-sharing model: one worker
        # proves it optimal in 0.02 s, two interleaved ones need over a second). Both passes are
        # bounded by deterministic time, so the answer stays reproducible.
        first = solve(ctx, budget, seed, 1, log, deterministic_limit * FIRST_PASS_SHARE, keep_solution=True,
                      improve_by=improve_by, floor=floor)
        if first.status == "OPTIMAL" or first.counts is None:
            return first
        if improve_by is not None:
            if floor is not None and first.objective is not None and first.objective > floor \
                    and first.wall_seconds >= improve_by:
                return first
            improve_by = max(0.0, improve_by - first.wall_seconds)
        _rehint(ctx)
        budget -= first.wall_seconds
        deterministic_limit *= 1 - FIRST_PASS_SHARE
        if budget <= MIN_SOLVE_SECONDS:
            return first
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.num_workers = max(1, workers)
    p.random_seed = seed
    p.interleave_search = p.num_workers > 1
    p.interleave_batch_size = p.num_workers   # larger batches wait for the slowest subsolver
    # The wall budget is enforced by the timer below (stop_search), not by max_time_in_seconds:
    # CP-SAT gives up after its (light) presolve when that took about half of
    # max_time_in_seconds, and then drops the complete hint it has just checked. At 1,000 nodes the
    # lean model's load and presolve take ~0.05 s: with a 0.1 s budget it answered UNKNOWN and
    # the cycle fell back; given 4x as nominal limit, it returns the hint (or better) at the timer.
    p.max_time_in_seconds = NOMINAL_TIME_FACTOR * budget
    p.max_deterministic_time = deterministic_limit if deterministic_limit is not None else budget
    # Presolve is what overruns short deadlines on these models (full presolve took ~0.7 s on
    # 14k variables before the hint was even loaded), and even one light pass costs more than
    # it gives. Measured by bench/bench_solver.py (the 1 s cycle's own models of fragmented
    # clusters, 13 per size, 0.5 s per solve), models proven optimal at 200 / 1,000 nodes:
    # one worker without presolve 10/13 and 13/13; one worker with a light pass 4/13 and 8/13;
    # two interleaved workers with it 4/13 and 4/13. Without presolve the complete greedy hint
    # is a solution from the first instant.
    p.cp_model_presolve = False
    p.cp_model_probing_level = 0
    p.symmetry_level = 0
    # The full LP relaxation (cuts on every linear constraint, not only the objective's) is what
    # proves these lexicographic objectives: the 48-node example is proven optimal in 0.003
    # deterministic seconds instead of 0.114 (2,063 conflicts), and on every differential
    # snapshot, example and eviction fixture the objective reached at the cycle's deterministic
    # limit is the same or better (bench/bench_solver.py has the comparison).
    p.linearization_level = 2
    p.log_search_progress = log
    p.log_to_stdout = False
    lines: list[str] = []
    if log:
        solver.log_callback = lines.append
    timers = [threading.Timer(budget, solver.stop_search)]
    watch = None
    if improve_by is not None and floor is not None and improve_by < budget:
        watch = _StopOnceImproved(solver, t0 + improve_by, floor)
        timers.append(threading.Timer(max(0.0, t0 + improve_by - time.perf_counter()), watch.at_deadline))
    for timer in timers:
        timer.daemon = True
        timer.start()
    try:
        status = solver.solve(ctx.model, watch)
    finally:
        for timer in timers:
            timer.cancel()
    wall = time.perf_counter() - t0
    name = STATUS.get(status, str(status))
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        counts = np.array([solver.value(v) for v in ctx.x], dtype=np.int64)
        ctx.aux_values = {v.index: int(solver.value(v)) for v in ctx.aux}
        if keep_solution:
            variables = [ctx.model.get_int_var_from_proto_index(i) for i in range(len(ctx.model.proto.variables))]
            ctx.__dict__["_last_solution"] = [(v, int(solver.value(v))) for v in variables]
        return SolveOutcome(name, solver.objective_value, solver.best_objective_bound, counts, wall, "\n".join(lines),
                            late=watch is not None and watch.late)
    return SolveOutcome(name, None, None, None, wall, "\n".join(lines))
