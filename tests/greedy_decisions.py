"""Everything KAI's actions decide and say on a snapshot document, for tests that compare two
ways of computing the same decisions (a shortcut against the plain computation)."""

from __future__ import annotations

from typing import Any

import clustergen as cg
from kai_cp.actions.pipeline import run_greedy
from kai_cp.loader import load_snapshot_dict
from kai_cp.state import build_cluster_state

NOW = float(cg.BASE_EPOCH)


def decisions(doc: dict[str, Any]) -> tuple:
    """Placements, evictions with their messages, every job's errors and each eviction action's
    outcome, the eviction search run to its end."""
    state = build_cluster_state(load_snapshot_dict(doc))
    g = run_greedy(state, NOW)
    s = g.session
    return (sorted((k, p.node, p.pipelined, tuple(p.gpu_groups)) for k, p in s.placements.items()),
            sorted((k, e.action, e.for_job, e.message) for k, e in s.evictions.items()),
            sorted((j, o.started, o.errors) for j, o in g.outcomes.items()),
            {a: (sorted(o.solved), sorted(o.failed.items()), o.attempts) for a, o in g.actions.items()})
