"""Pydantic models of every object kind kai-cp reads from a KAI snapshot.

Attributes are snake_case, JSON is camelCase, unknown fields are kept, and
`model_dump(mode="json", by_alias=True, exclude_unset=True)` gives back the input JSON.
Note: collections that were absent in the input are not dumped even if mutated in place;
assign a new value (`pod.metadata.labels = {...}`) to make a change visible on dump.

Importing the package imports no model: each name is loaded from its module on first use
(PEP 562), so `kai-cp solve`, which reads objects as lean views and needs only the pure
helpers (quantities, durations, times, the kinds table), never imports pydantic (~0.1 s of
every start, issue 9).
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of this package that defines it
_HOME: dict[str, str] = {
    **dict.fromkeys([
        "Bool", "Int", "KubeModel", "Number", "Str", "StrMap", "Time"
    ], "base"),
    **dict.fromkeys([
        "Affinity", "ConfigMap", "Container", "ContainerPort", "LabelSelector",
        "LabelSelectorRequirement", "Node", "NodeAffinity", "NodeCondition", "NodeSelector",
        "NodeSelectorRequirement", "NodeSelectorTerm", "NodeSpec", "NodeStatus", "Pod",
        "PodAffinity", "PodAffinityTerm", "PodSchedulingGate", "PodSpec", "PodStatus",
        "PreferredSchedulingTerm", "PriorityClass", "ResourceList", "ResourceRequirements", "Taint",
        "Toleration", "WeightedPodAffinityTerm"
    ], "core"),
    **dict.fromkeys([
        "Duration", "duration_seconds"
    ], "duration"),
    **dict.fromkeys([
        "BindRequest", "BindRequestSpec", "BindRequestStatus", "PodGroup", "PodGroupSpec",
        "PodGroupStatus", "Queue", "QueueResource", "QueueResources", "QueueSpec", "QueueStatus",
        "ReceivedGPU", "SubGroup", "Topology", "TopologyConstraint", "TopologyLevel", "TopologySpec"
    ], "kai"),
    **dict.fromkeys([
        "KubeObject", "ObjectMeta", "OwnerReference"
    ], "meta"),
    **dict.fromkeys([
        "Quantity", "QuantityLike", "cpu_millis", "to_decimal", "to_fraction", "to_int_ceil",
        "validate_quantity"
    ], "quantity"),
    **dict.fromkeys([
        "RAW_OBJECT_KINDS", "RawKindInfo"
    ], "kinds"),
    **dict.fromkeys([
        "RawObjects", "Snapshot"
    ], "snapshot"),
    **dict.fromkeys([
        "KubeTime"
    ], "times"),
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))


__all__ = [
    # base types
    "KubeModel", "KubeTime", "Time", "Str", "Int", "Bool", "Number", "StrMap",
    # meta
    "KubeObject", "ObjectMeta", "OwnerReference",
    # core
    "Affinity", "ConfigMap", "Container", "ContainerPort", "LabelSelector",
    "LabelSelectorRequirement", "Node", "NodeAffinity", "NodeCondition", "NodeSelector",
    "NodeSelectorRequirement", "NodeSelectorTerm", "NodeSpec", "NodeStatus", "Pod",
    "PodAffinity", "PodAffinityTerm", "PodSchedulingGate", "PodSpec", "PodStatus",
    "PreferredSchedulingTerm", "PriorityClass", "ResourceList", "ResourceRequirements",
    "Taint", "Toleration", "WeightedPodAffinityTerm",
    # kai
    "BindRequest", "BindRequestSpec", "BindRequestStatus", "PodGroup", "PodGroupSpec",
    "PodGroupStatus", "Queue", "QueueResource", "QueueResources", "QueueSpec",
    "QueueStatus", "ReceivedGPU", "SubGroup", "Topology", "TopologyConstraint",
    "TopologyLevel", "TopologySpec",
    # quantities / durations
    "Quantity", "QuantityLike", "cpu_millis", "to_decimal", "to_fraction", "to_int_ceil",
    "validate_quantity", "Duration", "duration_seconds",
    # snapshot
    "RAW_OBJECT_KINDS", "RawKindInfo", "RawObjects", "Snapshot",
]
