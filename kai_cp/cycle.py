"""One scheduling cycle: greedy first (KAI's allocate), then one CP-SAT model warm-started
from it under the remaining time, and the greedy decisions whenever the solver has nothing
at least as good in time."""

from __future__ import annotations

import importlib
import logging
import math
import numbers
import os
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable

from kai_cp.actions.pipeline import (CYCLE_NOTE, beyond_hint, estimated_greedy_seconds, hint_budget, run_evictions,
                                     run_greedy, unmodelled_evictions)
from kai_cp.actions.preemptors import ActionOutcome
from kai_cp.gcpause import gc_paused
from kai_cp.gpu_sharing import gpu_fraction
from kai_cp.actions.allocate import GreedyResult
from kai_cp.actions.stale_gangs import StaleOutcome, outcome_json, run_after_actions
from kai_cp.jobs import PENDING, queue_gpu_of_accepted
from kai_cp.reasons import unschedulable
from kai_cp.session import Session
from kai_cp.state import ClusterState
from kai_cp.validate import violations

from kai_cp.defaults import (DEFAULT_SEED, DEFAULT_TIME_LIMIT, DEFAULT_WORKERS, ENGINES,  # noqa: F401 (re-exported)
                             SEED_MAX, SEED_MIN)

if TYPE_CHECKING:        # (the model's modules import OR-Tools: only cp-sat cycles load them)
    from kai_cp.model.base import ModelContext

DETERMINISTIC_SHARE = 0.15  # CP-SAT deterministic time per second of time limit (ends the search reproducibly);
# divided by the worker count: interleaved workers wait on each other (measured: two workers took
# 1.5 s of wall time for 0.5 s of deterministic time on a GPU-sharing model, one worker 0.02 s).
# 0.15, not 0.5: with the fragmentation terms a 60-node model (tests/test_determinism.py) runs to
# its limit at ~2.5 s of wall time per deterministic second, so 0.4 and even 0.25 raced the
# wall-clock guard of a 1 s cycle and the answer depended on the machine's speed.
# Build time per pending job, from below: the fewest seconds measured per job of the cycle's order
# was 0.22 ms (bench/bench_evictions.py's full-cycle shape: 4,000 one-pod jobs, one class each);
# most clusters take 0.5-2 ms. A cycle whose greedy left less than this estimate builds no model.
BUILD_SECONDS_PER_JOB = 1.5e-4
# Seconds kept back from the solver for decoding, KAI's last action and the result: a base, per
# placement greedy made, per victim pod the model has variables for (`python bench/bench_decode.py
# SNAPSHOT ...`). On 16 snapshots (1,000-10,000 nodes, kai-differential, the examples,
# bench_evictions' shapes; 3 s limit, other work beside the runs) all of it took 2-78 ms, at most
# 47 us per placement (medium-s1: 65 ms for 1,377) and ~10 us per eviction decoded (4,000
# reclaimed with 500 placements: 67 ms); this keeps 1.7-3x that. (0.08 s + 50 us per placement
# and per two victims kept 3-50x, and left a 1,000-node shared-GPU cycle's solver no time to find
# a solution: FALLBACK.) KAI's eviction actions run after the model are kept back apart (_run).
DECODE_RESERVE = 0.05
DECODE_SECONDS_PER_POD = 45e-6
DECODE_SECONDS_PER_VICTIM = 10e-6
# The model's decisions are checked before they are returned (kai_cp/validate.py; a break falls
# back to KAI's): medium-s1 18-35 ms for 1,377 placements, bench_scale's 1,000 nodes 21 ms for 888.
VALIDATE_SECONDS_PER_POD = 25e-6
# Where keeping back the time decoding needs leaves a lean model's solver less than this, it runs
# until the decoding reserve's base instead (greedy's own allocation is then usable, and a better
# solution only if found in time to decode it): at 10,000 nodes (bench_scale's) it proved greedy's
# allocation optimal in 0.03-0.06 s, and 0.01 s found nothing.
LEAN_SOLVE_SECONDS = 0.1
# KAI's eviction search stops on the clock as well as on its work bound (actions/preemptors.py
# `Budget`): as the CP-SAT model's hint at this share of the time limit, so the model has the
# rest to be built, solved and decoded in (at 100 nodes the hint's bound took 0.6-2.1 s of a 1 s
# cycle, which then fell back late); in the greedy engine's cycle at the limit less this reserve,
# for KAI's last action (stale gangs) and the result.
HINT_SHARE = 0.5
END_RESERVE = 0.03
STRICT_ENV = "KAI_CP_STRICT"

