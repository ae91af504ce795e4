"""The state a StateBuilder keeps across cycles equals the state built from scratch, every cycle.

Why: `kai-cp run` and `kai-cp simulate` build each cycle's state with
kai_cp.state_cache.StateBuilder, which re-derives only the objects that changed since the last
cycle. Same cluster, same decisions (README): a stale record, or a cycle's session changes
leaking into the next cycle's state, would change decisions without any test of one cycle
noticing. Here generated clusters (tests/clustergen.py) go through sequences of changes a
cluster sees between cycles (pods created, deleted, bound, deleting or gated; nodes cordoned,
relabelled, added, removed; queues edited or removed; PodGroups edited, annotated or deleted;
BindRequests, priority classes, topologies and the configuration changed; a cycle's own
decisions applied as `kai-cp simulate` applies them), each change replacing the objects it
touches as the watch cache does, and after every change the builder's state must equal a fresh
build's, field by field, and decide the same.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clustergen import BASE_EPOCH, clusters, contended_clusters, placement_config, ts  # noqa: E402

import kai_cp.simulate as simulate_mod  # noqa: E402
from kai_cp.cycle import CycleSettings, run_cycle  # noqa: E402
from kai_cp.loader import load_snapshot, load_snapshot_dict  # noqa: E402
from kai_cp.state import ClusterState, build_cluster_state  # noqa: E402
from kai_cp.state_cache import StateBuilder  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NOW = float(BASE_EPOCH)
TIMINGS = {"wallSeconds", "greedySeconds", "buildSeconds", "solveSeconds", "evictSeconds"}


# ------------------------------------------------------------------------------------ comparing
def _task(t) -> tuple:
    return (t.uid, t.name, t.namespace, t.job, t.podset, t.status, t.node, t.request, t.request.problems,
            t.order_key, t.predicate_key, t.gpu_groups, t.nominated_node, t.scheduler_name, t.utility, t.pod is not None)


def _scope(s) -> Any:
    if s is None:
        return None
    c = s.constraint
    return (s.name, None if c is None else (c.tree.name, c.required, c.preferred, c.source), list(s.podsets),
            s.is_podset, s.depth, [_scope(k) for k in s.children])


def digest(state: ClusterState) -> dict[str, Any]:
    """Everything a cycle reads of a state, as plain comparable values."""
    t = state.table
    return {
        "config": state.config,
        "nodes": [dataclasses.asdict(n) for n in state.nodes],
        "table": (t.resources, t.allocatable.tolist(), t.used.tolist(), t.releasing.tolist(), t.ready.tolist(),
                  t.idle.tolist(), t.free.tolist()),
        "queues": [(name, dataclasses.asdict(q), q.is_leaf) for name, q in state.queues.items()],
        "jobs": [(name, j.name, j.namespace, j.uid, j.queue, j.priority, j.preemptible, j.creation, j.problems, j.notes,
                  j.topology_constraint, j.pod_group.metadata.name, _scope(j.scope), j.last_start, j.stale_since,
                  [(ps.name, ps.min_available, [_task(x) for x in ps.tasks], [_task(x) for x in ps.pending],
                    ps.active_allocated) for ps in j.podsets.values()],
                  [_task(x) for x in j.waiting], j.is_ready(), j.has_pending())
                 for name, j in state.jobs.items()],
        "tasks": [_task(x) for x in state.tasks],
        "schedulable": [j.name for j in state.schedulable_jobs()],
        "total": state.total,
        "warnings": [w.to_json() for w in state.warnings],
        "orphans": state.orphan_groups,
        "legacy": state.legacy_mig_nodes,
        "workload": list(state.workload.items()),
        "topologies": sorted(state.topologies),
    }


def decisions(state: ClusterState, engine: str = "greedy") -> dict[str, Any]:
    return _strip(run_cycle(state, CycleSettings(engine=engine, time_limit=0.5, now=NOW)).to_json())


def _strip(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _strip(v) for k, v in doc.items() if k not in TIMINGS}
    if isinstance(doc, (list, tuple)):
        return [_strip(v) for v in doc]
    return doc


def assert_same(builder: StateBuilder, loaded) -> None:
    """The builder's state equals a fresh one, and so do the decisions taken from it."""
    incremental = builder.build(loaded)
    fresh = build_cluster_state(loaded)
    assert digest(incremental) == digest(fresh)
    assert decisions(incremental) == decisions(fresh)
    assert digest(incremental) == digest(build_cluster_state(loaded)), "the cycle changed the state it decided from"


