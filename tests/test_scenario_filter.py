"""The eviction search's scenario filter (`kai_cp/actions/victims.py` `_ScenarioFilter`) rules out
only scenarios whose simulation would fail.

Why: consolidation, reclaim and preempt grow a victim set and simulate a scenario for each node
of the latest victim (spec 6.2.3-6.2.4); simulating is what the search costs. The filter skips
scenarios where the preemptor's pods cannot fit even with everything the victims free: whole
GPUs in total, each kind of pod counted node by node over its admitted nodes, within one domain
of a required topology level. Skipping is sound only if such a scenario's simulation fails
anyway: then KAI's search and its decisions are the same, only faster (bench/generate.py's
200-node contended clusters: the unbounded search 4-7x faster).

Checked two ways on generated clusters: the filter is asked but never obeyed, and no scenario it
rules out succeeds; and whole cycles decide the same with and without it.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings

from clustergen import clusters, contended_clusters
from kai_cp.actions import victims
from kai_cp.cycle import CycleSettings, run_cycle
from kai_cp.loader import load_snapshot_dict
from kai_cp.state import build_cluster_state
from test_bench_generator import gen

Filter = victims._ScenarioFilter


def _decisions(doc: dict[str, Any]) -> dict[str, Any]:
    state = build_cluster_state(load_snapshot_dict(copy.deepcopy(doc)))
    # a long limit: the search ends at its work bound, which these clusters never reach
    out = run_cycle(state, CycleSettings(engine="greedy", time_limit=60.0, now=1.8e9)).to_json()
    assert "evictionSearch" not in out["cycle"]
    return {k: out[k] for k in ("binds", "pipelined", "evictions")}


def _audited(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], Counter]:
    """A greedy cycle that simulates every scenario, with what the filter said of each: per
    (filter let it through, the simulation succeeded), how many."""
    seen: Counter = Counter()
    gates: list[Filter] = []
    real_init, real_ok, real_admits = Filter.__init__, Filter.ok, Filter.admits
    simulate = victims.JobSolver._simulate

    def init(self, *args, **kwargs) -> None:
        real_init(self, *args, **kwargs)
        self.said_ok, self.said = True, True
        gates.append(self)

    def ok(self) -> bool:
        self.said_ok = real_ok(self)
        return True

    def admits(self, scenario, recorded=None) -> bool:
        self.said = real_admits(self, scenario, recorded)
        return True

    def audit(self, *args, **kwargs):
        gate = gates[-1]
        let_through = gate.said_ok and gate.said
        gate.said = True                 # the next scenario may be the recorded victims' (no admits)
        result = simulate(self, *args, **kwargs)
        seen[(let_through, result is not None)] += 1
        return result

    with monkeypatch.context() as m:
        m.setattr(Filter, "__init__", init)
        m.setattr(Filter, "ok", ok)
        m.setattr(Filter, "admits", admits)
        m.setattr(victims.JobSolver, "_simulate", audit)
        decided = _decisions(doc)
    return decided, seen


def audited_check(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch, audited, passed: bool, wrong: str,
                  drawn: bool, events: tuple[str, str]) -> Counter:
    """A shortcut asked but never obeyed (`audited`: the decisions and, per (its verdict, the
    work it would skip succeeded), how many): it never skipped work that succeeds (a verdict
    other than `passed` on a success), and obeyed it decides the same."""
    unobeyed, seen = audited(doc, monkeypatch)
    assert seen[(not passed, True)] == 0, wrong
    assert _decisions(doc) == unobeyed
    if drawn:
        event(events[0] if seen[(not passed, False)] else events[1])
    return seen


def _check(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch, drawn: bool = True) -> Counter:
    return audited_check(doc, monkeypatch, _audited, True, "the filter ruled out a scenario that works", drawn,
                         ("the filter ruled out scenarios", "it ruled out none"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(doc=contended_clusters(max_nodes=6, max_running=14, max_pending=5))
def test_no_scenario_the_filter_rules_out_works_on_contended_clusters(doc: dict[str, Any],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _check(doc, monkeypatch)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(doc=contended_clusters(max_nodes=6, max_running=14, max_pending=5, topology=True))
def test_no_scenario_the_filter_rules_out_works_with_required_topology(doc: dict[str, Any],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _check(doc, monkeypatch)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                  HealthCheck.function_scoped_fixture])
@given(doc=clusters())
def test_no_scenario_the_filter_rules_out_works_with_shared_gpus(doc: dict[str, Any],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _check(doc, monkeypatch)


@pytest.mark.parametrize("seed, fractional", [(3, 0.0), (6, 0.4)])
def test_the_filter_rules_out_most_scenarios_of_a_contended_cluster_and_decides_the_same(
        seed: int, fractional: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 40-node cluster over its fair shares, with rack-bound gangs: most scenarios cannot fit
    the preemptor (all 2,000-odd reclaim scenarios at 200 nodes but a tenth failed before)."""
    doc = gen.generate_cluster(40, 25, 240, seed=seed, utilization=0.9, topology_share=0.3,
                               fractional_share=fractional, contention=True)
    seen = _check(doc, monkeypatch, drawn=False)
    ruled_out = seen[(False, False)]
    simulated = sum(seen.values())
    assert ruled_out > simulated / 2, seen


