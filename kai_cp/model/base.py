"""The one small interface every modelling concern implements, and the shared model context.

A concern (gang, quota, node capacity, order, placement, pipelining, ...) reads the prepared
data in ModelContext and adds variables, constraints and objective terms. Adding a policy is
adding a module with one more Concern; the builder runs them in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.actions.allocate import GreedyResult
from kai_cp.actions.victims import moved_victims
from kai_cp.jobs import JobInfo, TaskInfo
from kai_cp.model.objective import Levels
from kai_cp.state import ClusterState


@dataclass(eq=False)
class PodClass:
    """Interchangeable pending pods: same job, PodSet, request and predicates (one count variable per node)."""

    index: int
    job: JobInfo
    podset: str
    tasks: list[TaskInfo]                  # in KAI task order
    vec: np.ndarray                        # request over the node table's columns
    gpus: int                              # whole GPUs per pod

    @property
    def size(self) -> int:
        return len(self.tasks)


def kai_moved(greedy: GreedyResult) -> bool:
    """Whether KAI's actions moved a victim (evicted it and placed it again this cycle): the model
    has no variables for moves, so its floors taken from KAI's decisions (the jobs KAI started,
    the GPUs it placed) may then be out of its reach."""
    return bool(moved_victims(greedy.session))


def greedy_placements(greedy: GreedyResult, classes: list[PodClass]) -> dict[int, list[tuple[int, tuple[str, ...]]]]:
    """Per class, (node, shared GPU groups) of every pod greedy placed, in greedy's order."""
    by_task = {t.key: c.index for c in classes for t in c.tasks}
    out: dict[int, list[tuple[int, tuple[str, ...]]]] = {}
    for key, p in greedy.session.placements.items():
        c = by_task.get(key)
        if c is not None:
            out.setdefault(c, []).append((p.node, p.gpu_groups))
    return out


@dataclass
class ObjectiveTerm:
    """One objective contribution (maximised), kept by name so it can be reported and evaluated."""

    name: str
    variables: list[cp_model.IntVar]
    coefficients: list[int]
    level: int = 0                         # objective level it belongs to (0 = soft preferences)


@dataclass(eq=False)
class ModelContext:
    state: ClusterState
    greedy: GreedyResult
    model: cp_model.CpModel
    classes: list[PodClass]
    # Sparse candidate pairs, one entry per (class, node) variable.
    pair_class: np.ndarray                 # class index per pair
    pair_node: np.ndarray                  # node index per pair
    pair_ub: np.ndarray                    # per-pair upper bound (pods of the class that fit the node alone)
    x: list[cp_model.IntVar] = field(default_factory=list)
    starts: dict[str, cp_model.IntVar] = field(default_factory=dict)   # job -> "job gets its gang this cycle"
    placed: dict[str, cp_model.LinearExprT] = field(default_factory=dict)  # job -> pods placed
    terms: list[ObjectiveTerm] = field(default_factory=list)
    hints: dict[int, tuple[cp_model.IntVar, int]] = field(default_factory=dict)   # var index -> (var, value)
    free: np.ndarray | None = None         # node idle + releasing at cycle start
    idle: np.ndarray | None = None
    levels: Levels = field(default_factory=Levels)
    greedy_counts: dict[int, int] = field(default_factory=dict)         # pair -> pods greedy put there
    aux: list[cp_model.IntVar] = field(default_factory=list)            # other variables decode reads
    aux_values: dict[int, int] = field(default_factory=dict)            # var index -> solution value
    extensions: dict[str, object] = field(default_factory=dict)         # per-concern data for decode
    greedy_objective: int = 0                                           # the objective of greedy's decisions

    def add_term(self, name: str, variables: list, coefficients: list[int]) -> None:
        if variables:
            self.terms.append(ObjectiveTerm(name, list(variables), [int(c) for c in coefficients],
                                            max(self.levels.index, 0)))

    def hint(self, var: cp_model.IntVar, value: int) -> None:
        self.hints[var.index] = (var, int(value))

    def hinted(self, var: cp_model.IntVar) -> int:
        return self.hinted_index(var.index)

    def hinted_index(self, index: int) -> int:
        """`hinted` by proto variable index (0 where unhinted)."""
        hit = self.hints.get(index)
        return 0 if hit is None else hit[1]

    def derive_hint(self, derive: Callable[[], None]) -> None:
        """Register the hint of an auxiliary variable (an indicator, a slack) that follows the
        decision variables' hints: build.py runs it once greedy's hint is complete and again after
        the constructive eviction hint, so the complete hint stays a solution."""
        self.extensions.setdefault("derived-hints", []).append(derive)

    def keep_pending(self, jobs: Iterable[str]) -> None:
        """Jobs greedy left pending that the constructive eviction hint must not start: a rule
        starts them only under conditions the hint does not track."""
        self.extensions.setdefault("hint-keep-pending", set()).update(jobs)

    def extra_pairs(self) -> dict[str, list[int]]:
        """Job -> its pairs, for the jobs greedy placed nothing for: work the model may start
        beyond KAI's decisions (the eviction rules that keep greedy's decisions a solution exempt
        the others)."""
        return self.pairs_by_job(excluding={p.task.job for p in self.greedy.session.placements.values()})

    def pairs_by_job(self, excluding: set[str]) -> dict[str, list[int]]:
        """Job -> its pairs, for every job not in `excluding`."""
        out: dict[str, list[int]] = {}
        for i, c in enumerate(self.pair_class.tolist()):
            name = self.classes[c].job.name
            if name not in excluding:
                out.setdefault(name, []).append(i)
        return out

    def hinted_objective(self) -> int:
        """The objective of the greedy solution (every objective variable is hinted)."""
        total = 0
        for term in self.terms:
            for v, c in zip(term.variables, term.coefficients):
                total += c * self.hints.get(v.index, (v, 0))[1]
        return total


class Concern(Protocol):
    """A modelling concern: contributes variables, constraints and objective terms."""

    name: str

    def contribute(self, ctx: ModelContext) -> None: ...
