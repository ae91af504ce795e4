"""Consolidation's cap on victim jobs (spec 6.1: `maxNumberConsolidationPreemptees` + 1 jobs).

Why: KAI counts the jobs it accepts in Go map order, so which jobs a capped consolidation may
move is random there; kai-cp keeps the first ones in victim order (spec 3.8: lower-priority
queues first), so the cap never hides the job KAI's own search would move first.
"""

from __future__ import annotations

import copy
import json

import pytest

from kai_cp.cycle import CycleSettings, run_cycle
from kai_cp.validate import violations
from snapshot_builder import DEFAULT_PARAMS, node, pod, podgroup, queue, snapshot, state_of


def world(cap: int) -> dict:
    """n0: a1 holds 3 of 4 GPUs; n1: a2 holds 2, b1 holds 1. w needs 2 GPUs on one node: only
    moving b1 (queue b, lower priority) onto n0 makes room; a1 and a2 fit nowhere else."""
    params = copy.deepcopy(DEFAULT_PARAMS)
    params["maxNumberConsolidationPreemptees"] = cap
    queues = [queue("a", priority=200), queue("b", created=1)]
    return snapshot([node("n0", gpu=4), node("n1", gpu=4)], queues=queues,
                    podgroups=[podgroup("a1", "a"), podgroup("a2", "a"), podgroup("b1", "b"), podgroup("w", "a")],
                    pods=[pod("a1-0", "a1", gpu=3, phase="Running", node="n0"),
                          pod("a2-0", "a2", gpu=2, phase="Running", node="n1"),
                          pod("b1-0", "b1", gpu=1, phase="Running", node="n1"),
                          pod("w-0", "w", gpu=2)],
                    config={"actions": "allocate, consolidation", "tiers": [{"plugins": [{"name": "proportion"}]}]},
                    params=params)


@pytest.mark.parametrize("engine", ["greedy", "cp-sat"])
@pytest.mark.parametrize("cap", [1, -1])
def test_capped_consolidation_keeps_the_first_victims_in_victim_order(engine: str, cap: int) -> None:
    result = run_cycle(state_of(world(cap)), CycleSettings(engine=engine))
    assert violations(result.state, result.session) == []
    out = json.loads(json.dumps(result.to_json()))
    assert [(e["pod"], e["action"]) for e in out["evictions"]] == [("default/b1-0", "consolidation")]
    assert {p["pod"]: p["node"] for p in out["pipelined"]} == {"default/b1-0": "n0", "default/w-0": "n1"}