# ------------------------------------------------------------------------------------- changes
def _edit(objs: list, i: int, change: Callable[[dict], None]) -> None:
    """Replace objs[i] by a changed copy (as the watch cache does: a change is a new object)."""
    obj = objs[i]
    doc = copy.deepcopy(obj.model_dump(mode="json", by_alias=True, exclude_unset=True))
    change(doc)
    objs[i] = type(obj).model_validate(doc, by_alias=True, by_name=False)


def _new(objs: list, i: int, change: Callable[[dict], None]) -> None:
    """Append a changed copy of objs[i] (a new object of the same kind)."""
    objs.append(objs[i])
    _edit(objs, len(objs) - 1, change)


def _renamed(suffix: str) -> Callable[[dict], None]:
    def change(d: dict) -> None:
        d["metadata"]["name"] += suffix
        d["metadata"]["uid"] = d["metadata"].get("uid", "") + suffix
    return change


def _sub(d: dict, key: str) -> dict:
    if not isinstance(d.get(key), dict):
        d[key] = {}
    return d[key]


def _spec(d: dict) -> dict:
    return _sub(d, "spec")


def _annotations(d: dict) -> dict:
    return _sub(d["metadata"], "annotations")


def _labels(d: dict) -> dict:
    return _sub(d["metadata"], "labels")


def _pending_again(d: dict) -> None:
    _spec(d).pop("nodeName", None)
    d["metadata"].pop("deletionTimestamp", None)
    d["status"] = {"phase": "Pending"}


CHANGES = ("add_pod", "delete_pod", "bind_pod", "delete_pod_soon", "gate_pod", "regroup_pod", "cordon_node",
           "relabel_node", "remove_node", "add_node", "edit_queue", "remove_queue", "edit_podgroup",
           "annotate_podgroup", "delete_podgroup", "bind_request", "drop_bind_request", "priority_class",
           "topology", "config", "unreadable_pod", "nothing", "cycle")


