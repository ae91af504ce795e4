"""The cluster state of one cycle: queues (spec 1.2, 2.2 step 5, 3.5), jobs (1.3, 1.4, 1.8, 4.5),
nodes (1.5, 2.2, 3.2.1) and the capacity policy (3.6, 10.1)."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest

from kai_cp import capacity
from kai_cp.jobs import (BINDING, BOUND, FAILED, GATED, PENDING, RELEASING, RUNNING, SUCCEEDED, UNKNOWN)
from kai_cp.ordering import request_vector, tasks_to_allocate
from kai_cp.session import Session
from snapshot_builder import (DEFAULT_PARAMS, bind_request, node, pod, podgroup, priority_class, queue,
                              resources, snapshot, solve_doc, state_of)

GI = 1024 ** 3


def bound_pods(out) -> dict[str, str]:
    return {b["pod"]: b["node"] for b in out["binds"]}


def unsched(out) -> dict[str, list[str]]:
    return {u["podGroup"]: u["reasons"] for u in out["unschedulable"]}


def warned(out, prefix: str) -> list[dict]:
    return [w for w in out["warnings"] if w["object"].startswith(prefix)]


# ====================================================================== queues


def test_queue_units_memory_mb_to_bytes_cpu_millis_gpu_devices():
    q = queue("q", gpu=resources(2, 4, 3), cpu=resources(8000, 16000, 2), memory=resources(32000, 64000, 1))
    st = state_of(snapshot(queues=[q]))
    info = st.queues["q"]
    assert info.deserved == {"gpu": 2, "cpu": 8000, "memory": 32000 * 10 ** 6}
    assert info.limit == {"gpu": 4, "cpu": 16000, "memory": 64000 * 10 ** 6}
    assert info.weight == {"gpu": 3, "cpu": 2, "memory": 1}


def test_queue_minus_one_is_kept_and_negative_memory_becomes_minus_one():
    q = queue("q", gpu=resources(-1, -1), cpu=resources(-1, -1), memory=resources(-5, -1))
    info = state_of(snapshot(queues=[q])).queues["q"]
    assert info.deserved == {"gpu": -1, "cpu": -1, "memory": -1}
    assert info.limit == {"gpu": -1, "cpu": -1, "memory": -1}


def test_queue_values_beyond_any_cluster_are_capped_with_a_warning():
    """CLI fuzz: a memory quota of 1.8e302 MB (1.8e308 bytes) overflowed the queue order's
    floats, an internal error and no decisions for anyone. Read as 2^64 (past any cluster's
    total, so it decides as the value would), with a warning; -1 and ordinary values unchanged."""
    q = queue("q", gpu=resources(-1e20, -1, 1e300), cpu=resources(8000, -1), memory=resources(1.797e302, 64000))
    st = state_of(snapshot(queues=[q]))
    info = st.queues["q"]
    assert info.deserved == {"gpu": -(1 << 64), "cpu": 8000, "memory": 1 << 64}
    assert info.limit == {"gpu": -1, "cpu": -1, "memory": 64000 * 10 ** 6}
    assert info.weight["gpu"] == 1 << 64
    assert sorted(w.field for w in st.warnings if w.object == "Queue/q") == \
        ["spec.resources.gpu.overQuotaWeight", "spec.resources.gpu.quota", "spec.resources.memory.quota"]


@pytest.mark.parametrize("engine", ["greedy", "cp-sat"])
def test_a_queue_limit_far_below_zero_lets_its_queue_place_nothing_in_either_engine(engine: str):
    """A limit below 0 other than -1 leaves no room (spec 3.6: maxAllowed < allocated + request):
    the queue places nothing, the others go on. At -1e20 GPUs (-2^64 after the cap) the model's
    row for the shared-GPU pod (whole-GPU pods of a queue over its limit get no variables) was
    past int64 and CP-SAT refused it (an internal error)."""
    doc = snapshot([node("n1", gpu=4)], [queue("a", gpu=resources(-1, -1e20)), queue("b")],
                   [podgroup("ja", queue="a"), podgroup("jf", queue="a"), podgroup("jb", queue="b")],
                   [pod("pa", "ja", gpu=1), pod("pf", "jf", annotations={"gpu-fraction": "0.5"}),
                    pod("pb", "jb", gpu=1)])
    out = solve_doc(doc, engine)
    assert list(bound_pods(out)) == ["default/pb"] and sorted(unsched(out)) == ["ja", "jf"]


def test_queue_fractional_gpu_quota():
    q = queue("q", gpu=resources("0.5", -1))
    q["spec"]["resources"]["gpu"]["quota"] = 0.5
    assert state_of(snapshot(queues=[q])).queues["q"].deserved["gpu"] == Fraction(1, 2)


def test_queue_omitted_fields_are_zero():
    q = queue("q", raw_resources={"gpu": {"quota": 1}, "cpu": {"limit": 5}, "memory": {"overQuotaWeight": 2}})
    info = state_of(snapshot(queues=[q])).queues["q"]
    assert info.deserved == {"gpu": 1, "cpu": 0, "memory": 0}
    assert info.limit == {"gpu": 0, "cpu": 5, "memory": 0}
    assert info.weight == {"gpu": 0, "cpu": 0, "memory": 2}


def test_queue_without_resources_is_all_zero():
    q = queue("q")
    del q["spec"]["resources"]
    info = state_of(snapshot(queues=[q])).queues["q"]
    assert info.deserved == info.limit == info.weight == {"gpu": 0, "cpu": 0, "memory": 0}


def test_queue_priority_default_100():
    st = state_of(snapshot(queues=[queue("a"), queue("b", priority=7)]))
    assert st.queues["a"].priority == 100
    assert st.queues["b"].priority == 7


def test_queue_children_are_rebuilt():
    st = state_of(snapshot(queues=[queue("root"), queue("a", "root", created=2), queue("b", "root", created=1)]))
    assert sorted(st.queues["root"].children) == ["a", "b"]
    assert st.queues["a"].is_leaf and not st.queues["root"].is_leaf


def test_orphan_queue_and_subtree_dropped_with_warning():
    qs = [queue("root"), queue("ok", "root"), queue("orphan", "missing"), queue("child", "orphan"),
          queue("grandchild", "child")]
    doc = snapshot([node("n1")], qs, [podgroup("good", "ok"), podgroup("lost", "grandchild")],
                   [pod("g", "good"), pod("l", "lost")])
    st = state_of(doc)
    assert set(st.queues) == {"root", "ok"}
    objs = {w.object for w in st.warnings}
    assert "Queue/orphan" in objs
    w = next(w for w in st.warnings if w.object == "Queue/orphan")
    assert "missing" in w.reason and w.field == "spec.parentQueue"
    out = solve_doc(doc)
    assert bound_pods(out) == {"default/g": "n1"}          # everyone else still scheduled
    assert "lost" in unsched(out)


def test_job_in_non_leaf_queue_is_not_scheduled():
    doc = snapshot([node("n1")], [queue("root"), queue("leaf", "root")],
                   [podgroup("inner", "root"), podgroup("ok", "leaf")], [pod("i", "inner"), pod("o", "ok")])
    out = solve_doc(doc)
    assert bound_pods(out) == {"default/o": "n1"}


def test_project_level_fairness_flattens_to_default_queue():
    params = dict(DEFAULT_PARAMS, fullHierarchyFairness=False)
    qs = [queue("root", gpu=resources(1, 1)), queue("dept", "root", gpu=resources(1, 1)),
          queue("team", "dept", gpu=resources(2, 3)), queue("top-leaf")]
    st = state_of(snapshot(queues=qs, params=params))
    assert "root" not in st.queues and "top-leaf" not in st.queues   # every top-level queue is dropped
    assert st.queues["team"].parent == "default"
    assert st.queues["dept"].parent == "default"
    d = st.queues["default"]
    assert d.parent is None
    assert d.deserved == d.limit == {"gpu": -1, "cpu": -1, "memory": -1}
    assert d.weight == {"gpu": 1, "cpu": 1, "memory": 1}
    assert sorted(d.children) == ["dept", "team"]
    assert st.queues["team"].deserved["gpu"] == 2 and st.queues["team"].limit["gpu"] == 3


def test_project_level_fairness_ignores_parent_limit_end_to_end():
    """With full hierarchy the parent's GPU limit 1 blocks a 2-GPU job; flattened, it does not."""
    qs = [queue("root", gpu=resources(1, 1)), queue("team", "root")]
    pgs, pods = [podgroup("j", "team")], [pod("a", "j", gpu=2)]
    full = solve_doc(snapshot([node("n1", gpu=4)], qs, pgs, pods))
    assert full["binds"] == []
    flat = solve_doc(snapshot([node("n1", gpu=4)], qs, pgs, pods,
                              params=dict(DEFAULT_PARAMS, fullHierarchyFairness=False)))
    assert bound_pods(flat) == {"default/a": "n1"}