log = logging.getLogger(__name__)


# cycle.evictionSearch where the clock stopped KAI's eviction search before its work bound did
CLOCKED = ("stopped at the time limit's clock before its work bound: these decisions depend on the "
           "machine's speed (a longer --time-limit searches further)")


@dataclass(frozen=True)
class CycleSettings:
    engine: str = "cp-sat"
    time_limit: float = DEFAULT_TIME_LIMIT
    seed: int = DEFAULT_SEED
    workers: int = DEFAULT_WORKERS
    log: bool = False
    now: float | None = None          # the cycle's clock (epoch seconds) for time-based rules; None: time.time()

    def __post_init__(self) -> None:
        """Settings no cycle can run with are refused here, for scripts and notebooks as the
        command line refuses them: a seed past 32 bits failed every model (a silent fallback to
        KAI's decisions), an infinite limit failed writing the cycle's clock."""
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; choose one of {', '.join(ENGINES)}")
        if not (self.time_limit > 0 and math.isfinite(self.time_limit)):
            raise ValueError(f"time_limit must be a finite number of seconds > 0, not {self.time_limit!r}")
        if not (isinstance(self.seed, numbers.Integral) and SEED_MIN <= self.seed <= SEED_MAX):
            raise ValueError(f"seed must be a 32-bit integer ({SEED_MIN} to {SEED_MAX}), not {self.seed!r}")
        if not (isinstance(self.workers, numbers.Integral) and self.workers >= 1):
            raise ValueError(f"workers must be an integer >= 1, not {self.workers!r}")
        if self.now is not None and not math.isfinite(self.now):
            raise ValueError(f"now must be finite epoch seconds, not {self.now!r}")


@dataclass
class CycleResult:
    state: ClusterState
    session: Session
    greedy: GreedyResult
    engine: str
    status: str
    objective: float | None
    bound: float | None
    wall_seconds: float
    settings: CycleSettings
    stats: dict[str, Any] = field(default_factory=dict)
    solver_log: str = ""
    actions: dict[str, ActionOutcome] = field(default_factory=dict)    # eviction actions' outcomes
    stale: StaleOutcome | None = None     # stale-gang eviction's decisions (None: the action is not configured)

    def binds(self) -> list[dict]:
        out = []
        for p in sorted(self.session.placements.values(), key=lambda p: p.task.key):
            if not p.pipelined:
                out.append({"pod": p.task.key, "podGroup": p.task.job, "node": self.state.nodes[p.node].name,
                            "gpuGroups": list(p.gpu_groups), "gpuFraction": gpu_fraction(self.state, p)})
        return out

    def pipelined(self) -> list[dict]:
        return [{"pod": p.task.key, "podGroup": p.task.job, "node": self.state.nodes[p.node].name,
                 "gpuGroups": list(p.gpu_groups)}
                for p in sorted(self.session.placements.values(), key=lambda p: p.task.key) if p.pipelined]

    def nominations(self) -> dict[str, str]:
        """Pod key -> node for the pending pods that carry `status.nominatedNodeName` after this
        cycle (kube-scheduler's field on a preemptor): the pods of the jobs this cycle's evictions
        are for, and those pipelined again to the node they were nominated to (their victims are
        still leaving). kai_cp/simulate.py and integration/status.py both write these."""
        preemptors = {e.for_job for e in self.session.evictions.values()}
        out: dict[str, str] = {}
        for p in self.session.placements.values():
            if p.pipelined:
                node = self.state.nodes[p.node].name
                if p.task.job in preemptors or p.task.nominated_node == node:
                    out[p.task.key] = node
        return out

    def evictions(self) -> list[dict]:
        return [{"pod": e.task.key, "podGroup": e.task.job, "action": e.action, "forPodGroup": e.for_job,
                 "node": self.state.nodes[e.node].name, "message": e.message}
                for e in sorted(self.session.evictions.values(), key=lambda e: e.task.key)]

    def to_json(self) -> dict:
        with gc_paused():
            return self._to_json()

    def _to_json(self) -> dict:
        return {
            "cycle": {
                "engine": self.engine, "status": self.status, "objective": self.objective, "bound": self.bound,
                "wallSeconds": round(self.wall_seconds, 6), "timeLimitSeconds": self.settings.time_limit,
                "seed": self.settings.seed, "workers": self.settings.workers,
                **{k: v for k, v in self.stats.items()},
            },
            "fairShare": {q.name: {r: number(q.fair_share[r]) for r in ("gpu", "cpu", "memory")}
                          for q in sorted(self.state.queues.values(), key=lambda q: q.name)},
            "binds": self.binds(),
            "pipelined": self.pipelined(),
            "evictions": self.evictions(),
            **outcome_json(self.stale),
            "unschedulable": unschedulable(self.state, self.greedy, self.session, self.engine),
            "warnings": [w.to_json() for w in self.state.warnings + (self.stale.warnings if self.stale else [])],
        }


