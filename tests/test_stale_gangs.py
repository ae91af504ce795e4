"""KAI's stale-gang eviction (kai-semantics.md 6.6, 2.7, 10.2).

Why: a gang that lost pods below its minimum holds GPUs without making progress; KAI users rely
on it being evicted after the grace period (default 60 s, negative: never) so it can restart
whole, and on the `kai.scheduler/stale-podgroup-timestamp` annotation that carries the time it
became stale from cycle to cycle (otherwise the grace would restart every cycle and never end).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from kai_cp.actions.stale_gangs import rfc3339, run_stale_gang_eviction
from kai_cp.cli import main
from kai_cp.cycle import CycleSettings, run_cycle
from kai_cp.loader import load_snapshot_dict
from kai_cp.session import Session
from kai_cp.simulate import simulate
from kai_cp.state import STALE_ANNOTATION, parse_rfc3339
from snapshot_builder import DEFAULT_PARAMS, node, pod, podgroup, snapshot, state_of

NOW = parse_rfc3339("2026-01-01T12:00:00Z")
SECOND = 1_000_000_000


def params(grace_seconds: float | None) -> dict:
    p = copy.deepcopy(DEFAULT_PARAMS)
    if grace_seconds is not None:
        p["globalDefaultStalenessGracePeriod"] = int(grace_seconds * SECOND)
    return p


def stale_pg(name: str = "g", min_member: int = 2, since: str | None = None, **kw) -> dict:
    pg = podgroup(name, min_member=min_member, **kw)
    if since is not None:
        pg["metadata"]["annotations"] = {STALE_ANNOTATION: since}
    return pg


def ago(seconds: float) -> str:
    return rfc3339(NOW - seconds)


def gang_doc(since: str | None, grace: float | None = 60, *, phases=("Running", "Failed"), actions=None,
             spec_extra: dict | None = None) -> dict:
    """Job g, minMember 2, one pod per phase on node n1 (Pending pods unplaced)."""
    pods = [pod(f"g-{i}", "g", gpu=1, phase=ph, node=None if ph == "Pending" else "n1") for i, ph in enumerate(phases)]
    cfg = None
    if actions is not None:
        cfg = {"actions": actions, "tiers": [{"plugins": [{"name": "proportion"}]}]}
    return snapshot([node("n1", gpu=4)], podgroups=[stale_pg(since=since, spec_extra=spec_extra)], pods=pods,
                    params=params(grace), config=cfg)


def cycle(doc: dict, engine: str = "greedy", now: float = NOW) -> dict:
    result = run_cycle(state_of(doc), CycleSettings(engine=engine, time_limit=1.0, now=now))
    return json.loads(json.dumps(result.to_json()))


def stale_entry(out: dict, job: str = "g") -> dict | None:
    return next((j for j in out["staleJobs"] if j["podGroup"] == job), None)


# -- staleness and the grace period -------------------------------------------------------------

def test_newly_stale_job_gets_the_annotation_and_keeps_its_pods():
    out = cycle(gang_doc(since=None))
    assert out["evictions"] == []
    assert out["podGroupAnnotations"] == [{"podGroup": "g", "namespace": "default", "annotation": STALE_ANNOTATION,
                                           "value": "2026-01-01T12:00:00Z"}]
    entry = stale_entry(out)
    assert entry["staleSince"] == "2026-01-01T12:00:00Z" and entry["evicted"] == []
    assert entry["event"] is None        # KAI marks a job stale only once it read the annotation back


def test_stale_within_grace_is_not_evicted_and_the_annotation_is_kept():
    out = cycle(gang_doc(since=ago(59)))
    assert out["evictions"] == []
    assert out["podGroupAnnotations"] == []          # already there, unchanged
    entry = stale_entry(out)
    assert entry["staleSince"] == ago(59)
    assert entry["event"] == "Job is stale. 1 pods are active, minMember is 2"


@pytest.mark.parametrize("engine", ["greedy", "cp-sat"])
def test_stale_beyond_grace_evicts_every_active_pod_with_kais_message(engine):
    doc = gang_doc(since=ago(60), phases=("Running", "Failed", "Pending"))   # 60 s: the grace is inclusive
    doc["rawObjects"]["podGroups"][0]["spec"]["minMember"] = 3
    out = cycle(doc, engine=engine)
    assert out["evictions"] == [{
        "pod": "default/g-0", "podGroup": "g", "action": "stalegangeviction", "forPodGroup": None, "node": "n1",
        "message": "Workload doesn't meet the minimum required number of pods (3), evicting remaining pod: default/g-0"}]
    assert stale_entry(out)["evicted"] == ["default/g-0"]
    # Evicted pods are Releasing, which KAI still counts as active in the event at session close.
    assert stale_entry(out)["event"] == "Job is stale. 1 pods are active, minMember is 3"


def test_sub_group_form_of_the_message_and_event():
    subs = [{"name": "workers", "minMember": 2}, {"name": "ps", "minMember": 1}]
    pg = stale_pg(min_member=3, since=ago(120), sub_groups=subs)
    pods = [pod(f"w-{i}", "g", gpu=1, phase="Running", node="n1", labels={"kai.scheduler/subgroup-name": "workers"})
            for i in range(2)]
    pods.append(pod("ps-0", "g", gpu=1, phase="Failed", node="n1", labels={"kai.scheduler/subgroup-name": "ps"}))
    doc = snapshot([node("n1", gpu=4)], podgroups=[pg], pods=pods, params=params(60))
    out = cycle(doc)
    assert [(e["pod"], e["message"]) for e in out["evictions"]] == [
        (f"default/w-{i}", "Workload doesn't meet the minimum required number of pods (2) in sub-group workers, "
                           f"evicting remaining pod: default/w-{i}") for i in range(2)]
    assert stale_entry(out)["event"] == ("Job is stale. 2 pods are active, minMember is 3, "
                                         "subGroup ps minMember is 1 and 0 pods are active")


def test_deadline_says_when_the_next_cycle_is_due():
    """`kai-cp run` skips cycles whose input did not change; the outcome's deadline (end of the
    earliest running grace period) makes it run one when an eviction becomes due."""
    def deadline(doc):
        return run_cycle(state_of(doc), CycleSettings(engine="greedy", now=NOW)).stale.deadline
    assert deadline(gang_doc(since=ago(50))) == NOW + 10
    assert deadline(gang_doc(since=None)) == NOW + 60
    assert deadline(gang_doc(since=ago(60))) is None              # evicted now
    assert deadline(gang_doc(since=ago(50), grace=-1)) is None    # never


def test_negative_grace_never_evicts():
    out = cycle(gang_doc(since=ago(86400 * 30), grace=-1))
    assert out["evictions"] == []
    out = cycle(gang_doc(since=None, grace=-1))
    assert out["evictions"] == [] and out["podGroupAnnotations"][0]["value"] == "2026-01-01T12:00:00Z"


def test_zero_grace_evicts_in_the_cycle_the_job_becomes_stale():
    """KAI writes schedulerParams omitempty: an absent grace period in a present
    schedulerParams is 0 (spec 9.2), which evicts at once."""
    out = cycle(gang_doc(since=None, grace=None))
    assert [e["pod"] for e in out["evictions"]] == ["default/g-0"]
    assert out["podGroupAnnotations"][0]["value"] == "2026-01-01T12:00:00Z"


def test_podgroup_grace_period_overrides_the_global_one():
    out = cycle(gang_doc(since=ago(10), grace=60, spec_extra={"stalenessGracePeriod": "5s"}))
    assert [e["pod"] for e in out["evictions"]] == ["default/g-0"]
    out = cycle(gang_doc(since=ago(10), grace=0, spec_extra={"stalenessGracePeriod": "-1s"}))
    assert out["evictions"] == []
    out = cycle(gang_doc(since=ago(10), grace=60, spec_extra={"stalenessGracePeriod": "soon"}))
    assert out["evictions"] == []
    assert any(w["field"] == "spec.stalenessGracePeriod" and "not a duration" in w["reason"] for w in out["warnings"])


def test_warnings_found_while_deciding_are_reported_once_and_leave_the_state_alone():
    """The in-cluster loop and simulate decide many cycles from one cluster state: a warning the
    stale-gang action finds (an invalid grace period here) is reported with each cycle's
    decisions, once, and not added to the state (it was, and piled up a copy per cycle; found
    by tests/test_state_cache.py's generated changes: a pod on a node outside the cycle)."""
    state = state_of(gang_doc(since=ago(10), grace=60, spec_extra={"stalenessGracePeriod": "soon"}))
    before = [w.to_json() for w in state.warnings]
    outs = [run_cycle(state, CycleSettings(engine="greedy", time_limit=1.0, now=NOW)).to_json() for _ in range(2)]
    assert [w.to_json() for w in state.warnings] == before
    for out in outs:
        assert sum(w["field"] == "spec.stalenessGracePeriod" for w in out["warnings"]) == 1


def test_a_job_that_recovers_loses_its_annotation():
    out = cycle(gang_doc(since=ago(600), phases=("Running", "Running")))
    assert out["evictions"] == [] and stale_entry(out) is None
    assert out["podGroupAnnotations"] == [{"podGroup": "g", "namespace": "default", "annotation": STALE_ANNOTATION,
                                           "value": None}]


def test_a_job_with_no_active_pod_is_not_stale():
    out = cycle(gang_doc(since=ago(600), phases=("Failed", "Pending")))
    assert out["evictions"] == [] and out["podGroupAnnotations"][0]["value"] is None


def test_a_succeeded_pod_makes_the_job_not_stale():
    out = cycle(gang_doc(since=ago(600), phases=("Running", "Succeeded")))
    assert out["evictions"] == [] and stale_entry(out) is None
    assert out["podGroupAnnotations"][0]["value"] is None


def test_pods_placed_this_cycle_count_as_active():
    """The pending pod of a stale gang is bound by allocate in the same cycle: the gang is whole
    again, nothing is evicted and the annotation goes."""
    out = cycle(gang_doc(since=ago(600), phases=("Running", "Pending")))
    assert [b["pod"] for b in out["binds"]] == ["default/g-1"]
    assert out["evictions"] == [] and out["podGroupAnnotations"][0]["value"] is None


def test_unparseable_annotation_is_a_warning_and_counts_as_unset():
    out = cycle(gang_doc(since="yesterday"))
    assert out["evictions"] == []                          # stale from now on, within the grace
    assert out["podGroupAnnotations"][0]["value"] == "2026-01-01T12:00:00Z"   # replaced
    assert any(w["object"] == "PodGroup/default/g" and w["field"] == f"metadata.annotations.{STALE_ANNOTATION}"
               for w in out["warnings"])
    out = cycle(gang_doc(since="yesterday", phases=("Running", "Running")))
    assert out["podGroupAnnotations"][0]["value"] is None  # not stale: removed


def test_rfc3339_forms_go_accepts():
    assert parse_rfc3339("2026-01-01T12:00:00Z") == NOW
    assert parse_rfc3339("2026-01-01T14:00:00.5+02:00") == NOW + 0.5
    for bad in ("2026-01-01", "2026-01-01T12:00:00", "2026-01-01 12:00:00Z", "", "12"):
        assert parse_rfc3339(bad) is None


def test_without_the_action_annotations_are_left_alone():
    out = cycle(gang_doc(since=ago(600), actions="allocate"))
    assert out["evictions"] == [] and out["podGroupAnnotations"] == [] and out["staleJobs"] == []


# -- session semantics --------------------------------------------------------------------------

def test_pods_evicted_earlier_in_the_cycle_still_count_as_active():
    """KAI counts Releasing pods as active-used (spec 16): a job that lost a pod to another
    action this cycle is not stale because of it."""
    state = state_of(gang_doc(since=None, grace=0, phases=("Running", "Running")))
    session = Session.open(state)
    victim = state.jobs["g"].podsets["default"].tasks[0]
    session.evict(victim, "reclaim", "other", "taken")
    outcome = run_stale_gang_eviction(state, session, NOW)
    assert outcome.jobs == {} and list(session.evictions) == [victim.key]


def test_a_placement_of_this_cycle_in_a_stale_gang_is_withdrawn():
    """If an earlier step placed part of a gang that stays stale, evicting means undoing the
    placement (the pod was never bound): it stays Pending and its node gets the room back."""
    doc = gang_doc(since=None, grace=0, phases=("Running", "Pending", "Pending"))
    doc["rawObjects"]["podGroups"][0]["spec"]["minMember"] = 4
    state = state_of(doc)
    session = Session.open(state)
    idle, allocated = session.idle.copy(), dict(session.allocated["q"])
    pending = [t for t in state.jobs["g"].tasks if t.status == "Pending"][0]
    session.place(pending, 0, pipelined=False)
    outcome = run_stale_gang_eviction(state, session, NOW)
    job = outcome.jobs["g"]
    assert job.withdrawn == (pending.key,) and job.evicted == ("default/g-0",)
    assert pending.key not in session.placements and set(session.evictions) == {"default/g-0"}
    freed = state.table.vector(state.jobs["g"].tasks[0])
    assert np.array_equal(session.idle, idle) and np.array_equal(session.releasing[0], freed)
    assert session.allocated["q"]["gpu"] == allocated["gpu"] - 1


# -- persistence across cycles ------------------------------------------------------------------

def test_simulate_honours_the_grace_across_cycles(tmp_path):
    """Grace 2 s, cycles 1 s apart (schedulePeriod): stale at cycle 0, still within the grace at
    cycle 1 (only because the annotation carried the time), evicted at cycle 2, annotation
    removed at cycle 3 once no pod of the gang is active."""
    doc = gang_doc(since=None, grace=2)
    doc["schedulerParams"]["schedulePeriod"] = SECOND
    loaded = load_snapshot_dict(copy.deepcopy(doc), "t.json")
    result, final = simulate(loaded, 4, CycleSettings(engine="greedy", now=NOW))
    cycles = result["cycles"]
    assert [c["podGroupAnnotations"] for c in cycles[:3]] == [[{
        "podGroup": "g", "namespace": "default", "annotation": STALE_ANNOTATION, "value": "2026-01-01T12:00:00Z"}],
        [], []]
    assert [[e["pod"] for e in c["evictions"]] for c in cycles] == [[], [], ["default/g-0"], []]
    assert cycles[3]["podGroupAnnotations"][0]["value"] is None
    pg = final["rawObjects"]["podGroups"][0]
    assert STALE_ANNOTATION not in (pg["metadata"].get("annotations") or {})
    assert {p["name"]: p["status"] for p in result["pods"]} == {"g-0": "Pending", "g-1": "Failed"}

    # Stopped after cycle 1, the snapshot carries the annotation: resuming from it keeps the time.
    loaded = load_snapshot_dict(copy.deepcopy(doc), "t.json")
    _, mid = simulate(loaded, 2, CycleSettings(engine="greedy", now=NOW))
    assert mid["rawObjects"]["podGroups"][0]["metadata"]["annotations"][STALE_ANNOTATION] == "2026-01-01T12:00:00Z"
    snap = tmp_path / "mid.json"
    snap.write_text(json.dumps(mid))
    out = tmp_path / "out.json"
    assert main(["simulate", str(snap), "--cycles", "1", "--output", str(out), "--engine", "greedy",
                 "--now", "2026-01-01T12:00:02Z"]) == 0
    assert [e["pod"] for e in json.loads(out.read_text())["cycles"][0]["evictions"]] == ["default/g-0"]


def test_cli_now_rejects_a_time_without_offset(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["solve", str(tmp_path / "x.json"), "--now", "2026-01-01T12:00:00"])
    assert e.value.code == 2 and "RFC 3339" in capsys.readouterr().err


# -- in-cluster: the status writer patches what the cycle decided ---------------------------------

class _FakeKube:
    def __init__(self):
        self.patches: list[tuple[str, dict]] = []
        self.created: list[tuple[str, dict]] = []

    def patch(self, path, body, *args, **kw):
        self.patches.append((path, body))

    def create(self, path, body, *args, **kw):
        self.created.append((path, body))


@pytest.mark.parametrize("since,phases,expected", [
    (None, ("Running", "Failed"), "2026-01-01T12:00:00Z"),      # became stale: set to the cycle's time
    ("2026-01-01T11:00:00Z", ("Running", "Running"), None),     # recovered: removed
])
def test_status_writer_patches_the_stale_annotation(since, phases, expected):
    from integration.apply import ApplyOutcome
    from integration.status import StatusWriter
    doc = gang_doc(since=since, grace=-1, phases=phases)
    result = run_cycle(state_of(doc), CycleSettings(engine="greedy", now=NOW))
    kube = _FakeKube()
    writer = StatusWriter(kube, "kai-scheduler", "default", workers=1)
    try:
        writer.record(result, result.to_json(), ApplyOutcome())
        assert writer.flush(10)
        annotations = [b["metadata"]["annotations"] for p, b in kube.patches if "metadata" in b]
        assert annotations == [{STALE_ANNOTATION: expected}]
        assert "/podgroups/g" in [p for p, b in kube.patches if "metadata" in b][0]
        # The next cycle still sees the old PodGroup (cache lag): nothing is written again.
        writer.record(result, result.to_json(), ApplyOutcome())
        assert writer.flush(10)
        assert len([b for _, b in kube.patches if "metadata" in b]) == 1
    finally:
        writer.close()


def test_status_writer_emits_the_stale_job_event_once():
    from integration.apply import ApplyOutcome
    from integration.status import StatusWriter
    result = run_cycle(state_of(gang_doc(since=ago(30), grace=-1)), CycleSettings(engine="greedy", now=NOW))
    kube = _FakeKube()
    writer = StatusWriter(kube, "kai-scheduler", "default", workers=1)
    try:
        for _ in range(2):          # written once per change, not every cycle
            writer.record(result, result.to_json(), ApplyOutcome())
            assert writer.flush(10)
        events = [b for _, b in kube.created if b.get("reason") == "StaleJob"]
        assert [(e["type"], e["involvedObject"]["kind"], e["involvedObject"]["name"], e["message"]) for e in events] \
            == [("Normal", "PodGroup", "g", "Job is stale. 1 pods are active, minMember is 2")]
    finally:
        writer.close()


# -- KAI's own stale-gang scenarios ---------------------------------------------------------------

HERE = Path(__file__).resolve().parent
SCENARIOS = sorted((HERE / "fixtures" / "kai-scenarios" / "stalegangeviction").glob("*.json"))


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_stale_scenario_fixtures_are_present():
    assert len(SCENARIOS) == 5


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_kai_stale_gang_scenario(path: Path, tmp_path: Path) -> None:
    """KAI's stalegangeviction unit tests and its integration test, judged as run_all.py does."""
    tools = HERE / "kai_scenarios_tools"
    build = _load("kai_scenarios_build_snapshot", tools / "build_snapshot.py")
    check = _load("kai_scenarios_check", tools / "check.py")
    scen = json.loads(path.read_text())
    snap, _ = build.build(scen)
    (tmp_path / "s.json").write_text(json.dumps(snap))
    rc = main(["simulate", str(tmp_path / "s.json"), "--cycles", str(scen["harness"]["cycles"]),
               "--output", str(tmp_path / "r.json")])
    assert rc == 0
    verdict = check.check(scen, json.loads((tmp_path / "r.json").read_text()), stability=False,
                          strict_gpu_groups=False, mock_check=True, raw_unit=False)
    assert verdict.ok, verdict.render(verbose=True)


# -- property: the decisions match KAI's rule, computed from the snapshot alone ----------------------

from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PHASES = ("Running", "Pending", "Bound", "Failed", "Succeeded", "Releasing")


@st.composite
def stale_clusters(draw) -> dict:
    pods, groups = [], []
    for j in range(draw(st.integers(1, 4))):
        name = f"j{j}"
        n_sets = draw(st.integers(1, 2))
        sets = ["default"] if n_sets == 1 else ["a", "b"]
        mins = {s: draw(st.integers(1, 3)) for s in sets}
        subs = None if n_sets == 1 else [{"name": s, "minMember": mins[s]} for s in sets]
        extra = {}
        if draw(st.integers(0, 4)) == 0:
            extra["stalenessGracePeriod"] = draw(st.sampled_from(["-1s", "0s", "30s", "2m", "bad"]))
        pg = stale_pg(name, min_member=sum(mins.values()), sub_groups=subs, spec_extra=extra,
                      since=draw(st.sampled_from([None, ago(5), ago(45), ago(600), "garbage"])))
        groups.append(pg)
        for s in sets:
            for i in range(draw(st.integers(0, 4))):
                phase = draw(st.sampled_from(PHASES))
                labels = {} if n_sets == 1 else {"kai.scheduler/subgroup-name": s}
                p = pod(f"{name}-{s}-{i}", name, cpu="1", gpu=draw(st.integers(0, 1)), labels=labels,
                        phase={"Bound": "Pending", "Releasing": "Running"}.get(phase, phase),
                        node=None if phase == "Pending" else draw(st.sampled_from(["n1", "n2"])),
                        deleting=phase == "Releasing")
                pods.append(p)
    grace = draw(st.sampled_from([None, -1, 0, 30, 60]))
    return snapshot([node("n1", cpu="64", gpu=8), node("n2", cpu="4", gpu=1)], podgroups=groups, pods=pods,
                    params=params(grace))


def _expected(doc: dict, out: dict) -> tuple[dict[str, set[str]], dict[str, str | None]]:
    """Per job: the pods KAI's rule evicts, and the annotation write (absent: none)."""
    placed = {p["pod"] for p in out["binds"] + out["pipelined"]}
    placed |= {w for j in out["staleJobs"] for w in j["withdrawn"]}
    raw_grace = doc["schedulerParams"].get("globalDefaultStalenessGracePeriod", 0) / SECOND
    evict: dict[str, set[str]] = {}
    writes: dict[str, str | None] = {}
    for pg in doc["rawObjects"]["podGroups"]:
        name = pg["metadata"]["name"]
        subs = pg["spec"].get("subGroups")
        mins = {s["name"]: s["minMember"] for s in subs} if subs else {"default": pg["spec"]["minMember"]}
        members = [p for p in doc["rawObjects"]["pods"] if p["metadata"]["annotations"]["pod-group-name"] == name]
        active = {s: 0 for s in mins}
        running = set()
        succeeded = False
        for p in members:
            k = f"default/{p['metadata']['name']}"
            s = p["metadata"]["labels"].get("kai.scheduler/subgroup-name", "default")
            phase, on_node = p["status"]["phase"], bool(p["spec"].get("nodeName"))
            succeeded |= phase == "Succeeded"
            up = phase == "Running" or (phase == "Pending" and on_node)
            active[s] += up or k in placed
            if up and not p["metadata"].get("deletionTimestamp") and k not in placed:
                running.add(k)
        stale = not succeeded and sum(active.values()) > 0 and any(active[s] < m for s, m in mins.items())
        ann = (pg["metadata"].get("annotations") or {}).get(STALE_ANNOTATION)
        since = parse_rfc3339(ann) if ann else None
        if not stale:
            if ann is not None:
                writes[name] = None
            continue
        if since is None:
            writes[name] = rfc3339(NOW)
        raw = pg["spec"].get("stalenessGracePeriod")
        grace = {"-1s": -1, "0s": 0, "30s": 30, "2m": 120}.get(raw, raw_grace)
        if grace >= 0 and NOW - (since if since is not None else NOW) >= grace:
            evict[name] = running
    return evict, writes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=stale_clusters())
def test_stale_gang_decisions_follow_kais_rule(doc: dict) -> None:
    out = cycle(doc)
    evict, writes = _expected(doc, out)
    got: dict[str, set[str]] = {}
    for e in out["evictions"]:
        assert e["action"] == "stalegangeviction" and e["forPodGroup"] is None
        assert e["message"].startswith("Workload doesn't meet the minimum required number of pods (")
        assert e["message"].endswith(f", evicting remaining pod: {e['pod']}")
        got.setdefault(e["podGroup"], set()).add(e["pod"])
    assert got == {j: pods for j, pods in evict.items() if pods}
    assert {w["podGroup"]: w["value"] for w in out["podGroupAnnotations"]} == writes
    assert not {w for j in out["staleJobs"] for w in j["withdrawn"]} & {b["pod"] for b in out["binds"]}
    event(f"evicted: {bool(out['evictions'])}")
    event(f"annotation set: {any(w['value'] for w in out['podGroupAnnotations'])}")
    event(f"annotation removed: {any(w['value'] is None for w in out['podGroupAnnotations'])}")
    event(f"placed: {bool(out['binds'] or out['pipelined'])}")
