"""An eviction scenario's simulation skips the topology node sets where a task of the gang fits
on no node (kai_cp/actions/allocate.py `_reachable`), and gives up on a scope whose tasks fit on
none of the nodes offered, before its candidate domains are even ranked.

Why: a topology gang's scenario tried every candidate domain (KAI counts a domain's room by
resources alone, so a domain of NotReady or tainted nodes is a candidate), ~40 per scenario, which
was most of a 10,000-node consolidation. Free capacity only shrinks while an attempt places
pods, so such a set always failed: skipping it must leave every decision as it was. These tests
compare KAI's actions with the shortcut against the same actions with it switched off."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import clustergen as cg
from greedy_decisions import decisions
from kai_cp.actions import allocate
from kai_cp.fit import Fitter


def without_pruning(doc: dict[str, Any]) -> tuple:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(allocate.Allocator, "_reachable", lambda self, tasks: None)
        return decisions(doc)


def rack_cluster() -> dict[str, Any]:
    """Two racks of two 8-GPU nodes. rack-a is tainted and idle: by resources it holds the
    preemptor, but the preemptor does not tolerate the taint. rack-b is full of a preemptible
    training job of another queue. The preemptor (a 2-pod gang, required rack) is placed only by
    reclaiming rack-b; every scenario of the search is offered rack-a first (most free)."""
    zone = {"topo/zone": "z1"}
    nodes = [cg.node(f"a{i}", gpus=8, labels={**zone, "topo/rack": "rack-a"}, taints=[("dedicated", "infra", "NoSchedule")])
             for i in range(2)]
    nodes += [cg.node(f"b{i}", gpus=8, labels={**zone, "topo/rack": "rack-b"}) for i in range(2)]
    queues = [cg.queue("q-train", gpu=cg.resource(0)), cg.queue("q-new", gpu=cg.resource(16))]
    pods, groups = [], []
    groups.append(cg.pod_group("train", "q-train", min_member=1, priority_class="train"))
    for i in range(4):
        pods.append(cg.pod(f"train-{i}", "train", gpus=4, phase="Running", node_name=f"b{i % 2}", queue_name="q-train"))
    groups.append(cg.pod_group("new", "q-new", min_member=2, priority_class="train",
                               topology=cg.constraint(required="topo/rack")))
    for i in range(2):
        pods.append(cg.pod(f"new-{i}", "new", gpus=8, queue_name="q-new"))
    return cg.snapshot(nodes, queues, pods, groups, topologies=[cg.topology_object(cg.TOPOLOGY, cg.TOPOLOGY_LEVELS)])


def test_a_domain_the_gang_cannot_use_is_skipped_with_the_same_decisions(monkeypatch) -> None:
    doc = rack_cluster()
    calls = {"n": 0}
    choose = Fitter.choose

    def counted(self, *args, **kwargs):
        calls["n"] += 1
        return choose(self, *args, **kwargs)

    monkeypatch.setattr(Fitter, "choose", counted)
    pruned = decisions(doc)
    with_shortcut = calls["n"]
    calls["n"] = 0
    plain = without_pruning(doc)
    assert pruned == plain
    placements, evictions, _, actions = pruned
    # the reclaim happened, on rack-b, and the preemptor waits for it there
    assert {k for k, *_ in evictions} == {f"default/train-{i}" for i in range(4)}
    assert [(k, p) for k, _, p, _ in placements if k.startswith("default/new-")] == [
        ("default/new-0", True), ("default/new-1", True)]
    assert "new" in actions["reclaim"][0]
    # and the scenarios no longer try the tainted rack
    assert with_shortcut < calls["n"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.clusters())
def test_pruning_never_changes_kai_actions(doc: dict[str, Any]) -> None:
    assert decisions(doc) == without_pruning(doc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.contended_clusters(max_nodes=6, topology=True))
def test_pruning_never_changes_kai_actions_under_contention(doc: dict[str, Any]) -> None:
    assert decisions(doc) == without_pruning(doc)
