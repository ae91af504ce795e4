"""Scheduler configuration read from a snapshot's ``config`` and ``schedulerParams``.

KAI writes ``schedulerParams`` with ``omitempty`` on every key, so an absent boolean in a
present ``schedulerParams`` means *false*, not the CLI default (spec 9.2). The CLI defaults
(spec 2.4) apply only when ``schedulerParams`` itself is absent or null.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping

DEFAULT_ACTIONS: tuple[str, ...] = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
KNOWN_ACTIONS = frozenset(DEFAULT_ACTIONS)
DEFAULT_SCHEDULER_NAME = "kai-scheduler"
DEFAULT_NODE_POOL_LABEL = "kai.scheduler/node-pool"
NS_PER_SECOND = 1_000_000_000


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


def _plugin_arguments(config: Mapping[str, Any]) -> tuple[dict[str, dict[str, str]], tuple[str, ...]]:
    args: dict[str, dict[str, str]] = {}
    names: list[str] = []
    for tier in config.get("tiers") or []:
        if not isinstance(tier, Mapping):
            continue
        for plugin in tier.get("plugins") or []:
            if not isinstance(plugin, Mapping) or not plugin.get("name"):
                continue
            name = str(plugin["name"])
            names.append(name)
            raw_args = plugin.get("arguments") or {}
            if isinstance(raw_args, Mapping):
                args[name] = {str(k): str(v) for k, v in raw_args.items()}
    return args, tuple(names)


def parse_config(config: Mapping[str, Any] | None, params: Mapping[str, Any] | None) -> SchedulerConfig:
    config = config or {}
    actions, unknown = parse_actions(config.get("actions"))
    plugin_args, plugins = _plugin_arguments(config)
    placement = plugin_args.get("nodeplacement", {})
    proportion = plugin_args.get("proportion", {})
    k_value = max(Fraction(0), _parse_fraction(proportion.get("kValue", "1"), Fraction(1)))
    multiplier = _parse_fraction(proportion.get("relcaimerSaturationMultiplier", "1"), Fraction(1))
    depth = config.get("queueDepthPerAction") or {}
    kwargs: dict[str, Any] = dict(
        actions=actions,
        unknown_actions=unknown,
        gpu_placement="spread" if placement.get("gpu", "binpack").strip().lower() == "spread" else "binpack",
        cpu_placement="spread" if placement.get("cpu", "binpack").strip().lower() == "spread" else "binpack",
        k_value=k_value,
        reclaimer_saturation_multiplier=max(Fraction(1), multiplier),
        queue_depth_per_action={str(k): int(v) for k, v in depth.items() if isinstance(v, int)}
        if isinstance(depth, Mapping) else {},
        plugins=plugins,
    )
    if params is not None:
        # omitempty semantics: what is absent is false / zero (spec 9.2).
        partition = params.get("partitionParams") or {}
        grace_ns = params.get("globalDefaultStalenessGracePeriod", 0)
        kwargs.update(
            scheduler_name=str(params.get("schedulerName") or DEFAULT_SCHEDULER_NAME),
            node_pool_label_key=str(partition.get("NodePoolLabelKey", "") or ""),
            node_pool_label_value=str(partition.get("NodePoolLabelValue", "") or ""),
            restrict_node_scheduling=bool(params.get("restrictSchedulingNodes", False)),
            full_hierarchy_fairness=bool(params.get("fullHierarchyFairness", False)),
            max_consolidation_preemptees=int(params.get("maxNumberConsolidationPreemptees", 0) or 0),
            use_scheduling_signatures=bool(params.get("useSchedulingSignatures", False)),
            allow_consolidating_reclaim=bool(params.get("allowConsolidatingReclaim", False)),
            stale_grace_period_seconds=(grace_ns or 0) / NS_PER_SECOND if isinstance(grace_ns, (int, float)) else 0.0,
            detailed_fit_errors=bool(params.get("detailedFitErrors", False)),
        )
    return SchedulerConfig(**kwargs)