# ====================================================================== jobs: priority


def _job(doc, name="j"):
    return state_of(doc).jobs[name]


@pytest.mark.parametrize("pc,pcs,expected", [
    ("train", None, 50),
    ("build", None, 100),
    ("inference", None, 125),
    ("missing", [priority_class("x", 10), priority_class("d", 77, True), priority_class("e", 88, True)], 77),
    (None, [priority_class("d", 60, True)], 60),
    ("missing", [priority_class("x", 10)], 50),
    (None, [], 50),
])
def test_job_priority(pc, pcs, expected):
    doc = snapshot(podgroups=[podgroup("j", priority_class=pc)], priority_classes=pcs)
    assert _job(doc).priority == expected


@pytest.mark.parametrize("pc,mode,expected", [
    ("train", None, True),
    ("build-preemptible", None, True),        # 75 < 100
    ("build", None, False),                   # 100
    ("inference", None, False),
    ("inference", "preemptible", True),
    ("train", "non-preemptible", False),
    ("build", "", False),
    ("train", "", True),
])
def test_job_preemptibility(pc, mode, expected):
    doc = snapshot(podgroups=[podgroup("j", priority_class=pc, preemptibility=mode)])
    assert _job(doc).preemptible is expected


def test_priority_class_value_100_from_global_default_is_non_preemptible():
    doc = snapshot(podgroups=[podgroup("j", priority_class=None)], priority_classes=[priority_class("sys", 1000, True)])
    j = _job(doc)
    assert j.priority == 1000 and j.preemptible is False


