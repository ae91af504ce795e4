"""The allocator checks a job's queue capacity once per attempt and each task's only where a task
can fail it after its job passed (kai_cp/actions/allocate.py, `_task_checks`): a task counts, in
its own check and once placed, no more than in its job's request, except a GPU-memory task (0 in
the job's request, its largest portion per task).

Why: the per-task check ran for every pod placed (~7% of a 10,000-node cycle) and never failed
after its job's check passed unless the job has GPU-memory pods. Skipping it must change nothing:
the decisions, the pending reasons and the eviction actions are compared with every task checked."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import clustergen as cg
from greedy_decisions import decisions
from kai_cp.actions.allocate import Allocator



def _every_task_checked(m: pytest.MonkeyPatch) -> None:
    m.setattr(Allocator, "_task_checks", property(lambda self: True, lambda self, value: None), raising=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=cg.clusters())
def test_skipping_task_checks_changes_nothing(doc: dict[str, Any]) -> None:
    fast = decisions(doc)
    with pytest.MonkeyPatch.context() as m:
        _every_task_checked(m)
        assert decisions(doc) == fast


def test_a_gpu_memory_task_is_still_checked_after_its_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU-memory pod counts 0 GPUs in its job's check and its portion in its own: a queue with
    a 0.5-GPU limit passes the job and must stop the pod asking 60% of a device's memory."""
    nodes = [cg.node("n1", gpus=1)]
    queues = [cg.queue("q", gpu=cg.resource(-1, 0.5))]
    pod = cg.pod("p", "g", annotations={"gpu-memory": "49152"})     # 60% of 81,920 MiB
    doc = cg.snapshot(nodes, queues, [pod], [cg.pod_group("g", "q")])
    placements, _, outcomes, _ = decisions(doc)
    assert placements == []
    assert any("allowable limit of GPUs" in err for _, _, errors in outcomes for _, err in errors), outcomes
