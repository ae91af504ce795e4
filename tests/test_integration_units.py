"""Parts of integration/ that need no API server: flags, schedulerParams, metric names, status
texts, bind back-off, BindRequest fields, and crds/ kept in step with models/."""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import pytest

from integration import crdgen
from integration.apply import bind_request_body, received
from integration.backoff import BindBackoff
from integration.metrics import Metrics
from integration.run import parse_args, scheduler_params
from integration.status import job_summary, quantity_list, reason_code
from kai_cp.resources import PodRequest

# Every flag of KAI's scheduler (cmd/scheduler/app/options/options.go), as KAI's operator passes them.
KAI_FLAGS = ["--scheduler-name=kai-scheduler", "--namespace=kai-scheduler", "--metrics-namespace=kai",
             "--resource-reservation-app-label=kai-resource-reservation", "--restrict-node-scheduling=false",
             "--nodepool-label-key=kai.scheduler/node-pool", "--partition-label-value=pool-a",
             "--scheduler-conf=/etc/kai/config.yaml", "--schedule-period=1s", "--leader-elect=true", "--version=true",
             "--listen-address=:8080", "--v=3", "--max-consolidation-preemptees=16", "--qps=50", "--burst=300",
             "--detailed-fit-errors=false", "--schedule-csi-storage=false", "--use-scheduling-signatures=true",
             "--full-hierarchy-fairness=true", "--allow-consolidating-reclaim=true",
             "--num-of-status-recording-workers=5", "--default-staleness-grace-period=60s",
             "--plugin-server-port=8081", "--cpu-worker-node-label-key=node-role.kubernetes.io/cpu-worker",
             "--gpu-worker-node-label-key=node-role.kubernetes.io/gpu-worker",
             "--mig-worker-node-label-key=node-role.kubernetes.io/mig-enabled", "--queue-label-key=kai.scheduler/queue",
             "--update-pod-eviction-condition"]


def test_kai_flags_are_all_understood():
    args = parse_args(KAI_FLAGS)
    assert args.unknown == []
    assert args.leader_elect is True and args.schedule_period == 1.0 and args.partition_label_value == "pool-a"
    assert args.update_pod_eviction_condition is True and args.detailed_fit_errors is False


def test_unknown_flags_are_collected_not_fatal():
    args = parse_args(["--enable-profiler", "--pyroscope-address=x", "--scheduler-name=s"])
    assert args.scheduler_name == "s"
    assert [u for u in args.unknown if u.startswith("-")] == ["--enable-profiler", "--pyroscope-address=x"]


@pytest.mark.parametrize("bad", [["--schedule-period=soon"], ["--leader-elect=maybe"]])
def test_bad_flag_values_are_errors(bad):
    with pytest.raises(SystemExit):
        parse_args(bad)


def test_scheduler_params_follow_kais_omitempty_encoding():
    p = scheduler_params(parse_args(["--partition-label-value=a", "--schedule-period=500ms",
                                     "--use-scheduling-signatures=false"]))
    assert p["partitionParams"] == {"NodePoolLabelKey": "kai.scheduler/node-pool", "NodePoolLabelValue": "a"}
    assert p["schedulePeriod"] == 500_000_000 and p["globalDefaultStalenessGracePeriod"] == 60_000_000_000
    assert "useSchedulingSignatures" not in p and p["fullHierarchyFairness"] is True
    assert "restrictSchedulingNodes" not in p


def test_metric_names_and_types_are_kais():
    m = Metrics("kai")
    m.scheduled.labels("allocate").inc()
    m.evicted.labels("pg", "ns", "uid", "default", "reclaim").inc()
    m.fs_gpu.labels("Team A", "team-a", "Team A").set(2)
    text = m.exposition()[0].decode()
    assert "# TYPE kai_podgroups_scheduled_by_action counter" in text
    assert 'kai_podgroups_scheduled_by_action{action="allocate"} 1.0' in text
    assert "kai_podgroups_scheduled_by_action_total" not in text
    assert "kai_pod_group_evicted_pods_total{" in text
    assert 'kai_queue_fair_share_gpu{queue_display_name="Team A",queue_metadata_name="team-a",queue_name="Team A"} 2.0' in text
    assert "# TYPE kai_e2e_scheduling_latency_milliseconds gauge" in text
    assert "_created" not in text


def test_job_summary_and_reason_codes():
    assert reason_code("Queue 'x' does not exist") == "QueueDoesNotExist"
    assert reason_code("q quota has reached the allowable limit of GPUs. Limit is 1 GPUs") == "OverLimit"
    assert reason_code("Non-preemptible workload is over quota. Workload requested 2 GPUs") == "NonPreemptibleOverQuota"
    assert job_summary(["Queue 'x' does not exist"]) == "QueueDoesNotExist: Queue 'x' does not exist."
    two = job_summary(["b reason.", "a reason", "a reason"])
    assert two == "Unable to schedule podgroup: 2 a reason. \nb reason."