# ====================================================================== jobs: PodSets


@pytest.mark.parametrize("mm,expected", [(None, 1), (0, 1), (1, 1), (3, 3)])
def test_min_member_at_least_one(mm, expected):
    doc = snapshot(podgroups=[podgroup("j", min_member=mm)])
    (ps,) = _job(doc).podsets.values()
    assert ps.min_available == expected


def test_sub_groups_become_podsets_and_unlabelled_pods_are_ignored():
    subs = [{"name": "master", "minMember": 1}, {"name": "workers", "minMember": 2}]
    pods = [pod("m", "j", labels={"kai.scheduler/subgroup-name": "master"}),
            pod("w1", "j", labels={"kai.scheduler/subgroup-name": "workers"}),
            pod("w2", "j", labels={"kai.scheduler/subgroup-name": "workers"}),
            pod("stray", "j"),
            pod("unknown", "j", labels={"kai.scheduler/subgroup-name": "nope"})]
    doc = snapshot([node("n1")], None, [podgroup("j", min_member=5, sub_groups=subs)], pods)
    j = _job(doc)
    assert set(j.podsets) == {"master", "workers"}
    assert "default" not in j.podsets
    assert j.podsets["workers"].min_available == 2
    assert sorted(t.name for t in j.tasks) == ["m", "w1", "w2"]
    out = solve_doc(doc)
    assert set(bound_pods(out)) == {"default/m", "default/w1", "default/w2"}


def test_inner_sub_groups_are_not_podsets_and_parents_are_case_insensitive():
    subs = [{"name": "root", "minMember": 9}, {"name": "a", "parent": "ROOT", "minMember": 2},
            {"name": "b", "parent": "root", "minMember": 0}]
    j = _job(snapshot(podgroups=[podgroup("j", sub_groups=subs)]))
    assert {n: ps.min_available for n, ps in j.podsets.items()} == {"a": 2, "b": 1}


def test_invalid_sub_group_tree_falls_back_to_default_with_warning():
    subs = [{"name": "a", "parent": "ghost", "minMember": 2}]
    doc = snapshot(podgroups=[podgroup("j", sub_groups=subs)])
    st = state_of(doc)
    assert any(w.object == "PodGroup/default/j" for w in st.warnings)


def test_elastic_job_podset_counts():
    pods = [pod(f"p{i}", "j") for i in range(4)]
    j = _job(snapshot([node("n1")], None, [podgroup("j", min_member=2)], pods))
    (ps,) = j.podsets.values()
    assert ps.min_available == 2 and len(ps.tasks) == 4


# ====================================================================== jobs: readiness


def test_not_ready_job_is_not_scheduled_and_reported():
    doc = snapshot([node("n1")], None, [podgroup("gang", min_member=3), podgroup("ok")],
                   [pod("g1", "gang"), pod("g2", "gang"), pod("o", "ok")])
    st = state_of(doc)
    assert not st.jobs["gang"].is_ready() and st.jobs["ok"].is_ready()
    out = solve_doc(doc)
    assert bound_pods(out) == {"default/o": "n1"}
    reasons = unsched(out)["gang"]
    assert any("Job is not ready for scheduling. Waiting for 3 pods, currently 2 exist, 0 are gated" in r
               for r in reasons), reasons


def test_gated_pods_do_not_count_towards_readiness():
    doc = snapshot([node("n1")], None, [podgroup("gang", min_member=3)],
                   [pod("g1", "gang"), pod("g2", "gang"), pod("g3", "gang", gates=["wait"])])
    st = state_of(doc)
    assert not st.jobs["gang"].is_ready()
    out = solve_doc(doc)
    assert out["binds"] == []
    assert any("currently 3 exist, 1 are gated" in r for r in unsched(out)["gang"])


def test_running_members_count_towards_readiness():
    doc = snapshot([node("n1")], None, [podgroup("gang", min_member=3)],
                   [pod("g1", "gang", phase="Running", node="n1"), pod("g2", "gang", phase="Running", node="n1"),
                    pod("g3", "gang")])
    assert state_of(doc).jobs["gang"].is_ready()
    assert bound_pods(solve_doc(doc)) == {"default/g3": "n1"}