def apply_change(draw, loaded, kind: str, step: int) -> None:
    raw = loaded.snapshot.raw_objects
    pick = lambda objs: draw(st.integers(0, len(objs) - 1))  # noqa: E731
    if kind == "add_pod" and raw.pods:
        i = pick(raw.pods)
        group = draw(st.sampled_from([None] + [g.metadata.name for g in raw.pod_groups] + ["no-such-group"]))

        def change(d: dict) -> None:
            _renamed(f"-new{step}")(d)
            _pending_again(d)
            if group is not None:
                _annotations(d)["pod-group-name"] = group
        _new(raw.pods, i, change)
    elif kind == "delete_pod" and raw.pods:
        del raw.pods[pick(raw.pods)]
    elif kind == "bind_pod" and raw.pods and raw.nodes:
        node = raw.nodes[pick(raw.nodes)].metadata.name
        phase = draw(st.sampled_from(["Running", "Pending", "Succeeded", "Failed"]))

        def change(d: dict) -> None:
            _spec(d)["nodeName"] = node
            d["status"] = {"phase": phase}
        _edit(raw.pods, pick(raw.pods), change)
    elif kind == "delete_pod_soon" and raw.pods:
        _edit(raw.pods, pick(raw.pods), lambda d: d["metadata"].__setitem__("deletionTimestamp", ts(-1)))
    elif kind == "gate_pod" and raw.pods:
        def change(d: dict) -> None:
            if _spec(d).get("schedulingGates"):
                del d["spec"]["schedulingGates"]
            else:
                d["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
        _edit(raw.pods, pick(raw.pods), change)
    elif kind == "regroup_pod" and raw.pods:
        sub = draw(st.sampled_from([None, "workers", "ps", "other"]))

        def change(d: dict) -> None:
            if sub is None:
                _labels(d).pop("kai.scheduler/subgroup-name", None)
            else:
                _labels(d)["kai.scheduler/subgroup-name"] = sub
            _labels(d)["kai.scheduler/task-priority"] = str(step)
        _edit(raw.pods, pick(raw.pods), change)
    elif kind == "cordon_node" and raw.nodes:
        _edit(raw.nodes, pick(raw.nodes), lambda d: _spec(d).__setitem__("unschedulable", not d["spec"].get("unschedulable")))
    elif kind == "relabel_node" and raw.nodes:
        label, value = draw(st.sampled_from([("topo/zone", "z9"), ("topo/rack", "r9"), ("nvidia.com/gpu.memory", "40960"),
                                             ("gpu-type", "h100"), ("kai.scheduler/node-pool", "other")]))
        _edit(raw.nodes, pick(raw.nodes), lambda d: _labels(d).__setitem__(label, value))
    elif kind == "remove_node" and raw.nodes:
        del raw.nodes[pick(raw.nodes)]
    elif kind == "add_node" and raw.nodes:
        _new(raw.nodes, pick(raw.nodes), _renamed(f"-new{step}"))
    elif kind == "edit_queue" and raw.queues:
        quota = draw(st.sampled_from([-1, 0, 1, 2.5, 8]))

        def change(d: dict) -> None:
            res = _spec(d).setdefault("resources", {})
            res.setdefault("gpu", {})["quota"] = quota
            res["gpu"]["limit"] = draw(st.sampled_from([-1, 4, 16]))
        _edit(raw.queues, pick(raw.queues), change)
    elif kind == "remove_queue" and raw.queues:
        del raw.queues[pick(raw.queues)]
    elif kind == "edit_podgroup" and raw.pod_groups:
        field, value = draw(st.sampled_from([("minMember", 1), ("minMember", 3), ("queue", "no-such-queue"),
                                             ("priorityClassName", "build"), ("priorityClassName", "inference"),
                                             ("preemptibility", "preemptible"), ("preemptibility", "non-preemptible")]))
        _edit(raw.pod_groups, pick(raw.pod_groups), lambda d: _spec(d).__setitem__(field, value))
    elif kind == "annotate_podgroup" and raw.pod_groups:
        key = draw(st.sampled_from(["kai.scheduler/stale-podgroup-timestamp", "kai.scheduler/last-start-timestamp"]))
        value = draw(st.sampled_from([ts(-100), ts(-10_000), "not a time", "0001-01-01T00:00:00Z"]))
        _edit(raw.pod_groups, pick(raw.pod_groups), lambda d: _annotations(d).__setitem__(key, value))
    elif kind == "delete_podgroup" and raw.pod_groups:
        del raw.pod_groups[pick(raw.pod_groups)]
    elif kind == "bind_request" and raw.pods and raw.nodes:
        pod = raw.pods[pick(raw.pods)]
        node = raw.nodes[pick(raw.nodes)].metadata.name
        doc = {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest",
               "metadata": {"name": f"br-{step}", "namespace": pod.metadata.namespace or "default", "uid": f"br-{step}"},
               "spec": {"podName": pod.metadata.name, "selectedNode": node, "selectedGPUGroups": ["g-1"]},
               "status": {"phase": draw(st.sampled_from(["Pending", "Failed"]))}}
        raw.bind_requests.append(type(raw.bind_requests[0]).model_validate(doc, by_alias=True, by_name=False)
                                 if raw.bind_requests else _bind_request_model(doc))
    elif kind == "drop_bind_request" and raw.bind_requests:
        del raw.bind_requests[pick(raw.bind_requests)]
    elif kind == "priority_class" and raw.priority_classes:
        value = draw(st.sampled_from([10, 50, 99, 100, 200]))
        _edit(raw.priority_classes, pick(raw.priority_classes), lambda d: d.__setitem__("value", value))
    elif kind == "topology" and raw.topologies:
        _edit(raw.topologies, pick(raw.topologies), lambda d: d["spec"].__setitem__("levels", d["spec"]["levels"][:1]))
    elif kind == "config":
        loaded.snapshot.config = placement_config(gpu=draw(st.sampled_from(["binpack", "spread"])))
    elif kind == "unreadable_pod":
        loaded.raw_invalid.setdefault("pods", []).append(
            {"metadata": {"name": f"bad-{step}", "namespace": "default",
                          "annotations": {"pod-group-name": draw(st.sampled_from(["job0", "job1", "gone"]))}},
             "spec": {"nodeName": raw.nodes[0].metadata.name if raw.nodes else None, "containers": "not a list"}})
    elif kind == "cycle":
        # A cycle's decisions, applied as `kai-cp simulate` applies them.
        simulate_mod.apply_decisions(loaded, run_cycle(build_cluster_state(loaded),
                                                       CycleSettings(engine="greedy", now=NOW)))


def _bind_request_model(doc: dict):
    from models import RAW_OBJECT_KINDS
    model = next(k.model for k in RAW_OBJECT_KINDS if k.key == "bindRequests")
    return model.model_validate(doc, by_alias=True, by_name=False)


@st.composite
def change_runs(draw, cluster_strategy) -> tuple[dict, Any]:
    return draw(cluster_strategy), draw(st.data())


def _run_changes(doc: dict, data, steps: int) -> None:
    loaded = load_snapshot_dict(doc)
    builder = StateBuilder()
    assert_same(builder, loaded)
    for step in range(steps):
        for _ in range(data.draw(st.integers(1, 3))):
            apply_change(data.draw, loaded, data.draw(st.sampled_from(CHANGES)), step)
        assert_same(builder, loaded)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.data())
