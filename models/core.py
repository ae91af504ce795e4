"""Core Kubernetes kinds the scheduler reads: Pod, Node, PriorityClass, ConfigMap.

Typed fields are exactly those KAI reads (kai-semantics.md 1.4, 1.5, 1.8); the rest of
each object is kept verbatim as extra fields. Fields the scheduler does not read are left
untyped on purpose, so a malformed value there never drops an otherwise usable object.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Optional

from pydantic import Field

from .base import AnyDict, Bool, Int, KubeModel, NullDict, NullList, NullModel, Str, StrMap, new_dict, new_list
from .meta import KubeObject
from .quantity import Quantity

__all__ = [
    "ResourceList",
    "ResourceRequirements",
    "ContainerPort",
    "Container",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeSelector",
    "PreferredSchedulingTerm",
    "NodeAffinity",
    "LabelSelectorRequirement",
    "LabelSelector",
    "PodAffinityTerm",
    "WeightedPodAffinityTerm",
    "PodAffinity",
    "Affinity",
    "Toleration",
    "PodSchedulingGate",
    "PodSpec",
    "PodStatus",
    "Pod",
    "Taint",
    "NodeSpec",
    "NodeCondition",
    "NodeStatus",
    "Node",
    "PriorityClass",
    "ConfigMap",
]

ResourceList = Annotated[dict[str, Quantity], NullDict]
"""corev1.ResourceList: resource name -> quantity string."""


class ResourceRequirements(KubeModel):
    """Container requests/limits. KAI reads requests only (limits are copied by the API
    server into requests when requests are missing)."""

    requests: ResourceList = Field(default_factory=new_dict)
    limits: ResourceList = Field(default_factory=new_dict)


class ContainerPort(KubeModel):
    """Host ports take part in the NodePorts predicate."""

    container_port: Optional[Int] = None
    host_port: Optional[Int] = None
    host_ip: Optional[Str] = Field(default=None, alias="hostIP")
    protocol: Optional[Str] = None
    name: Optional[Str] = None


class Container(KubeModel):
    name: Optional[Str] = None
    resources: Annotated[ResourceRequirements, NullModel] = Field(
        default_factory=ResourceRequirements
    )
    ports: Annotated[list[ContainerPort], NullList] = Field(default_factory=new_list)
    restart_policy: Optional[Str] = None     # "Always" on an init container: a sidecar (Kubernetes 1.29+)


class NodeSelectorRequirement(KubeModel):
    key: Str
    operator: Str
    values: Annotated[list[Str], NullList] = Field(default_factory=new_list)


class NodeSelectorTerm(KubeModel):
    match_expressions: Annotated[list[NodeSelectorRequirement], NullList] = Field(
        default_factory=new_list
    )
    match_fields: Annotated[list[NodeSelectorRequirement], NullList] = Field(
        default_factory=new_list
    )


class NodeSelector(KubeModel):
    node_selector_terms: Annotated[list[NodeSelectorTerm], NullList] = Field(
        default_factory=new_list
    )


class PreferredSchedulingTerm(KubeModel):
    weight: Int
    preference: NodeSelectorTerm


class NodeAffinity(KubeModel):
    required_during_scheduling_ignored_during_execution: Optional[NodeSelector] = None
    preferred_during_scheduling_ignored_during_execution: Annotated[
        list[PreferredSchedulingTerm], NullList
    ] = Field(default_factory=new_list)


class LabelSelectorRequirement(KubeModel):
    key: Str
    operator: Str
    values: Annotated[list[Str], NullList] = Field(default_factory=new_list)


class LabelSelector(KubeModel):
    match_labels: StrMap = Field(default_factory=new_dict)
    match_expressions: Annotated[list[LabelSelectorRequirement], NullList] = Field(
        default_factory=new_list
    )


class PodAffinityTerm(KubeModel):
    label_selector: Optional[LabelSelector] = None
    namespaces: Annotated[list[Str], NullList] = Field(default_factory=new_list)
    topology_key: Str = ""
    namespace_selector: Optional[LabelSelector] = None
    match_label_keys: Annotated[list[Str], NullList] = Field(default_factory=new_list)
    mismatch_label_keys: Annotated[list[Str], NullList] = Field(default_factory=new_list)


class WeightedPodAffinityTerm(KubeModel):
    weight: Int
    pod_affinity_term: PodAffinityTerm


class PodAffinity(KubeModel):
    """Used for both podAffinity and podAntiAffinity."""

    required_during_scheduling_ignored_during_execution: Annotated[
        list[PodAffinityTerm], NullList
    ] = Field(default_factory=new_list)
    preferred_during_scheduling_ignored_during_execution: Annotated[
        list[WeightedPodAffinityTerm], NullList
    ] = Field(default_factory=new_list)


class Affinity(KubeModel):
    node_affinity: Optional[NodeAffinity] = None
    pod_affinity: Optional[PodAffinity] = None
    pod_anti_affinity: Optional[PodAffinity] = None


class Toleration(KubeModel):
    key: Optional[Str] = None
    operator: Optional[Str] = None
    value: Optional[Str] = None
    effect: Optional[Str] = None
    toleration_seconds: Optional[Int] = None


class PodSchedulingGate(KubeModel):
    name: Str


class PodSpec(KubeModel):
    scheduler_name: Optional[Str] = None
    node_name: Optional[Str] = None
    containers: Annotated[list[Container], NullList] = Field(default_factory=new_list)
    init_containers: Annotated[list[Container], NullList] = Field(default_factory=new_list)
    overhead: Optional[ResourceList] = None
    node_selector: StrMap = Field(default_factory=new_dict)
    affinity: Optional[Affinity] = None
    tolerations: Annotated[list[Toleration], NullList] = Field(default_factory=new_list)
    scheduling_gates: Annotated[list[PodSchedulingGate], NullList] = Field(default_factory=new_list)
    priority_class_name: Optional[Str] = None
    priority: Optional[Int] = None
    preemption_policy: Optional[Str] = None
    # Read by predicates (volumes/DRA/spread) but not modelled in detail yet.
    volumes: Annotated[list[AnyDict], NullList] = Field(default_factory=new_list)
    resource_claims: Annotated[list[AnyDict], NullList] = Field(default_factory=new_list)
    topology_spread_constraints: Annotated[list[AnyDict], NullList] = Field(
        default_factory=new_list
    )
    host_network: Optional[Bool] = None     # every container port is a host port (NodePorts)


class PodStatus(KubeModel):
    phase: Optional[Str] = None
    nominated_node_name: Optional[Str] = None


class Pod(KubeObject):
    KIND: ClassVar[str] = "Pod"
    API_VERSION: ClassVar[str] = "v1"

    spec: Annotated[PodSpec, NullModel] = Field(default_factory=PodSpec)
    status: Annotated[PodStatus, NullModel] = Field(default_factory=PodStatus)


class Taint(KubeModel):
    key: Str
    value: Optional[Str] = None
    effect: Str


class NodeSpec(KubeModel):
    unschedulable: Optional[Bool] = None
    taints: Annotated[list[Taint], NullList] = Field(default_factory=new_list)


class NodeCondition(KubeModel):
    type: Str
    status: Str
    reason: Optional[Str] = None
    message: Optional[Str] = None


class NodeStatus(KubeModel):
    allocatable: ResourceList = Field(default_factory=new_dict)
    capacity: ResourceList = Field(default_factory=new_dict)
    conditions: Annotated[list[NodeCondition], NullList] = Field(default_factory=new_list)


class Node(KubeObject):
    KIND: ClassVar[str] = "Node"
    API_VERSION: ClassVar[str] = "v1"
    NAMESPACED: ClassVar[bool] = False

    spec: Annotated[NodeSpec, NullModel] = Field(default_factory=NodeSpec)
    status: Annotated[NodeStatus, NullModel] = Field(default_factory=NodeStatus)


class PriorityClass(KubeObject):
    """scheduling.k8s.io/v1 PriorityClass: value decides job priority (1.8)."""

    KIND: ClassVar[str] = "PriorityClass"
    API_VERSION: ClassVar[str] = "scheduling.k8s.io/v1"
    NAMESPACED: ClassVar[bool] = False

    value: Int
    global_default: Optional[Bool] = None
    preemption_policy: Optional[Str] = None
    description: Optional[Str] = None


class ConfigMap(KubeObject):
    """Read for GPU-sharing ConfigMaps and the podgrouper per-kind defaults."""

    KIND: ClassVar[str] = "ConfigMap"
    API_VERSION: ClassVar[str] = "v1"

    data: StrMap = Field(default_factory=new_dict)
    binary_data: Optional[dict[str, Any]] = None
