"""Host ports (spec 5.3, Kubernetes' NodePorts): two pods that want the same host port and
protocol never share a node, whether the other pod runs there (in any namespace, terminating
or not) or is placed in the same cycle, for both engines; hostNetwork makes every container
port a host port; the pending job says why (Kubernetes' words).

Why: kai-cp had no NodePorts predicate, so it bound a second pod onto a node whose port was
taken, and the kubelet then refused it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clustergen as cg  # noqa: E402

from kai_cp import host_ports  # noqa: E402
from kai_cp.cycle import CycleSettings, run_cycle  # noqa: E402
from kai_cp.loader import load_snapshot_dict  # noqa: E402
from kai_cp.state import build_cluster_state  # noqa: E402
from kai_cp.validate import violations  # noqa: E402
from models import Pod  # noqa: E402

ENGINES = ["cp-sat", "greedy"]


def _doc(nodes: int, pods: list[dict], groups: list[dict]) -> dict[str, Any]:
    return cg.snapshot([cg.node(f"n{i}", gpus=8) for i in range(nodes)], [cg.queue("q")], pods, groups)


def _cycle(doc: dict[str, Any], engine: str) -> dict[str, Any]:
    res = run_cycle(build_cluster_state(load_snapshot_dict(doc)), CycleSettings(engine=engine, time_limit=1.0))
    assert violations(res.state, res.session) == []
    return res.to_json()


def _placed(out: dict[str, Any]) -> dict[str, str]:
    return {b["pod"]: b["node"] for b in out["binds"] + out["pipelined"]}


def _spec(**kw) -> Any:
    return Pod.model_validate(cg.pod("p", "g", **kw), by_alias=True, by_name=False).spec


def test_wanted_reads_containers_sidecars_and_host_network():
    assert host_ports.wanted(_spec(host_ports=[(8080, "TCP"), (53, "udp")])) == (("TCP", 8080), ("UDP", 53))
    assert host_ports.wanted(_spec()) == ()
    assert host_ports.wanted(_spec(host_ports=[(9000, "TCP")], host_network=True)) == (("TCP", 9000),)
    raw = cg.pod("p", "g")
    raw["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]          # no host port: none wanted
    raw["spec"]["initContainers"] = [
        {"name": "setup", "ports": [{"containerPort": 1, "hostPort": 7000}]},        # exited before the pod runs
        {"name": "mesh", "restartPolicy": "Always", "ports": [{"containerPort": 15001, "hostPort": 15001}]}]
    assert host_ports.wanted(Pod.model_validate(raw, by_alias=True, by_name=False).spec) == (("TCP", 15001),)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_gang_wanting_one_port_takes_one_pod_a_node(engine: str) -> None:
    """Four 1-GPU workers on two 8-GPU nodes would binpack onto one; with a host port each needs a
    node of its own: on three nodes the gang of three starts, one pod a node."""
    pods = [cg.pod(f"w-{i}", "w", gpus=1, queue_name="q", host_ports=[(29500, "TCP")]) for i in range(3)]
    groups = [cg.pod_group("w", "q", min_member=3)]
    out = _cycle(_doc(3, pods, groups), engine)
    assert sorted(_placed(out).values()) == ["n0", "n1", "n2"]
    out = _cycle(_doc(2, pods, groups), engine)
    assert _placed(out) == {}
    (why,) = [u["reasons"] for u in out["unschedulable"] if u["podGroup"] == "w"]
    assert "2 are required" in " ".join(why) or "3 are required" in " ".join(why), why


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("holder", ["running", "terminating", "other-namespace", "host-network"])
def test_a_port_held_on_a_node_keeps_the_pod_off_it(engine: str, holder: str) -> None:
    """n0 is fuller (binpack would choose it) and holds the port: the pod goes to n1."""
    kw: dict[str, Any] = {"host_ports": [(8080, "TCP")]}
    if holder == "host-network":
        kw["host_network"] = True
    pods = [cg.pod("old-0", "old", gpus=4, queue_name="q", phase="Running", node_name="n0",
                   deleting=holder == "terminating", namespace="other" if holder == "other-namespace" else "default",
                   **kw),
            cg.pod("new-0", "new", gpus=1, queue_name="q", host_ports=[(8080, "TCP")])]
    groups = [cg.pod_group("old", "q", namespace="other" if holder == "other-namespace" else "default"),
              cg.pod_group("new", "q")]
    assert _placed(_cycle(_doc(2, pods, groups), engine)) == {"default/new-0": "n1"}


@pytest.mark.parametrize("engine", ENGINES)
def test_another_protocol_or_port_does_not_conflict(engine: str) -> None:
    pods = [cg.pod("old-0", "old", gpus=4, queue_name="q", phase="Running", node_name="n0", host_ports=[(8080, "TCP")]),
            cg.pod("udp-0", "udp", gpus=1, queue_name="q", host_ports=[(8080, "UDP")]),
            cg.pod("other-0", "other", gpus=1, queue_name="q", host_ports=[(8081, "TCP")])]
    groups = [cg.pod_group("old", "q"), cg.pod_group("udp", "q"), cg.pod_group("other", "q")]
    assert _placed(_cycle(_doc(2, pods, groups), engine)) == {"default/udp-0": "n0", "default/other-0": "n0"}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_pod_whose_port_is_taken_everywhere_says_so(engine: str) -> None:
    pods = [cg.pod(f"old-{i}", "old", gpus=1, queue_name="q", phase="Running", node_name=f"n{i}",
                   host_ports=[(8080, "TCP")]) for i in range(2)]
    pods.append(cg.pod("new-0", "new", gpus=1, queue_name="q", host_ports=[(8080, "TCP")]))
    out = _cycle(_doc(2, pods, [cg.pod_group("old", "q", min_member=2), cg.pod_group("new", "q")]), engine)
    assert _placed(out) == {}
    (why,) = [u["reasons"] for u in out["unschedulable"] if u["podGroup"] == "new"]
    assert host_ports.REASON in " ".join(why), why


def test_the_validator_catches_two_pods_on_one_port():
    from kai_cp.actions.allocate import run_allocate
    pods = [cg.pod(f"a-{i}", f"a{i}", gpus=1, queue_name="q", host_ports=[(8080, "TCP")]) for i in range(2)]
    doc = _doc(1, pods, [cg.pod_group(f"a{i}", "q") for i in range(2)])
    state = build_cluster_state(load_snapshot_dict(doc))
    greedy = run_allocate(state)
    assert len(greedy.session.placements) == 1 and violations(state, greedy.session) == []
    (placed,) = greedy.session.placements.values()
    other = next(t for t in state.tasks if t.key != placed.task.key)
    greedy.session.place(other, placed.node, pipelined=False)      # what a model bug would do
    broken = violations(state, greedy.session)
    assert any("host port TCP/8080" in b for b in broken), broken


def test_an_empty_namespace_selector_selects_every_namespace():
    """Kubernetes: `namespaceSelector: {}` in a pod (anti-)affinity term means all namespaces;
    it was read as the pod's own namespace."""
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname",
         "namespaceSelector": {}}]}}
    pods = [cg.pod("old-0", "old", gpus=4, queue_name="q", phase="Running", node_name="n0", namespace="other",
                   labels={"app": "db"}),
            cg.pod("new-0", "new", gpus=1, queue_name="q", affinity=anti)]
    groups = [cg.pod_group("old", "q", namespace="other"), cg.pod_group("new", "q")]
    for engine in ENGINES:
        assert _placed(_cycle(_doc(2, pods, groups), engine)) == {"default/new-0": "n1"}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("rule", ["host-port", "anti-affinity", "none"])
