"""Nodes, queues, PodGroups, BindRequests, PriorityClasses, ConfigMaps and Topologies decoded
straight from JSON into lean typed structs, as kai_cp/podview.py does for pods: with them a
`kai-cp solve` run never imports pydantic (~0.1 s of every start, issue 9) and validates these
objects in one msgspec call per list instead of one pydantic call per chunk.

The same soundness rule as for pods: every typed field of the pydantic model (models/core.py,
models/kai.py) is typed here at least as strictly, under the same JSON name; where pydantic is
lenient (`null` for a list, map or struct, a number for a quantity) the view refuses and the
loader validates that one object with pydantic, which gives its warnings or its model. Fields
the scheduler reads from a model's extras are declared under their JSON name
(`stalenessGracePeriod`, `schedulingConditions`), so `getattr(obj, "<jsonName>")` reads the same
on a model and on a view. tests/test_objectviews.py holds the two paths side by side.
"""

# No `from __future__ import annotations` here: msgspec then reads the types as they are instead
# of evaluating each annotation string when it builds a decoder (~4 ms of every start).
import functools
import math
from dataclasses import dataclass, field as dataclass_field
from typing import Any, ClassVar, Optional, Union

import msgspec
from msgspec import field

from kai_cp.podview import ObjectMetaView, PodView, _check_quantities, _View
from models.duration import validate_duration
from models.identity import ObjectIdentity

__all__ = ["VIEW_TYPES", "RawObjectsView", "SnapshotView", "decoders"]


def _check_duration(value: Optional[str]) -> None:
    if value is not None:
        validate_duration(value)


class _Object(_View, ObjectIdentity):
    metadata: ObjectMetaView
    api_version: Optional[str] = None
    kind: Optional[str] = None


# ------------------------------------------------------------------------------------ Node


class TaintView(_View):
    key: str
    effect: str
    value: Optional[str] = None


class NodeSpecView(_View):
    unschedulable: Optional[bool] = None
    taints: list[TaintView] = []


class NodeConditionView(_View):
    type: str
    status: str
    reason: Optional[str] = None
    message: Optional[str] = None


class NodeStatusView(_View):
    allocatable: dict[str, str] = {}
    capacity: dict[str, str] = {}
    conditions: list[NodeConditionView] = []

    def __post_init__(self) -> None:
        _check_quantities(self.allocatable)
        _check_quantities(self.capacity)


class NodeView(_Object):
    KIND: ClassVar[str] = "Node"
    API_VERSION: ClassVar[str] = "v1"
    NAMESPACED: ClassVar[bool] = False

    spec: NodeSpecView = field(default_factory=NodeSpecView)
    status: NodeStatusView = field(default_factory=NodeStatusView)


# ----------------------------------------------------------------------------------- Queue

_Number = Union[int, float]


class QueueResourceView(_View):
    quota: Optional[_Number] = None
    limit: Optional[_Number] = None
    over_quota_weight: Optional[_Number] = None

    def __post_init__(self) -> None:
        for v in (self.quota, self.limit, self.over_quota_weight):
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError("must be a finite number")


class QueueResourcesView(_View):
    gpu: Optional[QueueResourceView] = None
    cpu: Optional[QueueResourceView] = None
    memory: Optional[QueueResourceView] = None


class QueueSpecView(_View):
    display_name: Optional[str] = None
    parent_queue: Optional[str] = None
    priority: Optional[int] = None
    resources: Optional[QueueResourcesView] = None
    preempt_min_runtime: Optional[str] = None
    reclaim_min_runtime: Optional[str] = None

    def __post_init__(self) -> None:
        _check_duration(self.preempt_min_runtime)
        _check_duration(self.reclaim_min_runtime)


class EmptyView(_View):
    """A status the scheduler keeps but does not read (any object)."""


class QueueView(_Object):
    KIND: ClassVar[str] = "Queue"
    API_VERSION: ClassVar[str] = "scheduling.run.ai/v2"
    NAMESPACED: ClassVar[bool] = False

    spec: QueueSpecView = field(default_factory=QueueSpecView)
    status: EmptyView = field(default_factory=EmptyView)


# -------------------------------------------------------------------------------- PodGroup


