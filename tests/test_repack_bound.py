"""Consolidation's repacking bound (`kai_cp/actions/repack.py`) rules out only scenarios whose
simulation would fail.

Why: consolidation moves its victims, never evicts them (spec 6.3), so a scenario works only if
every victim finds room again beside the preemptor. The bound counts that room without
simulating; skipping a scenario is sound only where its simulation fails anyway, so that KAI's
search decides the same, with less of its work bound spent. Checked as the scenario filter is
(tests/test_scenario_filter.py): the bound is asked but never obeyed, and no consolidation
scenario it rules out succeeds; and cycles decide the same with and without it.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from clustergen import clusters, contended_clusters, node, pod, pod_group, priority_class, queue, snapshot
from kai_cp.actions import repack, victims
from kai_cp.actions.pipeline import EvictionSearch, hint_budget
from kai_cp.actions.allocate import run_allocate
from kai_cp.loader import load_snapshot_dict
from kai_cp.state import build_cluster_state
from test_bench_generator import gen
from test_scenario_filter import _decisions, audited_check


def _audited(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], Counter]:
    """A greedy cycle in which the bound is asked but never obeyed: per (the bound let the
    scenario through, its simulation succeeded), how many consolidation scenarios."""
    seen: Counter = Counter()
    said = [True]
    real_admits, simulate = repack.RepackBound.admits, victims.JobSolver._simulate

    def admits(self, scenario) -> bool:
        said[0] = real_admits(self, scenario)
        return True

    def audit(self, *args, **kwargs):
        let_through, said[0] = said[0], True
        result = simulate(self, *args, **kwargs)
        if self.policy.action == "consolidation":
            seen[(let_through, result is not None)] += 1
        return result

    with monkeypatch.context() as m:
        m.setattr(repack.RepackBound, "admits", admits)
        m.setattr(victims.JobSolver, "_simulate", audit)
        decided = _decisions(doc)
    return decided, seen


def _check(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch, drawn: bool = True) -> Counter:
    return audited_check(doc, monkeypatch, _audited, True, "the bound ruled out a consolidation scenario that works",
                         drawn, ("the bound ruled out scenarios", "it ruled out none"))


_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                       HealthCheck.function_scoped_fixture])


@settings(max_examples=200, **_SETTINGS)
@given(doc=contended_clusters(max_nodes=6, max_running=14, max_pending=5))
def test_no_consolidation_scenario_the_bound_rules_out_works(doc: dict[str, Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _check(doc, monkeypatch)


@settings(max_examples=120, **_SETTINGS)
@given(doc=contended_clusters(max_nodes=6, max_running=14, max_pending=5, topology=True))
def test_no_consolidation_scenario_the_bound_rules_out_works_with_topology(doc: dict[str, Any],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _check(doc, monkeypatch)


@settings(max_examples=80, **_SETTINGS)
@given(doc=clusters())
def test_no_consolidation_scenario_the_bound_rules_out_works_with_shared_gpus(doc: dict[str, Any],
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _check(doc, monkeypatch)


@pytest.mark.parametrize("seed, fractional", [(3, 0.0), (6, 0.4), (11, 0.0)])
def test_the_bound_decides_the_same_on_contended_generated_clusters(seed: int, fractional: float,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    doc = gen.generate_cluster(40, 25, 240, seed=seed, utilization=0.9, topology_share=0.3,
                               fractional_share=fractional, contention=True)
    _check(doc, monkeypatch, drawn=False)


def _pools(v0_gpus: int, v1_gpus: int, want_gpus: int) -> dict[str, Any]:
    """Pool a: two 8-GPU nodes, n0 running v0, n1 running v1; pool b: one 8-GPU node, free.
    Every pod selects pool a, so the pending job can get room only by consolidation moving a
    victim within pool a."""
    nodes = [node("n0", gpus=8, labels={"pool": "a"}), node("n1", gpus=8, labels={"pool": "a"}),
             node("n2", gpus=8, labels={"pool": "b"})]
    groups = [pod_group("v0", "q", priority_class="train", created=-900),
              pod_group("v1", "q", priority_class="train", created=-800),
              pod_group("want", "q", priority_class="train", created=-100)]
    a = {"pool": "a"}
    pods = [pod("v0-0", "v0", gpus=v0_gpus, phase="Running", node_name="n0", queue_name="q", node_selector=a,
                created=-899),
            pod("v1-0", "v1", gpus=v1_gpus, phase="Running", node_name="n1", queue_name="q", node_selector=a,
                created=-799),
            pod("want-0", "want", gpus=want_gpus, queue_name="q", node_selector=a, created=-99)]
    return snapshot(nodes, [queue("q")], pods, groups, priority_classes=[priority_class("train", 50)],
                    config={"actions": "allocate, consolidation"})


def _consolidation_scenarios(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Counter:
    """The bounded (hint) search's consolidation scenarios simulated: per outcome, how many."""
    seen: Counter = Counter()
    simulate = victims.JobSolver._simulate

    def count(self, *args, **kwargs):
        result = simulate(self, *args, **kwargs)
        seen[result is not None] += 1
        return result

    with monkeypatch.context() as m:
        m.setattr(victims.JobSolver, "_simulate", count)
        state = build_cluster_state(load_snapshot_dict(copy.deepcopy(doc)))
        greedy = run_allocate(state)
        EvictionSearch(state, greedy.session, 1.8e9).run(hint_budget(state))
    return seen


def test_victims_with_nowhere_to_go_in_their_pool_get_no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """v0 (7 GPUs) leaves n0 1 free, v1 takes n1 whole; the job wants 2. Moving v1 needs 8 GPUs
    free in pool a, moving v0 7, moving both leaves 1 for the job: pool b's free node is none of
    theirs. Every scenario is ruled out unsimulated, and each of them, simulated, fails."""
    doc = _pools(7, 8, 2)
    assert _consolidation_scenarios(doc, monkeypatch) == Counter()
    seen = _check(doc, monkeypatch, drawn=False)
    assert seen[(False, False)] > 0 and set(seen) == {(False, False)}, seen
    assert _decisions(doc)["evictions"] == []


def test_a_move_the_pool_has_room_for_is_simulated_and_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """v0 and v1 take 4 GPUs each; the job wants a whole node. v1 moves beside v0 and the job
    takes n1: the bound lets that scenario through."""
    doc = _pools(4, 4, 8)
    assert _consolidation_scenarios(doc, monkeypatch)[True] == 1
    seen = _check(doc, monkeypatch, drawn=False)
    assert seen[(True, True)] == 1 and seen[(False, True)] == 0, seen
    decided = _decisions(doc)
    assert [e["pod"].split("/")[-1] for e in decided["evictions"]] == ["v1-0"]
    assert {p["pod"].split("/")[-1]: p["node"] for p in decided["pipelined"]} == {"v1-0": "n0", "want-0": "n1"}
