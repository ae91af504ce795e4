"""The candidate ranking's partial sort (kai_cp/model/candidates.py `_Ranking`).

Why: a class reads only the first few of thousands of ranked nodes, so the ranking sorts a flag's
block only as far as asked (nodes at most the m-th smallest preference). What it returns must be
exactly the prefix of the full order the selection used before (flag, preference, node; the
first max(min_nodes, k) nodes, k the fewest whose capped bounds reach the target), ties and
repeated asks included: the model's pairs, and so its proto, come in that order.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import kai_cp.model.candidates as candidates
from kai_cp.model.candidates import _Ranking


def _reference(nodes, flag, prim, ub, target, min_nodes):
    order = np.lexsort((prim, flag))
    cum = np.cumsum(np.minimum(ub[order], 1 << 20))
    k = max(min_nodes, int(np.searchsorted(cum, target)) + 1)
    return nodes[order][:k]


@settings(max_examples=400, deadline=None)
@given(n=st.integers(0, 300), seed=st.integers(0, 1 << 30),
       asks=st.lists(st.tuples(st.one_of(st.integers(1, 3000), st.floats(0.5, 3000)), st.integers(1, 40)),
                     min_size=1, max_size=4),
       ties=st.sampled_from([2, 5, 1000]), floats=st.booleans(), blockwise=st.booleans())
def test_prefix_is_the_full_orders_prefix(n, seed, asks, ties, floats, blockwise) -> None:
    """Both ways: block by block (large rankings) and sorted whole (up to SORT_ALL_NODES)."""
    kept = candidates.SORT_ALL_NODES
    candidates.SORT_ALL_NODES = 0 if blockwise else 1 << 20
    try:
        _check(n, seed, asks, ties, floats)
    finally:
        candidates.SORT_ALL_NODES = kept


def _check(n, seed, asks, ties, floats) -> None:
    rng = np.random.default_rng(seed)
    nodes = np.sort(rng.choice(10 * n + 1, size=n, replace=False)).astype(np.int64)
    flag = rng.integers(0, 4, size=n)
    prim = rng.integers(0, ties, size=n).astype(np.float64 if floats else np.int64)
    if floats:
        prim[rng.random(n) < 0.2] = 1e18        # non-finite rows, as the selection writes them
    ub = rng.integers(1, 40, size=n)
    ub[rng.random(n) < 0.05] = 1 << 40           # best-effort pods: capped at 2^20
    ranking = _Ranking(nodes, flag, prim, ub)
    # targets met exactly at a flag block's end as well (the block is then the last one read)
    ends = np.cumsum([np.minimum(ub[flag == f], 1 << 20).sum() for f in range(4)])
    asks = asks + [(int(e), m) for e, (_, m) in zip(ends, asks) if e > 0]
    for target, min_nodes in asks:              # one ranking serves many classes and both passes
        want = _reference(nodes, flag, prim, ub, target, min_nodes)
        assert ranking.prefix(target, min_nodes).tolist() == want.tolist()
    order = np.lexsort((prim, flag))
    got_nodes, got_ub = ranking.full()
    assert got_nodes.tolist() == nodes[order].tolist() and got_ub.tolist() == ub[order].tolist()