class TopologyConstraintView(_View):
    topology: Optional[str] = None
    required_topology_level: Optional[str] = None
    preferred_topology_level: Optional[str] = None


class SubGroupView(_View):
    name: str
    min_member: Optional[int] = None
    parent: Optional[str] = None
    topology_constraint: Optional[TopologyConstraintView] = None


class PodGroupSpecView(_View):
    min_member: Optional[int] = None
    queue: Optional[str] = None
    priority_class_name: Optional[str] = None
    preemptibility: Optional[str] = None
    mark_unschedulable: Optional[bool] = None
    scheduling_backoff: Optional[int] = None
    topology_constraint: Optional[TopologyConstraintView] = None
    sub_groups: list[SubGroupView] = []
    parallelism: Optional[int] = None
    completions: Optional[int] = None
    backoff_limit: Optional[int] = None
    # an extra of the model (newer KAI's per-PodGroup grace period), read by its JSON name
    stalenessGracePeriod: Any = None  # noqa: N815


class PodGroupStatusView(_View):
    # an extra of the model (KAI's status updater writes it, spec 10.3), read by its JSON name
    schedulingConditions: Any = None  # noqa: N815


class PodGroupView(_Object):
    KIND: ClassVar[str] = "PodGroup"
    API_VERSION: ClassVar[str] = "scheduling.run.ai/v2alpha2"
    NAMESPACED: ClassVar[bool] = True

    spec: PodGroupSpecView = field(default_factory=PodGroupSpecView)
    status: PodGroupStatusView = field(default_factory=PodGroupStatusView)


# ----------------------------------------------------------------------------- BindRequest


class ReceivedGPUView(_View):
    count: Optional[int] = None
    portion: Optional[str] = None


class BindRequestSpecView(_View):
    pod_name: Optional[str] = None
    selected_node: Optional[str] = None
    received_resource_type: Optional[str] = None
    received_gpu: Optional[ReceivedGPUView] = field(default=None, name="receivedGPU")
    selected_gpu_groups: list[str] = field(default_factory=list, name="selectedGPUGroups")
    resource_claim_allocations: list[dict[str, Any]] = []
    backoff_limit: Optional[int] = None


class BindRequestStatusView(_View):
    phase: Optional[str] = None
    reason: Optional[str] = None
    failed_attempts: Optional[int] = None


class BindRequestView(_Object):
    KIND: ClassVar[str] = "BindRequest"
    API_VERSION: ClassVar[str] = "scheduling.run.ai/v1alpha2"
    NAMESPACED: ClassVar[bool] = True

    spec: BindRequestSpecView = field(default_factory=BindRequestSpecView)
    status: BindRequestStatusView = field(default_factory=BindRequestStatusView)


# ---------------------------------------------------------- PriorityClass, ConfigMap, Topology


class PriorityClassView(_Object, kw_only=True):
    KIND: ClassVar[str] = "PriorityClass"
    API_VERSION: ClassVar[str] = "scheduling.k8s.io/v1"
    NAMESPACED: ClassVar[bool] = False

    value: int
    global_default: Optional[bool] = None
    preemption_policy: Optional[str] = None
    description: Optional[str] = None
    spec: Any = None
    status: Any = None


class ConfigMapView(_Object):
    KIND: ClassVar[str] = "ConfigMap"
    API_VERSION: ClassVar[str] = "v1"
    NAMESPACED: ClassVar[bool] = True

    data: dict[str, str] = {}
    binary_data: Optional[dict[str, Any]] = None
    spec: Any = None
    status: Any = None


class TopologyLevelView(_View):
    node_label: str


class TopologySpecView(_View):
    levels: list[TopologyLevelView] = []


class TopologyView(_Object):
    KIND: ClassVar[str] = "Topology"
    API_VERSION: ClassVar[str] = "kai.scheduler/v1alpha1"
    NAMESPACED: ClassVar[bool] = False

    spec: TopologySpecView = field(default_factory=TopologySpecView)
    status: Any = None


# rawObjects key -> the view type of its objects
VIEW_TYPES: dict[str, type] = {
    "pods": PodView, "nodes": NodeView, "queues": QueueView, "podGroups": PodGroupView, "bindRequests": BindRequestView,
    "priorityClasses": PriorityClassView, "configMaps": ConfigMapView, "topologies": TopologyView,
}


