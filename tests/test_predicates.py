"""Static node predicates (spec 5.3): nodeSelector, required node affinity, taints/tolerations."""

from __future__ import annotations

import pytest

from snapshot_builder import node, pod, podgroup, snapshot, solve_doc, state_of

NODES = [
    node("a", labels={"zone": "z1", "gpu-type": "a100", "rank": "5"}),
    node("b", labels={"zone": "z2", "gpu-type": "h100", "rank": "10"}),
    node("c", labels={"zone": "z3", "rank": "x"}),
    node("d", labels={}),
]


def allowed(nodes=NODES, **pod_kw) -> set[str]:
    """Names of the nodes the pod's static predicates accept."""
    doc = snapshot(list(nodes), None, [podgroup("j")], [pod("p", "j", **pod_kw)])
    st = state_of(doc)
    (task,) = st.jobs["j"].tasks
    mask = st.predicates.mask(task.predicate_key)
    return {n.name for n in st.nodes if mask[n.index]}


def affinity(*terms) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key, op, *values) -> dict:
    d = {"key": key, "operator": op}
    if values:
        d["values"] = list(values)
    return d


def term(*exprs, fields=()) -> dict:
    t = {}
    if exprs:
        t["matchExpressions"] = list(exprs)
    if fields:
        t["matchFields"] = list(fields)
    return t


# ---------------------------------------------------------------------- nodeSelector


def test_no_constraints_allow_every_node():
    assert allowed() == {"a", "b", "c", "d"}


def test_node_selector():
    assert allowed(node_selector={"zone": "z1"}) == {"a"}
    assert allowed(node_selector={"zone": "z1", "gpu-type": "h100"}) == set()
    assert allowed(node_selector={"gpu-type": "h100"}) == {"b"}
    assert allowed(node_selector={"missing": ""}) == set()


# ---------------------------------------------------------------------- node affinity


@pytest.mark.parametrize("e,expected", [
    (expr("zone", "In", "z1", "z2"), {"a", "b"}),
    (expr("zone", "NotIn", "z1"), {"b", "c", "d"}),          # an absent label satisfies NotIn
    (expr("gpu-type", "Exists"), {"a", "b"}),
    (expr("gpu-type", "DoesNotExist"), {"c", "d"}),
    (expr("rank", "Gt", "6"), {"b"}),                          # non-integer and absent values never match
    (expr("rank", "Lt", "6"), {"a"}),
    (expr("rank", "Gt", "5"), {"b"}),                          # strict
])
def test_match_expressions(e, expected):
    assert allowed(affinity=affinity(term(e))) == expected


def test_expressions_within_a_term_are_anded():
    assert allowed(affinity=affinity(term(expr("zone", "In", "z1", "z2"), expr("gpu-type", "In", "h100")))) == {"b"}


def test_terms_are_ored():
    assert allowed(affinity=affinity(term(expr("zone", "In", "z1")), term(expr("zone", "In", "z3")))) == {"a", "c"}


def test_match_fields_metadata_name():
    assert allowed(affinity=affinity(term(fields=[expr("metadata.name", "In", "c", "d")]))) == {"c", "d"}
    assert allowed(affinity=affinity(term(fields=[expr("metadata.name", "NotIn", "a")]))) == {"b", "c", "d"}


def test_match_fields_and_expressions_in_one_term_are_anded():
    t = term(expr("zone", "Exists"), fields=[expr("metadata.name", "In", "c", "d")])
    assert allowed(affinity=affinity(t)) == {"c"}


def test_empty_node_selector_terms_match_nothing():
    assert allowed(affinity=affinity()) == set()


def test_empty_term_matches_nothing():
    assert allowed(affinity=affinity(term())) == set()
    assert allowed(affinity=affinity(term(), term(expr("zone", "In", "z2")))) == {"b"}


def test_node_selector_and_affinity_both_apply():
    assert allowed(node_selector={"zone": "z1"}, affinity=affinity(term(expr("gpu-type", "In", "h100")))) == set()
    assert allowed(node_selector={"zone": "z2"}, affinity=affinity(term(expr("gpu-type", "In", "h100")))) == {"b"}


def test_preferred_affinity_is_not_a_filter():
    aff = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", "z1")]}}]}}
    assert allowed(affinity=aff) == {"a", "b", "c", "d"}


def test_node_affinity_end_to_end_with_reason():
    doc = snapshot(NODES, None, [podgroup("ok"), podgroup("none")],
                   [pod("x", "ok", affinity=affinity(term(expr("gpu-type", "In", "h100")))),
                    pod("y", "none", node_selector={"zone": "nowhere"})])
    out = solve_doc(doc)
    assert {b["pod"]: b["node"] for b in out["binds"]} == {"default/x": "b"}
    (u,) = out["unschedulable"]
    assert u["podGroup"] == "none"
    assert any("node affinity/selector" in r for r in u["reasons"])


# ---------------------------------------------------------------------- taints