@pytest.mark.parametrize("seed, fractional", [(1, 0.0), (2, 0.4), (10, 0.0)])
def test_the_recorded_victims_worked_out_once_give_every_scenario_the_same_answer(
        seed: int, fractional: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """`admits(batch, recorded)` memoises what the recorded victims free and gain per domain; it
    must answer as the scenario's victims summed from scratch do, for every scenario of a search
    with gang steps (rack-bound gangs: the per-domain gains are read)."""
    doc = gen.generate_cluster(40, 25, 240, seed=seed, utilization=0.9, topology_share=0.3,
                               fractional_share=fractional, contention=True)
    real = Filter.admits
    asked = Counter()

    def both(self, batch, recorded=None) -> bool:
        said = real(self, batch, recorded)
        fresh = Filter.__new__(Filter)
        fresh.__dict__.update(self.__dict__)
        fresh._recorded = None
        assert real(fresh, list(recorded or []) + list(batch)) == said
        asked[(bool(recorded), said)] += 1
        return said

    monkeypatch.setattr(Filter, "admits", both)
    _decisions(doc)
    assert asked[(True, True)] and asked[(True, False)], asked      # recorded victims, both answers


def _pinned_gang_cluster(fractional: bool = False) -> dict[str, Any]:
    """Two racks of two 8-GPU nodes, all taken: a rack-bound gang with one 4-GPU pod running in
    rack r1 and two pending (4 GPUs each, or half a GPU each: `fractional`), and lower-priority
    preemptible jobs on every node. The gang may only grow in r1 (topology.pinned_domains), so
    scenarios evicting r2's jobs cannot work."""
    from clustergen import (TOPOLOGY, TOPOLOGY_LEVELS, constraint, node, pod, pod_group, priority_class, queue,
                            snapshot, topology_object)
    nodes = []
    for i, rack in enumerate(("r1", "r1", "r2", "r2")):
        nodes.append(node(f"n{i}", gpus=8, cpu_m=64_000, labels={TOPOLOGY_LEVELS[0]: "z1", TOPOLOGY_LEVELS[1]: rack}))
    groups = [pod_group("pinned", "a", min_member=1, priority_class="build", created=-600,
                        topology=constraint(required=TOPOLOGY_LEVELS[1]))]
    pods = [pod("pinned-0", "pinned", gpus=4, phase="Running", node_name="n0", queue_name="a", created=-599),
            *(pod(f"pinned-{i}", "pinned", gpus=0 if fractional else 4, queue_name="a", created=-599 + i,
                  annotations={"gpu-fraction": "0.5"} if fractional else None) for i in (1, 2))]
    for i, gpus in enumerate((4, 8, 8, 8)):
        groups.append(pod_group(f"v{i}", "a", priority_class="train", created=-900 + 10 * i))   # r2 newest: popped first
        pods.append(pod(f"v{i}-0", f"v{i}", gpus=gpus, phase="Running", node_name=f"n{i}", queue_name="a",
                        created=-899 + 10 * i))
    return snapshot(nodes, [queue("a")], pods, groups,
                    priority_classes=[priority_class("build", 100), priority_class("train", 50)],
                    config={"actions": "allocate, preempt"}, topologies=[topology_object(TOPOLOGY, TOPOLOGY_LEVELS)])


@pytest.mark.parametrize("fractional", [False, True], ids=["whole", "fractional"])
def test_a_gang_pinned_to_its_rack_gets_no_scenario_of_another_rack(monkeypatch: pytest.MonkeyPatch,
                                                                    fractional: bool) -> None:
    """The filter counts only the domains a gang already runs in: the scenarios evicting the other
    rack's jobs are ruled out (their simulations fail), and the gang grows in its own rack. Pods
    of shared GPUs are followed by their CPU, memory and pod slot on the nodes with GPU room and
    the victims' (a pinned gang of fractional pods had every scenario simulated)."""
    doc = _pinned_gang_cluster(fractional)
    seen = _check(doc, monkeypatch, drawn=False)
    assert seen[(False, False)] > 0               # the other rack's scenarios, ruled out
    evicted = {e["pod"].split("/")[-1] for e in _decisions(doc)["evictions"]}
    assert evicted and evicted <= {"v0-0", "v1-0"}        # victims in rack r1 only


def _audited_steps(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], Counter]:
    """A greedy cycle in which `out_of_reach` is asked but never obeyed: per (it called the gang
    step hopeless, the step found victims), how many steps."""
    seen: Counter = Counter()
    said: list[bool] = []
    real, partial = victims.out_of_reach, victims.JobSolver._solve_partial

    def out_of_reach(*args) -> bool:
        said.append(real(*args))
        return False

    def audit(self, *args):
        said.clear()
        result = partial(self, *args)
        if said:
            seen[(said[0], result is not None)] += 1
        return result

    with monkeypatch.context() as m:
        m.setattr(victims, "out_of_reach", out_of_reach)
        m.setattr(victims.JobSolver, "_solve_partial", audit)
        decided = _decisions(doc)
    return decided, seen