def number(v: Fraction) -> int | float:
    return int(v) if v.denominator == 1 else float(v)


def pending_gpus_placed(state: ClusterState, session: Session) -> tuple[Fraction, Fraction]:
    """GPUs (queue accounting) of the pods pending at the cycle's start that the decisions bind or
    pipeline, and of those they bind: the work a cycle admits, without running victims it moves."""
    admitted = bound = Fraction(0)
    for p in session.placements.values():
        if p.task.status == PENDING:
            gpus = queue_gpu_of_accepted(p.task, state.nodes[p.node].gpu_memory)
            admitted += gpus
            if not p.pipelined:
                bound += gpus
    return admitted, bound


def short_of_kai(state: ClusterState, ours: Session, kais: Session) -> str | None:
    """Why the model's decisions would be worse than KAI's actions by what users see of a cycle,
    or None. They must admit as many GPUs of pending pods (bound or pipelined): the model sees
    KAI's victims that KAI's actions re-place elsewhere only as evicted, and evictions after the
    model run on its allocation, either can leave it admitting less. And they must bind as many
    now: the model's order level counts a job pipelined behind evictions as started like one
    bound, so it can start more jobs while binding fewer GPUs than KAI binds this cycle
    (kai-differential small-s2-full as KAI's tool saw it: 155.75 bound against 163.75)."""
    (admitted, bound), (kai_admitted, kai_bound) = pending_gpus_placed(state, ours), pending_gpus_placed(state, kais)
    if admitted < kai_admitted or bound < kai_bound:
        return (f"the model's decisions place {number(admitted)} GPUs of pending pods ({number(bound)} bound), "
                f"KAI's actions {number(kai_admitted)} ({number(kai_bound)} bound)")
    return None


def pair_budget(state: ClusterState, greedy: GreedyResult, time_limit: float) -> int:
    """Model size for the time greedy leaves to building and solving. Greedy's time is estimated
    from the problem's size, not read from the clock, so the same snapshot and settings always
    give the same model (and so the same decisions)."""
    estimated_greedy = estimated_greedy_seconds(state, len(greedy.order))
    from kai_cp.model.candidates import PAIRS_PER_SECOND   # lazily: it imports OR-Tools
    return int(PAIRS_PER_SECOND * max(0.0, time_limit - estimated_greedy))


def decode_reserve(ctx: ModelContext) -> float:
    """Seconds kept back from the solver for decoding (it replays every placement and eviction),
    so the cycle ends in time. Only the victims the model has variables for can be evicted: at
    1,000 nodes 2,174 of the victim pool's 7,768 pods (counting the whole pool kept 0.14 s more
    than decoding can take, and left the solver no time)."""
    victims = sum(len(u.tasks) for u, _ in ctx.extensions.get("eviction-units", ()))
    return DECODE_RESERVE + (DECODE_SECONDS_PER_POD + VALIDATE_SECONDS_PER_POD) * len(ctx.greedy.session.placements) \
        + DECODE_SECONDS_PER_VICTIM * victims


def _build_deadline(t0: float, time_limit: float, after_model: float, greedy: GreedyResult) -> float:
    """Past this instant the solver would get less than MIN_SOLVE_SECONDS (the budget keeps at
    least the decoding reserve back) and the cycle falls back whatever the model: building it,
    or going on building it (seconds at 10,000 nodes), would only make the fallback late."""
    from kai_cp.model.solve import MIN_SOLVE_SECONDS
    return (t0 + time_limit - MIN_SOLVE_SECONDS - DECODE_RESERVE - after_model
            - (DECODE_SECONDS_PER_POD + VALIDATE_SECONDS_PER_POD) * len(greedy.session.placements))