def test_queue_status_quantities():
    q = quantity_list({"cpu": Fraction(2500), "memory": Fraction(10**9), "gpu": Fraction(3, 2)})
    assert q == {"cpu": "2500m", "memory": "1000000000", "nvidia.com/gpu": "1.5"}
    # -1 (unlimited, e.g. a fair share of a resource no queue limits) is no quantity: left out, not "-1m"
    assert quantity_list({"cpu": Fraction(-1), "memory": Fraction(-1), "gpu": Fraction(4)}) == {"nvidia.com/gpu": "4"}


def test_bind_backoff_doubles_to_a_cap_and_clears():
    now = [0.0]
    b = BindBackoff(base=1, cap=10, clock=lambda: now[0])
    assert [b.fail("p") for _ in range(6)] == [1, 2, 4, 8, 10, 10]
    assert b.waiting("p") and b.active_keys() == {"p"}
    now[0] = 10.5
    assert not b.waiting("p")
    b.fail("p")
    b.success("p")
    assert not b.waiting("p") and b.failures("p") == 0


def _task(**req):
    return SimpleNamespace(request=PodRequest(**req))


def test_bind_request_fields_as_kai_writes_them():
    assert received(_task(), None) == ("Regular", 0, "0.00")
    assert received(_task(gpus=2), None) == ("Regular", 2, "1.00")
    assert received(_task(kind="Fraction", gpu_portion=Fraction(1, 2), devices=1), None) == ("Fraction", 1, "0.50")
    assert received(_task(kind="GpuMemory", gpu_memory=20000, devices=1), 80000) == ("Fraction", 1, "0.25")
    pod = SimpleNamespace(metadata=SimpleNamespace(name="p", namespace="ns", uid="u1"))
    body = bind_request_body(_task(gpus=1), pod, "n1", [], None, "kai.scheduler/node-pool", "a")
    assert body["metadata"] == {"name": "p", "namespace": "ns",
                                "labels": {"selected-node": "n1", "kai.scheduler/node-pool": "a"},
                                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"}]}
    assert body["spec"] == {"podName": "p", "selectedNode": "n1", "receivedResourceType": "Regular",
                            "receivedGPU": {"count": 1, "portion": "1.00"}}
    assert "kai.scheduler/node-pool" not in bind_request_body(_task(), pod, "n1", [], None, "kai.scheduler/node-pool", "")["metadata"]["labels"]


def test_crds_are_generated_from_models():
    assert crdgen.main(["--check"]) == 0, "crds/ is stale: run python -m integration.crdgen"


def test_run_without_a_cluster_is_a_clear_error(tmp_path, capsys):
    from integration.run import main
    assert main([f"--kubeconfig={tmp_path / 'missing'}", "--listen-address=", "--plugin-server-port=0"]) == 2
    err = capsys.readouterr().err
    assert "no cluster found" in err and "--kubeconfig" in err


def test_trimming_keeps_what_makes_an_init_container_a_sidecar():
    """A sidecar's request counts beside the containers (kai_cp/resources.py pod_request): the
    cache's trimmed pods must keep its restartPolicy, or in-cluster it would count as a plain
    init container, as in no snapshot."""
    from integration.trim import trim_pod
    from kai_cp.loader import load_snapshot_dict
    from kai_cp.state import build_cluster_state
    pod = {"metadata": {"name": "p", "namespace": "n", "uid": "u", "annotations": {"pod-group-name": "g"}},
           "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}},
                                                                      "env": [{"name": "X"}]}],
                    "initContainers": [{"name": "mesh", "restartPolicy": "Always", "image": "x",
                                        "resources": {"requests": {"cpu": "2"}}}]},
           "status": {"phase": "Pending"}}
    trimmed = trim_pod(pod)
    assert trimmed["spec"]["initContainers"] == [{"name": "mesh", "resources": {"requests": {"cpu": "2"}},
                                                  "restartPolicy": "Always"}]
    doc = {"rawObjects": {"pods": [{"apiVersion": "v1", "kind": "Pod", **trimmed}],
                          "podGroups": [{"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                                         "metadata": {"name": "g", "namespace": "n"}, "spec": {"minMember": 1}}]}}
    state = build_cluster_state(load_snapshot_dict(doc))
    (task,) = [t for j in state.jobs.values() for t in j.tasks]
    assert task.request.cpu == 3000


def test_own_status_echoes_do_not_count_as_changes():
    from integration.cache import fingerprint
    from integration.trim import trim_pod
    pod = {"metadata": {"name": "p", "namespace": "n", "resourceVersion": "1", "managedFields": [{}]},
           "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "env": [{"name": "X"}]}]},
           "status": {"phase": "Pending"}}
    echo = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "2"},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}}
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}}
    fp = lambda o: fingerprint("pods", trim_pod(o))  # noqa: E731
    assert fp(pod) == fp(echo) and fp(pod) != fp(bound)
    assert "env" not in str(trim_pod(pod)) and "managedFields" not in str(trim_pod(pod))
    pg = {"metadata": {"name": "g"}, "spec": {"minMember": 2}, "status": {"schedulingConditions": [{"a": 1}]}}
    assert fingerprint("podGroups", pg) == fingerprint("podGroups", {**pg, "status": {}})
    backoff = {**pg, "spec": {"minMember": 2, "schedulingBackoff": 1}}
    assert fingerprint("podGroups", backoff) != fingerprint("podGroups", {**backoff, "status": {}})