def _check_steps(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch, drawn: bool = True) -> Counter:
    return audited_check(doc, monkeypatch, _audited_steps, False, "a gang step called out of reach found victims",
                         drawn, ("steps out of reach", "none out of reach"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(doc=contended_clusters(max_nodes=6, max_running=14, max_pending=5))
def test_no_gang_step_out_of_reach_finds_victims(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A step whose largest pod no node could hold with every victim gone is not searched: that
    is sound only if its search would find nothing."""
    _check_steps(doc, monkeypatch)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                  HealthCheck.function_scoped_fixture])
@given(doc=clusters())
def test_no_gang_step_out_of_reach_finds_victims_with_shared_gpus(doc: dict[str, Any],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _check_steps(doc, monkeypatch)


@pytest.mark.parametrize("seed, fractional", [(3, 0.0), (13, 0.4)])
def test_steps_out_of_reach_are_skipped_on_a_contended_cluster(seed: int, fractional: float,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """(Draws where some preemptor's largest pod needs more whole GPUs than any node could free.)"""
    doc = gen.generate_cluster(40, 25, 240, seed=seed, utilization=0.9, topology_share=0.3,
                               fractional_share=fractional, contention=True)
    seen = _check_steps(doc, monkeypatch, drawn=False)
    assert seen[(True, False)] > 0, seen
