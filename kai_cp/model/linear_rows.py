"""Many linear `<=` rows written into a CP-SAT model's proto at once.

cp_model's `add(weighted_sum(...) <= ub)` builds an expression object and flattens it, ~30 us
a row in Python; a constraint family of thousands of rows (model/freed_use.py) spent most of its
time there. The rows here come as flat arrays and are written in the form cp_model writes them
(terms sorted by variable index, a repeated variable's coefficients summed, zero coefficients
dropped, domain [INT64_MIN, ub] or [lb, INT64_MAX]), so the model proto is byte-identical to
adding them one by one (tests/test_linear_rows.py checks that against cp_model).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from ortools.sat.python import cp_model
from ortools.sat.python import cp_model_helper

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def upper_bound(v: cp_model.IntVar) -> int:
    """A variable's upper bound, read from its proto domain."""
    d = v.proto.domain            # (the proto's repeated field has no negative indexing)
    return int(d[len(d) - 1])


def add_le_rows(model: cp_model.CpModel, row: np.ndarray, var: np.ndarray, coef: np.ndarray,
                ub: np.ndarray, var_ub: np.ndarray | None = None) -> None:
    """Add `sum(coef[t] * x[var[t]] for t with row[t] == i) <= ub[i]` for i = 0 .. len(ub) - 1,
    in that order. `var` holds proto variable indices (IntVar.index); a row without terms is
    added empty, as cp_model adds one. `var_ub`: see add_rows."""
    add_rows(model, row, var, coef, np.full(len(ub), INT64_MIN, dtype=np.int64), ub, var_ub=var_ub)


# Row sums below this are exact in float64 (every partial sum an integer under 2^53); a variable
# whose bound a caller does not know is given UNBOUNDED, which keeps its rows.
EXACT_SUM = float(1 << 52)
UNBOUNDED = 1 << 60


def add_rows(model: cp_model.CpModel, row: np.ndarray, var: np.ndarray, coef: np.ndarray,
             lower: np.ndarray, upper: np.ndarray, enforcement: list[list[int]] | None = None,
             var_ub: np.ndarray | None = None) -> None:
    """Rows `lower[i] <= sum(...) <= upper[i]` (see add_le_rows), each only enforced if the
    proto literals `enforcement[i]` hold (a negated one is -index - 1) when given. cp_model writes
    `weighted_sum(...) <= c + k * b` of two or more terms as `k * b - weighted_sum(...) >= -c`
    (the sum defers to the right side's `>=`), i.e. domain [-c, INT64_MAX]: rows replacing such
    calls give that form (tests/test_linear_rows.py pins cp_model's behaviour).

    `var_ub` (per proto variable index, its upper bound; every variable's lower bound 0): rows
    the bounds alone satisfy are left out. Half the rows of some families are such rows (a node
    whose every candidate pod fits without what is releasing or freed there): writing them cost
    ~3 us each and the solver's presolve removes them again."""
    n_rows = len(lower)
    row = np.asarray(row, dtype=np.int64)
    var = np.asarray(var, dtype=np.int64)
    coef = np.asarray(coef, dtype=np.int64)
    lower, upper = np.asarray(lower, dtype=np.int64), np.asarray(upper, dtype=np.int64)
    if len(row):
        order = np.lexsort((var, row))
        row, var, coef = row[order], var[order], coef[order]
        first = np.ones(len(row), dtype=bool)
        first[1:] = (row[1:] != row[:-1]) | (var[1:] != var[:-1])
        starts = np.flatnonzero(first)
        row, var, coef = row[starts], var[starts], np.add.reduceat(coef, starts)
        keep = coef != 0
        row, var, coef = row[keep], var[keep], coef[keep]
    if var_ub is not None and n_rows:
        part = coef.astype(np.float64) * np.asarray(var_ub, dtype=np.float64)[var]
        most = np.bincount(row, weights=np.maximum(part, 0.0), minlength=n_rows)
        least = np.bincount(row, weights=np.minimum(part, 0.0), minlength=n_rows)
        implied = (most - least < EXACT_SUM) & (most <= upper) & (least >= lower)
        if implied.any():
            kept = ~implied
            new_id = np.cumsum(kept) - 1
            terms = kept[row]
            row, var, coef = new_id[row[terms]], var[terms], coef[terms]
            lower, upper = lower[kept], upper[kept]
            if enforcement is not None:
                enforcement = [e for e, k in zip(enforcement, kept.tolist()) if k]
            n_rows = int(kept.sum())
    bounds = np.searchsorted(row, np.arange(n_rows + 1)).tolist()
    variables, coefficients = var.tolist(), coef.tolist()
    lows, highs = lower.tolist(), upper.tolist()
    constraints = model.proto.constraints
    for i in range(n_rows):
        s, e = bounds[i], bounds[i + 1]
        constraint = constraints.add()
        if enforcement is not None:
            constraint.enforcement_literal.extend(enforcement[i])
        linear = constraint.linear
        linear.vars.extend(variables[s:e])
        linear.coeffs.extend(coefficients[s:e])
        linear.domain.extend((lows[i], highs[i]))