def test_finished_members_do_not_count_towards_readiness():
    doc = snapshot([node("n1")], None, [podgroup("gang", min_member=2)],
                   [pod("g1", "gang", phase="Succeeded", node="n1"), pod("g2", "gang")])
    assert not state_of(doc).jobs["gang"].is_ready()


def test_not_ready_sub_group_message():
    subs = [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 2}]
    doc = snapshot([node("n1")], None, [podgroup("j", sub_groups=subs)],
                   [pod("a1", "j", labels={"kai.scheduler/subgroup-name": "a"}),
                    pod("b1", "j", labels={"kai.scheduler/subgroup-name": "b"})])
    out = solve_doc(doc)
    assert out["binds"] == []
    assert any("Waiting for 2 pods for SubGroup b, currently 1 exist, 0 are gated" in r for r in unsched(out)["j"])


# ====================================================================== jobs: task statuses


def _statuses(pods, brs=(), nodes=("n1", "n2")):
    doc = snapshot([node(n) for n in nodes], None, [podgroup("j", min_member=1)], pods, bind_requests=brs)
    st = state_of(doc)
    return {t.name: (t.status, t.node) for t in st.jobs["j"].tasks}


def test_task_statuses():
    pods = [
        pod("running", "j", phase="Running", node="n1"),
        pod("releasing-running", "j", phase="Running", node="n1", deleting=True),
        pod("releasing-pending", "j", phase="Pending", node="n1", deleting=True),
        pod("bound", "j", phase="Pending", node="n2"),
        pod("binding", "j"),
        pod("failed-br", "j"),
        pod("gated", "j", gates=["g"]),
        pod("pending", "j"),
        pod("succeeded", "j", phase="Succeeded", node="n1"),
        pod("failed", "j", phase="Failed", node="n1"),
        pod("unknown", "j", phase="Unknown", node="n1"),
    ]
    brs = [bind_request("binding", "n2"), bind_request("failed-br", "n1", phase="Failed")]
    s = _statuses(pods, brs)
    assert s["running"] == (RUNNING, "n1")
    assert s["releasing-running"][0] == RELEASING
    assert s["releasing-pending"][0] == RELEASING
    assert s["bound"] == (BOUND, "n2")
    assert s["binding"] == (BINDING, "n2")
    assert s["failed-br"] == (PENDING, None)
    assert s["gated"] == (GATED, None)
    assert s["pending"] == (PENDING, None)
    assert s["succeeded"][0] == SUCCEEDED
    assert s["failed"][0] == FAILED
    assert s["unknown"][0] == UNKNOWN


def test_bind_request_wins_over_scheduling_gates():
    s = _statuses([pod("p", "j", gates=["g"])], [bind_request("p", "n1")])
    assert s["p"] == (BINDING, "n1")


def test_bind_request_of_another_namespace_does_not_match():
    s = _statuses([pod("p", "j")], [bind_request("p", "n1", namespace="other")])
    assert s["p"] == (PENDING, None)


def test_pods_in_flight_are_not_scheduled_again():
    pods = [pod("bound", "j", node="n1"), pod("binding", "j"), pod("failed-br", "j"), pod("gated", "j", gates=["g"])]
    doc = snapshot([node("n1"), node("n2")], None, [podgroup("j")], pods,
                   bind_requests=[bind_request("binding", "n2"), bind_request("failed-br", "n2", phase="Failed")])
    assert set(bound_pods(solve_doc(doc))) == {"default/failed-br"}


def test_queue_does_not_exist():
    doc = snapshot([node("n1")], None, [podgroup("lost", "ghost"), podgroup("ok")], [pod("l", "lost"), pod("o", "ok")])
    out = solve_doc(doc)
    assert bound_pods(out) == {"default/o": "n1"}
    reasons = unsched(out)["lost"]
    assert any("QueueDoesNotExist" in r for r in reasons)
    assert any("Queue 'ghost' does not exist" in r for r in reasons)
    assert warned(out, "PodGroup/default/lost")


def test_pod_whose_podgroup_is_missing_is_reported():
    doc = snapshot([node("n1")], None, [podgroup("ok")], [pod("x", "nope"), pod("o", "ok")])
    out = solve_doc(doc)
    assert bound_pods(out) == {"default/o": "n1"}
    assert "nope" in unsched(out)
    assert warned(out, "Pod/default/x")


# ====================================================================== nodes


@pytest.mark.parametrize("cpu", ["9223372036854776", "-1e18"])
@pytest.mark.parametrize("engine", ["greedy", "cp-sat"])
def test_a_node_with_an_absurd_capacity_is_ignored_with_a_warning(engine: str, cpu: str):
    """A corrupt allocatable (9.2e15 cores, or -1e18: beyond the int64 capacity arrays in
    millicores) ended the build with an internal error (found by tests/test_cli.py's value
    fuzzing); the node is left out with a warning naming the field, and the rest of the cluster
    is scheduled."""
    doc = snapshot(nodes=[node("bad", cpu=cpu), node("good")],
                   podgroups=[podgroup("a")], pods=[pod("a-0", "a")])
    out = solve_doc(doc, engine)
    assert bound_pods(out) == {"default/a-0": "good"}
    [w] = warned(out, "Node/")
    assert w["object"] == "Node/bad" and w["field"] == "status.allocatable.cpu" and "node ignored" in w["reason"]


