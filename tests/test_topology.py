"""Topology-aware scheduling (spec 8) and required pod affinity (seed 002): state, KAI's greedy
behaviour, the model's joint domain choice, messages, and the validator."""

from __future__ import annotations

from typing import Any

import pytest

from clustergen import constraint, node, pod, pod_group, queue, resource, snapshot, topology_object
from kai_cp.cycle import CycleSettings, run_cycle
from kai_cp.loader import load_snapshot_dict
from kai_cp.session import Session
from kai_cp.state import build_cluster_state
from kai_cp.validate import violations

ZONE, RACK = "topo/zone", "topo/rack"


def racked(name: str, zone: str, rack: str, gpus: int = 8) -> dict:
    return node(name, gpus=gpus, labels={ZONE: zone, RACK: rack})


def running(name: str, node_name: str, gpus: int) -> list[dict]:
    return [pod(f"{name}-0", name, gpus=gpus, phase="Running", node_name=node_name, queue_name="q")]


def doc(nodes: list[dict], groups: list[dict], pods: list[dict]) -> dict[str, Any]:
    q = queue("q", gpu=resource(-1, -1), cpu=resource(-1, -1), memory=resource(-1, -1))
    return snapshot(nodes, [q], pods, groups, topologies=[topology_object("net", (ZONE, RACK))])


def gang(name: str, n: int, gpus: int, topology: dict | None = None, labels: dict | None = None,
         affinity: dict | None = None) -> tuple[dict, list[dict]]:
    g = pod_group(name, "q", min_member=n, topology=topology)
    return g, [pod(f"{name}-{i}", name, gpus=gpus, queue_name="q", labels=labels, affinity=affinity, created=-500 + i)
               for i in range(n)]


def cycle(d: dict, engine: str):
    state = build_cluster_state(load_snapshot_dict(d))
    res = run_cycle(state, CycleSettings(engine=engine, time_limit=2.0))
    assert violations(state, res.session) == []
    return state, res


def placed(res) -> dict[str, str]:
    return {b["pod"].split("/")[1]: b["node"] for b in res.binds() + res.pipelined()}


def test_domains_are_label_paths_and_unlabelled_nodes_are_invisible() -> None:
    nodes = [racked("a", "z1", "r1"), racked("b", "z2", "r1"), node("c", gpus=8, labels={ZONE: "z1"})]
    g, pods = gang("job", 1, 1, constraint(required=RACK))
    state = build_cluster_state(load_snapshot_dict(doc(nodes, [g], pods)))
    tree = state.topologies["net"]
    assert tree.names[1] == ["z1.r1", "z2.r1"]            # same rack name under two zones: two domains
    assert tree.member.tolist() == [True, True, False]    # node c lacks the rack label


@pytest.mark.parametrize("engine", ["greedy", "cp-sat"])
@pytest.mark.parametrize("bad, message", [
    (constraint(topology="nope", required=RACK), "Requested topology nope does not exist"),
    (constraint(required="topo/row"), "specified 'topo/row' as the required topology constraint level, but the "
                                      "topology tree 'net' does not contain a level with this name"),
    (constraint(), "no topology constraints were found"),
])
def test_bad_constraints_leave_the_job_pending_with_kais_message(engine: str, bad: dict, message: str) -> None:
    g, pods = gang("bad", 2, 1, bad)
    ok, ok_pods = gang("ok", 1, 1)
    _, res = cycle(doc([racked("a", "z1", "r1")], [g, ok], pods + ok_pods), engine)
    out = res.to_json()
    reasons = {u["podGroup"]: u["reasons"] for u in out["unschedulable"]}
    assert any(message in r for r in reasons["bad"]), reasons
    assert set(placed(res)) == {"ok-0"}                  # the other job is still scheduled
    assert any(w["field"] == "spec.topologyConstraint" for w in out["warnings"])


def _kai_doc_example() -> dict:
    """Spec 8.4: zone A racks with 2, 1, 1, 1 free GPUs, zone B racks with 2, 2, 2."""
    nodes, pods = [], []
    for zone, frees in (("A", (2, 1, 1, 1)), ("B", (2, 2, 2))):
        for i, free in enumerate(frees):
            name = f"{zone.lower()}{i + 1}"
            nodes.append(racked(name, zone, f"{zone}{i + 1}", gpus=2))
            if free < 2:
                pods += running(f"busy-{name}", name, 2 - free)
    groups = [pod_group(p["metadata"]["name"][:-2], "q") for p in pods]
    g, job = gang("job", 3, 1, constraint(required=ZONE, preferred=RACK))
    return doc(nodes, groups + [g], pods + job)


