"""The lean model (kai_cp/model/scope.py): what a cycle builds when the full model cannot be
built in the time KAI's actions left.

Why: at 10,000 nodes the full build did not fit a 1 s cycle and the solver never ran. The lean
model leaves out the eviction variables (KAI's eviction actions run on its allocation after it)
and the fragmentation terms; everything else a cycle promises must still hold: the invariants of
tests/test_invariants.py and tests/test_eviction_invariants.py, never worse than greedy, and the
cycle within its time limit. Here the full build is made to look too slow by its estimates
(build.SELECT_SECONDS_PER_CLASS_NODE), which is how the cycle meets it at scale.
"""

from __future__ import annotations

import copy
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

from hypothesis import HealthCheck, Phase, event, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clustergen as cg  # noqa: E402
from clustergen import clusters, contended_clusters  # noqa: E402
from test_cycle import Cluster, cycle, fragmented_cluster, gpus_placed, placed  # noqa: E402
from test_eviction_invariants import all_errors  # noqa: E402
from test_invariants import Raw, check_decisions, placed_gpus  # noqa: E402

import kai_cp.cycle as cycle_mod  # noqa: E402
import kai_cp.model.build as build  # noqa: E402
from kai_cp.actions.pipeline import run_greedy  # noqa: E402
from kai_cp.loader import load_snapshot_dict  # noqa: E402
from kai_cp.state import build_cluster_state  # noqa: E402


@contextmanager
def full_build_too_slow() -> Iterator[None]:
    """The full model's selection estimated at 10 s per class and node: never started."""
    with mock.patch.object(build, "SELECT_SECONDS_PER_CLASS_NODE", 10.0):
        yield


def run(doc: dict[str, Any], engine: str = "cp-sat", time_limit: float = 1.0):
    """tests/test_cycle.py's cycle (violations checked) on a copy: the checks read the document after."""
    return cycle(copy.deepcopy(doc), engine, time_limit)


def test_the_lean_model_places_what_greedy_strands_and_kais_actions_run_after_it() -> None:
    """tests/test_cycle.py's fragmented cluster: KAI's allocate strands j3 and its consolidation
    then moves a running pod for it. The lean model has no variables for that move, but it moves
    j1 instead: all three jobs bound, no running pod disturbed, as the full model does. Its
    allocation is not greedy's, so it is decoded and KAI's eviction actions run on it (they
    find nothing left to do)."""
    doc = fragmented_cluster()
    with full_build_too_slow():
        res = run(doc)
    out = res.to_json()
    c = out["cycle"]
    assert c["modelScope"] == "lean" and c["engine"] == "cp-sat" and c["status"] in ("OPTIMAL", "FEASIBLE")
    assert "evictSeconds" in c and "solution" not in c
    assert placed(out)["default/j1-0"] == "n-b"
    assert gpus_placed(doc, out) == 5 and out["evictions"] == [] and out["pipelined"] == []
    assert run(doc).to_json()["cycle"]["modelScope"] == "full"      # where the full model fits


def test_kais_eviction_actions_run_on_a_lean_allocation_that_is_not_greedys() -> None:
    """The fragmented cluster with reclaim and preempt only: KAI's actions evict nothing on
    greedy's allocation (greedy's hint is allocate's), the lean model moves j1, and the eviction
    actions KAI would run after allocate run once more, on the model's allocation."""
    c = Cluster(config=cg.placement_config(actions="allocate, reclaim, preempt"))
    c.node("n-a", gpus=4).node("n-b", gpus=4).queue("q")
    c.job("busy-a", "q", gpus=2, running_on=["n-a"]).job("busy-b", "q", gpus=1, running_on=["n-b"])
    c.job("j1", "q", gpus=1).job("j2", "q", gpus=2).job("j3", "q", gpus=2)
    calls: list[dict] = []
    real = cycle_mod.run_evictions

    def recorded(state, session, now, budget=None):
        calls.append({k: p.node for k, p in session.placements.items()})
        return real(state, session, now, budget)
    with full_build_too_slow(), mock.patch.object(cycle_mod, "run_evictions", recorded):
        res = run(c.doc())
    out = res.to_json()
    assert out["cycle"]["modelScope"] == "lean" and out["cycle"]["evictionsBy"] == "greedy actions after the lean model"
    assert len(calls) == 1 and set(calls[0]) == {"default/j1-0", "default/j2-0", "default/j3-0"}
    assert placed(out)["default/j1-0"] == "n-b" and gpus_placed(c.doc(), out) == 5
    assert set(res.actions) == {"reclaim", "preempt"}


