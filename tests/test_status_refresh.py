"""Status writes of pending jobs (integration/status.py): a message that changed only in its numbers
is rewritten at most once per `--status-refresh`; a new reason is written at once; a failed write
is tried again. Kept off the API server: the writes are recorded by a fake client."""

from __future__ import annotations

import pytest

from integration.apply import ApplyOutcome
from integration.kube import ApiError
from integration.status import LastWritten, StatusWriter, message_shape
from kai_cp.cycle import CycleSettings, run_cycle
from snapshot_builder import node, pod, podgroup, queue, resources, snapshot, state_of

NOW = 1_767_268_800.0


class _Kube:
    def __init__(self, fail: bool = False):
        self.writes: list[tuple[str, dict]] = []
        self.fail = fail

    def patch(self, path, body, *args, **kw):
        if self.fail:
            raise ApiError(500, "boom")
        self.writes.append((path, body))

    def create(self, path, body, *args, **kw):
        if self.fail:
            raise ApiError(500, "boom")
        self.writes.append((path, body))


def _cycle(running: int, limit: int = 4, extra_node_gpus: int = 0):
    """Queue `q` limited to `limit` GPUs with `running` of them used; job `p` (2 GPUs) pending
    over the limit: its message names the queue's allocation, a number."""
    pods = [pod(f"r{i}", "r", gpu=1, phase="Running", node="n0") for i in range(running)]
    pods += [pod("p-0", "p", gpu=1), pod("p-1", "p", gpu=1)]
    doc = snapshot(nodes=[node("n0", gpu=8, cpu="64", memory="256Gi")] +
                   ([node("n1", gpu=extra_node_gpus, cpu="64", memory="256Gi")] if extra_node_gpus else []),
                   queues=[queue("q", gpu=resources(limit=limit))],
                   podgroups=[podgroup("r", min_member=max(running, 1)), podgroup("p", min_member=2)], pods=pods)
    result = run_cycle(state_of(doc), CycleSettings(engine="greedy", now=NOW))
    return result, result.to_json()


def _messages(kube: _Kube) -> list[str]:
    out = []
    for path, body in kube.writes:
        if "message" in body:                                   # an event
            out.append(("event", body["involvedObject"]["name"], body["message"]))
        elif "conditions" in body.get("status", {}):            # a pod's PodScheduled
            out.append(("pod", path.split("/")[-2], body["status"]["conditions"][0]["message"]))
        elif "schedulingConditions" in body.get("status", {}):  # the PodGroup's condition
            out.append(("podgroup", path.split("/")[-2], body["status"]["schedulingConditions"][-1]["message"]))
    return out


def _record(writer: StatusWriter, cycle) -> None:
    result, doc = cycle
    writer.record(result, doc, ApplyOutcome())
    assert writer.flush(10)


def test_message_shape_blanks_numbers_only():
    a = "q quota has reached the allowable limit of GPUs. Limit is 4 GPUs, currently 3 GPUs allocated"
    b = "q quota has reached the allowable limit of GPUs. Limit is 4 GPUs, currently 2.5 GPUs allocated"
    assert message_shape(a) == message_shape(b)
    assert message_shape(a) != message_shape("reclaim: queue q would go over its fair share")


def test_last_written_drift_waits_for_refresh_reason_change_does_not(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("integration.status.time.monotonic", lambda: clock[0])
    lw = LastWritten(refresh=60)
    assert lw.claim("pg", "limit 4, 3 allocated")
    assert not lw.claim("pg", "limit 4, 3 allocated")          # same message: never again
    assert not lw.claim("pg", "limit 4, 2 allocated")          # numbers only, within the refresh
    clock[0] += 61
    assert lw.claim("pg", "limit 4, 2 allocated")              # ... written once it passed
    assert lw.get("pg") == "limit 4, 2 allocated"
    assert lw.claim("pg", "no node has 2 free GPUs")           # another reason: at once
    lw.forget("pg", "no node has 2 free GPUs")                 # its write failed
    assert lw.claim("pg", "no node has 2 free GPUs")           # tried again


@pytest.mark.parametrize("refresh,rewritten", [(60.0, False), (0.0, True)])
def test_pending_job_status_with_only_numbers_changed(refresh, rewritten):
    kube = _Kube()
    writer = StatusWriter(kube, "kai-scheduler", "default", workers=1, refresh=refresh)
    try:
        _record(writer, _cycle(running=3))
        first = _messages(kube)
        kinds = sorted({k for k, _, _ in first})
        assert kinds == ["event", "pod", "podgroup"]
        assert all("currently 3 GPUs allocated" in m for _, _, m in first), first
        kube.writes.clear()
        _record(writer, _cycle(running=4))                      # the queue's allocation moved: 3 -> 4
        second = _messages(kube)
        if rewritten:
            assert sorted((k, o, message_shape(m)) for k, o, m in second) == \
                sorted((k, o, message_shape(m)) for k, o, m in first)
            assert all("currently 4 GPUs allocated" in m for _, _, m in second), second
        else:
            assert second == []
    finally:
        writer.close()


def test_new_reason_is_written_at_once_and_failed_writes_retried():
    kube = _Kube(fail=True)
    writer = StatusWriter(kube, "kai-scheduler", "default", workers=1, refresh=3600.0)
    try:
        _record(writer, _cycle(running=3))
        assert kube.writes == []                                # every write failed
        kube.fail = False
        _record(writer, _cycle(running=3))                      # same message: written now, the failure forgotten
        assert {k for k, _, _ in _messages(kube)} == {"event", "pod", "podgroup"}
        kube.writes.clear()
        # The limit lifted but the node is full: another reason, within the refresh -> written.
        _record(writer, _cycle(running=8, limit=-1))
        msgs = _messages(kube)
        assert {k for k, _, _ in msgs} == {"event", "pod", "podgroup"}
        assert not any("quota" in m for _, _, m in msgs), msgs
    finally:
        writer.close()


def test_token_bucket_allows_the_burst_then_the_rate():
    from integration.ratelimit import TokenBucket
    clock = [0.0]
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        clock[0] += s
    bucket = TokenBucket(rate=10, burst=3, clock=lambda: clock[0], sleep=sleep)
    assert [bucket.acquire() for _ in range(3)] == [0.0, 0.0, 0.0]      # the burst
    assert bucket.acquire() == pytest.approx(0.1)                       # then one per 1/rate
    assert bucket.acquire() == pytest.approx(0.1)
    clock[0] += 10                                                      # idle: the bucket refills to the burst only
    assert [bucket.acquire() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.acquire() > 0
    assert TokenBucket(rate=0, burst=1).acquire() == 0.0                # 0: no limit


def test_status_writes_keep_to_qps():
    kube = _Kube()
    writer = StatusWriter(kube, "kai-scheduler", "default", workers=3, qps=20, burst=1)
    try:
        import time
        t0 = time.monotonic()
        _record(writer, _cycle(running=3))          # n writes: 1 at once, the rest at 20/s
        elapsed = time.monotonic() - t0
        n = len(kube.writes)
        assert n >= 6
        assert elapsed >= (n - 1) / 20 * 0.9, (n, elapsed)   # a lower bound: a slow machine cannot fail it
    finally:
        writer.close()