@functools.cache
def whole_snapshot_decoder() -> msgspec.json.Decoder:
    """A decoder of a whole snapshot in one pass: each rawObjects list of a kind with views as
    a list of them, every other known list as plain JSON. Unknown keys (top-level or in
    rawObjects) and any object a view refuses fail the decode: the loader then takes the
    list-by-list path, which reports them. One pass instead of the envelope's scan of the whole
    document and then one decode per list: ~0.35 s of a 10,000-node load (issue 9)."""
    from models.kinds import RAW_OBJECT_KINDS
    lists = msgspec.defstruct(
        "RawObjectsViews",
        [(i.key, Optional[list[VIEW_TYPES[i.key]]] if i.key in VIEW_TYPES else Any, msgspec.UNSET)
         for i in RAW_OBJECT_KINDS],
        forbid_unknown_fields=True)
    whole = msgspec.defstruct(
        "SnapshotViews",
        [("config", Any, msgspec.UNSET), ("schedulerParams", Any, msgspec.UNSET),
         ("rawObjects", Optional[lists], msgspec.UNSET), ("discovery", Any, msgspec.UNSET)],
        forbid_unknown_fields=True)
    return msgspec.json.Decoder(whole)


def decoders(key: str) -> tuple[msgspec.json.Decoder, msgspec.json.Decoder]:
    """(one object, a list of them) decoders for a rawObjects key's views."""
    found = _DECODERS.get(key)
    if found is None:
        t = VIEW_TYPES[key]
        found = _DECODERS[key] = (msgspec.json.Decoder(t), msgspec.json.Decoder(list[t]))
    return found


_DECODERS: dict[str, tuple[msgspec.json.Decoder, msgspec.json.Decoder]] = {}


@dataclass
class RawObjectsView:
    """The object lists of a snapshot loaded with views, under the attribute names of
    `models.RawObjects` (a missing list is empty)."""

    pods: list = dataclass_field(default_factory=list)
    nodes: list = dataclass_field(default_factory=list)
    queues: list = dataclass_field(default_factory=list)
    pod_groups: list = dataclass_field(default_factory=list)
    bind_requests: list = dataclass_field(default_factory=list)
    priority_classes: list = dataclass_field(default_factory=list)
    config_maps: list = dataclass_field(default_factory=list)
    persistent_volume_claims: list = dataclass_field(default_factory=list)
    csi_storage_capacities: list = dataclass_field(default_factory=list)
    storage_classes: list = dataclass_field(default_factory=list)
    csi_drivers: list = dataclass_field(default_factory=list)
    resource_claims: list = dataclass_field(default_factory=list)
    resource_slices: list = dataclass_field(default_factory=list)
    device_classes: list = dataclass_field(default_factory=list)
    topologies: list = dataclass_field(default_factory=list)

    @classmethod
    def of(cls, lists: dict[str, list]) -> "RawObjectsView":
        """From the loader's lists by JSON key (keys of no known kind are left out, as the
        model leaves them out of its typed lists)."""
        return cls(**{_ATTR[k]: v for k, v in lists.items() if k in _ATTR})


# rawObjects JSON key -> attribute (the models' camelCase aliases)
_ATTR = {f: f for f in ("pods", "nodes", "queues", "topologies")} | {
    "podGroups": "pod_groups", "bindRequests": "bind_requests", "priorityClasses": "priority_classes",
    "configMaps": "config_maps", "persistentVolumeClaims": "persistent_volume_claims",
    "csiStorageCapacities": "csi_storage_capacities", "storageClasses": "storage_classes",
    "csiDrivers": "csi_drivers", "resourceClaims": "resource_claims", "resourceSlices": "resource_slices",
    "deviceClasses": "device_classes"}


@dataclass
class SnapshotView:
    """A snapshot loaded with views, read like `models.Snapshot`; it cannot be written back
    (kai_cp.loader.dump_snapshot refuses it)."""

    config: Optional[dict[str, Any]] = None
    scheduler_params: Optional[dict[str, Any]] = None
    raw_objects: RawObjectsView = dataclass_field(default_factory=RawObjectsView)
    discovery: Optional[dict[str, Any]] = None