def test_kais_eviction_actions_after_a_lean_model_run_only_in_the_time_left() -> None:
    """The cluster above, with KAI's eviction actions taking 0.7 s of the 1 s cycle (they found
    nothing on greedy's allocation): the lean model's better allocation is decoded and returned
    without running them again, their first run explaining what stays pending; they used to be
    kept back from the solver, and then no time was left to decode (a 100-node bench_cycle seed
    fell back so with the model's extra jobs found)."""
    import kai_cp.actions.pipeline as pipeline
    c = Cluster(config=cg.placement_config(actions="allocate, reclaim, preempt"))
    c.node("n-a", gpus=4).node("n-b", gpus=4).queue("q")
    c.job("busy-a", "q", gpus=2, running_on=["n-a"]).job("busy-b", "q", gpus=1, running_on=["n-b"])
    c.job("j1", "q", gpus=1).job("j2", "q", gpus=2).job("j3", "q", gpus=2)
    real = pipeline.EvictionSearch.run
    calls: list[int] = []

    def slow(search, budget=None):       # KAI's eviction actions, wherever they run
        calls.append(1)
        time.sleep(0.7)
        return real(search, budget)
    with full_build_too_slow(), mock.patch.object(pipeline.EvictionSearch, "run", slow):
        res = run(c.doc())
    out = res.to_json()
    cyc = out["cycle"]
    assert cyc["modelScope"] == "lean" and cyc["status"] in ("OPTIMAL", "FEASIBLE")
    assert cyc["evictionsBy"].startswith("none: KAI's eviction actions evicted nothing") and "evictSeconds" not in cyc
    assert len(calls) == 1 and res.actions is res.greedy.actions and cyc["wallSeconds"] < 1.0
    assert placed(out)["default/j1-0"] == "n-b" and gpus_placed(c.doc(), out) == 5


def test_a_lean_solution_that_is_greedys_allocation_returns_kais_whole_cycle() -> None:
    """Where the solver's answer is greedy's own allocation, KAI's cycle is that answer's
    decoding (its eviction actions already ran on it): returned as it is, with the solver's
    status, no decoding and no second run of the actions."""
    c = Cluster().node("n1", gpus=4).node("n2", gpus=4).queue("q")
    c.job("a", "q", gpus=2).job("b", "q", gpus=4)
    greedy = run(c.doc(), "greedy").to_json()
    with full_build_too_slow():
        res = run(c.doc())
    out = res.to_json()
    assert out["cycle"]["modelScope"] == "lean" and out["cycle"]["status"] == "OPTIMAL"
    assert out["cycle"]["solution"] == "greedy's allocation" and "evictSeconds" not in out["cycle"]
    assert out["binds"] == greedy["binds"] and res.session is res.greedy.session


def models(doc: dict[str, Any]):
    """The lean and the full model of one cycle, on allocate's decisions."""
    state = build_cluster_state(load_snapshot_dict(doc))
    greedy = run_greedy(state, time.time(), evictions=False)
    return (build.build_model(state, greedy, evictions=False, lean=True),
            build.build_model(state, greedy, evictions=True))


def test_the_lean_model_leaves_out_evictions_and_fragmentation_only() -> None:
    """Built directly. Without victims (the fragmented cluster): every term of the full model
    but fragmentation's. With victims a queue may reclaim: the full model has the victim pool,
    eviction units and their cost term, the lean one none of them."""
    lean, full = models(fragmented_cluster())
    assert lean.extensions["lean"] and not full.extensions["lean"]
    lean_terms, full_terms = {t.name for t in lean.terms}, {t.name for t in full.terms}
    assert "fragmentation" in full_terms and lean_terms == full_terms - {"fragmentation"}

    c = Cluster().node("n1", gpus=4).node("n2", gpus=4).queue("q", gpu=(4, -1, 1)).queue("r", gpu=(0, -1, 1))
    c.job("run", "r", gpus=4, running_on=["n1"]).job("run2", "r", gpus=3, running_on=["n2"])
    c.job("want", "q", gpus=4)
    lean, full = models(c.doc())
    assert full.extensions["victim-pool"] is not None and full.extensions["eviction-units"]
    assert "victims" in {t.name for t in full.terms}
    assert lean.extensions["victim-pool"] is None and not lean.extensions.get("eviction-units")
    assert "victims" not in {t.name for t in lean.terms}


