"""Rows written into the proto in bulk equal the same rows added one by one through cp_model."""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.model.linear_rows import INT64_MAX, INT64_MIN, add_le_rows, add_rows, maximize, proto_bytes


def _models(n_vars: int) -> tuple[cp_model.CpModel, list, cp_model.CpModel]:
    one, bulk = cp_model.CpModel(), cp_model.CpModel()
    xs = [one.new_bool_var("") if i % 3 == 0 else one.new_int_var(0, 1 + i % 7, "") for i in range(n_vars)]
    for i in range(n_vars):
        bulk.new_bool_var("") if i % 3 == 0 else bulk.new_int_var(0, 1 + i % 7, "")
    return one, xs, bulk


def test_random_rows_match_cp_model_byte_for_byte() -> None:
    rng = np.random.default_rng(7)
    one, xs, bulk = _models(40)
    rows, variables, coefficients, limits = [], [], [], []
    for i in range(300):
        size = int(rng.integers(1, 12))
        vs = rng.integers(0, 40, size)                 # repeats and any order
        cs = rng.integers(-50, 50, size)               # zeros and signs
        if i % 17 == 0:                                # a variable whose coefficients cancel
            vs = np.append(vs, [vs[0]])
            cs = np.append(cs, [-cs[:1].sum() - cs[1:][vs[1:-1] == vs[0]].sum()])
        ub = int(rng.integers(-100, 1000))
        one.add(cp_model.LinearExpr.weighted_sum([xs[v] for v in vs.tolist()], cs.tolist()) <= ub)
        rows += [i] * len(vs)
        variables += vs.tolist()
        coefficients += cs.tolist()
        limits.append(ub)
    perm = rng.permutation(len(rows))                  # terms may come in any order
    add_le_rows(bulk, np.array(rows)[perm], np.array(variables)[perm], np.array(coefficients)[perm],
                np.array(limits))
    assert len(bulk.proto.constraints) == 300
    assert proto_bytes(bulk) == proto_bytes(one)


def test_a_row_without_terms_is_added_empty() -> None:
    one, xs, bulk = _models(3)
    one.add(cp_model.LinearExpr.weighted_sum([xs[0]], [2]) <= 5)
    one.add(cp_model.LinearExpr.weighted_sum([xs[1], xs[1]], [3, -3]) <= 4)
    one.add(cp_model.LinearExpr.weighted_sum([xs[2], xs[0]], [1, 1]) <= 1)
    add_le_rows(bulk, np.array([0, 1, 1, 2, 2]), np.array([0, 1, 1, 2, 0]), np.array([2, 3, -3, 1, 1]),
                np.array([5, 4, 1]))
    assert proto_bytes(bulk) == proto_bytes(one)
    assert len(bulk.proto.constraints[1].linear.vars) == 0


def test_cp_model_forms_the_bulk_rows_reproduce() -> None:
    """model/pipeline.py writes `weighted_sum(x) <= idle + releasing * b` in bulk as cp_model does:
    `<=` form for a one-term sum, `>=` form (negated) for longer ones. If OR-Tools changes this,
    this test fails before the model protos silently change."""
    m = cp_model.CpModel()
    a, c, b = m.new_int_var(0, 3, ""), m.new_int_var(0, 5, ""), m.new_bool_var("")
    m.add(cp_model.LinearExpr.weighted_sum([a], [2]) <= 7 + 5 * b)
    m.add(cp_model.LinearExpr.weighted_sum([a, c], [2, 3]) <= 7 + 5 * b)
    bulk = cp_model.CpModel()
    bulk.new_int_var(0, 3, ""), bulk.new_int_var(0, 5, ""), bulk.new_bool_var("")
    add_rows(bulk, np.array([0, 0, 1, 1, 1]), np.array([0, 2, 0, 1, 2]), np.array([2, -5, -2, -3, 5]),
             np.array([INT64_MIN, -7]), np.array([7, INT64_MAX]))
    assert proto_bytes(bulk) == proto_bytes(m)


def test_maximize_writes_what_cp_model_writes() -> None:
    one, xs, bulk = _models(6)
    variables, coefficients = [xs[3], xs[0], xs[3], xs[5], xs[1]], [4, -2, 3, 0, 7]
    one.maximize(cp_model.LinearExpr.weighted_sum(variables, coefficients))
    maximize(bulk, [bulk.get_int_var_from_proto_index(v.index) for v in variables], coefficients)
    assert proto_bytes(bulk) == proto_bytes(one)
    assert bulk.proto.objective.scaling_factor == -1.0
