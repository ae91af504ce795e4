"""Scheduler configuration read from a snapshot's ``config`` and ``schedulerParams``.

KAI writes ``schedulerParams`` with ``omitempty`` on every key, so an absent boolean in a
present ``schedulerParams`` means *false*, not the CLI default (spec 9.2). The CLI defaults
(spec 2.4) apply only when ``schedulerParams`` itself is absent or null.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping

from models.duration import duration_seconds

DEFAULT_ACTIONS: tuple[str, ...] = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
KNOWN_ACTIONS = frozenset(DEFAULT_ACTIONS)
DEFAULT_SCHEDULER_NAME = "kai-scheduler"
DEFAULT_NODE_POOL_LABEL = "kai.scheduler/node-pool"
NS_PER_SECOND = 1_000_000_000
RECLAIM_RESOLVE_METHODS = ("lca", "queue")


@dataclass(frozen=True)
class SchedulerConfig:
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    unknown_actions: tuple[str, ...] = ()
    gpu_placement: str = "binpack"          # nodeplacement plugin argument `gpu`
    cpu_placement: str = "binpack"          # nodeplacement plugin argument `cpu`
    k_value: Fraction = Fraction(1)         # proportion plugin `kValue`
    reclaimer_saturation_multiplier: Fraction = Fraction(1)
    queue_depth_per_action: Mapping[str, int] = field(default_factory=dict)
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    node_pool_label_key: str = DEFAULT_NODE_POOL_LABEL
    node_pool_label_value: str = ""
    restrict_node_scheduling: bool = False
    full_hierarchy_fairness: bool = True
    max_consolidation_preemptees: int = 16
    use_scheduling_signatures: bool = True
    allow_consolidating_reclaim: bool = True
    stale_grace_period_seconds: float = 60.0
    detailed_fit_errors: bool = False
    plugins: tuple[str, ...] = ()
    default_preempt_min_runtime: Fraction = Fraction(0)   # minruntime `defaultPreemptMinRuntime`, seconds
    default_reclaim_min_runtime: Fraction = Fraction(0)   # minruntime `defaultReclaimMinRuntime`, seconds
    reclaim_resolve_method: str = "lca"                   # minruntime `reclaimResolveMethod`: lca | queue

    @property
    def min_runtime_enabled(self) -> bool:
        """KAI applies min-runtime protection only when the minruntime plugin is configured; a
        config without tiers means KAI's built-in fallback, which lists it (spec 2.3)."""
        return "minruntime" in self.plugins or not self.plugins

    @property
    def may_allocate(self) -> bool:
        return "allocate" in self.actions

    @property
    def node_pool_name(self) -> str:
        return self.node_pool_label_value or "default"


def _parse_fraction(value: Any, default: Fraction) -> Fraction:
    try:
        return Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        return default


def _parse_min_runtime(args: Mapping[str, str], key: str, rd: "_Reader") -> Fraction:
    """A minruntime default as exact seconds; absent, invalid or negative is 0s (spec 2.4)."""
    raw = args.get(key)
    if raw is None:
        return Fraction(0)
    try:
        value = duration_seconds(raw.strip())
    except ValueError:
        rd.warn(f"config.tiers.plugins[minruntime].arguments.{key}", f"invalid duration {raw!r}; using 0s")
        return Fraction(0)
    return max(Fraction(0), value)


def _resolve_method(args: Mapping[str, str], rd: "_Reader") -> str:
    """`reclaimResolveMethod`: anything but `lca`/`queue` falls back to `lca`, as in KAI."""
    raw = args.get("reclaimResolveMethod", "")
    if raw in RECLAIM_RESOLVE_METHODS:
        return raw
    if raw:
        rd.warn("config.tiers.plugins[minruntime].arguments.reclaimResolveMethod",
                f"unknown method {raw!r} (expected lca or queue); using lca")
    return "lca"