def test_the_lean_model_is_chosen_where_the_full_ones_rows_would_typically_not_end_in_time() -> None:
    """The start checks' least estimates decide whether a build starts at all; where a lean model
    can be built, the full one is also not started when its rows would typically take past the
    deadline (medium-s1: a full build that fit the least estimates left its solver 0.02 s and
    fell back). Where KAI's actions made evictions the model decides, the lean model is built on
    allocate's decisions."""
    c = Cluster().node("n1", gpus=4).node("n2", gpus=4).queue("q")
    c.job("a", "q", gpus=2).job("b", "q", gpus=4)
    with mock.patch.object(build, "TYPICAL_SECONDS_PER_PAIR", 1.0):        # a second per pair
        out = run(c.doc()).to_json()
    assert out["cycle"]["modelScope"] == "lean" and out["cycle"]["status"] == "OPTIMAL"
    assert run(c.doc()).to_json()["cycle"]["modelScope"] == "full"
    # a full build that would leave its solver less than USEFUL_SOLVE_SECONDS: the lean one
    with mock.patch.object(build, "TYPICAL_SECONDS_PER_PAIR", 0.0), mock.patch.object(build, "USEFUL_SOLVE_SECONDS", 10.0):
        assert run(c.doc()).to_json()["cycle"]["modelScope"] == "lean"

    # greedy reclaims: the lean model is then built on allocate's decisions (below)
    r = Cluster().node("n1", gpus=4).queue("q", gpu=(4, -1, 1)).queue("r", gpu=(0, -1, 1))
    r.job("run", "r", gpus=4, running_on=["n1"]).job("want", "q", gpus=4)
    with mock.patch.object(build, "TYPICAL_SECONDS_PER_PAIR", 1.0):
        out = run(r.doc()).to_json()
    assert out["cycle"]["modelScope"] == "lean" and "allocate's decisions" in out["cycle"]["evictionsBy"]
    assert out["cycle"]["status"] != "FALLBACK"
    assert run(r.doc()).to_json()["cycle"]["modelScope"] == "full"


def test_a_lean_model_on_allocates_decisions_where_greedys_modelled_evictions_would_be_lost() -> None:
    """Greedy reclaimed a whole-GPU pod (an eviction the full model decides itself), and the full
    model cannot be built in time: the lean model, which has no eviction variables, is built on
    allocate's decisions (kept before KAI's actions ran), not on greedy's. Its answer is
    allocate's allocation (the reclaim's preemptor fits nowhere without it), so the cycle is KAI's
    whole cycle, reclaim included, and not a fallback."""
    c = Cluster().node("n1", gpus=4).queue("q", gpu=(4, -1, 1)).queue("r", gpu=(0, -1, 1))
    c.job("run", "r", gpus=4, running_on=["n1"]).job("want", "q", gpus=4)
    greedy = run(c.doc(), "greedy").to_json()
    assert [e["action"] for e in greedy["evictions"]] == ["reclaim"], "the cluster no longer reclaims"
    with full_build_too_slow():
        res = run(c.doc())
    out = res.to_json()
    assert out["cycle"]["status"] in ("OPTIMAL", "FEASIBLE") and out["cycle"]["modelScope"] == "lean", out["cycle"]
    assert "allocate's decisions" in out["cycle"]["evictionsBy"]
    assert (out["binds"], out["pipelined"], out["evictions"]) == \
        (greedy["binds"], greedy["pipelined"], greedy["evictions"])