@pytest.mark.parametrize("label", ["99999999999999999999", "-3"])
def test_a_gpu_count_or_memory_label_past_any_device_falls_back_to_the_allocatable(label: str):
    """`nvidia.com/gpu.count` of 1e20 overflowed the int64 GPU counts (CLI fuzz), an internal
    error for everyone; like an unreadable label it is ignored (the node's allocatable GPUs),
    and so is a GPU memory label past any device."""
    labels = {"nvidia.com/gpu.count": label, "nvidia.com/gpu.memory": "9" * 40}
    doc = snapshot(nodes=[node("n1", gpu=2, labels=labels)], podgroups=[podgroup("a")], pods=[pod("a-0", "a", gpu=2)])
    st = state_of(doc)
    assert st.nodes[0].gpu_count == 2 and not st.nodes[0].gpu_memory_synced
    assert bound_pods(solve_doc(doc, "cp-sat")) == {"default/a-0": "n1"}


def _row(st, name):
    t = st.table
    i = t.index[name]
    return {r: (int(t.allocatable[i, c]), int(t.used[i, c]), int(t.idle[i, c]), int(t.releasing[i, c]))
            for r, c in t.col.items()}


def test_node_allocatable_per_resource():
    st = state_of(snapshot([node("n1", cpu="7500m", memory="16Gi", gpu=4, pods="50",
                                 extra={"example.com/nic": "2"})]))
    row = _row(st, "n1")
    assert row["cpu"][0] == 7500
    assert row["memory"][0] == 16 * GI
    assert row["gpu"][0] == 4
    assert row["pods"][0] == 50
    assert row["example.com/nic"][0] == 2000


def test_node_used_idle_releasing():
    pods = [pod("run", "j", cpu="2", memory="1Gi", phase="Running", node="n1"),
            pod("bound", "j", cpu="1", memory="1Gi", node="n1"),
            pod("rel", "j", cpu="3", memory="2Gi", phase="Running", node="n1", deleting=True),
            pod("binding", "j", cpu="500m", memory="0"),
            pod("done", "j", cpu="4", phase="Succeeded", node="n1"),
            pod("failed", "j", cpu="4", phase="Failed", node="n1"),
            pod("unknown", "j", cpu="4", phase="Unknown", node="n1"),
            pod("gated", "j", cpu="4", gates=["x"]),
            pod("pending", "j", cpu="4")]
    doc = snapshot([node("n1", cpu="16", memory="32Gi")], None, [podgroup("j")], pods,
                   bind_requests=[bind_request("binding", "n1")])
    row = _row(state_of(doc), "n1")
    assert row["cpu"] == (16000, 6500, 9500, 3000)
    assert row["memory"] == (32 * GI, 4 * GI, 28 * GI, 2 * GI)
    assert row["pods"][1] == 4


def test_releasing_capacity_pipelines_instead_of_binding():
    """A pod that fits only in resources being released is pipelined, not bound (spec 1.5, 5.3)."""
    doc = snapshot([node("n1", cpu="4")], None, [podgroup("old"), podgroup("new")],
                   [pod("r", "old", cpu="3", phase="Running", node="n1", deleting=True), pod("a", "new", cpu="3")])
    out = solve_doc(doc)
    assert out["binds"] == []
    assert [(p["pod"], p["node"]) for p in out["pipelined"]] == [("default/a", "n1")]


@pytest.mark.parametrize("kw,ready", [
    ({}, True),
    ({"unschedulable": True}, False),
    ({"conditions": {"Ready": "False"}}, False),
    ({"conditions": {"Ready": "Unknown"}}, False),
    ({"conditions": {"MemoryPressure": "True"}}, False),
    ({"conditions": {"DiskPressure": "True"}}, False),
    ({"conditions": {"PIDPressure": "True"}}, False),
    ({"conditions": {"NetworkUnavailable": "True"}}, False),
    ({"conditions": {"MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False",
                     "NetworkUnavailable": "False"}}, True),
])
def test_node_readiness(kw, ready):
    doc = snapshot([node("n1", cpu="4", gpu=2, **kw)], None, [podgroup("j")], [pod("a", "j")])
    st = state_of(doc)
    assert (st.nodes[0].not_ready_reason is None) is ready
    # not-ready nodes add nothing to the fair-share total and get no pods
    assert st.total["cpu"] == (4000 if ready else 0)
    assert st.total["gpu"] == (2 if ready else 0)
    assert bool(solve_doc(doc)["binds"]) is ready


