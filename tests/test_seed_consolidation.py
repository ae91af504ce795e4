"""The worked example of ../shared/seeds/003 (NVIDIA's "Run:ai Scheduler" announcement): Training
Job A is placed by moving Training Job 2 to another node.

Why: it is the example KAI users are shown of what consolidation is for. Three nodes of eight
GPUs; queue-b (high priority) runs Training Job 1 (4 GPUs) on node 1; queue-a (medium priority)
runs Training Job 2 (2 GPUs) on node 1, Training Job 3 (6 GPUs) on node 2 and an interactive job
(5 GPUs, non-preemptible) on node 3. Pending: Training Job B (queue-b, 3 GPUs) and Training
Job A (queue-a, 4 GPUs on one node). Allocation binds B to node 3; no node has 4 free GPUs for
A, so consolidation evicts Job 2, pipelines it onto node 2 and pipelines A onto node 1. The
following cycles bind the recreated Job 2 pod on node 2 and A on node 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kai_cp.cli import main
from snapshot_builder import node, pod, podgroup, queue, resources, snapshot, solve_doc, write


def seed_003() -> dict:
    nodes = [node(f"node-{i}", cpu="64", memory="512Gi", gpu=8) for i in (1, 2, 3)]
    queues = [queue("queue-a", gpu=resources(16), priority=100, created=1),
              queue("queue-b", gpu=resources(8), priority=200, created=2)]
    jobs = [  # name, queue, GPUs, node, priority class, created (s)
        ("training-job-1", "queue-b", 4, "node-1", "train", 10),
        ("training-job-3", "queue-a", 6, "node-2", "train", 20),
        ("interactive", "queue-a", 5, "node-3", "build", 30),
        ("training-job-2", "queue-a", 2, "node-1", "train", 40),
        ("training-job-b", "queue-b", 3, None, "train", 100),
        ("training-job-a", "queue-a", 4, None, "train", 110),
    ]
    groups = [podgroup(name, q, 1, priority_class=pc, created=t) for name, q, _, _, pc, t in jobs]
    pods = [pod(f"{name}-0", name, cpu="1", memory="4Gi", gpu=g, node=n, phase="Running" if n else "Pending",
                created=t + 1) for name, _, g, n, _, t in jobs]
    return snapshot(nodes, queues, groups, pods)


@pytest.fixture
def doc() -> dict:
    return seed_003()


def test_first_cycle_binds_b_and_moves_job_2_to_make_room_for_a(doc: dict) -> None:
    out = solve_doc(doc, engine="greedy")
    assert [(b["pod"], b["node"]) for b in out["binds"]] == [("default/training-job-b-0", "node-3")]
    assert [(e["pod"], e["action"], e["forPodGroup"], e["node"]) for e in out["evictions"]] == [
        ("default/training-job-2-0", "consolidation", "training-job-a", "node-1")]
    assert sorted((p["pod"], p["node"]) for p in out["pipelined"]) == [
        ("default/training-job-2-0", "node-2"), ("default/training-job-a-0", "node-1")]
    assert not any(u["podGroup"] == "training-job-a" for u in out["unschedulable"])


def test_without_consolidation_job_a_waits(doc: dict) -> None:
    """The move is what places A: with allocate alone no node has four free GPUs."""
    doc["config"]["actions"] = "allocate"
    out = solve_doc(doc, engine="greedy")
    assert out["evictions"] == [] and out["pipelined"] == []
    assert any(u["podGroup"] == "training-job-a" for u in out["unschedulable"])


@pytest.mark.parametrize("engine", ["greedy", "cp-sat"])
def test_three_cycles_end_with_every_job_running(doc: dict, engine: str, tmp_path: Path) -> None:
    res = tmp_path / "result.json"
    assert main(["simulate", str(write(tmp_path / "snap.json", doc)), "--cycles", "3", "--engine", engine,
                 "--time-limit", "1", "--output", str(res)]) == 0
    result = json.loads(res.read_text())
    where = {p["name"]: (p["status"], p["node"]) for p in result["pods"]}
    assert where == {"training-job-1-0": ("Running", "node-1"), "training-job-2-0": ("Running", "node-2"),
                     "training-job-3-0": ("Running", "node-2"), "interactive-0": ("Running", "node-3"),
                     "training-job-b-0": ("Running", "node-3"), "training-job-a-0": ("Running", "node-1")}
    # Job 2 moved once; nothing else was ever evicted
    assert [e["pod"] for c in result["cycles"] for e in c["evictions"]] == ["default/training-job-2-0"]
