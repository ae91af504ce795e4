"""KAI's eviction actions in the order the configuration lists them (spec 2.1, 2.5), run on the
session the allocation left: consolidation, reclaim, preempt (stale gangs last)."""

from __future__ import annotations

import time

import numpy as np

from kai_cp.actions import min_runtime
from kai_cp.actions.consolidation import consolidation_pass
from kai_cp.actions.preempt import preempt_pass
from kai_cp.actions.allocate import GreedyResult, run_allocate
from kai_cp.actions.preemptors import ActionOutcome, ActionPass, Budget
from kai_cp.actions.reclaim import reclaim_pass
from kai_cp.jobs import JobInfo, TaskInfo, protected_since
from kai_cp.session import Session
from kai_cp.state import ClusterState

EVICTING = ("consolidation", "reclaim", "preempt")


class RuntimeGuard:
    """Minimum-runtime protection (6.7) as the actions ask for it, at the cycle's clock."""

    def __init__(self, state: ClusterState, session: Session, now: float):
        self.state, self.session, self.now = state, session, now
        # per victim list (one queue's, shared by every preemptor while the cycle leaves the queue
        # alone: victims.preemptible_running) -> (the list, each job's jobs.protected_since,
        # (action, preemptor queue) -> the victims passing)
        self._lists: dict[int, tuple[list, np.ndarray, dict[tuple[str, str], list]]] = {}
        # per queue, its snapshot victim jobs' (state.victim_jobs) last starts and priorities as
        # arrays; per (queue, action, preemptor queue, priority bound) how many pass
        self._columns: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._counts: dict[tuple, int] = {}

    def passing(self, victims: list, action: str, preemptor_queue: str) -> list:
        """The victims (of one queue) whose jobs `may_lose` to the preemptor, at once: the
        reclaim of one preemptor asked it of every running job, ~28,000 at 10,000 nodes (0.4 s
        a preemptor). A job passes when elastic, never started, or `now >= lastStart + runtime`
        (min_runtime.filter_victim), the runtime being one per victim queue and preemptor queue."""
        if not victims or not self.state.config.min_runtime_enabled:
            return victims
        memo = self._lists.get(id(victims))
        if memo is None or memo[0] is not victims:      # (the memo holds the list: its id stays its own)
            memo = self._lists[id(victims)] = (victims, np.array([protected_since(v.job) for v in victims],
                                                                 dtype=np.float64), {})
        _, starts, passing = memo
        out = passing.get((action, preemptor_queue))
        if out is None:
            runtime = min_runtime.min_runtime_seconds(self.state, action, victims[0].job.queue, preemptor_queue)
            ok = ~(self.now < starts + runtime)
            out = passing[(action, preemptor_queue)] = \
                victims if ok.all() else [victims[i] for i in np.flatnonzero(ok).tolist()]
        return out

    def snapshot_passing(self, queue: str, action: str, preemptor_queue: str, below: int | None = None) -> int:
        """How many of the snapshot's victim jobs of `queue` pass (`passing`), of priority below
        `below` if given, counted from the state's columns without making their victims: with
        victims.changed_victim_counts, a lower bound of a victim list's length."""
        key = (queue, action, preemptor_queue, below)
        n = self._counts.get(key)
        if n is not None:
            return n
        cols = self.state.victim_jobs.get(queue)
        if cols is None:
            n = 0
        else:
            columns = self._columns.get(queue)
            if columns is None:
                columns = self._columns[queue] = (np.array(cols.started, dtype=np.float64),
                                                  np.array(cols.priority, dtype=np.int64))
            starts, priority = columns
            ok = np.ones(len(starts), dtype=bool)
            if self.state.config.min_runtime_enabled:
                ok = ~(self.now < starts + min_runtime.min_runtime_seconds(self.state, action, queue, preemptor_queue))
            if below is not None:
                ok &= priority < below
            n = int(ok.sum())
        self._counts[key] = n
        return n

    def elastic_ok(self, victims: list[TaskInfo], action: str, preemptor_queue: str) -> str | None:
        by_job: dict[str, list[TaskInfo]] = {}
        for t in victims:
            by_job.setdefault(t.job, []).append(t)
        for name, tasks in by_job.items():
            job = self.state.jobs[name]
            if not min_runtime.elastic_ok(self.state, job, tasks, action, preemptor_queue, self.now):
                return f"job {job.label} is within its minimum runtime and may only lose pods above its minimum"
        return None


class EvictionSearch:
    """KAI's eviction actions in order over one session, resumable (actions/preemptors.py
    ActionPass): a search its budget stopped goes on, by `run` with a larger budget, from where
    it stopped; an action starts only once the one before it has ended, as in one uninterrupted
    run."""

    def __init__(self, state: ClusterState, session: Session, now: float):
        self.state, self.session = state, session
        self.guard = RuntimeGuard(state, session, now)
        self.actions = [a for a in state.config.actions if a in EVICTING]
        self.at = 0                                  # the action running or next to start
        self.current: ActionPass | None = None
        self.outcomes: dict[str, ActionOutcome] = {}
        self.budget: Budget | None = None            # the budget of the last run

    @property
    def finished(self) -> bool:
        return self.at >= len(self.actions)

    def run(self, budget: Budget | None = None) -> dict[str, ActionOutcome]:
        self.budget = budget
        while not self.finished:
            action = self.actions[self.at]
            if self.current is None:
                self.current = self._start(action)
            if self.current is None:        # disabled by the configuration
                self.outcomes[action] = ActionOutcome(action)
            else:
                self.outcomes[action] = self.current.run(budget)
                if not self.current.done:
                    break
            self.at, self.current = self.at + 1, None
        for action in self.actions[self.at + 1:]:        # not started: the budget stopped one before
            self.outcomes[action] = ActionOutcome(action, budget_spent=True)
        return {a: self.outcomes[a] for a in self.actions}

    def _start(self, action: str) -> ActionPass | None:
        if action == "consolidation":
            return consolidation_pass(self.state, self.session)
        if action == "reclaim":
            return reclaim_pass(self.state, self.session, self.guard)
        return preempt_pass(self.state, self.session, self.guard)