def test_node_without_ready_condition_is_not_ready():
    n = node("n1")
    n["status"]["conditions"] = []
    st = state_of(snapshot([n]))
    assert st.nodes[0].not_ready_reason is not None


def test_unschedulable_node_reason():
    doc = snapshot([node("n1", unschedulable=True)], None, [podgroup("j")], [pod("a", "j")])
    out = solve_doc(doc)
    assert any("node is unschedulable" in r for r in unsched(out)["j"])


def _pool_params(key, value):
    return dict(DEFAULT_PARAMS, partitionParams={"NodePoolLabelKey": key, "NodePoolLabelValue": value})


def test_node_pool_empty_value_selects_unlabelled_objects():
    pool = {"kai.scheduler/node-pool": "a"}
    doc = snapshot([node("plain"), node("in-a", labels=pool)], [queue("q"), queue("qa", labels=pool)],
                   [podgroup("j"), podgroup("ja", "qa", labels=pool)], [pod("p", "j"), pod("pa", "ja")],
                   params=_pool_params("kai.scheduler/node-pool", ""))
    st = state_of(doc)
    assert [n.name for n in st.nodes] == ["plain"]
    assert set(st.queues) == {"q"}
    assert set(st.jobs) == {"j"}
    assert bound_pods(solve_doc(doc)) == {"default/p": "plain"}


def test_node_pool_value_selects_labelled_objects():
    pool = {"kai.scheduler/node-pool": "a"}
    doc = snapshot([node("plain"), node("in-a", labels=pool), node("in-b", labels={"kai.scheduler/node-pool": "b"})],
                   [queue("q"), queue("qa", labels=pool)],
                   [podgroup("j"), podgroup("ja", "qa", labels=pool)], [pod("p", "j"), pod("pa", "ja")],
                   params=_pool_params("kai.scheduler/node-pool", "a"))
    st = state_of(doc)
    assert [n.name for n in st.nodes] == ["in-a"]
    assert set(st.queues) == {"qa"}
    assert set(st.jobs) == {"ja"}
    out = solve_doc(doc)
    assert bound_pods(out) == {"default/pa": "in-a"}
    # The other pool's job is another shard's, not a pod whose PodGroup is missing (KAI ignores it).
    assert "j" not in unsched(out) and not warned(out, "Pod/default/p")


def test_node_pool_empty_key_selects_everything():
    doc = snapshot([node("plain"), node("in-a", labels={"kai.scheduler/node-pool": "a"})],
                   params=_pool_params("", ""))
    assert [n.name for n in state_of(doc).nodes] == ["in-a", "plain"]


def test_custom_node_pool_label_key():
    doc = snapshot([node("x", labels={"pool": "gpu"}), node("y", labels={"pool": "cpu"}), node("z")],
                   params=_pool_params("pool", "gpu"))
    assert [n.name for n in state_of(doc).nodes] == ["x"]


def test_other_scheduler_pods_consume_nodes_and_capacity_but_are_never_scheduled():
    pods = [pod("foreign-running", "j", cpu="3", memory="1Gi", gpu=1, phase="Running", node="n1",
                scheduler="default-scheduler"),
            pod("foreign-pending", "fj", cpu="1", scheduler="default-scheduler"),
            pod("ours", "j", cpu="4")]
    doc = snapshot([node("n1", cpu="8", memory="8Gi", gpu=2), node("n2", cpu="2", memory="8Gi")], None,
                   [podgroup("j"), podgroup("fj")], pods)
    st = state_of(doc)
    assert st.total["cpu"] == 10000 - 3000
    assert st.total["memory"] == 16 * GI - GI
    assert st.total["gpu"] == 2 - 1
    assert _row(st, "n1")["cpu"][1] == 3000
    assert "foreign-pending" not in {t.name for t in st.tasks}
    out = solve_doc(doc)
    assert bound_pods(out) == {"default/ours": "n1"}
    assert out["fairShare"]["q"]["cpu"] <= 7000


def test_other_scheduler_pods_block_node_capacity_end_to_end():
    doc = snapshot([node("n1", cpu="4")], None, [podgroup("j")],
                   [pod("f", None, cpu="3", phase="Running", node="n1", scheduler="default-scheduler"),
                    pod("a", "j", cpu="2")])
    out = solve_doc(doc)
    assert out["binds"] == []


def test_own_pods_without_podgroup_use_nodes_but_not_capacity():
    """Spec 3.2.1: pods of our own scheduler with no PodGroup are not subtracted from the total."""
    doc = snapshot([node("n1", cpu="8")], None, [], [pod("bare", None, cpu="3", phase="Running", node="n1")])
    st = state_of(doc)
    assert st.total["cpu"] == 8000
    assert _row(st, "n1")["cpu"][1] == 3000


def test_reservation_pods_of_other_schedulers_are_not_subtracted():
    doc = snapshot([node("n1", cpu="8", gpu=1)], None, [],
                   [pod("res", None, cpu="1", gpu=1, phase="Running", node="n1", scheduler="default-scheduler",
                        labels={"app": "kai-resource-reservation"})])
    st = state_of(doc)
    assert st.total["cpu"] == 8000 and st.total["gpu"] == 1


