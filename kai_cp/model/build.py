"""Assemble the cycle's CP-SAT model from its concerns, and hint it with the greedy solution."""

from __future__ import annotations

import time

import numpy as np

from ortools.sat.python import cp_model

from kai_cp.actions.allocate import GreedyResult
from kai_cp.model.anti_affinity import AntiAffinity
from kai_cp.model.base import Concern, ModelContext
from kai_cp.model.compaction import compact
from kai_cp.model.eviction_hint import improve_hint
from kai_cp.model.eviction_focus import EvictionFocus
from kai_cp.model.evictions import Evictions, VictimCost
from kai_cp.model.victim_pool import build_pool, pending_keys
from kai_cp.model.candidates import build_classes, greedy_class_nodes, pair_counts, select_pairs
from kai_cp.model.gang import Gang
from kai_cp.model.fragmentation import Fragmentation
from kai_cp.model.walk_hint import walk_hint
from kai_cp.model.gpu_sharing import GpuSharing
from kai_cp.model.linear_rows import maximize
from kai_cp.model.node_capacity import NodeCapacity
from kai_cp.model.objective import SAFE_OBJECTIVE, shrink_lowest
from kai_cp.model.order import KaiOrder
from kai_cp.model.pipeline import Pipelining
from kai_cp.model.placement import Placement
from kai_cp.model.nominated import NominatedFirst
from kai_cp.model.priority_inversion import NoPriorityInversion
from kai_cp.model.quota import QueueQuota
from kai_cp.model.scope import LEAN_SELECT_SECONDS_PER_CLASS_NODE, lean_levels
from kai_cp.model.stability import KeepGreedyNodes
from kai_cp.model.topology import Compactness, Topology
from kai_cp.model.utilisation import Utilisation
from kai_cp.model.victim_growth import NoVictimGrowth
from kai_cp.state import ClusterState

# What the build takes per chosen pair after choosing them, from below: 31 us measured on
# topo-512-s1, 40-110 us on the other differential, example and benchmark snapshots (58 us at
# 10,000 nodes). Before the pairs are chosen, greedy's own (class, node) pairs count: every one
# becomes a pair.
BUILD_SECONDS_PER_PAIR = 25e-6
# The victim pool looks at every victim job (state.victims: preemptible, pods on nodes), most as
# arrays: 6.1 us per victim job measured at 10,000 nodes (bench_scale's), 7-8 us at 1,000.
POOL_SECONDS_PER_JOB = 6e-6
# The candidate selection ranks each class's nodes (fragmentation rows included): 37 ns per
# class and node measured at 10,000 nodes (59 with shared GPUs), 51-73 ns at 4,000, ~140 at 1,000.
SELECT_SECONDS_PER_CLASS_NODE = 35e-9
# These estimates are the least measured on this machine (bench/bench_build.py): a build that
# cannot end in time is not started, a build that could is, on a machine of this speed; the
# pool's own time then tells the machine's speed (other work beside it) to the estimates left.
# What the model's rows typically take, to build the lean model (model/scope.py) where the full
# one would likely not end in time (the least measured, above, decide whether a build is started
# at all): 80 us per pair of the budget and of greedy's own nodes (68-90 us per pair chosen on
# bench_scale's clusters, which choose ~0.85 as many pairs as these two add up to). With the pool's
# and the selection's least estimates: 0.98-1.0x the full builds measured at 1,000, 4,000 and
# 10,000 nodes (whole GPUs), 0.8-0.9x with shared GPUs. (65 us: the 4,000-node builds were started
# and fell back.)
TYPICAL_SECONDS_PER_PAIR = 80e-6
# A full model is built instead of the lean one only where its solver would typically still get
# this much: one built just in time leaves its solver nothing (1,000 nodes: solve 0.00-0.04 s,
# FALLBACK), where the lean model's is proven optimal in ~0.13 s.
USEFUL_SOLVE_SECONDS = 0.1
# The victim pool's typical rate, to tell a machine slower than usual (other work beside it) by the
# pool's own time: 7-8 us per victim job at 1,000 nodes, 6 at 10,000.
TYPICAL_POOL_SECONDS_PER_JOB = 8e-6

# Constraints first; objective levels bottom-up (each level must outweigh those before it).
CONSTRAINTS: tuple[Concern, ...] = (Evictions(), NodeCapacity(), Gang(), EvictionFocus(), NoPriorityInversion(),
                                     NoVictimGrowth(), NominatedFirst(), QueueQuota(), Topology(), AntiAffinity())
