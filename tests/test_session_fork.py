"""Session.fork: allocate's decisions kept while KAI's eviction actions go on with the session.

Why: where those actions make a move the CP-SAT model has no variables for, the model's hint is
allocate's decisions alone. They used to come from allocate run again (0.3-0.6 s of a 1 s cycle
at 10,000 nodes); run_greedy now forks the session before the actions run. The fork must be
exactly what a second allocate makes, stay so however the session goes on, and give the model
the same hint: the same model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from clustergen import contended_clusters
from kai_cp.actions.pipeline import run_greedy
from kai_cp.loader import load_snapshot, load_snapshot_dict
from kai_cp.session import Session
from kai_cp.state import ClusterState, build_cluster_state

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = sorted((ROOT / "examples").glob("*.zip"))
NOW = 1_750_000_000.0


def _view(s: Session, ordered: bool = True) -> dict:
    """Everything a session's decisions consist of, comparable (a rollback puts a placement it
    restores last: `ordered=False` compares them as a set)."""
    placements = [(k, p.node, p.pipelined, p.ledger_pipelined, p.gpu_groups, p.from_releasing.tolist(),
                  None if p.vec is None else p.vec.tolist()) for k, p in s.placements.items()]
    return {
        "placements": placements if ordered else sorted(placements, key=repr),
        "evictions": sorted((k, e.node, e.action, e.for_job, e.message, e.vec.tolist()) for k, e in s.evictions.items()),
        "idle": s.idle.tolist(), "releasing": s.releasing.tolist(), "free": s.free.tolist(),
        "allocated": s.allocated, "allocated_np": s.allocated_np,
        "added": {k: v for k, v in s.added.items() if v},
        "shared": (s.shared.best.tolist(), [sorted((g, vars(d)) for g, d in s.shared.groups(n).items())
                                            for n in range(len(s.state.nodes))]),
        "log": len(s._log),
    }


def _check(state: ClusterState) -> bool:
    """Returns whether KAI's actions changed the session after the fork."""
    greedy = run_greedy(state, NOW, bounded=True)
    again = run_greedy(state, NOW, evictions=False)
    assert greedy.alone is not None
    kept = greedy.alone.session
    assert _view(kept) == _view(again.session)
    assert greedy.alone.order == again.order
    # the fork goes on alone: a decision made and rolled back there leaves it as it was, and the
    # session it came from untouched
    before, original = _view(kept, ordered=False), _view(greedy.session)
    cp = kept.checkpoint()
    pending = [t for j in state.waiting_jobs for t in j.waiting if t.key not in kept.placements]
    if pending:
        kept.place(pending[0], int(np.argmax(kept.free[:, 0])), pipelined=False)
    for p in list(kept.placements.values())[:3]:
        kept.unplace(p.task)
    assert _view(greedy.session) == original
    kept.rollback(cp)
    assert _view(kept, ordered=False) == before
    return bool(greedy.session.evictions) or len(greedy.session._log) != len(kept._log)


@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.name)
def test_the_fork_is_what_allocate_run_again_makes(path: Path) -> None:
    assert _check(build_cluster_state(load_snapshot(path)))      # the examples' actions evict or move


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contended_clusters())
def test_the_fork_is_what_allocate_run_again_makes_on_contended_clusters(doc: dict) -> None:
    _check(build_cluster_state(load_snapshot_dict(doc, "generated.json")))


@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.name)
def test_the_model_from_the_fork_is_the_model_from_allocate_run_again(path: Path) -> None:
    from kai_cp.cycle import load_engine
    load_engine("cp-sat")
    from kai_cp.model.build import build_model
    from kai_cp.model.linear_rows import proto_bytes
    state = build_cluster_state(load_snapshot(path))
    kept = run_greedy(state, NOW, bounded=True).alone
    again = run_greedy(state, NOW, evictions=False)
    protos = [proto_bytes(build_model(state, g, pair_budget=20_000, evictions=False).model)
              for g in (kept, again)]
    assert protos[0] == protos[1]