def test_victims_consolidation_moves_keep_away_from_each_other(engine: str, rule: str) -> None:
    """A gang of two 8-GPU pods needs n0 and n1, each half taken by a victim; n2 is free but
    tainted for all but the victims. Consolidation would move both victims onto n2, where the
    second cannot run beside the first when both want one host port, or are anti-affine per node:
    it moved them there all the same, as the in-cycle check ran only for pending carriers."""
    kw: dict[str, Any] = {}
    if rule == "host-port":
        kw["host_ports"] = [(29500, "TCP")]
    elif rule == "anti-affinity":
        kw["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"role": "worker"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        kw["labels"] = {"role": "worker"}
    nodes = [cg.node("n0", gpus=8), cg.node("n1", gpus=8), cg.node("n2", gpus=8, taints=[("dedicated", "batch", "NoSchedule")])]
    tol = [{"key": "dedicated", "operator": "Exists"}]
    pods = [cg.pod(f"r{i}-0", f"r{i}", gpus=4, queue_name="q", phase="Running", node_name=f"n{i}", tolerations=tol, **kw)
            for i in range(2)]
    pods += [cg.pod(f"big-{i}", "big", gpus=8, queue_name="q") for i in range(2)]
    groups = [cg.pod_group(f"r{i}", "q", priority_class="train") for i in range(2)]
    groups.append(cg.pod_group("big", "q", min_member=2, priority_class="train"))
    out = _cycle(cg.snapshot(nodes, [cg.queue("q")], pods, groups), engine)
    moved = sorted(b["node"] for b in out["pipelined"] if b["pod"].startswith("default/r"))
    if rule == "none":
        assert moved == ["n2", "n2"] and len(out["evictions"]) == 2
    else:
        assert moved == [] and out["evictions"] == [] and _placed(out) == {}


def test_the_validator_catches_anti_affine_pods_placed_together():
    from kai_cp.actions.allocate import run_allocate
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "worker"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    pods = [cg.pod(f"a-{i}", f"a{i}", gpus=1, queue_name="q", affinity=anti, labels={"role": "worker"}) for i in range(2)]
    state = build_cluster_state(load_snapshot_dict(_doc(2, pods, [cg.pod_group(f"a{i}", "q") for i in range(2)])))
    greedy = run_allocate(state)
    assert sorted(state.nodes[p.node].name for p in greedy.session.placements.values()) == ["n0", "n1"]
    assert violations(state, greedy.session) == []
    second = next(p for p in greedy.session.placements.values() if state.nodes[p.node].name == "n1")
    first = next(p for p in greedy.session.placements.values() if p is not second)
    greedy.session.unplace(second.task)
    greedy.session.place(second.task, first.node, pipelined=False)       # what a bug would do
    broken = violations(state, greedy.session)
    assert any("required anti-affinity keeps it away" in b for b in broken), broken
