"""A session knows the nodes that may have releasing capacity (`Session.releasing_nodes`): on
every other node idle >= free, so what fits free capacity fits idle, and the fit checks read idle
on those nodes only (`idle_fits`, kai_cp/fit.py; kai_cp/gpu_sharing_place.py; NodeWalker).

Why: a cluster without terminating pods has no releasing capacity until an eviction, and the
second pass was ~10% of a 10,000-node allocate. Every node with releasing capacity must be in the
set (through evictions, rollbacks, moves and held nominated room), `idle_fits` must be the full
check, and reading idle on fewer nodes must change no decision."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import clustergen as cg
from greedy_decisions import decisions
from kai_cp.actions import allocate
from kai_cp.fit import idle_fits, rows_fit
from kai_cp.loader import load_snapshot_dict
from kai_cp.session import Session
from kai_cp.state import build_cluster_state

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _checked(m: pytest.MonkeyPatch, seen: list[bool]) -> None:
    """After every operation that changes a session's capacity: every node with releasing
    capacity is in the session's set, and its sorted rows are the set's."""
    def check(s: Session) -> None:
        positive = set(np.flatnonzero((s.releasing > 0).any(axis=1)).tolist())
        assert positive <= s.releasing_nodes, f"releasing capacity on {sorted(positive - s.releasing_nodes)}"
        assert s.releasing_rows().tolist() == sorted(s.releasing_nodes)
        seen.append(bool(positive))

    for name in ("place", "evict", "rollback", "unplace", "cancel_move", "convert_to_pipelined"):
        real = getattr(Session, name)
        m.setattr(Session, name, lambda self, *a, __real=real, **k: (__real(self, *a, **k), check(self))[0])
    real_unhold = allocate._unhold
    m.setattr(allocate, "_unhold", lambda session, held: (real_unhold(session, held), check(session))[0])


@SETTINGS
@given(doc=cg.contended_clusters())
def test_every_node_with_releasing_capacity_is_in_the_set(doc: dict[str, Any]) -> None:
    seen: list[bool] = []
    with pytest.MonkeyPatch.context() as m:
        _checked(m, seen)
        decisions(doc)


@SETTINGS
@given(doc=cg.clusters())
def test_skipping_the_idle_pass_changes_nothing(doc: dict[str, Any]) -> None:
    fast = decisions(doc)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Session, "releasing_nodes", property(lambda self: _Every(), lambda self, value: None), raising=False)
        m.setattr(Session, "releasing_rows", lambda self: np.arange(len(self.state.nodes)))
        assert decisions(doc) == fast


class _Every:
    """Every node (reading idle everywhere, as before the set)."""

    def __contains__(self, node: int) -> bool:
        return True

    def __bool__(self) -> bool:
        return True

    def add(self, node: int) -> None:
        pass


@pytest.mark.parametrize("seed", range(10))
def test_idle_fits_is_the_full_check(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    idle = rng.integers(-2, 12, (n, 4)).astype(np.int64)
    releasing = rng.integers(-2, 4, (n, 4)).astype(np.int64) * (rng.random((n, 1)) < 0.1)
    s = Session.__new__(Session)
    s.idle, s.releasing, s.free = np.asfortranarray(idle), releasing, np.asfortranarray(idle + releasing)
    s.releasing_nodes = set(np.flatnonzero((releasing > 0).any(axis=1)).tolist()) | \
        set(rng.choice(n, int(rng.integers(0, 5)), replace=False).tolist())
    s._releasing_rows = None
    vec = rng.integers(0, 8, 4).astype(np.int64)
    for size in (0, 1, 3, 40, 399):
        sub = np.sort(rng.choice(n, size, replace=False)).astype(np.int64)
        fits = rows_fit(s.free, sub, vec)
        assert np.array_equal(idle_fits(s, sub, fits, vec), fits & rows_fit(s.idle, sub, vec))


def test_a_session_without_terminating_pods_starts_clear() -> None:
    nodes = [cg.node("n1", gpus=2), cg.node("n2", gpus=2)]
    pods = [cg.pod("run-0", "run", gpus=1, phase="Running", node_name="n1")]
    doc = cg.snapshot(nodes, [cg.queue("q")], pods, [cg.pod_group("run", "q")])
    s = Session.open(build_cluster_state(load_snapshot_dict(doc)))
    assert not s.releasing_nodes and not np.any(s.releasing > 0)
    pods[0] = cg.pod("run-0", "run", gpus=1, phase="Running", node_name="n1", deleting=True)
    s = Session.open(build_cluster_state(load_snapshot_dict(doc)))
    assert s.releasing_nodes == {0} and np.any(s.releasing > 0)