def test_greedy_takes_the_most_packed_zone_and_the_roomiest_rack_in_it() -> None:
    _, res = cycle(_kai_doc_example(), "greedy")
    where = placed(res)
    assert len(where) == 3 and {n[0] for n in where.values()} == {"a"}     # zone A: 5 free < zone B's 6
    assert list(where.values()).count("a1") == 2                          # rack A1 (2 free) scores highest


def test_cp_sat_keeps_the_zone_and_uses_the_fewest_racks() -> None:
    _, res = cycle(_kai_doc_example(), "cp-sat")
    where = placed(res)
    assert len(where) == 3 and len({n[0] for n in where.values()}) == 1
    assert len(set(where.values())) == 2                                  # 3 pods in 2 racks: the minimum


def _spread_zone_doc(sub_groups: bool = False) -> dict:
    """Zone A: six racks with one free GPU each (the most packed zone that fits); zone B: two
    racks with four free each. A gang of six 1-GPU pods requires a zone and prefers a rack: no
    rack holds it, so KAI takes zone A and six racks; zone B holds it in two."""
    nodes, pods = [], []
    for i in range(6):
        nodes.append(racked(f"a{i}", "A", f"A{i}", gpus=2))
        pods += running(f"busy-a{i}", f"a{i}", 1)
    nodes += [racked("b0", "B", "B0", gpus=4), racked("b1", "B", "B1", gpus=4)]
    groups = [pod_group(p["metadata"]["name"][:-2], "q") for p in pods]
    if sub_groups:      # the zone on the job, the rack on its one sub-group: two constraints
        g = pod_group("job", "q", min_member=6, topology=constraint(required=ZONE),
                      sub_groups=[{"name": "s", "minMember": 6, "topologyConstraint": constraint(preferred=RACK)}])
        job = [pod(f"job-{i}", "job", gpus=1, queue_name="q", subgroup="s", created=-500 + i) for i in range(6)]
    else:
        g, job = gang("job", 6, 1, constraint(required=ZONE, preferred=RACK))
    return doc(nodes, groups + [g], pods + job)


def test_the_hint_moves_a_spread_gang_to_the_zone_where_it_uses_the_fewest_racks() -> None:
    """The model's starting point (kai_cp/model/compaction.py) re-places a gang greedy spread in
    the required domain where it needs the fewest racks, not only inside greedy's own domain."""
    from kai_cp.actions.pipeline import run_greedy
    from kai_cp.model.candidates import build_classes, greedy_class_nodes
    from kai_cp.model.compaction import compact

    state = build_cluster_state(load_snapshot_dict(_spread_zone_doc()))
    greedy = run_greedy(state, 0.0, evictions=False)
    classes = build_classes(state, greedy)
    before = greedy_class_nodes(greedy, classes)
    after = compact(state, greedy, classes, before)
    names = [n.name for n in state.nodes]
    assert sorted(names[n] for ns in before.values() for n in ns) == [f"a{i}" for i in range(6)]   # KAI's
    assert sorted(names[n] for ns in after.values() for n in ns) == ["b0"] * 4 + ["b1"] * 2


@pytest.mark.parametrize("sub_groups", [False, True])
def test_cp_sat_places_the_gang_in_the_zone_with_the_fewest_racks(sub_groups: bool) -> None:
    _, greedy = cycle(_spread_zone_doc(sub_groups), "greedy")
    _, cpsat = cycle(_spread_zone_doc(sub_groups), "cp-sat")
    assert sorted(placed(greedy).values()) == [f"a{i}" for i in range(6)]
    assert sorted(placed(cpsat).values()) == ["b0"] * 4 + ["b1"] * 2


def test_why_pending_names_the_level_and_what_the_best_domain_offers() -> None:
    nodes = [racked(f"n{i}", "z1", f"r{i // 2}") for i in range(4)]
    pods = running("busy", "n0", 4) + running("busy2", "n2", 4)
    # non-preemptible, so that consolidation cannot make the room (see the next test)
    groups = [pod_group("busy", "q", preemptibility="non-preemptible"),
              pod_group("busy2", "q", preemptibility="non-preemptible")]
    g, job = gang("big", 4, 4, constraint(required=RACK))
    for engine in ("greedy", "cp-sat"):
        _, res = cycle(doc(nodes, groups + [g], pods + job), engine)
        assert placed(res) == {}
        reasons = {u["podGroup"]: u["reasons"] for u in res.to_json()["unschedulable"]}["big"]
        assert any("requirement topo/rack couldn't be satisfied" in r and "needs one topo/rack with 4 pods and 16 GPUs "
                   "free; the largest has 12 GPUs free" in r for r in reasons), reasons


