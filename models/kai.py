"""KAI-Scheduler custom resources: Queue, PodGroup, Topology, BindRequest.

Field semantics are in kai-semantics.md 1.2 (Queue), 1.3 (PodGroup), 1.6 (Topology) and
1.7 (BindRequest). Optional fields stay None when absent, because KAI distinguishes
"unset" from zero (e.g. an unset queue `limit` means 0, `minMember` unset means 1).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Optional

from pydantic import Field

from .base import AnyDict, Bool, Int, Int32, KubeModel, NullList, NullModel, Number, Str, crd_schema, new_list
from .duration import Duration
from .meta import KubeObject

__all__ = [
    "QueueResource",
    "QueueResources",
    "QueueSpec",
    "QueueStatus",
    "Queue",
    "TopologyConstraint",
    "SubGroup",
    "PodGroupSpec",
    "PodGroupStatus",
    "PodGroup",
    "TopologyLevel",
    "TopologySpec",
    "Topology",
    "ReceivedGPU",
    "BindRequestSpec",
    "BindRequestStatus",
    "BindRequest",
]


class QueueResource(KubeModel):
    """One resource of a queue. None = omitted (quota 0, limit 0, weight 0 in KAI).

    Values are kept as the JSON numbers they were (ints stay ints); convert with
    `fractions.Fraction(str(x))` or `Decimal(str(x))` for exact arithmetic.
    """

    quota: Optional[Number] = None
    limit: Optional[Number] = None
    over_quota_weight: Optional[Number] = None


class QueueResources(KubeModel):
    gpu: Optional[QueueResource] = None
    cpu: Optional[QueueResource] = None
    memory: Optional[QueueResource] = None


class QueueSpec(KubeModel):
    display_name: Optional[Str] = None
    parent_queue: Optional[Str] = None
    priority: Optional[Int] = None
    resources: Optional[QueueResources] = None
    preempt_min_runtime: Optional[Duration] = None
    reclaim_min_runtime: Optional[Duration] = None


class QueueStatus(KubeModel):
    """Written by KAI's queue controller; kept for write-back, not used for decisions."""


class Queue(KubeObject):
    KIND: ClassVar[str] = "Queue"
    API_VERSION: ClassVar[str] = "scheduling.run.ai/v2"
    NAMESPACED: ClassVar[bool] = False

    spec: Annotated[QueueSpec, NullModel] = Field(default_factory=QueueSpec)
    status: Annotated[QueueStatus, NullModel] = Field(default_factory=QueueStatus)


class TopologyConstraint(KubeModel):
    """Honoured only when `topology` is non-empty (8.x)."""

    topology: Optional[Str] = None
    required_topology_level: Optional[Str] = None
    preferred_topology_level: Optional[Str] = None


# KAI's CRD pattern for sub-group names (the looser of the two KAI has shipped, so every name
# either version accepts is accepted here).
_SUBGROUP_NAME = r"^[a-z0-9][a-z0-9\-]*$"


class SubGroup(KubeModel):
    name: Str = Field(json_schema_extra=crd_schema(minLength=1, pattern=_SUBGROUP_NAME))
    min_member: Optional[Int32] = Field(default=None, json_schema_extra=crd_schema(minimum=1))
    parent: Optional[Str] = Field(default=None, json_schema_extra=crd_schema(pattern=_SUBGROUP_NAME))
    topology_constraint: Optional[TopologyConstraint] = None


class PodGroupSpec(KubeModel):
    min_member: Optional[Int32] = Field(default=None, json_schema_extra=crd_schema(minimum=1))
    queue: Optional[Str] = None
    priority_class_name: Optional[Str] = None
    preemptibility: Optional[Str] = Field(
        default=None, json_schema_extra=crd_schema(enum=["preemptible", "non-preemptible"]))
    mark_unschedulable: Optional[Bool] = None
    scheduling_backoff: Optional[Int32] = None
    topology_constraint: Optional[TopologyConstraint] = None
    sub_groups: Annotated[list[SubGroup], NullList] = Field(default_factory=new_list)
    # In KAI's API, unused by its scheduler (spec 1.3); typed so the CRD checks them as KAI's does.
    parallelism: Optional[Int32] = None
    completions: Optional[Int32] = None
    backoff_limit: Optional[Int32] = None


class PodGroupStatus(KubeModel):
    """schedulingConditions / resourcesStatus written by KAI; kept, not interpreted."""


class PodGroup(KubeObject):
    KIND: ClassVar[str] = "PodGroup"
    API_VERSION: ClassVar[str] = "scheduling.run.ai/v2alpha2"

    spec: Annotated[PodGroupSpec, NullModel] = Field(default_factory=PodGroupSpec)
    status: Annotated[PodGroupStatus, NullModel] = Field(default_factory=PodGroupStatus)


_LABEL_KEY = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
              r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
# KAI's CRD rules for the levels (spec 1.6): immutable, unique, hostname only as the last level.
_LEVEL_RULES = [
    {"message": "field is immutable", "rule": "self == oldSelf"},
    {"message": "must be unique", "rule": "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0"},
    {"message": "the kubernetes.io/hostname label can only be used at the lowest level of topology",
     "rule": "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || "
             "self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'"},
]


class TopologyLevel(KubeModel):
    node_label: Str = Field(json_schema_extra=crd_schema(minLength=1, maxLength=316, pattern=_LABEL_KEY))


class TopologySpec(KubeModel):
    # Required in KAI's CRD (a Topology without levels is rejected there); loading defaults it.
    model_config = {**KubeModel.model_config, "json_schema_extra": {"required": ["levels"]}}

    levels: Annotated[list[TopologyLevel], NullList] = Field(
        default_factory=new_list,
        json_schema_extra=crd_schema(minItems=1, maxItems=16, x_kubernetes_list_type="atomic",
                                     x_kubernetes_validations=_LEVEL_RULES))


class Topology(KubeObject):
    KIND: ClassVar[str] = "Topology"
    API_VERSION: ClassVar[str] = "kai.scheduler/v1alpha1"
    NAMESPACED: ClassVar[bool] = False

    spec: Annotated[TopologySpec, NullModel] = Field(default_factory=TopologySpec)


class ReceivedGPU(KubeModel):
    count: Optional[Int] = None
    portion: Optional[Str] = None  # a string such as "0.50" (2 decimals)


class BindRequestSpec(KubeModel):
    pod_name: Optional[Str] = None
    selected_node: Optional[Str] = None
    received_resource_type: Optional[Str] = None
    received_gpu: Optional[ReceivedGPU] = Field(default=None, alias="receivedGPU")
    selected_gpu_groups: Annotated[list[Str], NullList] = Field(
        default_factory=new_list, alias="selectedGPUGroups"
    )
    resource_claim_allocations: Annotated[list[AnyDict], NullList] = Field(default_factory=new_list)
    backoff_limit: Optional[Int32] = None


class BindRequestStatus(KubeModel):
    phase: Optional[Str] = None
    reason: Optional[Str] = None
    failed_attempts: Optional[Int32] = None


class BindRequest(KubeObject):
    KIND: ClassVar[str] = "BindRequest"
    API_VERSION: ClassVar[str] = "scheduling.run.ai/v1alpha2"

    spec: Annotated[BindRequestSpec, NullModel] = Field(default_factory=BindRequestSpec)
    status: Annotated[BindRequestStatus, NullModel] = Field(default_factory=BindRequestStatus)
