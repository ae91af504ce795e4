"""Scheduler configuration from a snapshot's `config` and `schedulerParams` (spec 2.4, 9.2)."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest

from kai_cp.config import DEFAULT_ACTIONS, parse_config
from snapshot_builder import (DEFAULT_CONFIG, DEFAULT_PARAMS, node, pod, podgroup, snapshot, solve_doc, state_of)

CLI_DEFAULTS = dict(scheduler_name="kai-scheduler", node_pool_label_key="kai.scheduler/node-pool",
                    node_pool_label_value="", restrict_node_scheduling=False, full_hierarchy_fairness=True,
                    max_consolidation_preemptees=16, use_scheduling_signatures=True,
                    allow_consolidating_reclaim=True, stale_grace_period_seconds=60.0, detailed_fit_errors=False)


def _fields(cfg, names):
    return {n: getattr(cfg, n) for n in names}


# ------------------------------------------------------------------ schedulerParams


def test_absent_scheduler_params_give_cli_defaults():
    cfg = parse_config(None, None)
    assert _fields(cfg, CLI_DEFAULTS) == CLI_DEFAULTS


def test_null_config_gives_default_actions_and_placement():
    doc = snapshot([node("n1")], None, [podgroup("j")], [pod("a", "j")])
    doc["config"] = None
    cfg = state_of(doc).config
    assert cfg.actions == DEFAULT_ACTIONS
    assert (cfg.gpu_placement, cfg.cpu_placement) == ("binpack", "binpack")
    assert cfg.k_value == 1
    del doc["config"]
    assert state_of(doc).config.actions == DEFAULT_ACTIONS
    assert [b["pod"] for b in solve_doc(doc)["binds"]] == ["default/a"]


def test_absent_or_null_scheduler_params_in_a_snapshot_give_cli_defaults():
    doc = snapshot(params=None)
    assert "schedulerParams" not in doc
    assert _fields(state_of(doc).config, CLI_DEFAULTS) == CLI_DEFAULTS
    doc["schedulerParams"] = None
    assert _fields(state_of(doc).config, CLI_DEFAULTS) == CLI_DEFAULTS


def test_present_params_absent_booleans_mean_false_omitempty():
    """A present schedulerParams without a key means false / zero, not the CLI default (9.2)."""
    cfg = parse_config({}, {"schedulerName": "kai-scheduler"})
    assert cfg.full_hierarchy_fairness is False
    assert cfg.use_scheduling_signatures is False
    assert cfg.allow_consolidating_reclaim is False
    assert cfg.max_consolidation_preemptees == 0
    assert cfg.restrict_node_scheduling is False
    assert cfg.detailed_fit_errors is False
    assert cfg.stale_grace_period_seconds == 0


def test_empty_params_object_is_present():
    cfg = parse_config({}, {})
    assert cfg.full_hierarchy_fairness is False
    assert cfg.scheduler_name == "kai-scheduler"     # an empty name is no name: KAI's flag default


def test_present_params_values_are_read():
    params = dict(DEFAULT_PARAMS, maxNumberConsolidationPreemptees=-1, restrictSchedulingNodes=True,
                  globalDefaultStalenessGracePeriod=30_000_000_000, detailedFitErrors=True,
                  schedulerName="other", partitionParams={"NodePoolLabelKey": "pool", "NodePoolLabelValue": "a"})
    cfg = parse_config({}, params)
    assert cfg.full_hierarchy_fairness is True
    assert cfg.use_scheduling_signatures is True
    assert cfg.allow_consolidating_reclaim is True
    assert cfg.max_consolidation_preemptees == -1
    assert cfg.restrict_node_scheduling is True
    assert cfg.stale_grace_period_seconds == 30.0
    assert cfg.detailed_fit_errors is True
    assert cfg.scheduler_name == "other"
    assert (cfg.node_pool_label_key, cfg.node_pool_label_value) == ("pool", "a")


def test_full_hierarchy_fairness_absent_from_present_params_flattens_queues():
    """End to end: schedulerParams present without fullHierarchyFairness => project-level fairness."""
    from snapshot_builder import queue
    params = dict(DEFAULT_PARAMS)
    del params["fullHierarchyFairness"]
    doc = snapshot([node("n1")], [queue("root"), queue("leaf", "root")], [podgroup("j", "leaf")], [pod("a", "j")],
                   params=params)
    st = state_of(doc)
    assert st.config.full_hierarchy_fairness is False
    assert set(st.queues) == {"default", "leaf"}
    assert st.queues["leaf"].parent == "default"
    # and with schedulerParams absent (CLI default true) the tree is kept
    doc2 = copy.deepcopy(doc)
    del doc2["schedulerParams"]
    st2 = state_of(doc2)
    assert set(st2.queues) == {"root", "leaf"}
    assert st2.queues["leaf"].parent == "root"


# ------------------------------------------------------------------ actions


def test_default_actions_when_config_absent():
    assert parse_config(None, None).actions == DEFAULT_ACTIONS
    assert parse_config({}, None).actions == DEFAULT_ACTIONS


def test_actions_are_split_on_commas_and_trimmed_in_order():
    cfg = parse_config({"actions": " reclaim ,allocate,  preempt"}, None)
    assert cfg.actions == ("reclaim", "allocate", "preempt")
    assert cfg.unknown_actions == ()


def test_unknown_action_is_reported_and_ignored():
    cfg = parse_config({"actions": "allocate, backfill, reclaim"}, None)
    assert cfg.actions == ("allocate", "reclaim")
    assert cfg.unknown_actions == ("backfill",)


def test_unknown_action_appears_in_cycle_warnings():
    conf = dict(DEFAULT_CONFIG, actions="allocate, frobnicate")
    doc = snapshot([node("n1")], None, [podgroup("j")], [pod("a", "j")], config=conf)
    out = solve_doc(doc)
    hits = [w for w in out["warnings"] if "frobnicate" in w["reason"]]
    assert len(hits) == 1
    assert hits[0]["field"] == "config.actions"
    assert [b["pod"] for b in out["binds"]] == ["default/a"]   # allocate still runs


def test_without_allocate_nothing_is_bound_and_jobs_say_why():
    conf = dict(DEFAULT_CONFIG, actions="reclaim, preempt")
    doc = snapshot([node("n1")], None, [podgroup("j")], [pod("a", "j")], config=conf)
    out = solve_doc(doc)
    assert out["binds"] == [] and out["pipelined"] == []
    assert [u["podGroup"] for u in out["unschedulable"]] == ["j"]
    assert any("allocate" in r for r in out["unschedulable"][0]["reasons"])


# ------------------------------------------------------------------ plugin arguments


def _conf_with(plugin: str, arguments: dict) -> dict:
    return {"actions": "allocate", "tiers": [{"plugins": [{"name": "predicates"},
                                                          {"name": plugin, "arguments": arguments}]}]}


def test_nodeplacement_defaults_to_binpack():
    cfg = parse_config({"actions": "allocate"}, None)
    assert (cfg.gpu_placement, cfg.cpu_placement) == ("binpack", "binpack")


def test_nodeplacement_spread_per_resource():
    cfg = parse_config(_conf_with("nodeplacement", {"gpu": "spread", "cpu": "binpack"}), None)
    assert (cfg.gpu_placement, cfg.cpu_placement) == ("spread", "binpack")
    cfg = parse_config(_conf_with("nodeplacement", {"cpu": "spread"}), None)
    assert (cfg.gpu_placement, cfg.cpu_placement) == ("binpack", "spread")


@pytest.mark.parametrize("strategy,expected", [("binpack", "n-busy"), ("spread", "n-empty")])
def test_nodeplacement_cpu_strategy_decides_the_node(strategy, expected):
    """binpack prefers the fuller node, spread the emptier one (spec 5.4)."""
    conf = _conf_with("nodeplacement", {"cpu": strategy, "gpu": "binpack"})
    doc = snapshot([node("n-busy", cpu="8"), node("n-empty", cpu="8")], None,
                   [podgroup("run"), podgroup("new")],
                   [pod("r", "run", cpu="6", phase="Running", node="n-busy"), pod("a", "new", cpu="1")],
                   config=conf)
    out = solve_doc(doc)
    assert [(b["pod"], b["node"]) for b in out["binds"]] == [("default/a", expected)]


@pytest.mark.parametrize("raw,expected", [
    (None, Fraction(1)), ("1", Fraction(1)), ("0.5", Fraction(1, 2)), ("2", Fraction(2)),
    ("-3", Fraction(0)), ("0", Fraction(0)), ("nonsense", Fraction(1)),
])
def test_kvalue(raw, expected):
    conf = _conf_with("proportion", {} if raw is None else {"kValue": raw})
    assert parse_config(conf, None).k_value == expected


@pytest.mark.parametrize("args,expected", [
    ({}, Fraction(1)), ({"relcaimerSaturationMultiplier": "2.5"}, Fraction(5, 2)),
    ({"relcaimerSaturationMultiplier": "0.5"}, Fraction(1)),       # < 1 resets to 1
    ({"reclaimerUtilizationMultiplier": "3"}, Fraction(1)),        # only the misspelt key is read
])
def test_reclaimer_saturation_multiplier(args, expected):
    assert parse_config(_conf_with("proportion", args), None).reclaimer_saturation_multiplier == expected


def test_queue_depth_per_action():
    cfg = parse_config({"actions": "allocate", "queueDepthPerAction": {"allocate": 7}}, None)
    assert cfg.queue_depth_per_action == {"allocate": 7}


def test_plugins_are_listed_in_order():
    cfg = parse_config(DEFAULT_CONFIG, None)
    assert cfg.plugins[:2] == ("predicates", "proportion")
    assert "nodeplacement" in cfg.plugins