def run_evictions(state: ClusterState, session: Session, now: float, budget: Budget | None = None
                  ) -> dict[str, ActionOutcome]:
    return EvictionSearch(state, session, now).run(budget)


# Work (victims queued plus placements simulated) the eviction actions may do when they only hint
# the CP-SAT model, which searches evictions itself: KAI's victim search is quadratic in a gang's
# size (6.2.2), ~15 s for one 160-pod gang on this machine (bench/bench_evictions.py), and the
# budget keeps the hint to ~0.1 s.
HINT_WORK = 5_000
# On clusters up to HINT_SMALL_NODES nodes the bound is HINT_WORK_SMALL. Work counts victims and
# placements simulated plus the pending jobs each simulation orders (victims.ORDER_WORK_PER_UNIT
# per unit: ordering them is most of a simulation on large clusters; a 1,000-node contended
# cluster's hint took 5.6 s without it, 0.8 s with it). Measured on 48-node contended clusters
# (examples/showcase-cluster.zip and three other bench/generate.py draws): 10,000 stopped the
# search short of KAI's reclaims on the showcase (98 of 148 pending GPUs admitted), 15,000 reached
# the unbounded search's decisions on all four in 0.5-0.9 s.
HINT_WORK_SMALL = 15_000
HINT_SMALL_NODES = 250


def hint_budget(state: ClusterState, deadline: float | None = None) -> Budget:
    """The work bound of KAI's eviction search when it runs under the model (and the instant the
    cycle's clock stops it, if first)."""
    return Budget(HINT_WORK_SMALL if len(state.nodes) <= HINT_SMALL_NODES else HINT_WORK, deadline=deadline)


# KAI's actions' cost with the hint's bounded eviction search (bench/bench_cycle.py, 2-core
# machine): ~0.25 s at 900 jobs x 1,000 nodes, ~1 s at 1,100 jobs x 10,000 nodes. An estimate, not
# the clock, so what is built on it is the same for the same snapshot and settings.
GREEDY_BASE_SECONDS = 0.15
GREEDY_SECONDS_PER_JOB_NODE = 8e-8
# Eviction-search work per second (2-core machine): ~19,000 units/s at bench_scale's 10,000
# nodes, ~14,000 on examples/showcase-cluster.zip, ~7,800 on examples/fragmented-cluster.zip,
# whose simulations place many small pods.
WORK_PER_SECOND = 15_000


def estimated_greedy_seconds(state: ClusterState, jobs: int) -> float:
    return GREEDY_BASE_SECONDS + GREEDY_SECONDS_PER_JOB_NODE * jobs * len(state.nodes)


def cycle_budget(state: ClusterState, jobs: int, time_limit: float, deadline: float | None = None) -> Budget:
    """The greedy engine's eviction search within the cycle's time limit (`--time-limit`: seconds
    for the whole cycle): KAI's searches replayed to the end took 127 s on bench_scale's contended
    1,000-node cluster and over 8 minutes at 10,000 nodes, with a 1 s limit. The hint's bound
    plus what the rest of the limit allows, so the greedy engine never searches less than the
    CP-SAT cycle's fallback does."""
    return Budget(hint_budget(state).left + beyond_hint(state, jobs, time_limit), CYCLE_NOTE, deadline)


CYCLE_NOTE = "the cycle's time limit bounds it; a longer one searches further"


def beyond_hint(state: ClusterState, jobs: int, time_limit: float) -> int:
    """The greedy engine's work bound beyond the hint's: what the limit leaves after allocate."""
    return int(WORK_PER_SECOND * max(0.0, time_limit - estimated_greedy_seconds(state, jobs)))


def run_greedy(state: ClusterState, now: float, bounded: bool = False, evictions: bool = True,
               time_limit: float | None = None, deadline: float | None = None) -> GreedyResult:
    """KAI's actions in order: allocate, then the eviction actions on the session it leaves.
    `bounded`: the eviction search stops after HINT_WORK simulated placements (as a hint);
    `time_limit`: it stops at the work that limit allows (the greedy engine's cycle); neither:
    it runs to the end, as KAI's do; `deadline` (a `time.perf_counter()` instant, with either):
    it stops there if the work bound has not stopped it first; `evictions=False`: allocate alone."""
    t = time.perf_counter()
    greedy = run_allocate(state)
    greedy.allocate_seconds = time.perf_counter() - t
    greedy.now = now
    if evictions and any(a in EVICTING for a in state.config.actions):
        if bounded:
            greedy.alone = GreedyResult(greedy.session.fork(), greedy.order, greedy.outcomes, now=now,
                                        allocate_seconds=greedy.allocate_seconds)
        budget = (hint_budget(state, deadline) if bounded else
                  cycle_budget(state, len(greedy.order), time_limit, deadline) if time_limit is not None else None)
        greedy.search = EvictionSearch(state, greedy.session, now)
        greedy.actions = greedy.search.run(budget)
    return greedy


def unmodelled_evictions(greedy: GreedyResult) -> str | None:
    """Evictions the CP-SAT model does not decide (it has no variables for moves or shared-GPU
    victims): when greedy made one, its decisions are kept as they are."""
    for e in greedy.session.evictions.values():
        if e.action == "consolidation":
            return "consolidation moves are decided by KAI's greedy action"
        if e.task.request.is_shared_gpu:
            return "evictions of shared-GPU pods are decided by KAI's greedy actions"
    return None