def taint(key, effect, value=None):
    d = {"key": key, "effect": effect}
    if value is not None:
        d["value"] = value
    return d


def tol(key=None, op=None, value=None, effect=None):
    d = {}
    for k, v in (("key", key), ("operator", op), ("value", value), ("effect", effect)):
        if v is not None:
            d[k] = v
    return d


TAINTED = [
    node("clean"),
    node("nosched", taints=[taint("dedicated", "NoSchedule", "gpu")]),
    node("noexec", taints=[taint("dedicated", "NoExecute", "gpu")]),
    node("prefer", taints=[taint("dedicated", "PreferNoSchedule", "gpu")]),
    node("other", taints=[taint("team", "NoSchedule", "x")]),
]


def test_untolerated_taints():
    assert allowed(TAINTED) == {"clean", "prefer"}        # PreferNoSchedule is ignored


@pytest.mark.parametrize("tols,expected", [
    ([tol("dedicated", "Exists")], {"clean", "prefer", "nosched", "noexec"}),
    ([tol("dedicated", "Equal", "gpu")], {"clean", "prefer", "nosched", "noexec"}),
    ([tol("dedicated", None, "gpu")], {"clean", "prefer", "nosched", "noexec"}),   # operator defaults to Equal
    ([tol("dedicated", "Equal", "cpu")], {"clean", "prefer"}),
    ([tol("dedicated", "Exists", effect="NoSchedule")], {"clean", "prefer", "nosched"}),
    ([tol("dedicated", "Equal", "gpu", effect="NoExecute")], {"clean", "prefer", "noexec"}),
    ([tol(None, "Exists")], {"clean", "prefer", "nosched", "noexec", "other"}),   # empty key + Exists: all
    ([tol(None, "Exists", effect="NoSchedule")], {"clean", "prefer", "nosched", "other"}),
    ([tol("team", "Equal", "x"), tol("dedicated", "Exists")], {"clean", "prefer", "nosched", "noexec", "other"}),
])
def test_tolerations(tols, expected):
    assert allowed(TAINTED, tolerations=tols) == expected


def test_taint_without_value_tolerated_by_exists_or_empty_value():
    nodes = [node("t", taints=[taint("flag", "NoSchedule")])]
    assert allowed(nodes) == set()
    assert allowed(nodes, tolerations=[tol("flag", "Exists")]) == {"t"}
    assert allowed(nodes, tolerations=[tol("flag", "Equal")]) == {"t"}
    assert allowed(nodes, tolerations=[tol("flag", "Equal", "v")]) == set()


def test_taints_end_to_end():
    doc = snapshot(TAINTED[1:3] + [node("prefer2", taints=[taint("k", "PreferNoSchedule")])], None,
                   [podgroup("j"), podgroup("t")],
                   [pod("p", "j"), pod("q", "t", tolerations=[tol("dedicated", "Exists")])])
    out = solve_doc(doc)
    binds = {b["pod"]: b["node"] for b in out["binds"]}
    assert binds["default/p"] == "prefer2"
    assert binds["default/q"] in {"nosched", "noexec", "prefer2"}


def test_untolerated_taint_reason():
    doc = snapshot([node("n", taints=[taint("dedicated", "NoSchedule", "gpu")])], None, [podgroup("j")],
                   [pod("p", "j")])
    (u,) = solve_doc(doc)["unschedulable"]
    assert any("untolerated taint" in r for r in u["reasons"])


# ---------------------------------------------------------------------- readiness as a predicate


def test_not_ready_nodes_are_filtered():
    nodes = [node("ok"), node("cordoned", unschedulable=True), node("sick", conditions={"Ready": "False"}),
             node("pressure", conditions={"DiskPressure": "True"})]
    assert allowed(nodes) == {"ok"}


def test_selector_on_a_per_node_label_distinguishes_nodes():
    """Nodes that differ only in their hostname label must not share a predicate answer."""
    assert allowed(node_selector={"kubernetes.io/hostname": "c"}) == {"c"}
    assert allowed(affinity=affinity(term(expr("kubernetes.io/hostname", "NotIn", "a", "b")))) == {"c", "d"}


@pytest.mark.parametrize("seed", range(6))
def test_node_groups_are_unique_rows_of_their_codes(seed: int) -> None:
    """The node groups' unique rows (one integer per row, kai_cp/predicates.py) against numpy's
    unique over rows: same first nodes in the same order and the same group of every node,
    including codes too many for one integer (numpy's own path then)."""
    import numpy as np

    from kai_cp.predicates import _unique_rows
    rng = np.random.default_rng(seed)
    for n, width, top in ((1, 1, 1), (300, 1, 7), (300, 3, 5), (500, 4, 1 << 20)):
        cols = [rng.integers(0, top, n).astype(np.int64) for _ in range(width)]
        _, first, inverse = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
        mine_first, mine_inverse = _unique_rows(cols)
        assert np.array_equal(mine_first, first) and np.array_equal(mine_inverse, inverse.reshape(-1))