@pytest.mark.parametrize("engine", ["greedy", "cp-sat"])
def test_consolidation_empties_a_rack_for_a_rack_constrained_gang(engine: str) -> None:
    """Each rack has 12 of 16 GPUs free, the gang needs 16 in one rack: consolidation (spec 6.3
    with 8.6) moves one 4-GPU pod next to the other, and the gang is pipelined into the emptied
    rack; nothing is really evicted."""
    nodes = [racked(f"n{i}", "z1", f"r{i // 2}") for i in range(4)]
    pods = running("busy", "n0", 4) + running("busy2", "n2", 4)
    g, job = gang("big", 4, 4, constraint(required=RACK))
    _, res = cycle(doc(nodes, [pod_group("busy", "q"), pod_group("busy2", "q"), g], pods + job), engine)
    out = res.to_json()
    assert [e["action"] for e in out["evictions"]] == ["consolidation"]
    victim = out["evictions"][0]["pod"].split("/")[1]
    rack = {"n0": "r0", "n1": "r0", "n2": "r1", "n3": "r1"}
    freed = rack[{"busy-0": "n0", "busy2-0": "n2"}[victim]]
    where = {p["pod"].split("/")[1]: p["node"] for p in out["pipelined"]}
    assert {rack[where[f"big-{i}"]] for i in range(4)} == {freed}
    assert rack[where[victim]] != freed
    assert out["binds"] == []


def test_running_scope_grows_only_inside_its_required_domain() -> None:
    nodes = [racked("a", "z1", "r1", gpus=2), racked("b", "z1", "r2", gpus=8)]
    g = pod_group("el", "q", min_member=1, topology=constraint(required=RACK))
    pods = [pod("el-0", "el", gpus=1, phase="Running", node_name="a", queue_name="q")] + \
        [pod(f"el-{i}", "el", gpus=1, queue_name="q", created=-400 + i) for i in range(1, 4)]
    for engine in ("greedy", "cp-sat"):
        _, res = cycle(doc(nodes, [g], pods), engine)
        assert set(placed(res).values()) == {"a"}           # rack r1 only, though r2 has room


def test_a_scope_running_in_two_racks_grows_in_either() -> None:
    """Spec 8.3: new pods go to the required-level domains that already host the scope's pods. A
    gang whose running pods sit in two racks (a snapshot taken after its constraint changed) grows
    one pod at a time beyond its minimum, each time in either rack: the validators took any two
    racks among the new pods for a violation (a hypothesis cluster of tests/test_lean_model.py)."""
    nodes = [racked("a", "z1", "r1", gpus=2), racked("b", "z1", "r2", gpus=2), racked("c", "z1", "r3", gpus=8)]
    g = pod_group("el", "q", min_member=2, topology=constraint(required=RACK))
    pods = [pod("el-0", "el", gpus=1, phase="Running", node_name="a", queue_name="q"),
            pod("el-1", "el", gpus=1, phase="Running", node_name="b", queue_name="q")] + \
        [pod(f"el-{i}", "el", gpus=1, queue_name="q", created=-400 + i) for i in range(2, 4)]
    for engine in ("greedy", "cp-sat"):
        _, res = cycle(doc(nodes, [g], pods), engine)
        assert sorted(placed(res).values()) == ["a", "b"], engine     # both racks, not r3's room
    # the new pods outside the racks it runs in are still caught
    state = build_cluster_state(load_snapshot_dict(doc(nodes, [g], pods)))
    session = Session.open(state)
    session.place(next(t for t in state.jobs["el"].tasks if t.name == "el-2"), 2, False)
    assert any("at required level topo/rack" in v for v in violations(state, session))