def parse_actions(raw: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Split KAI's comma-separated action list into known and unknown names."""
    if raw is None:
        return DEFAULT_ACTIONS, ()
    if isinstance(raw, (list, tuple)):
        names = [str(a).strip() for a in raw]
    else:
        names = [a.strip() for a in str(raw).split(",")]
    names = [n for n in names if n]
    known = tuple(n for n in names if n in KNOWN_ACTIONS)
    unknown = tuple(n for n in names if n not in KNOWN_ACTIONS)
    return known, unknown


class _Reader:
    """Typed access to the config documents: a value of the wrong type is reported and replaced
    by its default, so a malformed setting never stops the cycle (interfaces.md, Errors)."""

    def __init__(self, warnings: list | None):
        self.warnings = warnings

    def warn(self, field: str, reason: str) -> None:
        if self.warnings is not None:
            from kai_cp.errors import ObjectWarning
            self.warnings.append(ObjectWarning("Config/snapshot", field, reason))

    def get(self, doc: Mapping[str, Any], key: str, kind: type | tuple, default: Any, field: str) -> Any:
        value = doc.get(key, default)
        if value is None:
            return default
        if kind is int and isinstance(value, bool) or not isinstance(value, kind):
            self.warn(field, f"expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}; using the default")
            return default
        return value


def _plugin_arguments(config: Mapping[str, Any], rd: _Reader) -> tuple[dict[str, dict[str, str]], tuple[str, ...]]:
    args: dict[str, dict[str, str]] = {}
    names: list[str] = []
    for i, tier in enumerate(rd.get(config, "tiers", list, [], "config.tiers")):
        if not isinstance(tier, Mapping):
            rd.warn(f"config.tiers[{i}]", "not an object; ignored")
            continue
        for j, plugin in enumerate(rd.get(tier, "plugins", list, [], f"config.tiers[{i}].plugins")):
            if not isinstance(plugin, Mapping) or not isinstance(plugin.get("name"), str):
                rd.warn(f"config.tiers[{i}].plugins[{j}]", "not an object with a name; ignored")
                continue
            name = plugin["name"]
            names.append(name)
            raw_args = rd.get(plugin, "arguments", Mapping, {}, f"config.tiers[{i}].plugins[{j}].arguments")
            args[name] = {str(k): str(v) for k, v in raw_args.items()}
    return args, tuple(names)


def parse_config(config: Mapping[str, Any] | None, params: Mapping[str, Any] | None,
                 warnings: list | None = None) -> SchedulerConfig:
    """Settings of one cycle; wrongly typed values are replaced by defaults and reported in `warnings`."""
    rd = _Reader(warnings)
    config = config if isinstance(config, Mapping) else {}
    actions, unknown = parse_actions(rd.get(config, "actions", (str, list), None, "config.actions"))
    plugin_args, plugins = _plugin_arguments(config, rd)
    placement = plugin_args.get("nodeplacement", {})
    proportion = plugin_args.get("proportion", {})
    k_value = max(Fraction(0), _parse_fraction(proportion.get("kValue", "1"), Fraction(1)))
    multiplier = _parse_fraction(proportion.get("relcaimerSaturationMultiplier", "1"), Fraction(1))
    minruntime = plugin_args.get("minruntime", {})
    depth = rd.get(config, "queueDepthPerAction", Mapping, {}, "config.queueDepthPerAction")
    kwargs: dict[str, Any] = dict(
        actions=actions,
        unknown_actions=unknown,
        gpu_placement="spread" if placement.get("gpu", "binpack").strip().lower() == "spread" else "binpack",
        cpu_placement="spread" if placement.get("cpu", "binpack").strip().lower() == "spread" else "binpack",
        k_value=k_value,
        reclaimer_saturation_multiplier=max(Fraction(1), multiplier),
        queue_depth_per_action={str(k): v for k, v in depth.items() if isinstance(v, int) and not isinstance(v, bool)},
        plugins=plugins,
        default_preempt_min_runtime=_parse_min_runtime(minruntime, "defaultPreemptMinRuntime", rd),
        default_reclaim_min_runtime=_parse_min_runtime(minruntime, "defaultReclaimMinRuntime", rd),
        reclaim_resolve_method=_resolve_method(minruntime, rd),
    )
    if isinstance(params, Mapping):
        # omitempty semantics: what is absent is false / zero (spec 9.2).
        partition = rd.get(params, "partitionParams", Mapping, {}, "schedulerParams.partitionParams")
        grace_ns = rd.get(params, "globalDefaultStalenessGracePeriod", (int, float), 0,
                          "schedulerParams.globalDefaultStalenessGracePeriod")

        def flag(key: str) -> bool:
            return rd.get(params, key, bool, False, f"schedulerParams.{key}")

        kwargs.update(
            scheduler_name=rd.get(params, "schedulerName", str, "", "schedulerParams.schedulerName") or DEFAULT_SCHEDULER_NAME,
            node_pool_label_key=rd.get(partition, "NodePoolLabelKey", str, "", "schedulerParams.partitionParams.NodePoolLabelKey"),
            node_pool_label_value=rd.get(partition, "NodePoolLabelValue", str, "", "schedulerParams.partitionParams.NodePoolLabelValue"),
            restrict_node_scheduling=flag("restrictSchedulingNodes"),
            full_hierarchy_fairness=flag("fullHierarchyFairness"),
            max_consolidation_preemptees=rd.get(params, "maxNumberConsolidationPreemptees", int, 0,
                                                "schedulerParams.maxNumberConsolidationPreemptees"),
            use_scheduling_signatures=flag("useSchedulingSignatures"),
            allow_consolidating_reclaim=flag("allowConsolidatingReclaim"),
            stale_grace_period_seconds=grace_ns / NS_PER_SECOND,
            detailed_fit_errors=flag("detailedFitErrors"),
        )
    return SchedulerConfig(**kwargs)
