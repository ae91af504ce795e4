"""Pydantic models of every object kind kai-cp reads from a KAI snapshot.

Attributes are snake_case, JSON is camelCase, unknown fields are kept, and
`model_dump(mode="json", by_alias=True, exclude_unset=True)` gives back the input JSON.
Note: collections that were absent in the input are not dumped even if mutated in place;
assign a new value (`pod.metadata.labels = {...}`) to make a change visible on dump.
"""

from .base import Bool, Int, KubeModel, KubeTime, Number, Str, StrMap, Time
from .core import (
    Affinity,
    ConfigMap,
    Container,
    ContainerPort,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    NodeAffinity,
    NodeCondition,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeSpec,
    NodeStatus,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodSchedulingGate,
    PodSpec,
    PodStatus,
    PreferredSchedulingTerm,
    PriorityClass,
    ResourceList,
    ResourceRequirements,
    Taint,
    Toleration,
    WeightedPodAffinityTerm,
)
from .duration import Duration, duration_seconds
from .kai import (
    BindRequest,
    BindRequestSpec,
    BindRequestStatus,
    PodGroup,
    PodGroupSpec,
    PodGroupStatus,
    Queue,
    QueueResource,
    QueueResources,
    QueueSpec,
    QueueStatus,
    ReceivedGPU,
    SubGroup,
    Topology,
    TopologyConstraint,
    TopologyLevel,
    TopologySpec,
)
from .meta import KubeObject, ObjectMeta, OwnerReference
from .quantity import (
    Quantity,
    QuantityLike,
    cpu_millis,
    to_decimal,
    to_fraction,
    to_int_ceil,
    validate_quantity,
)
from .snapshot import RAW_OBJECT_KINDS, RawKindInfo, RawObjects, Snapshot

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