def add_enforced_le(model: cp_model.CpModel, variables: np.ndarray, coefficients: np.ndarray, ub: int,
                    enforcement: list[int]) -> None:
    """One row `sum(coefficients[t] * x[variables[t]]) <= ub` (proto variable indices) only
    enforced if `enforcement` holds, as cp_model writes `add(a * e1 <= b * e2 + c)
    .only_enforce_if(...)` for sums e1, e2 of two or more terms each: flattening two sums of
    thousands of terms took ~0.8 ms a row there."""
    add_rows(model, np.zeros(len(variables), dtype=np.int64), variables, coefficients,
             np.array([INT64_MIN]), np.array([ub]), [enforcement])


def add_zero_unless(model: cp_model.CpModel, variables: list[int], literal: int) -> None:
    """`v == 0` for each proto variable index unless `literal` holds, as cp_model writes
    `add(v == 0).only_enforce_if(~literal)` one at a time (thousands of rows per cycle at 1,000
    nodes: model/eviction_focus.py, model/priority_inversion.py)."""
    n = len(variables)
    zeros = np.zeros(n, dtype=np.int64)
    add_rows(model, np.arange(n), np.asarray(variables, dtype=np.int64), np.ones(n, dtype=np.int64), zeros, zeros,
             [[-literal - 1]] * n)


def add_at_most_if(model: cp_model.CpModel, variables: list[int], bounds: list[int], literal: int) -> None:
    """`v <= bound * literal` for each proto variable index and bound, as cp_model writes
    `add(v <= bound * literal)` one at a time."""
    n = len(variables)
    rows = np.arange(n)
    add_le_rows(model, np.concatenate([rows, rows]),
                np.concatenate([np.asarray(variables, dtype=np.int64), np.full(n, literal, dtype=np.int64)]),
                np.concatenate([np.ones(n, dtype=np.int64), -np.asarray(bounds, dtype=np.int64)]),
                np.zeros(n, dtype=np.int64))


def maximize(model: cp_model.CpModel, variables: list, coefficients: list[int]) -> None:
    """model.maximize(weighted_sum(variables, coefficients)) for integer coefficients, written as
    cp_model writes it (its flattened expression, negated, scaling factor -1) with one extend per
    field: cp_model appends term by term, ~5% of the build at 8,000 terms."""
    flat = cp_model_helper.FlatIntExpr(cp_model.LinearExpr.weighted_sum(variables, coefficients))
    model.clear_objective()
    objective = model.proto.objective
    objective.vars.extend([v.index for v in flat.vars])
    objective.scaling_factor = -1.0
    objective.offset = -flat.offset
    objective.coeffs.extend([-c for c in flat.coeffs])


def proto_bytes(model: cp_model.CpModel) -> bytes:
    """The model proto as OR-Tools serialises it (its Python proto has no SerializeToString):
    what identity checks of built models compare (bench/model_protos.py, tests)."""
    fd, path = tempfile.mkstemp(suffix=".pb")
    os.close(fd)
    try:
        if not model.export_to_file(path):
            raise OSError(f"OR-Tools could not write the model to {path}")
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)
