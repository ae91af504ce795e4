"""Rows written into the proto in bulk equal the same rows added one by one through cp_model."""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.model.linear_rows import (INT64_MAX, INT64_MIN, UNBOUNDED, add_at_most_if, add_enforced_le, add_le_rows, add_rows,
                                     add_zero_unless, maximize, proto_bytes)


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


def test_enforced_row_of_two_sums_matches_cp_model_byte_for_byte() -> None:
    """model/evictions.py's gate-3 rows, `a * (h1 + e1) <= b * (h2 + e2) - 1` only enforced if
    (r, lost, not within), for sums e1, e2 of two or more terms: variables shared by both sides,
    zero coefficients and cancelling terms included."""
    rng = np.random.default_rng(3)
    one, xs, bulk = _models(30)
    lits = [(one.new_bool_var(""), bulk.new_bool_var("")) for _ in range(3)]
    for _ in range(40):
        sides = []
        for _ in range(2):
            size = int(rng.integers(2, 9))
            sides.append((int(rng.integers(0, 500)), rng.integers(0, 30, size).tolist(), rng.integers(-3, 4, size).tolist()))
        (h1, v1, c1), (h2, v2, c2) = sides
        a, b = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        e1 = h1 + cp_model.LinearExpr.weighted_sum([xs[v] for v in v1], c1)
        e2 = h2 + cp_model.LinearExpr.weighted_sum([xs[v] for v in v2], c2)
        r, lost, within = (x for x, _ in lits)
        one.add(a * e1 <= b * e2 - 1).only_enforce_if([r, lost, within.Not()])
        r, lost, within = (y for _, y in lits)
        add_enforced_le(bulk, [xs[v].index for v in v1] + [xs[v].index for v in v2],
                        [a * c for c in c1] + [-b * c for c in c2], b * h2 - 1 - a * h1,
                        [r.index, lost.index, -within.index - 1])
    assert proto_bytes(bulk) == proto_bytes(one)


def test_zero_unless_and_at_most_if_rows_match_cp_model_byte_for_byte() -> None:
    """model/eviction_focus.py's and priority_inversion.py's `v == 0` unless a literal, and gate
    3's `v <= bound * lost` (a literal created before or after the variables), in bulk."""
    rng = np.random.default_rng(5)
    one, xs, bulk = _models(30)
    for _ in range(20):
        picked = rng.choice(30, size=int(rng.integers(1, 8)), replace=False).tolist()
        lit = 3 * int(rng.integers(0, 10))           # a Boolean of _models
        if rng.random() < 0.5:
            for v in picked:
                one.add(xs[v] == 0).only_enforce_if(~xs[lit])
            add_zero_unless(bulk, [xs[v].index for v in picked], xs[lit].index)
        else:
            fresh = one.new_bool_var("") if rng.random() < 0.5 else None
            literal = fresh if fresh is not None else xs[lit]
            if fresh is not None:
                bulk.new_bool_var("")
            bounds = rng.integers(0, 6, len(picked)).tolist()
            for v, b in zip(picked, bounds):
                one.add(xs[v] <= b * literal)
            add_at_most_if(bulk, [xs[v].index for v in picked], bounds, literal.index)
    assert proto_bytes(bulk) == proto_bytes(one)


def test_rows_the_bounds_satisfy_are_left_out_and_the_others_written_as_before() -> None:
    """With the variables' upper bounds (lower bounds 0) a row whose left side cannot leave its
    domain is left out; every other row is written exactly as without the bounds, in order, with
    its enforcement; a variable of unknown bound keeps its rows. So the rows kept admit exactly
    the assignments all rows admit (checked on every assignment of small models)."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        n_vars, n_rows = 4, int(rng.integers(1, 30))
        hi = rng.integers(0, 3, n_vars)
        rows, variables, coefficients = [], [], []
        for i in range(n_rows):
            size = int(rng.integers(0, 4))
            rows += [i] * size
            variables += rng.integers(0, n_vars, size).tolist()
            coefficients += rng.integers(-3, 4, size).tolist()
        lower = np.where(rng.random(n_rows) < 0.5, INT64_MIN, rng.integers(-8, 2, n_rows))
        upper = np.where(lower != INT64_MIN, INT64_MAX, rng.integers(-2, 9, n_rows))
        enforcement = [[int(rng.integers(0, n_vars))] if rng.random() < 0.3 else [] for _ in range(n_rows)]
        var_ub = hi.copy()
        if trial % 5 == 0:
            var_ub[0] = UNBOUNDED                     # a bound the caller does not know
        full, kept = cp_model.CpModel(), cp_model.CpModel()
        for m in (full, kept):
            for h in hi.tolist():
                m.new_int_var(0, h, "")
        args = (np.array(rows, dtype=np.int64), np.array(variables, dtype=np.int64),
                np.array(coefficients, dtype=np.int64), lower, upper)
        add_rows(full, *args, enforcement=enforcement)
        add_rows(kept, *args, enforcement=enforcement, var_ub=var_ub)
        written = [c for c in full.proto.constraints]

        def satisfied(c, x) -> bool:
            if any(x[e] == 0 for e in c.enforcement_literal):
                return True
            total = sum(v * x[k] for k, v in zip(c.linear.vars, c.linear.coeffs))
            return c.linear.domain[0] <= total <= c.linear.domain[1]

        def always(c) -> bool:
            most = sum(max(v * int(var_ub[k]), 0) for k, v in zip(c.linear.vars, c.linear.coeffs))
            least = sum(min(v * int(var_ub[k]), 0) for k, v in zip(c.linear.vars, c.linear.coeffs))
            # (an unknown bound makes the row's range too wide to be sure of: kept)
            return most - least < 2 ** 52 and c.linear.domain[0] <= least and most <= c.linear.domain[1]
        expected = [c for c in written if not always(c)]
        assert [str(c) for c in kept.proto.constraints] == [str(c) for c in expected]
        if trial % 5 == 0:                            # every row of the unknown bound's variable kept
            assert sum(0 in c.linear.vars for c in written) == sum(0 in c.linear.vars for c in kept.proto.constraints)
        for x in np.ndindex(*(hi + 1)):
            assert all(satisfied(c, x) for c in written) == all(satisfied(c, x) for c in kept.proto.constraints)