def test_scheduler_name_from_params():
    params = dict(DEFAULT_PARAMS, schedulerName="mine")
    doc = snapshot([node("n1")], None, [podgroup("a"), podgroup("b")],
                   [pod("x", "a", scheduler="mine"), pod("y", "b", scheduler="kai-scheduler")], params=params)
    assert set(bound_pods(solve_doc(doc))) == {"default/x"}


# ====================================================================== queue accounting


def test_queue_allocated_and_request_walk_up_ancestors():
    qs = [queue("root"), queue("leaf", "root")]
    pods = [pod("r", "np", cpu="2", gpu=1, phase="Running", node="n1"),
            pod("p", "pre", cpu="1", gpu=1),
            pod("rel", "pre", cpu="5", phase="Running", node="n1", deleting=True)]
    doc = snapshot([node("n1", cpu="16", gpu=4)], qs,
                   [podgroup("np", "leaf", priority_class="build"), podgroup("pre", "leaf")], pods)
    st = state_of(doc)
    for q in ("leaf", "root"):
        info = st.queues[q]
        assert info.allocated == {"cpu": 2000, "memory": GI, "gpu": 1}
        assert info.allocated_np == {"cpu": 2000, "memory": GI, "gpu": 1}
        assert info.request == {"cpu": 3000, "memory": 2 * GI, "gpu": 2}


def test_pending_gpu_memory_request_counts_over_the_smallest_gpu_memory():
    doc = snapshot([node("n1", gpu=2)], None, [podgroup("j")], [pod("a", "j", annotations={"gpu-memory": "2000"})])
    assert state_of(doc).queues["q"].request["gpu"] == Fraction(2000, 40000)
    del doc["rawObjects"]["nodes"][0]["metadata"]["labels"]["nvidia.com/gpu.memory"]
    assert state_of(doc).queues["q"].request["gpu"] == 20       # no label: KAI's default of 100 MiB


# ====================================================================== capacity policy (3.6)


def _check(doc, job="j"):
    st = state_of(doc)
    s = Session.open(st)
    j = st.jobs[job]
    req = request_vector(tasks_to_allocate(j, s), None)
    return capacity.check(j, req, st.queue_path(j.queue), s.allocated, s.allocated_np)


def test_over_limit_message():
    doc = snapshot([node("n1", gpu=4)], [queue("q", gpu=resources(1, 1))], [podgroup("j")], [pod("a", "j", gpu=2)])
    f = _check(doc)
    assert f.reason == "OverLimit" and f.queue == "q" and f.resource == "gpu"
    assert f.message == ("q quota has reached the allowable limit of GPUs. Limit is 1 GPUs, currently 0 GPUs "
                         "allocated and workload requested 2 GPUs")
    out = solve_doc(doc)
    assert out["binds"] == []
    assert any("quota has reached the allowable limit of GPUs" in r for r in unsched(out)["j"])


def test_over_limit_counts_existing_allocation():
    doc = snapshot([node("n1", gpu=4)], [queue("q", gpu=resources(-1, 2))], [podgroup("run"), podgroup("j")],
                   [pod("r", "run", gpu=1, phase="Running", node="n1"), pod("a", "j", gpu=2)])
    f = _check(doc)
    assert f.reason == "OverLimit"
    assert "currently 1 GPUs allocated and workload requested 2 GPUs" in f.message
    # exactly at the limit is allowed
    doc2 = copy.deepcopy(doc)
    doc2["rawObjects"]["pods"][1]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    assert _check(doc2) is None
    assert set(bound_pods(solve_doc(doc2))) == {"default/a"}


def test_omitted_limit_blocks_a_requested_resource():
    """Spec 1.2: an omitted limit is 0, which blocks any job requesting that resource."""
    q = queue("q", raw_resources={"gpu": {"quota": 1, "limit": -1}, "memory": {"limit": -1}})
    doc = snapshot([node("n1", gpu=2)], [q], [podgroup("j")], [pod("a", "j", cpu="1", gpu=1)])
    f = _check(doc)
    assert f.reason == "OverLimit" and f.resource == "cpu"
    assert f.message.startswith("q quota has reached the allowable limit of CPU cores. Limit is 0")
    assert solve_doc(doc)["binds"] == []


def test_zero_request_ignores_zero_limit():
    q = queue("q", gpu=resources(0, 0), cpu=resources(-1, -1), memory=resources(-1, -1))
    doc = snapshot([node("n1", gpu=2)], [q], [podgroup("j")], [pod("a", "j", cpu="1")])
    assert _check(doc) is None
    assert set(bound_pods(solve_doc(doc))) == {"default/a"}


