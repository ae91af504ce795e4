"""Bounds of the classes kept on greedy's nodes, worked out for all of them at once
(kai_cp/model/candidates.py `_own_bounds`).

Why: past the pair budget a class's pairs are greedy's nodes, each bounded by the pods of the
class the node holds (with what the class's legal victims free there), its size and its shared
GPUs. Per class that was ~40% of a lean model's selection at 10,000 nodes (issue 9). Batched,
every pair and every bound must be the ones the per-class computation (`_own_pairs`) gives.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import clustergen as cg
import kai_cp.model.build as build
import kai_cp.model.candidates as candidates
from kai_cp.actions.pipeline import run_greedy
from kai_cp.loader import load_snapshot_dict
from kai_cp.state import build_cluster_state


def _per_class(state, owned, memo) -> list[np.ndarray]:
    out = []
    for _, c, nodes, reach in owned:
        chosen, ub = candidates._own_pairs(state, c, nodes.tolist(), None, reach, memo)
        assert chosen.tolist() == nodes.tolist()
        out.append(ub)
    return out


def pairs(doc: dict[str, Any], lean: bool, per_class: bool) -> tuple[list[list[int]], int]:
    """The model's candidate pairs with a pair budget of 0 (every class greedy started keeps its
    nodes); and how many classes had their bounds batched."""
    state = build_cluster_state(load_snapshot_dict(doc))
    greedy = run_greedy(state, float(cg.BASE_EPOCH), bounded=True)
    seen: list = []
    batched = 0
    select, bounds = candidates.select_pairs, candidates._own_bounds

    def counted(state, owned, memo):
        nonlocal batched
        batched += len(owned)
        return (_per_class if per_class else bounds)(state, owned, memo)

    def kept(*a, **k):
        out = select(*a, **k)
        seen.append([x.tolist() for x in out])
        return out

    with pytest.MonkeyPatch.context() as m:
        m.setattr(build, "select_pairs", kept)
        m.setattr(candidates, "_own_bounds", counted)
        build.build_model(state, greedy, pair_budget=0, lean=lean)
    return seen[-1], batched


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.contended_clusters(max_nodes=6))
def test_batched_bounds_equal_each_class_own(doc: dict[str, Any]) -> None:
    for lean in (True, False):
        batched, n = pairs(doc, lean, per_class=False)
        assert batched == pairs(doc, lean, per_class=True)[0]
        if n:
            cls, node, ub = batched
            assert len(cls) == len(node) == len(ub) and min(ub) >= 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.clusters())
def test_batched_bounds_equal_each_class_own_with_shared_gpus(doc: dict[str, Any]) -> None:
    batched, _ = pairs(doc, True, per_class=False)
    assert batched == pairs(doc, True, per_class=True)[0]
