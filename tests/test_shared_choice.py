"""The node a shared-GPU pod takes is looked for best-first (kai_cp/gpu_sharing_place.py): the
best-scored node by argmax, and KAI's full node order only when that node's GPUs cannot take the
pod. Both must read exactly KAI's order (a stable descending sort of the scores), and the
placements must be those of walking that order from the start."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clustergen as cg
from kai_cp import gpu_sharing_place
from kai_cp.actions.allocate import run_allocate
from kai_cp.gpu_sharing import largest_portion, portion_on_node
from kai_cp.loader import load_snapshot_dict
from kai_cp.state import build_cluster_state

SCORES = st.lists(st.sampled_from([-np.inf, 0.0, 1.0, 9.0, 100.0, 1000.0, 1109.0]), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(scores=SCORES)
def test_best_first_is_kais_stable_descending_order(scores: list[float]) -> None:
    score = np.array(scores)
    assert list(gpu_sharing_place._best_first(score)) == np.argsort(-score, kind="stable").tolist()


def _full_order(score: np.ndarray):
    yield from np.argsort(-score, kind="stable").tolist()


def placements(doc: dict[str, Any]) -> list[tuple]:
    state = build_cluster_state(load_snapshot_dict(doc))
    g = run_allocate(state)
    return sorted((k, p.node, p.pipelined, tuple(p.gpu_groups)) for k, p in g.session.placements.items())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.clusters(), refuse_even=st.booleans())
def test_shared_placements_equal_walking_the_whole_order(doc: dict[str, Any], refuse_even: bool) -> None:
    """`refuse_even`: the GPUs of even-numbered nodes never take the pod, so that the best node
    often fails and the rest of the order is walked (node-level fit and device choice agree on
    real ledgers, so that path is otherwise rare)."""
    with pytest.MonkeyPatch.context() as m:
        if refuse_even:
            real = gpu_sharing_place.choose_devices
            m.setattr(gpu_sharing_place, "choose_devices",
                      lambda request, ledger, n, *a: None if n % 2 == 0 else real(request, ledger, n, *a))
        best_first = placements(doc)
        m.setattr(gpu_sharing_place, "_best_first", _full_order)
        assert placements(doc) == best_first


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.clusters())
def test_largest_portion_is_the_portion_on_the_least_memory_node(doc: dict[str, Any]) -> None:
    """Cached per state; the value of the definition, for every GPU-memory request."""
    state = build_cluster_state(load_snapshot_dict(doc))
    mems = [n.gpu_memory for n in state.nodes if n.gpu_memory_synced] or [100]
    for job in state.jobs.values():
        for t in job.tasks:
            r = t.request
            if r.kind == "GpuMemory":
                want = portion_on_node(r, min(mems)) * max(r.devices, 1)
                assert largest_portion(r, state) == want