OBJECTIVE_LEVELS: tuple[tuple[Concern, ...], ...] = (
    (KeepGreedyNodes(), Placement(), Pipelining(), Compactness(), GpuSharing(), Fragmentation()),   # soft preferences
    (Utilisation(), VictimCost()),
    (KaiOrder(),),
)


class BuildTimeout(Exception):
    """The build passed its deadline: the solver could no longer get time, so the rest of the
    build would only make the cycle's fallback late."""


class _TurnsLean(Exception):
    """The build turns lean, and the lean model's hint is another than the full one's."""


def build_model(state: ClusterState, greedy: GreedyResult, pair_budget: int | None = None,
                constraints: tuple[Concern, ...] = CONSTRAINTS,
                levels: tuple[tuple[Concern, ...], ...] = OBJECTIVE_LEVELS, evictions: bool = True,
                deadline: float | None = None, lean_deadline: float | None = None, lean: bool = False,
                lean_hint: GreedyResult | None = None) -> ModelContext:
    """_build's model. `lean_hint`: where the build turns lean (below), the lean model's hint
    instead of `greedy`: allocate's decisions alone where KAI's eviction actions made evictions
    the full model decides (a lean model has no eviction variables, so its hint cannot hold
    them; KAI's actions run again on its answer, kai_cp/cycle.py). Its ctx.greedy is then that
    hint."""
    try:
        return _build(state, greedy, pair_budget, constraints, levels, evictions, deadline, lean_deadline, lean,
                      defer_lean=lean_hint is not None)
    except _TurnsLean:
        return _build(state, lean_hint, pair_budget, constraints, levels, False, deadline, lean_deadline, True)


