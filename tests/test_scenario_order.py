"""An eviction scenario's simulation allocates its last job without popping the job queue
through the others (`kai_cp/actions/victims.py` `JobSolver._last`).

Why: KAI's simulation (spec 6.2.4) ranks every pending job in the queue order, though it
allocates only the preemptor and the victims' jobs; the others only decide which of those goes
first. Once one is left, popping the others changes nothing: it goes next. The pops were half of
a 1,000-node consolidation search. Checked on generated clusters: every simulation allocates the
same jobs in the same order as when the queue is popped to the end, and whole cycles decide the
same.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from clustergen import contended_clusters
from kai_cp.actions import victims
from kai_cp.actions.allocate import Allocator
from test_bench_generator import gen
from test_scenario_filter import _decisions


def _run(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch, popped: bool) -> tuple[dict[str, Any], list[str]]:
    """A greedy cycle (the whole search) and the jobs it allocated, in order, simulations
    included; `popped`: every simulation pops the queue until its last job (no shortcut)."""
    attempts: list[str] = []
    attempt = Allocator.attempt_tasks

    def logged(self, job, *args, **kwargs):
        attempts.append(job.name)
        return attempt(self, job, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(Allocator, "attempt_tasks", logged)
        if popped:
            m.setattr(victims.JobSolver, "_last", lambda self, todo, preemptor, order: None)
        return _decisions(doc), attempts


def _check(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    decided, attempts = _run(doc, monkeypatch, popped=False)
    assert _run(doc, monkeypatch, popped=True) == (decided, attempts)
    return attempts


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(doc=contended_clusters(max_nodes=6, max_running=14, max_pending=5))
def test_simulations_allocate_in_the_queue_order_on_contended_clusters(doc: dict[str, Any],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _check(doc, monkeypatch)


@pytest.mark.parametrize("nodes, seed", [(40, 6), (60, 5)])
def test_simulations_allocate_in_the_queue_order_on_generated_clusters(
        nodes: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many queues over their fair shares: 65 and 58 simulated scenarios, a third and most of
    them with victims of two jobs or more (up to 11)."""
    doc = gen.generate_cluster(nodes, 25, 6 * nodes, seed=seed, utilization=0.9, topology_share=0.3,
                               fractional_share=0.4, contention=True)
    simulated = []
    simulate = victims.JobSolver._simulate
    monkeypatch.setattr(victims.JobSolver, "_simulate",
                        lambda self, *a, **k: simulated.append(1) or simulate(self, *a, **k))
    _check(doc, monkeypatch)
    assert len(simulated) > 100        # both runs: the search simulated scenarios