def test_subgroups_keep_their_preferred_rack_where_kai_splits_them() -> None:
    """KAI scenario allocateTopology_test 16: KAI grows each elastic sub-group one pod at a time and
    puts each sub-group's pods in two racks; cp-sat keeps each sub-group inside one rack (its
    preferred level), placing the same pods. This is the one topology scenario kai-cp differs on."""
    nodes = [racked("node0", "z1", "rack1", gpus=2), racked("node1", "z1", "rack2", gpus=2)]
    subs = [{"name": s, "minMember": 1, "topologyConstraint": constraint(preferred=RACK)} for s in ("a", "b")]
    g = pod_group("job", "q", min_member=2, sub_groups=subs)
    pods = [pod(f"job-{i}", "job", gpus=1, queue_name="q", subgroup="ab"[i // 2], created=-500 + i) for i in range(4)]
    _, greedy = cycle(doc(nodes, [g], pods), "greedy")
    _, cpsat = cycle(doc(nodes, [g], pods), "cp-sat")
    g_where, c_where = placed(greedy), placed(cpsat)
    assert len(g_where) == len(c_where) == 4
    assert g_where["job-0"] != g_where["job-1"]                          # KAI's split
    assert c_where["job-0"] == c_where["job-1"] and c_where["job-2"] == c_where["job-3"]


def test_validator_catches_a_gang_across_racks() -> None:
    nodes = [racked("a", "z1", "r1"), racked("b", "z1", "r2")]
    g, job = gang("job", 2, 1, constraint(required=RACK))
    state = build_cluster_state(load_snapshot_dict(doc(nodes, [g], job)))
    session = Session.open(state)
    tasks = state.jobs["job"].tasks
    session.place(tasks[0], 0, False)
    session.place(tasks[1], 1, False)
    assert any("at required level topo/rack" in v for v in violations(state, session))


def _affinity(key: str) -> dict:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "w"}}, "topologyKey": key}]}}


def test_seed_002_gang_pod_affinity_is_decided_for_the_whole_gang() -> None:
    """Two 4-GPU pods that must share a zone (affinity to each other). KAI places the first pod on
    the fullest node (binpack: zone z1's node with 4 free GPUs) and then finds no room for the second
    in z1, never trying z2: the gang stays pending. kai-cp's model picks z2 for both."""
    nodes = [node("z1-a", gpus=8, labels={ZONE: "z1"}), node("z2-a", gpus=8, labels={ZONE: "z2"})]
    pods = running("busy", "z1-a", 4)
    g, job = gang("w", 2, 4, labels={"app": "w"}, affinity=_affinity(ZONE))
    d = doc(nodes, [pod_group("busy", "q"), g], pods + job)
    _, greedy = cycle(d, "greedy")
    assert placed(greedy) == {}
    reasons = {u["podGroup"]: u["reasons"] for u in greedy.to_json()["unschedulable"]}["w"]
    assert reasons
    _, cpsat = cycle(d, "cp-sat")
    assert placed(cpsat) == {"w-0": "z2-a", "w-1": "z2-a"}


def test_pod_affinity_and_anti_affinity_against_running_pods() -> None:
    nodes = [node(f"n{i}", gpus=2, labels={ZONE: "east" if i < 2 else "west"}) for i in range(3)]
    db = [pod("db-0", "db", gpus=1, phase="Running", node_name="n0", queue_name="q", labels={"app": "db"})]
    near = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    g, job = gang("web", 1, 1, affinity=near)
    for engine in ("greedy", "cp-sat"):
        _, res = cycle(doc(nodes, [pod_group("db", "q"), g], db + job), engine)
        assert placed(res) == {"web-0": "n1"}            # east (affinity) but not db's node (anti-affinity)


def test_preferred_pod_affinity_draws_pods_to_their_peers() -> None:
    nodes = [node(f"n{i}", gpus=4, labels={ZONE: "east" if i < 2 else "west"}) for i in range(4)]
    cache = [pod("cache-0", "cache", gpus=1, phase="Running", node_name="n3", queue_name="q", labels={"app": "cache"}),
             pod("filler-0", "filler", gpus=2, phase="Running", node_name="n0", queue_name="q")]
    near = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE}}]}}
    g, job = gang("web", 2, 1, affinity=near)
    d = doc(nodes, [pod_group("cache", "q"), pod_group("filler", "q"), g], cache + job)
    _, res = cycle(d, "greedy")
    assert set(placed(res).values()) == {"n0"}                 # KAI's default plugins: binpack only
    _, res = cycle(d, "cp-sat")
    assert set(placed(res).values()) <= {"n2", "n3"}           # west, where the cache runs
    d["config"] = {"actions": "allocate", "tiers": [{"plugins": [{"name": "predicates"}, {"name": "proportion"},
                                                                {"name": "podaffinity"}, {"name": "nodeplacement"}]}]}
    _, res = cycle(d, "greedy")
    assert set(placed(res).values()) <= {"n2", "n3"}           # KAI's podaffinity plugin, when configured


