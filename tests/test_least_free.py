"""A whole-GPU task's node found among the nodes with the fewest free GPUs (kai_cp/fit.py
`Fitter._least_free`) where KAI's score orders the fitting nodes by free GPUs alone.

Why: a single pod's choice scored every fitting node (~2,000 at 10,000 nodes) with about 25 numpy
passes; under binpack with no releasing capacity the best node is the fitting one with the fewest
free GPUs, ties by name, which the few nodes with the fewest tell (issue 9). That shortcut must
pick KAI's node on every call, and leave every decision of the cycle as scoring all nodes does.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import clustergen as cg
import snapshot_builder as sb
from kai_cp import fit
from kai_cp.actions.pipeline import run_greedy
from kai_cp.fit import Fitter
from kai_cp.loader import load_snapshot_dict
from kai_cp.state import build_cluster_state


def decisions(doc: dict[str, Any], least_free: bool) -> tuple[list, list, int]:
    """KAI's cycle (allocate and the eviction actions); with the shortcut on, each of its choices
    is checked against scoring every node; how many were."""
    state = build_cluster_state(load_snapshot_dict(doc))
    checked = 0
    choose = Fitter.choose

    def both(self: Fitter, task, allowed=None, extra=None):
        nonlocal checked
        if not self._least_free_decides(task, self.state.table.vector(task)) or allowed is not None or extra is not None:
            return choose(self, task, allowed, extra)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(fit, "LEAST_FREE", False)
            scored = choose(self, task, allowed, extra)
        found = choose(self, task, allowed, extra)
        assert found == scored, (task.key, found, scored)
        checked += 1
        return found

    with pytest.MonkeyPatch.context() as m:
        m.setattr(fit, "LEAST_FREE", least_free)
        if least_free:
            m.setattr(Fitter, "choose", both)
        session = run_greedy(state, float(cg.BASE_EPOCH), time_limit=1.0).session
    return (sorted((k, p.node, p.pipelined, tuple(p.gpu_groups)) for k, p in session.placements.items()),
            sorted((k, e.action, e.for_job) for k, e in session.evictions.items()), checked)


def check(doc: dict[str, Any]) -> None:
    fast = decisions(doc, True)
    slow = decisions(doc, False)
    assert fast[:2] == slow[:2]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.clusters())
def test_least_free_picks_kais_node_on_generated_clusters(doc: dict[str, Any]) -> None:
    check(doc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.contended_clusters(max_nodes=6))
def test_least_free_picks_kais_node_on_contended_clusters(doc: dict[str, Any]) -> None:
    check(doc)


def test_the_shortcut_is_taken_and_ties_go_by_name() -> None:
    """Two GPU nodes with one free GPU each and one with four: a 1-GPU pod goes to the first by
    name of the two fullest (binpack), through the shortcut, and as the scores put it."""
    nodes = [sb.node(n, cpu="64", memory="256Gi", gpu=8) for n in ("n-c", "n-b", "n-a")]
    running = [sb.pod(f"r-{n}", f"r-{n}", gpu=g, phase="Running", node=f"n-{n}") for n, g in (("a", 4), ("b", 7), ("c", 7))]
    groups = [sb.podgroup(f"r-{n}") for n in "abc"] + [sb.podgroup("p")]
    doc = sb.snapshot(nodes, [sb.queue("q")], groups, running + [sb.pod("p-0", "p", gpu=1)])
    state = build_cluster_state(load_snapshot_dict(doc))
    placements, _, checked = decisions(doc, True)
    assert checked >= 1
    assert [(k, state.nodes[node].name) for k, node, *_ in placements] == [("default/p-0", "n-b")]
    check(doc)