def check_deadline(end: float, session: Session) -> float:
    """Where KAI's eviction actions run on the model's answer, the instant they stop: `end` less
    what checking the decisions then takes (kai_cp/validate.py, VALIDATE_SECONDS_PER_POD)."""
    return end - VALIDATE_SECONDS_PER_POD * len(session.placements)


def resume_search(state: ClusterState, kai: GreedyResult, time_limit: float, end: float, stats: dict[str, Any]) -> None:
    """Where a CP-SAT cycle falls back to KAI's decisions, KAI's eviction search, stopped for the
    model at HINT_SHARE of the limit, goes on from where it stopped until the cycle's end, with the
    greedy engine's work bound (actions/pipeline.py cycle_budget): the fallback is then what
    `--engine greedy` decides (where neither search is stopped by the clock), instead of a search
    of half the time. On bench_cycle's 100-node clusters the CP-SAT cycle fell back at 0.53 s on 3
    of 20 seeds (KAI's consolidation moves, whose eviction actions keep their time after the
    model) and admitted fewer GPUs than the greedy engine on 10 of 20. Not where the model's
    answer is KAI's allocation (a lean model proving it best): those cycles keep ending early
    (twelve 1 s `kai-cp simulate` cycles on 5 seeds: 48 s in all with them resumed, 33 without)."""
    search = kai.search
    if search is None or search.budget is None or search.finished or time.perf_counter() >= end:
        return
    t = time.perf_counter()
    budget = search.budget
    budget.resume(beyond_hint(state, len(kai.order), time_limit), end, CYCLE_NOTE)
    kai.actions = search.run(budget)
    stats["searchResumedSeconds"] = round(time.perf_counter() - t, 6)
    if budget.clocked:
        stats["evictionSearch"] = CLOCKED
    else:
        stats.pop("evictionSearch", None)


def load_engine(engine: str) -> None:
    """Import what `engine`'s cycles need (OR-Tools with pandas for cp-sat: 0.3-0.5 s). A cycle
    imports it itself, before its clock starts; a caller that runs many cycles (the in-cluster
    loop, a benchmark) calls this at its own start, so its first cycle is not that much late."""
    if engine == "cp-sat":
        for module in ("kai_cp.model.build", "kai_cp.model.decode", "kai_cp.model.solve"):
            importlib.import_module(module)


def run_cycle(state: ClusterState, settings: CycleSettings = CycleSettings()) -> CycleResult:
    with gc_paused():
        result = _run(state, settings)
        # KAI's last action, on whichever session the cycle returns (greedy's or the decoded one).
        t0 = time.perf_counter()
        result.stale = run_after_actions(state, result.session, settings.now)
        result.wall_seconds += time.perf_counter() - t0
        return result


def _run(state: ClusterState, settings: CycleSettings) -> CycleResult:
    if settings.engine == "cp-sat":
        # Imported here, before the clock starts: OR-Tools (with pandas) is ~0.5 s of start-up
        # that greedy-only runs and `kai-cp --help` skip.
        load_engine("cp-sat")
    t0 = time.perf_counter()
    now = settings.now if settings.now is not None else time.time()
    end = t0 + settings.time_limit - END_RESERVE      # where KAI's eviction actions stop at the latest
    cp_sat = settings.engine == "cp-sat"
    greedy = run_greedy(state, now, bounded=cp_sat, time_limit=None if cp_sat else settings.time_limit,
                        deadline=t0 + HINT_SHARE * settings.time_limit if cp_sat else end)
    t_greedy = time.perf_counter() - t0
    stats: dict[str, Any] = {"greedySeconds": round(t_greedy, 6)}
    if greedy.search_clocked:
        stats["evictionSearch"] = CLOCKED
    if settings.engine == "greedy" or not state.config.may_allocate:
        return CycleResult(state, greedy.session, greedy, "greedy" if settings.engine == "greedy" else "cp-sat",
                           "GREEDY" if settings.engine == "greedy" else "OPTIMAL", None, None,
                           time.perf_counter() - t0, settings, stats, actions=greedy.actions)
    full = greedy

    def kais(engine: str, status: str, objective: float | None = None, bound: float | None = None,
             log: str = "", resume: bool = False) -> CycleResult:
        """KAI's decisions as the cycle's: a fallback (its search resumed), or the model's answer
        where it is theirs (`resume`: its search resumed too, as where the cycle would otherwise
        have fallen back)."""
        if status == "FALLBACK" or resume:
            resume_search(state, full, settings.time_limit, end, stats)
        return CycleResult(state, full.session, full, engine, status, objective, bound, time.perf_counter() - t0,
                           settings, stats, log, actions=full.actions)

    try:
        return _modelled(state, settings, greedy, kais, t0, t_greedy, now, end, stats)
    except Exception as e:
        # KAI's decisions are made and valid: a fault in building, solving or decoding the model
        # (a model bug) costs this cycle its improvement, not its decisions. Where the same state
        # comes back every cycle, raising would stop scheduling altogether.
        if strict():
            raise
        log.warning("cycle falls back to KAI's decisions: the model failed", exc_info=True)
        stats["modelFault"] = f"{type(e).__name__}: {e}"
        stats["fallbackReason"] = f"the model failed ({stats['modelFault']}); KAI's decisions are used"
        return kais("greedy", "FALLBACK")