def test_invariant_checker_catches_topology_and_pod_affinity_violations() -> None:
    """The hypothesis checker (tests/test_invariants.py) must be able to fail on what it checks."""
    from test_invariants import Raw, peer_affinity_errors, topology_errors
    from clustergen import peer_affinity
    nodes = [racked("a", "z1", "r1"), racked("b", "z1", "r2"), racked("c", "z2", "r1")]
    g, job = gang("job", 2, 1, constraint(required=RACK))
    raw = Raw(doc(nodes, [g], job))
    assert topology_errors(raw, {"default/job-0": "a", "default/job-1": "b"})
    assert topology_errors(raw, {"default/job-0": "a", "default/job-1": "a"}) == []
    s, spread = gang("s", 2, 1, labels={"app": "s"}, affinity=peer_affinity("s", "spread"))
    t, together = gang("t", 2, 1, labels={"app": "t"}, affinity=peer_affinity("t", "together"))
    raw = Raw(doc(nodes, [s, t], spread + together))
    assert peer_affinity_errors(raw, {"default/s-0": "a", "default/s-1": "a"})
    assert peer_affinity_errors(raw, {"default/s-0": "a", "default/s-1": "b"}) == []
    assert peer_affinity_errors(raw, {"default/t-0": "a", "default/t-1": "c"})
    assert peer_affinity_errors(raw, {"default/t-0": "a", "default/t-1": "b"}) == []


def test_elastic_gang_with_own_pod_affinity_grows_in_its_zone() -> None:
    """A gang at its minimum grows one pod per attempt (spec 5.5): later pods must join the zone the
    first ones took, in both engines (greedy once chose the next pod's best node anywhere)."""
    nodes = [node("z1-a", gpus=2, labels={ZONE: "z1"}), node("z2-a", gpus=8, labels={ZONE: "z2"})]
    g = pod_group("w", "q", min_member=1)
    pods = [pod(f"w-{i}", "w", gpus=1, queue_name="q", labels={"app": "w"}, affinity=_affinity(ZONE), created=-500 + i)
            for i in range(4)]
    filler = running("busy", "z2-a", 2)
    for engine in ("greedy", "cp-sat"):
        _, res = cycle(doc(nodes, [pod_group("busy", "q"), g], filler + pods), engine)
        zones = {n.split("-")[0] for n in placed(res).values()}
        assert placed(res) and len(zones) == 1, placed(res)


def test_a_domains_fit_errors_describe_it_as_the_gang_found_it() -> None:
    """A gang's failure in a node set is summarised only when its reasons are read, after the
    cycle (fit.PendingReasons): the summary must still be of the nodes as they were when the gang
    tried them. `big` (3 x 2 GPUs, rack r1, only nodes labelled pool=x) places two pods on `a`
    and finds no room for the third: `a` is full and `b` does not match. `later` then takes all
    of `b`: read afterwards, `b` would count as short of GPUs and `a`, empty again, not at all."""
    nodes = [node(n, gpus=4, labels={ZONE: "z1", RACK: "r1", "pool": p}) for n, p in (("a", "x"), ("b", "y"))]
    g = pod_group("big", "q", min_member=3, topology=constraint(required=RACK), priority_class="inference")
    pods = [pod(f"big-{i}", "big", gpus=2, queue_name="q", node_selector={"pool": "x"}, created=-500 + i)
            for i in range(3)]
    pods.append(pod("later-0", "later", gpus=4, queue_name="q", node_selector={"pool": "y"}))
    d = doc(nodes, [g, pod_group("later", "q", priority_class="train")], pods)
    d["config"] = {"actions": "allocate"}
    for engine in ("greedy", "cp-sat"):
        _, res = cycle(d, engine)
        assert placed(res) == {"later-0": "b"}
        reasons = {u["podGroup"]: u["reasons"] for u in res.to_json()["unschedulable"]}["big"]
        found = [r for r in reasons if "Resources were found for 2 pods while 3 are required" in r]
        assert found and "1 node(s) didn't have enough resources: GPUs" in found[0], reasons
        assert "1 node(s) didn't match Pod's node affinity/selector" in found[0], reasons