def test_non_preemptible_over_quota_message():
    doc = snapshot([node("n1", gpu=4)], [queue("q", display="Team Q", gpu=resources(1, -1))],
                   [podgroup("j", priority_class="build")], [pod("a", "j", gpu=2)])
    f = _check(doc)
    assert f.reason == "NonPreemptibleOverQuota"
    assert f.message == ("Non-preemptible workload is over quota. Workload requested 2 GPUs, but Team Q quota is "
                         "1 GPUs, while 0 GPUs are already allocated for non-preemptible pods. Use a preemptible "
                         "workload to go over quota.")
    out = solve_doc(doc)
    assert out["binds"] == []
    assert any("Non-preemptible workload is over quota" in r for r in unsched(out)["j"])


def test_preemptible_job_may_go_over_quota():
    doc = snapshot([node("n1", gpu=4)], [queue("q", gpu=resources(1, -1))],
                   [podgroup("j", priority_class="train")], [pod("a", "j", gpu=2)])
    assert _check(doc) is None
    assert set(bound_pods(solve_doc(doc))) == {"default/a"}


def test_non_preemptible_quota_counts_only_non_preemptible_allocation():
    qs = [queue("q", gpu=resources(2, -1))]
    pgs = [podgroup("pre", priority_class="train"), podgroup("np-run", priority_class="build"),
           podgroup("j", priority_class="inference")]
    pods = [pod("p1", "pre", gpu=1, phase="Running", node="n1"), pod("n1p", "np-run", gpu=1, phase="Running", node="n1"),
            pod("a", "j", gpu=1)]
    doc = snapshot([node("n1", gpu=4)], qs, pgs, pods)
    assert _check(doc) is None                      # 1 (np) + 1 <= 2; the preemptible GPU does not count
    doc["rawObjects"]["pods"][2]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    f = _check(doc)
    assert f.reason == "NonPreemptibleOverQuota"
    assert "while 1 GPUs are already allocated" in f.message


def test_capacity_walks_up_to_ancestors():
    qs = [queue("org", display="The Org", gpu=resources(-1, 1)), queue("dept", "org"), queue("team", "dept")]
    doc = snapshot([node("n1", gpu=4)], qs, [podgroup("j", "team")], [pod("a", "j", gpu=2)])
    f = _check(doc)
    assert f.reason == "OverLimit" and f.queue == "org"
    assert f.message.startswith("The Org quota has reached the allowable limit of GPUs")


def test_capacity_leaf_violation_reported_before_ancestor():
    qs = [queue("org", gpu=resources(-1, 1)), queue("team", "org", gpu=resources(-1, 1))]
    doc = snapshot([node("n1", gpu=4)], qs, [podgroup("j", "team")], [pod("a", "j", gpu=2)])
    assert _check(doc).queue == "team"


def test_limit_checked_before_non_preemptible_quota():
    doc = snapshot([node("n1", gpu=4)], [queue("q", gpu=resources(1, 1))],
                   [podgroup("j", priority_class="build")], [pod("a", "j", gpu=2)])
    assert _check(doc).reason == "OverLimit"


def test_ancestor_non_preemptible_quota():
    qs = [queue("org", gpu=resources(1, -1)), queue("team", "org", gpu=resources(-1, -1))]
    doc = snapshot([node("n1", gpu=4)], qs, [podgroup("j", "team", priority_class="build")], [pod("a", "j", gpu=2)])
    f = _check(doc)
    assert f.reason == "NonPreemptibleOverQuota" and f.queue == "org"


def test_gang_stops_at_limit_end_to_end():
    """Two 1-GPU jobs in a queue limited to 1 GPU: exactly one runs."""
    doc = snapshot([node("n1", gpu=4)], [queue("q", gpu=resources(-1, 1))], [podgroup("a"), podgroup("b")],
                   [pod("a1", "a", gpu=1), pod("b1", "b", gpu=1)])
    out = solve_doc(doc)
    assert len(out["binds"]) == 1
    assert len(out["unschedulable"]) == 1


def test_pod_of_another_namespace_never_joins_a_same_named_group():
    """KAI finds a job's pods by the annotation's name alone; kai-cp keeps a gang to its own
    namespace, so a pod of team-b naming team-a's group is neither placed with it nor counted."""
    doc = snapshot(nodes=[node("n0", gpu=8)],
                   podgroups=[podgroup("train", min_member=2, namespace="team-a")],
                   pods=[pod("a-0", "train", gpu=1, namespace="team-a"), pod("a-1", "train", gpu=1, namespace="team-a"),
                         pod("b-0", "train", gpu=1, namespace="team-b")])
    state = state_of(doc)
    job = state.jobs["train"]
    assert sorted(t.key for ps in job.podsets.values() for t in ps.tasks) == ["team-a/a-0", "team-a/a-1"]
    assert any(w.object == "Pod/team-b/b-0" and "namespace 'team-a'" in w.reason for w in state.warnings)
    out = solve_doc(doc)
    assert sorted(b["pod"] for b in out["binds"]) == ["team-a/a-0", "team-a/a-1"]
