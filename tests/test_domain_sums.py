"""Per-domain sums of the topology plugin (kai_cp/topology_fit.py): exact integer sums of the
view's nodes, taken over nodes at the deepest level a scope asks for and upwards from there.

Why: the greedy engine's topology search sums free capacity per domain at every level for each
scope (~140 scopes over 10,000 nodes and 3 levels in one bench_scale allocation); summing the
few hundred racks into blocks and zones, rather than every node again per level, must give
exactly the sums over the nodes: memory in bytes summed over a zone or the whole cluster passes
2**53, where float sums would round."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_cp.topology import ROOT, build_tree
from kai_cp.topology_fit import DomainView, MemberFree, _domain_sums, allocatable_pods


def over_view(tree, level: int, valid: np.ndarray, values: np.ndarray) -> list:
    """The plain definition: per domain, the Python-integer sum of its view nodes' values."""
    dom = tree.domain_of(level)
    out = []
    for d in range(tree.count(level)):
        rows = values[valid & (dom == d)]
        out.append([int(x) for x in rows.astype(object).sum(axis=0)] if values.ndim > 1 else int(rows.astype(object).sum()))
    return out


def cluster(seed: int, n: int = 3000):
    rng = np.random.default_rng(seed)
    labels = []
    for i in range(n):
        if rng.random() < 0.05:
            labels.append({})                       # outside the tree
        else:
            zone = int(rng.integers(2))
            labels.append({"zone": f"z{zone}", "rack": f"z{zone}r{int(rng.integers(40))}", "host": f"h{i}"})
    tree = build_tree("t", ["zone", "rack", "host"], labels)
    valid = tree.member & (rng.random(n) < 0.8)
    # memory in bytes with odd values: a zone's sum passes 2**53, where a float sum rounds
    values = np.stack([rng.integers(-1000, 128_000, n), rng.integers(0, 2**43, n) * 2 + 1,
                       rng.integers(-1, 9, n), rng.integers(0, 111, n)], axis=1).astype(np.int64)
    return tree, valid, np.where(valid[:, None], values, 0)


@pytest.mark.parametrize("seed", range(4))
def test_domain_sums_equal_sums_over_the_view(seed: int) -> None:
    tree, valid, values = cluster(seed)
    assert values[:, 1].sum() > 2**53
    for level in (ROOT, 0, 1, 2):
        assert _domain_sums(tree, level, values).tolist() == over_view(tree, level, valid, values)
        assert _domain_sums(tree, level, values[:, 3]).tolist() == over_view(tree, level, valid, values[:, 3])


@pytest.mark.parametrize("deepest", [ROOT, 0, 1, 2])
def test_sums_upwards_from_the_deepest_level_equal_sums_over_nodes(deepest: int) -> None:
    tree, valid, values = cluster(7)
    view = DomainView(tree, valid, values, np.array([1, 1, 1, 0]), np.array([1, 1, 1, 0]), 4, deepest=deepest)
    pods = view.pods
    for level in (2, 1, 0, ROOT):            # deepest first, as the topology search asks
        assert view.sums(level).tolist() == over_view(tree, level, valid, values)
        assert view.pod_counts(level).tolist() == over_view(tree, level, valid, pods)