def test_incremental_state_equals_fresh_state_through_changes(doc, data):
    _run_changes(doc, data, steps=6)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contended_clusters(), st.data())
def test_incremental_state_equals_fresh_state_on_contended_clusters(doc, data):
    _run_changes(doc, data, steps=5)


def test_builder_reuses_unchanged_objects_and_derives_changed_ones():
    loaded = load_snapshot(EXAMPLES / "cluster-snapshot.zip")
    builder = StateBuilder()
    builder.build(loaded)
    total = builder.stats()["derived"]
    assert total > 0 and builder.stats()["reused"] == 0
    builder.build(loaded)
    assert builder.stats() == {"reused": total, "derived": 0}
    raw = loaded.snapshot.raw_objects
    _edit(raw.pods, 0, lambda d: d["metadata"].__setitem__("deletionTimestamp", ts(0)))
    del raw.pods[1]
    state = builder.build(loaded)
    assert builder.stats() == {"reused": total - 2, "derived": 1}
    assert digest(state) == digest(build_cluster_state(loaded))


def _simulate_fresh(monkeypatch, loaded, cycles: int, engine: str) -> tuple[dict, dict]:
    class Fresh:
        def build(self, loaded):
            return build_cluster_state(loaded)
    monkeypatch.setattr(simulate_mod, "StateBuilder", Fresh)
    try:
        return simulate_mod.simulate(loaded, cycles, CycleSettings(engine=engine, now=NOW))
    finally:
        monkeypatch.undo()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(contended_clusters())
def test_simulate_decides_alike_with_and_without_the_builder(monkeypatch, doc):
    """`kai-cp simulate` (evictions, binds, stale-gang annotations applied between cycles)."""
    incremental = simulate_mod.simulate(load_snapshot_dict(copy.deepcopy(doc)), 4, CycleSettings(engine="greedy", now=NOW))
    fresh = _simulate_fresh(monkeypatch, load_snapshot_dict(copy.deepcopy(doc)), 4, "greedy")
    assert _strip(incremental) == _strip(fresh)


def test_simulate_on_an_example_decides_alike_with_and_without_the_builder(monkeypatch):
    path = EXAMPLES / "cluster-snapshot.zip"
    incremental = simulate_mod.simulate(load_snapshot(path), 3, CycleSettings(engine="greedy", now=NOW))
    fresh = _simulate_fresh(monkeypatch, load_snapshot(path), 3, "greedy")
    assert _strip(incremental) == _strip(fresh)
