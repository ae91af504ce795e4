"""Eviction actions on shared GPUs (spec 6.2-6.4 with 7.3-7.4): a fractional or GPU-memory victim
frees a whole GPU only when it empties its shared GPU, consolidation's pre-check counts the free
parts of shared GPUs, and a victim moved to another GPU of its own node is still moved.

Why: most clusters mix fractions with whole-GPU training; a whole-GPU job waiting behind two
half-used GPUs is exactly what consolidation and reclaim exist for, and KAI users rely on it.
"""

from __future__ import annotations

import pytest

import json

from kai_cp.cycle import CycleSettings, run_cycle
from kai_cp.validate import violations
from snapshot_builder import node, pod, podgroup, queue, resources, snapshot, state_of

M = 40000   # MiB per GPU of snapshot_builder's GPU nodes


def shared(name: str, group: str, node_name: str, gpu_group: str, *, q: str | None = None,
           fraction: str | None = "0.5", memory: int | None = None) -> dict:
    ann = {"gpu-fraction": fraction} if memory is None else {"gpu-memory": str(memory)}
    return pod(name, group, annotations=ann, phase="Running", node=node_name,
               labels={"runai-gpu-group": gpu_group})


def solve(doc: dict, engine: str) -> dict:
    """One cycle; its decisions must pass the independent validator (evictions included)."""
    result = run_cycle(state_of(doc), CycleSettings(engine=engine))
    assert violations(result.state, result.session) == []
    return json.loads(json.dumps(result.to_json()))


def evicted(out: dict) -> dict[str, str]:
    return {e["pod"].split("/")[1]: e["action"] for e in out["evictions"]}


def pipelined(out: dict) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {p["pod"].split("/")[1]: (p["node"], tuple(p.get("gpuGroups") or ())) for p in out["pipelined"]}


@pytest.mark.parametrize("engine", ["greedy", "cp-sat"])
def test_reclaim_empties_a_shared_gpu_and_moves_its_pod_onto_the_other(engine: str) -> None:
    """Two queues above their (zero) share each hold half of a one-GPU node; the reclaimer's
    whole-GPU job can only run where a half-used GPU is emptied. KAI's reclaim (with
    allowConsolidatingReclaim) evicts one fractional pod, moves it onto the other half-used GPU
    and pipelines the reclaimer on the emptied GPU (reclaim_test 34)."""
    queues = [queue("a", gpu=resources(0, -1, 0)), queue("b", gpu=resources(0, -1, 0), created=1),
              queue("r", gpu=resources(2, -1, 0), created=2)]
    doc = snapshot([node("n0", gpu=1), node("n1", gpu=1)], queues=queues,
                   podgroups=[podgroup("a", "a"), podgroup("b", "b"), podgroup("w", "r")],
                   pods=[shared("a-0", "a", "n0", "g0"), shared("b-0", "b", "n1", "g1"), pod("w-0", "w", gpu=1)],
                   config={"actions": "reclaim", "tiers": [{"plugins": [{"name": "proportion"}]}]})
    out = solve(doc, engine)
    assert len(out["evictions"]) == 1 and set(evicted(out).values()) == {"reclaim"}
    victim = next(iter(evicted(out)))
    freed = {"a-0": "n0", "b-0": "n1"}[victim]
    other = {"n0": ("n1", "g1"), "n1": ("n0", "g0")}[freed]
    pl = pipelined(out)
    assert pl["w-0"][0] == freed
    assert pl[victim] == (other[0], (other[1],))       # joins the other half-used GPU
    assert out["binds"] == []


@pytest.mark.parametrize("engine", ["greedy", "cp-sat"])
def test_consolidation_counts_free_gpu_memory_of_shared_gpus(engine: str) -> None:
    """No whole GPU is free, but 0.5 + 0.25 of two shared GPUs are: consolidation may try, and
    moves the smaller GPU-memory pod next to the other to free a GPU (consolidationGpuMemory 3)."""
    doc = snapshot([node("n0", gpu=1), node("n1", gpu=1)], podgroups=[podgroup("s0"), podgroup("s1"), podgroup("w")],
                   pods=[shared("s0-0", "s0", "n0", "g0", memory=M // 2),
                         shared("s1-0", "s1", "n1", "g1", memory=3 * M // 10),
                         pod("w-0", "w", gpu=1)],
                   config={"actions": "allocate, consolidation", "tiers": [{"plugins": [{"name": "proportion"}]}]})
    out = solve(doc, engine)
    assert evicted(out) == {"s1-0": "consolidation"}
    assert pipelined(out) == {"w-0": ("n1", ()), "s1-0": ("n0", ("g0",))}


@pytest.mark.parametrize("engine", ["greedy", "cp-sat"])
def test_victim_moved_to_another_gpu_of_its_node_stays_a_victim(engine: str) -> None:
    """Two GPU-memory pods each on their own GPU of one node; a pod needing 90% of a GPU fits
    only once one joins the other. The moved pod is re-placed on its own node but on another
    GPU, so it is evicted and pipelined (KAI: isSharedAndMoveToDifferentGPU), not un-evicted
    (consolidationFractional integration test 0)."""
    doc = snapshot([node("n", gpu=2)], podgroups=[podgroup("s0"), podgroup("s1"), podgroup("w")],
                   pods=[shared("s0-0", "s0", "n", "g0", memory=M // 5), shared("s1-0", "s1", "n", "g1", memory=M // 5),
                         pod("w-0", "w", cpu="1", annotations={"gpu-memory": str(9 * M // 10)})],
                   config={"actions": "allocate, consolidation", "tiers": [{"plugins": [{"name": "proportion"}]}]})
    out = solve(doc, engine)
    ev = evicted(out)
    assert len(ev) == 1
    victim = next(iter(ev))
    stays = ({"s0-0", "s1-0"} - {victim}).pop()
    pl = pipelined(out)
    assert pl[victim] == ("n", ({"s0-0": "g0", "s1-0": "g1"}[stays],))
    assert pl["w-0"][0] == "n" and pl["w-0"][1] not in {("g0",), ("g1",)}


@pytest.mark.parametrize("engine", ["greedy", "cp-sat"])
def test_a_gang_moved_by_one_preemptor_is_taken_whole_by_the_next(engine: str) -> None:
    """Reclaim for p1 moves g-0 next to g-1 (g-1 stays: re-placed on its own node). For p2, g is
    the victim again: KAI takes every active-allocated pod of the gang, the moved (Pipelined) g-0
    included, so g is evicted whole and p2 gets n1; taking only g-1 would break the gang and still
    leave p2 without room (spec 6.2.3, 6.8)."""
    queues = [queue("v", gpu=resources(0, -1, 1)), queue("r", gpu=resources(4, -1, 1), created=1)]
    doc = snapshot([node("n0", gpu=2), node("n1", gpu=2)], queues=queues,
                   podgroups=[podgroup("g", "v", 2), podgroup("p1", "r", created=1), podgroup("p2", "r", created=2)],
                   pods=[pod("g-0", "g", gpu=1, phase="Running", node="n0"),
                         pod("g-1", "g", gpu=1, phase="Running", node="n1", created=1),
                         pod("p1-0", "p1", gpu=2), pod("p2-0", "p2", gpu=2)],
                   config={"actions": "allocate, reclaim", "tiers": [{"plugins": [{"name": "proportion"}]}]})
    out = solve(doc, engine)
    assert sorted(e["pod"].split("/")[1] for e in out["evictions"]) == ["g-0", "g-1"]
    assert pipelined(out) == {"p1-0": ("n0", ()), "p2-0": ("n1", ())}