def test_kais_modelled_evictions_run_again_on_a_lean_allocation_built_on_allocates_decisions() -> None:
    """The fragmented cluster (reclaim and preempt only: no consolidation move) beside a node
    whose running pod KAI reclaims for another queue's job: greedy's hint holds that reclaim, so
    the lean model is built on allocate's decisions; it moves j1 (all of j1-j3 bound, which
    allocate's binpack does not), and KAI's eviction actions then run again on its allocation,
    reclaiming as they did. Never less than KAI's cycle places."""
    from kai_cp.cycle import pending_gpus_placed

    c = Cluster(config=cg.placement_config(actions="allocate, reclaim, preempt"))
    c.node("n-a", gpus=4).node("n-b", gpus=4).node("n-c", gpus=4)
    c.queue("q", gpu=(8, -1, 1)).queue("p", gpu=(4, -1, 1)).queue("r", gpu=(0, -1, 1))
    c.job("busy-a", "q", gpus=2, running_on=["n-a"]).job("busy-b", "q", gpus=1, running_on=["n-b"])
    c.job("run", "r", gpus=4, running_on=["n-c"])
    c.job("j1", "q", gpus=1).job("j2", "q", gpus=2).job("j3", "q", gpus=2).job("want", "p", gpus=4)
    doc = c.doc()
    greedy = run(doc, "greedy")
    g = greedy.to_json()
    assert [(e["pod"], e["action"]) for e in g["evictions"]] == [("default/run-0", "reclaim")], g["evictions"]
    assert gpus_placed(doc, {**g, "pipelined": []}) == 3, "KAI's binpack choice changed"
    calls: list[set] = []
    real = cycle_mod.run_evictions

    def recorded(state, session, now, budget=None):
        calls.append(set(session.placements))
        return real(state, session, now, budget)
    with full_build_too_slow(), mock.patch.object(cycle_mod, "run_evictions", recorded):
        res = run(doc)
    out = res.to_json()
    assert out["cycle"]["modelScope"] == "lean" and "allocate's decisions" in out["cycle"]["evictionsBy"], out["cycle"]
    assert "solution" not in out["cycle"] and out["cycle"]["status"] in ("OPTIMAL", "FEASIBLE")
    # KAI's actions ran once more, on the model's allocation (j1-j3, nothing reclaimed yet)
    assert calls == [{"default/j1-0", "default/j2-0", "default/j3-0"}]
    assert placed(out)["default/j1-0"] == "n-b" and gpus_placed(doc, {**out, "pipelined": []}) == 5
    assert [(e["pod"], e["action"]) for e in out["evictions"]] == [("default/run-0", "reclaim")]
    ours, kais = pending_gpus_placed(res.state, res.session), pending_gpus_placed(greedy.state, greedy.session)
    assert ours[0] >= kais[0] and ours[1] > kais[1]


