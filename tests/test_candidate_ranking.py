"""The candidate ranking's partial sort (kai_cp/model/candidates.py `_Ranking`).

Why: a class reads only the first few of thousands of ranked nodes, so the ranking sorts a flag's
block only as far as asked (nodes at most the m-th smallest preference). What it returns must be
exactly the prefix of the full order the selection used before (flag, preference, node; the
first max(min_nodes, k) nodes, k the fewest whose capped bounds reach the target), ties and
repeated asks included: the model's pairs, and so its proto, come in that order.
"""

from __future__ import annotations

import numpy as np
from hypothesis import event, given, settings, strategies as st

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


def _past_budget_reference(state, greedy, classes, pool, fragmentation: bool):
    """Per class of a job greedy started: greedy's distinct nodes, then (fragmentation on, not
    best-effort) the walk's other nodes where the class fits, each bounded by the pods the
    node's capacity at the cycle start holds (with what the class's legal victims free), the
    class's size and, for shared GPUs, its shared-device room."""
    from kai_cp.gpu_sharing import SharedLedger, shared_bound
    from kai_cp.model.candidates import _blocked_by_queue, greedy_class_nodes
    from kai_cp.model.frag_rows import walked
    from kai_cp.model.victim_pool import reach_for

    own = greedy_class_nodes(greedy, classes)
    walk = walked(state) if fragmentation else {}
    ledger = SharedLedger.open(state.nodes)
    out = []
    for c in sorted(classes, key=lambda c: c.index):
        if c.job.name not in greedy.started_jobs or not own.get(c.index) or _blocked_by_queue(state, c, pool):
            continue
        request = c.tasks[0].request
        reach = None if request.is_shared_gpu else reach_for(pool, c.job, state)
        free = state.table.free + (0 if reach is None else reach)

        def fit(n: int) -> int:
            if request.best_effort:
                return 1 << 40
            need = [r for r in range(len(c.vec)) if c.vec[r] > 0]
            return min((int(free[n, r]) // int(c.vec[r]) for r in need), default=np.iinfo(np.int64).max // 4)
        nodes = sorted(set(own[c.index]))
        if not request.best_effort:
            nodes += sorted({n for n, _ in walk.get(c.index, ()) if fit(n) > 0} - set(nodes))
        for n in nodes:
            ub = min(fit(n), c.size) if not request.best_effort else c.size
            if request.is_shared_gpu:
                ub = min(ub, int(shared_bound(request, ledger, state.table.free)[n]))
            out.append((c.index, n, ub))
    return sorted(out)


def _past_budget_case(doc, fragmentation: bool) -> None:
    import time

    from kai_cp.actions.pipeline import run_greedy
    from kai_cp.loader import load_snapshot_dict
    from kai_cp.model.candidates import build_classes, greedy_class_nodes, select_pairs
    from kai_cp.model.victim_pool import build_pool, pending_keys
    from kai_cp.state import build_cluster_state

    state = build_cluster_state(load_snapshot_dict(doc))
    greedy = run_greedy(state, time.time(), evictions=False)
    classes = build_classes(state, greedy)
    pool = build_pool(state, greedy, pending_keys(classes)) if fragmentation else None
    c, n, ub = select_pairs(state, greedy, classes, 0, greedy_class_nodes(greedy, classes), pool,
                            fragmentation=fragmentation)
    got = sorted(zip(c.tolist(), n.tolist(), ub.tolist()))
    assert got == _past_budget_reference(state, greedy, classes, pool, fragmentation)
    event(f"pairs: {min(len(got), 3)} shared: {any(cl.tasks[0].request.is_shared_gpu for cl in classes)} reach: {bool(pool and pool.reach)}")


@settings(max_examples=60, deadline=None)
@given(doc=__import__("clustergen").clusters(), fragmentation=st.booleans())
def test_past_the_pair_budget_a_class_keeps_greedys_nodes_with_their_bounds(doc, fragmentation) -> None:
    """With no pair budget left (10,000 nodes: nine classes in ten) a class's pairs are greedy's
    nodes (and the fragmentation walk's), bounded on those nodes alone, never ranked over every
    node: the pairs and bounds a direct reading of the cluster gives, with and without victims
    (the pool) and fragmentation (the lean model)."""
    _past_budget_case(doc, fragmentation)


@settings(max_examples=100, deadline=None)
@given(doc=__import__("clustergen").contended_clusters(), fragmentation=st.booleans())
def test_past_the_pair_budget_on_contended_clusters(doc, fragmentation) -> None:
    """As above where victims free room for some classes (their bounds count it)."""
    _past_budget_case(doc, fragmentation)
