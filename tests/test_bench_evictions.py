"""Checks of bench/bench_evictions.py: its snapshot builders and its judge of eviction decisions.

Why: the eviction benchmark's figures (evictions, preemptors decided, invalid decisions) only
mean something when each shape is the cluster it claims to be (every GPU held, the quotas and
job sizes of KAI's benchmark) and when the judge really catches an eviction that breaks KAI's
victim rules; a judge that passes everything would report any engine as valid.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import snapshot_builder as sb

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str) -> ModuleType:
    """Import a bench/ script by path: bench/ is a folder of scripts, not a package."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


be = _load("bench_evictions")
gen = be.gen
PRIORITY = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


# --------------------------------------------------------------------------------------------
# raw-document readers (independent of the module's own snapshot_facts)
# --------------------------------------------------------------------------------------------

def gpus(pod: dict[str, Any]) -> int:
    return int(pod["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu", 0))


def groups(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {pg["metadata"]["name"]: pg for pg in doc["rawObjects"]["podGroups"]}


def quotas(doc: dict[str, Any]) -> dict[str, int]:
    return {q["metadata"]["name"]: q["spec"]["resources"]["gpu"]["quota"] for q in doc["rawObjects"]["queues"]}


def running(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in doc["rawObjects"]["pods"] if p["spec"].get("nodeName")]


def pending(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in doc["rawObjects"]["pods"] if not p["spec"].get("nodeName")]


def group_of(pod: dict[str, Any], pgs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return pgs[pod["metadata"]["annotations"]["pod-group-name"]]


def held_per_node(doc: dict[str, Any]) -> Counter:
    held: Counter = Counter()
    for p in running(doc):
        held[p["spec"]["nodeName"]] += gpus(p)
    return held


def node_gpus(doc: dict[str, Any]) -> dict[str, int]:
    return {n["metadata"]["name"]: int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in doc["rawObjects"]["nodes"]}


def loads(doc: dict[str, Any]) -> None:
    """kai-cp reads the document without a warning."""
    assert sb.state_of(doc).warnings == []


# --------------------------------------------------------------------------------------------
# builders
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nodes", [10, 24])
def test_reclaim_large_jobs_is_kais_benchmark_shape(nodes: int) -> None:
    doc = be.reclaim_large_jobs(nodes)
    pgs = groups(doc)
    caps = node_gpus(doc)
    assert len(caps) == nodes and set(caps.values()) == {8}
    assert held_per_node(doc) == Counter(caps)                     # every GPU held
    run = running(doc)
    assert len(run) == nodes * 8 and {gpus(p) for p in run} == {1}
    assert {group_of(p, pgs)["spec"]["queue"] for p in run} == {"queue-0"}
    assert {group_of(p, pgs)["spec"]["priorityClassName"] for p in run} == {"train"}
    assert all(len([q for q in run if group_of(q, pgs) is group_of(p, pgs)]) == 1 for p in run[:20])  # 1-pod jobs
    assert quotas(doc) == {"queue-0": 0, "queue-1": nodes * 8}
    weights = {q["metadata"]["name"]: q["spec"]["resources"]["gpu"]["overQuotaWeight"]
               for q in doc["rawObjects"]["queues"]}
    assert weights == {"queue-0": 0, "queue-1": 0}
    pend = pending(doc)
    assert len(pend) == nodes // 2 and {gpus(p) for p in pend} == {8}
    big = pgs["very-large-job"]
    assert {group_of(p, pgs)["metadata"]["name"] for p in pend} == {"very-large-job"}
    assert big["spec"]["queue"] == "queue-1" and big["spec"]["minMember"] == nodes // 2
    loads(doc)


def test_reclaim_large_job_share() -> None:
    assert len(pending(be.reclaim_large_jobs(50, 0.1))) == 5


def test_full_cycle_shape() -> None:
    doc = be.full_cycle(10, 80, 80, seed=1)
    pgs = groups(doc)
    caps = node_gpus(doc)
    assert sum(caps.values()) == 80 and held_per_node(doc) == Counter(caps)   # every GPU held
    assert quotas(doc) == {"team-a": 20, "team-b": 20, "team-c": 20, "team-d": 20}
    run, pend = running(doc), pending(doc)
    assert len(run) == 80 and len(pend) == 80 and {gpus(p) for p in run + pend} == {1}
    assert all(group_of(p, pgs)["spec"]["minMember"] == 1 for p in run + pend)
    assert Counter(group_of(p, pgs)["spec"]["queue"] for p in run) == {"team-a": 40, "team-b": 40}
    pend_q = Counter(group_of(p, pgs)["spec"]["queue"] for p in pend)
    assert pend_q["team-c"] + pend_q["team-d"] == 70 and pend_q["team-a"] + pend_q["team-b"] == 10
    run_prio = {PRIORITY[group_of(p, pgs)["spec"]["priorityClassName"]] for p in run}
    assert min(run_prio) < 100 <= max(run_prio)                    # preemptible and non-preemptible victims
    own = [group_of(p, pgs) for p in pend if group_of(p, pgs)["spec"]["queue"] in ("team-a", "team-b")]
    assert all(PRIORITY[g["spec"]["priorityClassName"]] > 50 for g in own)   # can preempt the train jobs
    loads(doc)


def test_full_cycle_refuses_more_running_jobs_than_gpus() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        be.full_cycle(2, 17, 1)


def test_contention_option_moves_jobs_only() -> None:
    plain = gen.generate_cluster(120, 600, seed=3, utilization=0.95)
    cont = gen.generate_cluster(120, 600, seed=3, utilization=0.95, contention=True)
    for key in ("nodes", "queues", "priorityClasses", "topologies"):
        assert json.dumps(plain["rawObjects"][key]) == json.dumps(cont["rawObjects"][key])
    where = lambda d: sorted((p["spec"].get("nodeName") or "", gpus(p)) for p in d["rawObjects"]["pods"])  # noqa: E731
    assert where(plain) == where(cont)                             # same pods on the same nodes
    assert plain != cont
    loads(cont)


def queue_gpus(doc: dict[str, Any]) -> tuple[Counter, Counter, dict[str, int]]:
    """GPUs held and GPUs wanted (pending) per leaf queue, and the leaf quotas."""
    pgs = groups(doc)
    held: Counter = Counter()
    want: Counter = Counter()
    for p in doc["rawObjects"]["pods"]:
        (held if p["spec"].get("nodeName") else want)[group_of(p, pgs)["spec"]["queue"]] += gpus(p)
    leaves = {q["metadata"]["name"] for q in doc["rawObjects"]["queues"] if q["spec"].get("parentQueue")}
    return held, want, {q: v for q, v in quotas(doc).items() if q in leaves}


@pytest.mark.parametrize("seed", [3, 4])
def test_contention_makes_queues_over_and_under_fair_share(seed: int) -> None:
    def over_and_under(doc: dict[str, Any]) -> tuple[int, int]:
        held, want, quota = queue_gpus(doc)
        return (sum(max(0, held[q] - quota[q]) for q in quota),           # GPUs held beyond quota
                sum(want[q] for q in quota if held[q] < quota[q]))      # pending GPUs of queues below quota
    plain = gen.generate_cluster(200, 1000, seed=seed, utilization=0.95)
    doc = gen.generate_cluster(200, 1000, seed=seed, utilization=0.95, contention=True)
    pgs = groups(doc)
    held, want, quota = queue_gpus(doc)
    over, under_want = over_and_under(doc)
    assert over > over_and_under(plain)[0] and over >= 0.3 * sum(held.values())
    assert under_want >= 0.8 * sum(want.values())
    run_prio = Counter(PRIORITY[group_of(p, pgs)["spec"]["priorityClassName"]] < 100
                       for p in running(doc) if gpus(p))
    assert run_prio[True] > run_prio[False] > 0                    # mostly preemptible, some not
    # same-queue preemptors: pending gangs of higher priority in queues over their quota
    assert any(PRIORITY[group_of(p, pgs)["spec"]["priorityClassName"]] > 50
               and held[group_of(p, pgs)["spec"]["queue"]] > quota[group_of(p, pgs)["spec"]["queue"]]
               for p in pending(doc))
    loads(doc)


def test_snapshot_facts_priority_and_preemptibility() -> None:
    doc = sb.snapshot([sb.node("n1", gpu=8)], [sb.queue("q")],
                      [sb.podgroup("a", "q", priority_class="train"),
                       sb.podgroup("b", "q", priority_class="inference"),
                       sb.podgroup("c", "q", priority_class="inference", preemptibility="preemptible"),
                       sb.podgroup("d", "q", priority_class="train", preemptibility="non-preemptible"),
                       sb.podgroup("e", "q", 3, priority_class="nope")],
                      [sb.pod("a-0", "a", gpu=1, phase="Running", node="n1"), sb.pod("e-0", "e", gpu=2)])
    f = be.snapshot_facts(doc)
    g = {k[1]: v for k, v in f.groups.items()}
    assert [(g[n].priority, g[n].preemptible) for n in "abcde"] == [
        (50, True), (125, False), (125, True), (50, False), (50, True)]
    assert (g["a"].active, g["a"].pending, g["e"].pending, g["e"].min_member) == (1, 0, 1, 3)
    assert f.pods["default/e-0"].gpus == 2 and not f.pods["default/e-0"].active
    assert [p.name for p in f.preemptors()] == ["e"]


# --------------------------------------------------------------------------------------------
# the judge
# --------------------------------------------------------------------------------------------

def judged_cluster() -> Any:
    """qa (over its quota) runs train-a (50), build-a (100, non-preemptible), bp-a (75) and the
    2-pod gang gang-a; stale-a runs 1 pod of minMember 2; pre-a (75) waits in qa, pre-b (50) in qb."""
    pgs = [sb.podgroup("train-a", "qa", priority_class="train"),
           sb.podgroup("build-a", "qa", priority_class="build"),
           sb.podgroup("bp-a", "qa", priority_class="build-preemptible"),
           sb.podgroup("gang-a", "qa", 2, priority_class="train"),
           sb.podgroup("stale-a", "qa", 2, priority_class="train"),
           sb.podgroup("pre-a", "qa", priority_class="build-preemptible"),
           sb.podgroup("pre-b", "qb", priority_class="train")]
    pods = [sb.pod("train-a-0", "train-a", gpu=4, phase="Running", node="n1"),
            sb.pod("build-a-0", "build-a", gpu=4, phase="Running", node="n1"),
            sb.pod("bp-a-0", "bp-a", gpu=2, phase="Running", node="n2"),
            sb.pod("gang-a-0", "gang-a", gpu=2, phase="Running", node="n2"),
            sb.pod("gang-a-1", "gang-a", gpu=2, phase="Running", node="n2"),
            sb.pod("stale-a-0", "stale-a", gpu=1, phase="Running", node="n3"),
            sb.pod("pre-a-0", "pre-a", gpu=4),
            sb.pod("pre-b-0", "pre-b", gpu=4)]
    doc = sb.snapshot([sb.node(n, cpu="64", memory="512Gi", gpu=8) for n in ("n1", "n2", "n3")],
                      [sb.queue("qa", gpu=sb.resources(quota=4)), sb.queue("qb", gpu=sb.resources(quota=12))],
                      pgs, pods)
    return be.snapshot_facts(doc)


def ev(pod: str, action: str, for_group: str | None) -> dict[str, Any]:
    return {"pod": f"default/{pod}", "podGroup": pod.rsplit("-", 1)[0], "action": action,
            "forPodGroup": for_group, "node": "n1", "message": ""}


def piped(pod: str, node: str) -> dict[str, Any]:
    return {"pod": f"default/{pod}", "podGroup": pod.rsplit("-", 1)[0], "node": node, "gpuGroups": []}


def test_judge_accepts_valid_evictions() -> None:
    facts = judged_cluster()
    decisions = {"binds": [{"pod": "default/pre-b-0", "podGroup": "pre-b", "node": "n3"}],
                 "pipelined": [piped("pre-a-0", "n1"), piped("bp-a-0", "n3")],
                 "evictions": [ev("train-a-0", "preempt", "pre-a"),
                               ev("gang-a-0", "reclaim", "pre-b"), ev("gang-a-1", "reclaim", "pre-b"),
                               ev("bp-a-0", "consolidation", "pre-a"),
                               ev("stale-a-0", "stalegangeviction", None)]}
    assert be.check_decisions(facts, decisions) == []


@pytest.mark.parametrize("decisions, finding", [
    ({"evictions": [ev("build-a-0", "reclaim", "pre-b")]}, "non-preemptible job build-a"),
    ({"evictions": [ev("build-a-0", "preempt", "pre-a")]}, "non-preemptible job build-a"),
    ({"evictions": [ev("bp-a-0", "preempt", "pre-a")]}, "not lower than preemptor pre-a's 75"),
    ({"evictions": [ev("train-a-0", "preempt", "pre-b")]}, "preemptor pre-b in qb"),
    ({"evictions": [ev("train-a-0", "reclaim", "pre-a")]}, "own queue qa"),
    ({"evictions": [ev("gang-a-0", "reclaim", "pre-b")]}, "gang broken"),
    ({"evictions": [ev("train-a-0", "consolidation", "pre-a")]}, "not re-placed"),
    ({"evictions": [ev("train-a-0", "consolidation", "pre-a")], "pipelined": [piped("train-a-0", "n1")]},
     "not re-placed"),
    ({"evictions": [ev("train-a-0", "stalegangeviction", None)]}, "not stale"),
    ({"evictions": [ev("pre-b-0", "reclaim", "pre-a")]}, "not running in the snapshot"),
    ({"evictions": [ev("train-a-0", "reclaim", "nobody")]}, "unknown or ambiguous preemptor"),
    ({"evictions": [ev("train-a-0", "evict", "pre-b")]}, "unknown eviction action"),
    ({"pipelined": [piped("pre-b-0", "n1")]}, "pipelined > 8"),
    ({"evictions": [ev("train-a-0", "reclaim", "pre-b")],
      "binds": [{"pod": "default/pre-b-0", "podGroup": "pre-b", "node": "n1"}]}, "bound on 0 idle"),
])
def test_judge_catches_bad_decisions(decisions: dict[str, Any], finding: str) -> None:
    found = be.check_decisions(judged_cluster(), decisions)
    assert any(finding in f for f in found), found


def test_judge_figures() -> None:
    facts = judged_cluster()
    fig = be.EngineFigures("x")
    be.judge(facts, {"binds": [], "pipelined": [piped("pre-a-0", "n1")],
                     "evictions": [ev("train-a-0", "preempt", "pre-a")]}, fig)
    assert (fig.evicted_pods, fig.evicted_gpus, fig.by_action) == (1, 4, {"preempt": 1})
    assert (fig.preemptor_gpus_bound, fig.preemptor_gpus_pipelined) == (0, 4)
    assert (fig.jobs_decided, fig.jobs_decided_on_evicted, fig.findings) == (1, 1, [])


# --------------------------------------------------------------------------------------------
# the script end to end (tiny shapes; figures, not timings)
# --------------------------------------------------------------------------------------------

def test_quick_run_writes_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ev.json"
    assert be.main(["--quick", "--time-limit", "0.5", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    runs = {r["shape"]: r for r in data["runs"]}
    assert set(runs) == {"reclaim", "full", "contention"}
    assert runs["reclaim"]["nodes"] == 10 and runs["reclaim"]["pending_jobs"] == 1
    assert runs["full"]["running_pods"] == 80 and runs["full"]["pending_jobs"] == 80
    for r in runs.values():
        assert set(r["engines"]) == {"greedy", "cp-sat"}
        for f in r["engines"].values():
            assert f["findings"] == [] and f["deterministic"]
            assert f["wallMedian"] > 0
    # the reclaim shape has no idle GPU: whatever runs of the pending job runs on evicted capacity
    for f in runs["reclaim"]["engines"].values():
        assert f["preemptor_gpus_bound"] == 0
        assert f["jobs_decided"] == f["jobs_decided_on_evicted"]
    assert "summary" in capsys.readouterr().out