def test_a_tree_without_members_sums_to_zero() -> None:
    tree = build_tree("t", ["zone", "rack"], [{}, {"zone": "z"}])
    values = np.ones((2, 3), dtype=np.int64)
    view = DomainView(tree, tree.member, values, np.ones(3, dtype=np.int64), None, 1, deepest=1)
    assert view.sums(ROOT).tolist() == [[0, 0, 0]]
    assert view.sums(0).shape == (0, 3)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_sums_kept_for_a_session_follow_its_free_capacity(seed: int) -> None:
    """MemberFree (a tree's member nodes' free capacity, pod counts per pod shape and per-domain
    sums, kept across a session's changes) against the definitions computed afresh, through
    placements, evictions and rollbacks (rows going back to earlier values), with levels and
    pod shapes first asked for at different moments."""
    rng = np.random.default_rng(seed)
    tree, _, values = cluster(seed % 1000, n=400)
    member = tree.member
    session = SimpleNamespace(free=np.asfortranarray(np.where(member[:, None], values, rng.integers(0, 9, values.shape))))
    history = [session.free.copy()]
    shapes = [np.array([1, 1, 1, 0]), np.array([3, 2**40, 2, 0]), np.array([0, 0, 0, 0]), np.array([0, 0, 1, 1])]
    for step in range(12):
        kept = MemberFree.of(tree, session)
        fresh = np.where(member[:, None], session.free, 0)
        assert kept.free.tolist() == fresh.tolist()
        for shape in shapes[: 1 + step % len(shapes)]:
            n_tasks = int(rng.integers(1, 5))
            view = DomainView(tree, member, kept.free, shape, shape, n_tasks, deepest=int(rng.integers(-1, 3)), kept=kept)
            want = np.where(member, allocatable_pods(fresh, shape, n_tasks), 0)
            assert view.pods.tolist() == want.tolist()
            for level in [int(x) for x in rng.permutation([ROOT, 0, 1, 2])[: int(rng.integers(1, 5))]]:
                assert view.sums(level).tolist() == over_view(tree, level, member, fresh)
                assert view.pod_counts(level).tolist() == over_view(tree, level, member, want)
        if rng.random() < 0.3 and len(history) > 1:          # a rollback: back to an earlier state
            session.free[:] = history[int(rng.integers(len(history)))]
        else:                                                 # placements and evictions on a few nodes
            rows = rng.choice(len(member), size=int(rng.integers(1, 6)), replace=False)
            session.free[rows] += rng.integers(-3, 4, (len(rows), values.shape[1]))
        history.append(session.free.copy())


@pytest.mark.parametrize("seed", range(6))
def test_sorted_tree_ranks_are_the_lexicographic_walk(seed: int) -> None:
    """The tree walk's ranks (children by ratio descending, ties by id, under their parent's
    rank) against one lexsort per level, from the root and from a start domain, with ties."""
    from kai_cp.topology_fit import _sorted_tree_ranks
    tree = cluster(seed, 600)[0]
    rng = np.random.default_rng(seed)
    ratios = {lv: rng.integers(0, 4, tree.count(lv)) / 4.0 for lv in range(len(tree.levels))}
    view = SimpleNamespace(ratio=lambda lv: ratios[lv])
    lowest = len(tree.levels) - 1
    for start_level in (ROOT, 0, 1):
        want: dict[int, np.ndarray] = {}
        for level in range(max(start_level, ROOT), lowest + 1):
            n = tree.count(level)
            if level <= start_level:
                want[level] = np.zeros(n, dtype=np.int64)
                continue
            parent = want[level - 1][tree.parent[level]] if level > 0 else np.zeros(n, dtype=np.int64)
            order = np.lexsort((tree.name_rank(level), -ratios[level], parent))
            want[level] = np.empty(n, dtype=np.int64)
            want[level][order] = np.arange(n)
        got = _sorted_tree_ranks(view, tree, start_level, lowest)
        assert set(got) == set(want) and all(np.array_equal(got[lv], want[lv]) for lv in want)


@pytest.mark.parametrize("seed", range(6))
def test_scope_demand_is_the_sum_and_largest_pod_of_its_tasks(seed: int) -> None:
    """scope_demand counts each distinct request once, weighted by its pods: the same summed
    request and largest pod as stacking every task's row."""
    from kai_cp.topology_fit import _homogeneous, scope_demand
    rng = np.random.default_rng(seed)
    requests = [SimpleNamespace(row=np.array([*rng.integers(0, 5, 3), 1]) * (rng.random(4) < 0.8)) for _ in range(3)]
    tasks = [SimpleNamespace(request=requests[int(rng.integers(len(requests)))]) for _ in range(int(rng.integers(1, 40)))]
    table = SimpleNamespace(vector=lambda t: t.request.row, col={"cpu": 0, "memory": 1, "gpu": 2, "pods": 3})
    demand, largest = scope_demand(SimpleNamespace(table=table), tasks)
    rows = np.stack([t.request.row for t in tasks])
    want = rows.sum(axis=0)
    want[3] = 0
    assert np.array_equal(demand, want)
    if _homogeneous(rows):
        assert largest is not None and np.array_equal(largest, rows.max(axis=0))
    else:
        assert largest is None