class InvalidDecisions(Exception):
    """The model's decisions break a rule the independent check holds (kai_cp/validate.py: node
    resources, predicates, shared GPUs, gangs, topology, queue limits, the eviction rules): a
    model bug, never applied. Random objectives over generated clusters found such bugs
    (tests/test_model_soundness.py); this keeps any left from reaching a cluster."""

    def __init__(self, broken: list[str]) -> None:
        more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
        super().__init__(f"the model's decisions break a rule: {broken[0]}{more}")
        self.broken = broken


def strict() -> bool:
    """`KAI_CP_STRICT=1`: a fault of the model raises instead of falling back to KAI's decisions.
    The test suite sets it (tests/conftest.py), so a model bug fails a test rather than hide
    behind a valid fallback."""
    return os.environ.get(STRICT_ENV) == "1"


def _modelled(state: ClusterState, settings: CycleSettings, greedy: GreedyResult,
              kais: Callable[..., CycleResult], t0: float, t_greedy: float, now: float, end: float,
              stats: dict[str, Any]) -> CycleResult:
    """The cp-sat part of a cycle, after KAI's actions (`greedy`): the model's decisions, or
    KAI's (`kais`) where it has nothing at least as good in time."""
    from kai_cp.model.base import kai_moved
    from kai_cp.model.build import BuildTimeout, build_model
    from kai_cp.model.decode import decode, is_greedys
    from kai_cp.model.solve import MIN_SOLVE_SECONDS, solve
    full = greedy
    fixed = unmodelled_evictions(greedy)
    # KAI's eviction actions' own time in the actions above (less their allocate's): what they
    # take again where they run after the model. Not less an allocate run again below (where
    # allocate's decisions were not kept): one slow run of it on a loaded machine took the
    # actions' time off what is kept back from the solver (CI, 2026-11-28).
    actions_seconds = max(0.0, t_greedy - greedy.allocate_seconds)
    after_model = 0.0       # seconds KAI's eviction actions will take after the model
    # ... after a lean model (model/scope.py), where greedy's hint is allocate's decisions: when
    # its eviction actions changed nothing (or, below, when they run after the model anyway).
    # None: no lean model.
    lean_after: float | None = None
    squeezed = False        # a fixed model built lean, KAI's actions after it not kept back (below)
    if not fixed and not greedy.session.evictions and not any(a.solved for a in greedy.actions.values()):
        lean_after = actions_seconds
    too_little = "KAI's actions left too little of the cycle's time limit to build the model"

    def no_time_to_build(at: float, hint: GreedyResult, after: float | None = None) -> bool:
        after = after_model if after is None else after
        return at + BUILD_SECONDS_PER_JOB * len(hint.order) >= _build_deadline(t0, settings.time_limit, after, hint)
    if fixed:
        # The model cannot decide these evictions: it decides the allocation alone (from KAI's
        # allocate as hint) and KAI's eviction actions then run on its answer; greedy's whole
        # cycle stays the fallback. Their time is kept back from the solver too, with the same
        # budget.
        stats["evictionsBy"] = f"greedy actions after the model ({fixed})"
        after_model = actions_seconds
        # The hint is allocate's decisions alone, kept before the actions ran (run_greedy), else
        # allocate run again: where that, as long as it took in KAI's actions, leaves the model
        # no time, the cycle falls back now, and KAI's search resumed gets the time (at 10,000
        # nodes allocate ran 0.36 s again, then the fallback, then the search, and the cycle
        # ended 0.05-0.1 s past its limit).
        again = 0.0 if greedy.alone is not None else full.allocate_seconds
        if no_time_to_build(time.perf_counter() + again, full):
            if greedy.alone is None or no_time_to_build(time.perf_counter(), full, 0.0):
                stats["fallbackReason"] = too_little
                return kais("greedy", "FALLBACK")
            # With the actions' time kept back nothing is left for the model (10,000 nodes: the
            # hint's search consolidated within its half of the limit), without it a lean model
            # fits: its answer where it is allocate's is KAI's whole cycle (is_greedys), and an
            # improved one gets KAI's actions with the time it leaves, as after a lean model
            # whose hint they left alone; where they then place less, KAI's cycle is returned
            # (short_of_kai).
            after_model, squeezed = 0.0, True
            stats["evictionsBy"] += ", with the time the lean model leaves"
        greedy = greedy.alone or run_greedy(state, now, evictions=False)
        lean_after = 0.0
    # Where KAI's eviction actions made evictions the full model decides, a lean model (which has
    # no eviction variables) cannot take their decisions as its hint: where the full model would
    # not end in time, the lean one is built on allocate's decisions, kept before the actions ran,
    # and the actions run again on its answer, as after a fixed model squeezed lean; its answer
    # where it is allocate's is KAI's whole cycle, its search resumed as a fallback's would be
    # (bench_scale's 1,000 nodes: the hint's search evicted 6 pods, and the cycle fell back
    # without a model).
    lean_hint = greedy.alone if lean_after is None and not fixed else None
    t1 = time.perf_counter()
    deadline = _build_deadline(t0, settings.time_limit, after_model, greedy)
    if no_time_to_build(t1, greedy):
        stats["fallbackReason"] = too_little
        return kais("greedy", "FALLBACK")
    # A lean model's allocation needs decoding and KAI's eviction actions after it only where it
    # is not greedy's own (which the solver then proved best, or found nothing above): when no
    # time is left for them then, greedy's cycle is returned. So its build may run until the solver
    # could still get MIN_SOLVE_SECONDS.
    lean_deadline = (None if lean_after is None and lean_hint is None
                     else t0 + settings.time_limit - MIN_SOLVE_SECONDS - DECODE_RESERVE)
    try:
        ctx = build_model(state, greedy, pair_budget=pair_budget(state, greedy, settings.time_limit),
                          evictions=not fixed, deadline=deadline, lean_deadline=lean_deadline, lean=squeezed,
                          lean_hint=lean_hint)
    except (OverflowError, BuildTimeout) as e:   # objective not exact in a double, or out of time
        stats["fallbackReason"] = str(e)
        stats["buildSeconds"] = round(time.perf_counter() - t1, 6)
        return kais("greedy", "FALLBACK")
    t_build = time.perf_counter() - t1
    lean = bool(ctx.extensions.get("lean"))
    rerun = ctx.greedy is not greedy         # built lean on allocate's decisions (lean_hint)
    greedy = ctx.greedy
    # After a lean model whose hint is allocate's decisions because KAI's eviction actions changed
    # nothing, running them again on the model's allocation is worth the time it leaves, not more:
    # the solver gets the time they took (lean_after), and they run only where it is left after
    # decoding (their earlier run's outcome explains the pending jobs otherwise). After a fixed
    # model they make evictions greedy made, and their time is kept back from the solver.
    if rerun:
        stats["evictionsBy"] = ("greedy actions after the lean model (its hint allocate's decisions: KAI's "
                                "evictions are not lean model variables)")
    elif lean and not fixed:
        stats["evictionsBy"] = "greedy actions after the lean model"
    stats["modelScope"] = "lean" if lean else "full"
    greedy_objective = ctx.greedy_objective
    proto = ctx.model.proto
    stats.update(buildSeconds=round(t_build, 6), variables=len(proto.variables), constraints=len(proto.constraints),
                 podClasses=len(ctx.classes), greedyObjective=greedy_objective,
                 hint=str(ctx.extensions.get("hint", "greedy")))
    if not ctx.x:
        stats["solveSeconds"] = 0.0
        return kais("cp-sat", "OPTIMAL", float(greedy_objective), float(greedy_objective), resume=rerun)
    keep = decode_reserve(ctx) + after_model       # decoding any solution, and the actions after it
    budget = settings.time_limit - (time.perf_counter() - t0) - keep
    improve_by = None
    if lean and budget < LEAN_SOLVE_SECONDS:
        # Past the time decoding needs, only greedy's own allocation is sure to be usable: a better
        # solution found later ends the search at once (decoded if time is left, else fallback).
        improve_by = max(0.0, budget)
        budget = settings.time_limit - (time.perf_counter() - t0) - DECODE_RESERVE
    outcome = solve(ctx, budget, settings.seed, settings.workers, settings.log,
                    deterministic_limit=settings.time_limit * DETERMINISTIC_SHARE / max(1, settings.workers),
                    improve_by=improve_by, floor=greedy_objective)
    stats["solveSeconds"] = round(outcome.wall_seconds, 6)
    stats["solverStatus"] = outcome.status
    if outcome.counts is None or outcome.objective is None or outcome.objective < greedy_objective:
        stats["fallbackReason"] = (f"the solver found no solution in the time left ({outcome.status})"
                                   if outcome.counts is None or outcome.objective is None else
                                   "the model's best solution scores below KAI's decisions, which rest on moved "
                                   "victims the model cannot express" if kai_moved(greedy) else
                                   "the model's best solution scores below KAI's decisions")
        return kais("greedy", "FALLBACK", float(greedy_objective), outcome.bound, outcome.log)
    # A solution that is greedy's allocation and no better (devices of shared GPUs aside, which
    # the objective weighs): KAI's cycle is its decoding, eviction actions included.
    if lean and outcome.objective == greedy_objective and is_greedys(ctx, outcome.counts):
        stats["solution"] = "greedy's allocation"
        return kais("cp-sat", outcome.status, outcome.objective, outcome.bound, outcome.log, resume=rerun)
    if time.perf_counter() + keep - DECODE_RESERVE > t0 + settings.time_limit:
        if outcome.late:
            # The lean solver ran past the time decoding needs only to prove greedy's allocation
            # best; the better solution came after that time, so until then greedy's allocation
            # was the model's best, as where the search ends there without one (FEASIBLE above).
            # Falling back here labelled the same decisions worse for the search having found more
            # (bench_scale's 10,000 nodes, 2 of 3 runs); KAI's search is resumed as it was then.
            stats["solution"] = ("greedy's allocation: the model's best within the time left to decode; a better "
                                 f"one (objective {outcome.objective:.17g}) was found after it")
            return kais("cp-sat", "FEASIBLE", float(greedy_objective), outcome.bound, outcome.log, resume=True)
        stats["fallbackReason"] = "no time was left to decode the model's decisions"
        return kais("greedy", "FALLBACK", outcome.objective, outcome.bound, outcome.log)
    session = decode(ctx, outcome.counts)
    actions: dict = {}
    if fixed or rerun or (lean and time.perf_counter() + (lean_after or 0.0) <= t0 + settings.time_limit):
        t = time.perf_counter()
        # The check of the decisions follows: the search stops in time for it (it ran to `end`,
        # and a 10,000-node cycle's check then took it 10-40 ms past its limit).
        budget = hint_budget(state, check_deadline(end, session))
        actions = run_evictions(state, session, now, budget)
        stats["evictSeconds"] = round(time.perf_counter() - t, 6)
        if budget.clocked:
            stats["evictionSearch"] = CLOCKED
    elif lean:
        stats["evictionsBy"] = ("none: KAI's eviction actions evicted nothing after allocate, and no time was "
                                "left to run them again on the lean model's allocation")
        actions = full.actions
    short = short_of_kai(state, session, full.session)
    if short is not None:          # kai-cp never returns less than KAI's whole cycle
        stats["fallbackReason"] = short
        return kais("greedy", "FALLBACK", outcome.objective, outcome.bound, outcome.log)
    broken = violations(state, session, now)
    if broken:                     # a model bug: the cycle falls back to KAI's decisions (_run)
        raise InvalidDecisions(broken)
    return CycleResult(state, session, greedy, "cp-sat", outcome.status, outcome.objective, outcome.bound,
                       time.perf_counter() - t0, settings, stats, outcome.log, actions=actions)
