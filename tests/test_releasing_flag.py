"""A session knows when no node has releasing capacity (`Session.positive_releasing` False):
idle >= free everywhere then, so what fits free capacity fits idle, and the fit checks skip
their second pass (kai_cp/fit.py, kai_cp/gpu_sharing_place.py).

Why: a cluster without terminating pods has no releasing capacity until an eviction, and the
second pass was ~10% of a 10,000-node allocate. The flag must be True whenever some node has
releasing capacity (through evictions, rollbacks, moves and held nominated room), and skipping
the pass must change no decision."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import clustergen as cg
from kai_cp.actions import allocate
from kai_cp.actions.pipeline import run_greedy
from kai_cp.loader import load_snapshot_dict
from kai_cp.session import Session
from kai_cp.state import build_cluster_state

NOW = 1.9e9
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _decisions(doc: dict[str, Any]) -> tuple:
    state = build_cluster_state(load_snapshot_dict(doc))
    g = run_greedy(state, NOW)
    s = g.session
    return (sorted((k, p.node, p.pipelined, tuple(p.gpu_groups)) for k, p in s.placements.items()),
            sorted((k, e.node, e.action, e.for_job) for k, e in s.evictions.items()),
            sorted((name, o.started, tuple(o.errors)) for name, o in g.outcomes.items()))


def _checked(m: pytest.MonkeyPatch, seen: list[bool]) -> None:
    """After every operation that changes a session's capacity: the flag is set wherever some
    node has releasing capacity."""
    def check(s: Session) -> None:
        positive = bool((s.releasing > 0).any())
        assert s.positive_releasing or not positive, "releasing capacity on a node, the flag clear"
        seen.append(positive)

    for name in ("place", "evict", "rollback", "unplace", "cancel_move", "convert_to_pipelined"):
        real = getattr(Session, name)
        m.setattr(Session, name, lambda self, *a, __real=real, **k: (__real(self, *a, **k), check(self))[0])
    real_unhold = allocate._unhold
    m.setattr(allocate, "_unhold", lambda session, held: (real_unhold(session, held), check(session))[0])


@SETTINGS
@given(doc=cg.contended_clusters())
def test_the_flag_is_set_wherever_releasing_capacity_is(doc: dict[str, Any]) -> None:
    seen: list[bool] = []
    with pytest.MonkeyPatch.context() as m:
        _checked(m, seen)
        _decisions(doc)


@SETTINGS
@given(doc=cg.clusters())
def test_skipping_the_idle_pass_changes_nothing(doc: dict[str, Any]) -> None:
    fast = _decisions(doc)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Session, "positive_releasing", property(lambda self: True, lambda self, value: None), raising=False)
        assert _decisions(doc) == fast


def test_a_session_without_terminating_pods_starts_clear() -> None:
    nodes = [cg.node("n1", gpus=2), cg.node("n2", gpus=2)]
    pods = [cg.pod("run-0", "run", gpus=1, phase="Running", node_name="n1")]
    doc = cg.snapshot(nodes, [cg.queue("q")], pods, [cg.pod_group("run", "q")])
    s = Session.open(build_cluster_state(load_snapshot_dict(doc)))
    assert not s.positive_releasing and not np.any(s.releasing > 0)
    pods[0] = cg.pod("run-0", "run", gpus=1, phase="Running", node_name="n1", deleting=True)
    s = Session.open(build_cluster_state(load_snapshot_dict(doc)))
    assert s.positive_releasing and np.any(s.releasing > 0)