def _crd(kind: str) -> dict:
    import yaml
    docs = {yaml.safe_load(t)["spec"]["names"]["kind"]: yaml.safe_load(t) for t in crdgen.render().values()}
    return docs[kind]


def _schema(kind: str) -> dict:
    return _crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_crds_apply_kais_validation():
    """kai-cp's CRDs reject what KAI's CRDs reject (spec 1.3, 1.6), so an object a kai-cp cluster
    accepts is accepted by KAI, and always parses in kai-cp's models (a sub-group without a name,
    or a Topology level without a nodeLabel, used to be accepted and then failed to load)."""
    spec = _schema("PodGroup")["properties"]["spec"]
    assert spec["properties"]["minMember"] == {"type": "integer", "format": "int32", "minimum": 1}
    assert spec["properties"]["preemptibility"]["enum"] == ["preemptible", "non-preemptible"]
    for f in ("schedulingBackoff", "parallelism", "completions", "backoffLimit"):
        assert spec["properties"][f] == {"type": "integer", "format": "int32"}, f
    sub = spec["properties"]["subGroups"]["items"]
    assert sub["required"] == ["name"]
    assert sub["properties"]["name"]["minLength"] == 1 and sub["properties"]["minMember"]["minimum"] == 1
    assert sub["properties"]["name"]["pattern"] == sub["properties"]["parent"]["pattern"]

    topo = _schema("Topology")
    assert topo["required"] == ["spec"] and topo["properties"]["spec"]["required"] == ["levels"]
    levels = topo["properties"]["spec"]["properties"]["levels"]
    assert (levels["minItems"], levels["maxItems"], levels["x-kubernetes-list-type"]) == (1, 16, "atomic")
    assert [v["message"] for v in levels["x-kubernetes-validations"]] == [
        "field is immutable", "must be unique",
        "the kubernetes.io/hostname label can only be used at the lowest level of topology"]
    assert levels["items"]["required"] == ["nodeLabel"]
    assert levels["items"]["properties"]["nodeLabel"]["maxLength"] == 316

    br = _schema("BindRequest")["properties"]
    assert br["spec"]["properties"]["backoffLimit"]["format"] == "int32"
    assert br["status"]["properties"]["failedAttempts"]["format"] == "int32"


def test_crd_status_subresource_as_kai():
    """Queue, PodGroup and BindRequest have a status subresource; Topology has no status at all
    (KAI's Topology CRD has neither, and KAI's tools write it whole)."""
    for kind in ("Queue", "PodGroup", "BindRequest"):
        assert _crd(kind)["spec"]["versions"][0]["subresources"] == {"status": {}}, kind
        assert "status" in _schema(kind)["properties"], kind
    ver = _crd("Topology")["spec"]["versions"][0]
    assert "subresources" not in ver and "status" not in _schema("Topology")["properties"]


def test_crd_validation_is_not_enforced_when_loading():
    """The CRD facets are for the API server only: a snapshot with values KAI's CRD would refuse
    is still read (and written back) as it is."""
    from models import PodGroup, Topology
    pg = PodGroup.model_validate({"metadata": {"name": "x"}, "spec": {"minMember": 0, "preemptibility": "other",
                                                                      "subGroups": [{"name": "A_b", "minMember": 0}]}})
    assert (pg.spec.min_member, pg.spec.preemptibility, pg.spec.sub_groups[0].name) == (0, "other", "A_b")
    assert Topology.model_validate({"metadata": {"name": "t"}}).spec.levels == []


def test_the_harness_waits_through_transient_api_answers():
    """integration/testing/fakes.py `wait_for`: the test's own reads meet the faults the tier
    injects; a 429 while the API server's storage re-initialised failed a CI run. Transient
    answers mean "not yet"; any other error still fails at once."""
    from integration.kube import ApiError
    from integration.testing.fakes import wait_for

    answers = iter([ApiError(429, "storage is (re)initializing"), ApiError(0, "transport"),
                    ApiError(503, "unavailable"), None, "settled"])

    def cond():
        a = next(answers)
        if isinstance(a, ApiError):
            raise a
        return a
    assert wait_for(cond, timeout=5, period=0) == "settled"
    with pytest.raises(ApiError):
        wait_for(lambda: (_ for _ in ()).throw(ApiError(403, "forbidden")), timeout=5, period=0)
    with pytest.raises(AssertionError, match="429"):
        wait_for(lambda: (_ for _ in ()).throw(ApiError(429, "busy")), timeout=0.05, period=0.01)