def test_a_lean_solution_found_past_the_time_to_decode_leaves_greedys_allocation_feasible() -> None:
    """The lean model's solver may run past the time decoding needs (only greedy's own
    allocation is then sure to be usable, here from the start: decoding is made to need 10 s).
    A better solution found after that point is not decoded past the limit: the cycle returns
    greedy's whole cycle as the model's best within the time it had, FEASIBLE, as where the
    search ends there with nothing better; the better objective is reported beside it. Where the
    better solution came before that point (here: the outcome's flag cleared) and still cannot be
    decoded in time, the cycle falls back."""
    import kai_cp.model.solve as solve_module

    doc = fragmented_cluster()
    greedy = run(doc, "greedy").to_json()      # greedy's whole cycle: its consolidation's move included
    with full_build_too_slow(), mock.patch.object(cycle_mod, "decode_reserve", lambda ctx: 10.0):
        out = run(doc).to_json()
    c = out["cycle"]
    assert c["status"] == "FEASIBLE" and c["modelScope"] == "lean" and c["wallSeconds"] < 1.0, c
    assert c["objective"] == c["greedyObjective"] and "fallbackReason" not in c
    better = float(c["solution"].split("objective ")[1].split(")")[0])
    assert better > c["greedyObjective"] and "was found after it" in c["solution"]
    assert (out["binds"], out["pipelined"], out["evictions"]) == \
        (greedy["binds"], greedy["pipelined"], greedy["evictions"])

    real = solve_module.solve

    def in_time(*args, **kwargs):
        outcome = real(*args, **kwargs)
        outcome.late = False
        return outcome
    with full_build_too_slow(), mock.patch.object(cycle_mod, "decode_reserve", lambda ctx: 10.0), \
            mock.patch.object(solve_module, "solve", in_time):
        out = run(doc).to_json()
    c = out["cycle"]
    assert c["status"] == "FALLBACK" and c["fallbackReason"] == "no time was left to decode the model's decisions"
    assert c["modelScope"] == "lean" and c["wallSeconds"] < 1.0
    assert (out["binds"], out["pipelined"], out["evictions"]) == \
        (greedy["binds"], greedy["pipelined"], greedy["evictions"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=clusters())
def test_lean_cycles_keep_the_allocation_invariants(doc: dict[str, Any]) -> None:
    """tests/test_invariants.py's checks on lean cycles (allocation only): every placement
    valid, and never worse than greedy."""
    doc = {**doc, "config": {**(doc.get("config") or {}), "actions": "allocate"}}
    raw = Raw(doc)
    greedy = run(doc, "greedy", 0.5).to_json()
    with full_build_too_slow():
        res = run(doc, "cp-sat", 0.5)
    out = res.to_json()
    assert check_decisions(raw, out) == []
    assert placed_gpus(raw, out) >= placed_gpus(raw, greedy)
    c = out["cycle"]
    if c["engine"] == "cp-sat" and c.get("objective") is not None:
        assert c["objective"] >= c["greedyObjective"]
    event(f"scope={c.get('modelScope')} status={c['status']} {c.get('solution', '')}")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(doc=contended_clusters())
def test_lean_cycles_keep_the_eviction_invariants(doc: dict[str, Any]) -> None:
    """tests/test_eviction_invariants.py's checks on cycles whose model is lean: KAI's
    eviction actions after it keep every eviction rule."""
    with full_build_too_slow():
        res = run(doc, "cp-sat", 0.3)
    assert all_errors(doc, res, time.time()) == []
    out = res.to_json()
    event(f"scope={out['cycle'].get('modelScope')} evictions={bool(out['evictions'])}")


def test_a_better_solution_found_past_the_decoding_deadline_ends_the_search() -> None:
    """The lean model's solver may run past the time decoding needs (to prove greedy's
    allocation optimal): the first better solution found after that point ends the search at
    once, as does the point itself once one was found, so that what is left may decode it. On
    examples/showcase-cluster.zip's lean model (proven optimal when let run), with one worker
    and with two (the single-worker first pass is bounded the same way)."""
    path = str(Path(__file__).resolve().parent.parent / "examples" / "showcase-cluster.zip")
    from kai_cp.cli import _load, _state
    from kai_cp.model.solve import solve

    def lean_model():
        state = _state(_load(path, views=True))
        greedy = run_greedy(state, 0.0, evictions=False)
        return build.build_model(state, greedy, evictions=False, lean=True, pair_budget=6000)
    ctx = lean_model()
    best = solve(ctx, 5.0, 0, 1, deterministic_limit=1.0)
    assert best.status == "OPTIMAL" and best.objective > ctx.greedy_objective
    for workers in (1, 2):
        ctx = lean_model()
        first = solve(ctx, 5.0, 0, workers, deterministic_limit=1.0, improve_by=0.0, floor=ctx.greedy_objective)
        assert first.status == "FEASIBLE" and ctx.greedy_objective < first.objective < best.objective
    ctx = lean_model()                  # nothing better than the floor: the search runs to its proof
    same = solve(ctx, 5.0, 0, 1, deterministic_limit=1.0, improve_by=0.0, floor=best.objective)
    assert same.status == "OPTIMAL" and same.objective == best.objective


def test_a_pool_slower_than_its_typical_rate_turns_the_full_build_into_the_lean_one() -> None:
    """Other work beside the cycle shows in the victim pool's own time: where the full model's
    rows, at the pool's pace against its typical rate, would not end in time, the lean model is
    built once the pool is done (the pool itself left out of it); at the usual pace the full
    model is built."""
    c = Cluster().queue("q").queue("r").node("n1", gpus=4)
    c.job("run", "r", gpus=4, running_on=["n1"]).job("want", "q", gpus=2)
    real = build.build_pool
    pools: list[int] = []

    def slow_pool(*args, **kwargs):
        pools.append(1)
        time.sleep(0.2)                                        # 5x the typical rate below
        return real(*args, **kwargs)
    with mock.patch.object(build, "POOL_SECONDS_PER_JOB", 0.02), \
            mock.patch.object(build, "TYPICAL_POOL_SECONDS_PER_JOB", 0.04):
        with mock.patch.object(build, "build_pool", slow_pool):
            out = run(c.doc()).to_json()
        assert pools == [1] and out["cycle"]["modelScope"] == "lean" and out["cycle"]["status"] != "FALLBACK"
        out = run(c.doc()).to_json()
        assert out["cycle"]["modelScope"] == "full" and out["cycle"]["status"] != "FALLBACK"