def _build(state: ClusterState, greedy: GreedyResult, pair_budget: int | None,
           constraints: tuple[Concern, ...], levels: tuple[tuple[Concern, ...], ...], evictions: bool,
           deadline: float | None, lean_deadline: float | None, lean: bool, defer_lean: bool = False
           ) -> ModelContext:
    """`deadline` (time.perf_counter()): checked between steps; past it, BuildTimeout. Also when
    what is left of the build cannot end before it: the victim pool and the candidate selection
    are not started when they could not end in time with the model's rows after them (a
    10,000-node build started on the pool's estimate alone ran 0.4 s into the selection and fell
    back at 0.8 s instead of 0.4 s), nor the model once the pairs are chosen.

    `lean_deadline`: where the full model would not be started, or would typically not end with
    USEFUL_SOLVE_SECONDS left for its solver (checked before the pool and, at the pool's pace,
    after it), the lean model (model/scope.py) is built instead, against this deadline (the
    cycle decodes a lean solution, and runs KAI's eviction actions after it, only where it is not
    greedy's allocation and time is left); None: no lean model, BuildTimeout. `lean`: the lean
    model whatever the time (greedy's decisions must then be allocate's alone, as the cycle
    ensures). `defer_lean`: where it would turn lean, _TurnsLean (build_model then builds the
    lean model on its own hint)."""
    def check(left: float = 0.0) -> None:
        if deadline is not None and time.perf_counter() + left > deadline:
            raise BuildTimeout("the model was not built within the time KAI's actions left")

    def fits(left: float) -> bool:
        return deadline is None or time.perf_counter() + left <= deadline

    def turn_lean(left: float) -> None:
        """The lean model's deadline from now on, checked for what it has `left` to do."""
        nonlocal deadline
        if lean_deadline is None:       # no lean model: out of time
            raise BuildTimeout("the model was not built within the time KAI's actions left")
        deadline = lean_deadline
        check(left)
        if defer_lean:
            raise _TurnsLean

    classes = build_classes(state, greedy)
    greedy_nodes = greedy_class_nodes(greedy, classes)
    class_nodes = len(classes) * len(state.nodes)
    own_pairs = sum(len(set(nodes)) for nodes in greedy_nodes.values())
    # the selection, then at least greedy's own pairs' rows
    after_pool = SELECT_SECONDS_PER_CLASS_NODE * class_nodes + BUILD_SECONDS_PER_PAIR * own_pairs
    lean_after = LEAN_SELECT_SECONDS_PER_CLASS_NODE * class_nodes + BUILD_SECONDS_PER_PAIR * own_pairs
    # what the selection and the model's rows typically take (where a lean model may be built
    # instead); after the pool scaled by the pool's speed against its typical rate (against its
    # least, 6 us per job at 10,000 nodes where 1,000 take 8, it pushed 1,000-node builds that
    # fit into the lean model)
    # (at least after_pool, which uses the least rates; without a lean model only after_pool counts)
    typical_after = after_pool if lean_deadline is None else SELECT_SECONDS_PER_CLASS_NODE * class_nodes \
        + TYPICAL_SECONDS_PER_PAIR * ((pair_budget or 0) + own_pairs) + USEFUL_SOLVE_SECONDS
    pool_estimate = POOL_SECONDS_PER_JOB * len(state.victims) if evictions else 0.0
    if lean:
        deadline = lean_deadline if lean_deadline is not None else deadline
    elif not fits(pool_estimate + typical_after):
        turn_lean(lean_after)
        lean = True
    pool = None
    if evictions and not lean:
        t = time.perf_counter()
        pool = build_pool(state, greedy, pending_keys(classes), check)
        took = time.perf_counter() - t
        speed = took / pool_estimate if pool_estimate > 0.01 else 1.0
        slower = took / (TYPICAL_POOL_SECONDS_PER_JOB * len(state.victims)) if pool_estimate > 0.01 else 1.0
        if not fits(max(after_pool * max(1.0, speed), typical_after * max(1.0, slower))):
            turn_lean(lean_after * max(1.0, speed))
            lean, pool = True, None
    if lean:
        levels = lean_levels(levels)
    else:       # the lean model's hint is greedy's allocation as it is (what model/decode.py is_greedys reads)
        greedy_nodes = compact(state, greedy, classes, greedy_nodes)
    pair_class, pair_node, pair_ub = select_pairs(state, greedy, classes, pair_budget, greedy_nodes, pool, check,
                                                  fragmentation=not lean)
    check(BUILD_SECONDS_PER_PAIR * len(pair_ub))
    counts = pair_counts(pair_class, pair_node, greedy_nodes)
    # A pair's bound counts the capacity its class's own legal victims free; KAI also pipelines a
    # job onto what another preemptor's evictions left over, so greedy's pods bound it from below
    # (its node's capacity rows are then always written: model/node_capacity.py).
    kai_counts = np.zeros(len(pair_ub), dtype=pair_ub.dtype)
    kai_counts[list(counts)] = list(counts.values())
    raised = np.flatnonzero(kai_counts > pair_ub)
    pair_ub = np.maximum(pair_ub, kai_counts)
    model = cp_model.CpModel()
    ctx = ModelContext(state=state, greedy=greedy, model=model, classes=classes, pair_class=pair_class,
                       pair_node=pair_node, pair_ub=pair_ub, free=state.table.free, idle=state.table.idle)
    ctx.greedy_counts = counts
    ctx.extensions["victim-pool"] = pool
    ctx.extensions["lean"] = lean
    ctx.extensions["raised-pairs"] = raised
    ctx.x = [model.new_bool_var("") if ub == 1 else model.new_int_var(0, int(ub), "") for ub in pair_ub.tolist()]
    for concern in constraints:
        concern.contribute(ctx)
        check()
    for level in levels:
        ctx.levels.open_level()
        for concern in level:
            concern.contribute(ctx)
        check()
    shrink_lowest(ctx.levels, ctx.terms)
    if ctx.levels.max_so_far > SAFE_OBJECTIVE:
        raise OverflowError(f"objective range {ctx.levels.max_so_far} is not exact in a double")
    for i, var in enumerate(ctx.x):                     # greedy's decisions, the complete hint
        ctx.hint(var, ctx.greedy_counts.get(i, 0))
    started = ctx.greedy.started_jobs
    for job, var in ctx.starts.items():
        ctx.hint(var, 1 if job in started else 0)
    _derive(ctx)
    ctx.greedy_objective = ctx.hinted_objective()       # what the fallback is compared with
    if improve_hint(ctx):
        _derive(ctx)
    elif not lean:
        walk_hint(ctx)
    _hint(ctx)
    variables = [v for t in ctx.terms for v in t.variables]
    coefficients = [c for t in ctx.terms for c in t.coefficients]
    if variables:
        maximize(model, variables, coefficients)
    return ctx


def _derive(ctx: ModelContext) -> None:
    for derive in ctx.extensions.get("derived-hints", ()):
        derive()


def _hint(ctx: ModelContext) -> None:
    """Hint every decision variable: greedy's decisions, extended by improve_hint. Written into
    the proto at once, as cp_model's add_hint writes each (a negated literal hints its variable
    with the opposite value); add_hint per variable was ~5% of the build at 1,000 nodes."""
    variables, values = [], []
    for var, value in ctx.hints.values():
        if var.index >= 0:
            variables.append(var.index)
            values.append(int(value))
        else:
            variables.append(ctx.model.negated(var.index))
            values.append(int(not value))
    if variables:             # (reading solution_hint creates it: an empty one would be written)
        hint = ctx.model.proto.solution_hint
        hint.vars.extend(variables)
        hint.values.extend(values)
