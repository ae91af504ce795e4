"""The constraints of a CP-SAT model that its solution hint breaks, evaluated directly on the
proto (linear rows, Boolean clauses, with enforcement literals), independently of the solver.
The tests check every hint with it; the build checks a hint it constructs before keeping it
(model/fragmentation.py `walk_hint`).

Why: the model is warm-started from KAI's decisions, extended by the constructive eviction
hint (kai_cp/model/eviction_hint.py). CP-SAT takes a complete hint that breaks one constraint
as no solution at all and spends its time repairing it: on the 1,000-node contention benchmark
such a hint left the solver with nothing after 2 s, so the cycle fell back to greedy."""

from __future__ import annotations

KINDS = ("linear", "bool_or", "bool_and", "at_most_one", "exactly_one")


def _lit(values: list[int], lit: int) -> int:
    return values[lit] if lit >= 0 else 1 - values[-lit - 1]


def hint_values(proto) -> list[int | None]:
    values: list[int | None] = [None] * len(proto.variables)
    for v, x in zip(proto.solution_hint.vars, proto.solution_hint.values):
        if v >= 0:
            values[v] = x
        else:
            values[-v - 1] = 1 - x
    return values


def values_of(hints, count: int) -> list[int | None]:
    """Per variable, the value of (variable or negated literal, value) pairs (None: unset)."""
    values: list[int | None] = [None] * count
    for var, v in hints:
        if var.index >= 0:
            values[var.index] = v
        else:
            values[-var.index - 1] = 1 - v
    return values


def broken_by_hint(proto) -> list[str]:
    """One line per variable hinted outside its domain or left unhinted, and per constraint the
    hint breaks (constraints of other kinds are not judged: the model has none)."""
    return broken(proto, hint_values(proto))


def broken(proto, values: list[int | None], first: bool = False) -> list[str]:
    """What `values` (one per variable, None: unset) break; `first`: stop at the first finding."""
    out = [f"variable {i} unhinted" for i, v in enumerate(values) if v is None]
    for i, (var, v) in enumerate(zip(proto.variables, values)):
        d = list(var.domain)
        if v is not None and not any(d[j] <= v <= d[j + 1] for j in range(0, len(d), 2)):
            out.append(f"variable {i} hinted {v} outside {d}")
    if out:
        return out
    for ci, c in enumerate(proto.constraints):
        if any(_lit(values, lit) == 0 for lit in c.enforcement_literal):
            continue
        kind = next((k for k in KINDS if getattr(c, "has_" + k)()), None)
        assert kind is not None, f"constraint {ci} of a kind this check does not judge"
        if kind == "linear":
            total = sum(coef * (values[v] if v >= 0 else -values[-v - 1])
                        for v, coef in zip(c.linear.vars, c.linear.coeffs))
            d = list(c.linear.domain)
            ok = any(d[j] <= total <= d[j + 1] for j in range(0, len(d), 2))
        elif kind == "bool_or":
            ok = any(_lit(values, lit) for lit in c.bool_or.literals)
        elif kind == "bool_and":
            ok = all(_lit(values, lit) for lit in c.bool_and.literals)
        elif kind == "at_most_one":
            ok = sum(_lit(values, lit) for lit in c.at_most_one.literals) <= 1
        else:
            ok = sum(_lit(values, lit) for lit in c.exactly_one.literals) == 1
        if not ok:
            out.append(f"constraint {ci} ({kind}) broken: {c}")
            if first:
                break
    return out
