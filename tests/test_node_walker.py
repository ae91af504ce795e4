"""KAI's node order for a run of identical tasks (kai_cp/fit.py `NodeWalker`), sorted only as far
as the walk goes.

Why: a walk places a gang's identical pods one after another on the first node of KAI's order
that still fits; sorting all ~2,000-5,000 fitting nodes of a 10,000-node cluster for each walk
was a tenth of the allocate action (issue 9), though a walk reads only its first few nodes. The
order the walk reads must be KAI's order (the lexsort of its score's terms) however far it goes,
and allocation with the walker must place every pod where ranking all nodes afresh per pod does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clustergen as cg
from kai_cp import fit
from kai_cp.actions.allocate import run_allocate
from kai_cp.actions.pipeline import run_greedy
from kai_cp.fit import Fitter, NodeWalker, _walk_keys
from kai_cp.loader import load_snapshot_dict
from kai_cp.state import build_cluster_state


@st.composite
def node_orders(draw) -> tuple:
    """Fitting nodes with their order's terms; sizes past a few hundred nodes, where the head's
    selection leaves the rest unsorted (numpy sorts small arrays whole)."""
    n = draw(st.integers(0, 1500))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sub = np.sort(rng.choice(4 * n + 1, size=n, replace=False)).astype(np.int64)
    free = rng.integers(0, draw(st.sampled_from([2, 7, 1000])), size=n).astype(np.int64)
    wide = draw(st.sampled_from([0, 0, 1 << 41, -1]))      # some too wide for one integer key
    if n and wide:
        free[rng.integers(n)] = wide
    flags = [rng.random(n) < draw(st.sampled_from([0.0, 0.2, 0.5, 1.0])) for _ in range(3)]
    head = draw(st.integers(1, 80))
    return sub, free, *flags, head


@settings(max_examples=200, deadline=None)
@given(case=node_orders())
def test_the_walk_reads_kais_order_however_far_it_goes(case: tuple) -> None:
    sub, free, cpu_only, fits_idle, on_shared, head = case
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fit, "HEAD", head)
        walker = NodeWalker(None, sub, fits_idle, _walk_keys(sub, free, cpu_only, fits_idle, on_shared),
                            np.ones(1, dtype=np.int64), False)
    while walker._extend():
        pass
    expected = np.lexsort((sub, free, ~cpu_only, ~fits_idle, ~on_shared))
    assert walker.order.tolist() == sub[expected].tolist()
    assert walker.idle0.tolist() == fits_idle[expected].tolist()


def placements(doc: dict[str, Any]) -> tuple[list, list, list]:
    """Allocate's placements, then KAI's whole cycle's with its evictions (the eviction actions
    simulate on the allocation the walks made)."""
    state = build_cluster_state(load_snapshot_dict(doc))
    alone = run_allocate(state).session
    cycle = run_greedy(state, float(cg.BASE_EPOCH)).session
    return (sorted((k, p.node, p.pipelined, tuple(p.gpu_groups)) for k, p in alone.placements.items()),
            sorted((k, p.node, p.pipelined, tuple(p.gpu_groups)) for k, p in cycle.placements.items()),
            sorted((k, e.action, e.for_job) for k, e in cycle.evictions.items()))


def check_same_as_ranking_every_pod(doc: dict[str, Any]) -> None:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fit, "HEAD", 1)          # every walk past its head: the lazily sorted rest is read
        walked = placements(doc)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Fitter, "walker", lambda self, task: None)     # KAI's scores over all nodes, per pod
        ranked = placements(doc)
    assert walked == ranked


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.clusters())
def test_walked_placements_equal_ranking_every_pod(doc: dict[str, Any]) -> None:
    check_same_as_ranking_every_pod(doc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.contended_clusters(max_nodes=6))
def test_walked_placements_equal_ranking_every_pod_on_contended_clusters(doc: dict[str, Any]) -> None:
    check_same_as_ranking_every_pod(doc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.contended_clusters(max_nodes=6, topology=True))
def test_walked_placements_equal_ranking_every_pod_on_topology_clusters(doc: dict[str, Any]) -> None:
    """Topology gangs' pods are ranked within their domains, the other gangs' walked."""
    check_same_as_ranking_every_pod(doc)
