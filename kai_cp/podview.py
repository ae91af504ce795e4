"""Pods decoded straight from JSON into lean typed structs: the fast load path of `kai-cp solve`.

Why: on a 10,000-node snapshot (~105,000 pods, two thirds of all objects) loading pods as
pydantic models went JSON -> dicts -> models, ~5 s of a ~8 s load, and the models kept every
field of the pod (status, container images, ...) alive for the whole run. A `PodView` is
decoded by msgspec in one step from the pod's JSON, holds only the fields the pydantic `Pod`
model types (models/core.py, models/meta.py) and answers the same attribute reads
(`pod.metadata.labels`, `pod.spec.containers[0].resources.requests`, ...) with the same values.

Soundness: a view is accepted only where the pydantic model would accept the object too. Every
typed field of `Pod` is typed here at least as strictly (strict str/int/bool, required keys,
RFC 3339 times and quantities checked by the models' own validators); where pydantic is lenient
(`null` for a list, map or struct, a number for a quantity) the view refuses, and the loader
validates that one object with pydantic instead, which gives its warnings or its model. So the
loaded pods are the same, as views or models, and so are the warnings.

Views are read-only by convention (nothing in a cycle changes a pod) and hold nothing else of
the pod, so a snapshot loaded with them cannot be written back: only `kai-cp solve` asks for
them (kai_cp.loader.load_snapshot(views=True)); simulate, the explore API and the writers
load full models.
"""

# No `from __future__ import annotations` here: msgspec then reads the types as they are instead
# of evaluating each annotation string when it builds a decoder (~4 ms of every start).
from typing import Annotated, Any, ClassVar, Optional

import msgspec
from msgspec import Meta, Struct, field

from models.times import _TIME_CACHE as _TIMES, parse_time
from models.identity import ObjectIdentity
from models.quantity import _KNOWN as _KNOWN_QUANTITIES, validate_quantity

__all__ = ["PodView", "SnapshotEnvelope"]

_NonEmpty = Annotated[str, Meta(min_length=1)]


class _View(Struct, rename="camel", gc=False):
    """camelCase JSON names as the models' aliases; no GC tracking (views hold no cycles)."""


def _check_quantities(values: Optional[dict[str, str]]) -> None:
    """The model's quantity check (models/quantity.py): a bad text refuses the object. Texts
    it already accepted are skipped here as there (the common case, without a call)."""
    if values:
        for q in values.values():
            if q not in _KNOWN_QUANTITIES:
                validate_quantity(q)


class OwnerReferenceView(_View):
    api_version: Optional[str] = None
    kind: Optional[str] = None
    name: Optional[str] = None
    uid: Optional[str] = None
    controller: Optional[bool] = None
    block_owner_deletion: Optional[bool] = None


class ObjectMetaView(_View):
    name: _NonEmpty
    namespace: Optional[str] = None
    uid: Optional[str] = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    creation_timestamp: Optional[str] = None     # a str in JSON, made a KubeTime once decoded
    deletion_timestamp: Optional[str] = None
    owner_references: list[OwnerReferenceView] = []
    finalizers: list[str] = []
    resource_version: Optional[str] = None
    generation: Optional[int] = None

    def __post_init__(self) -> None:
        # Times as the model parses them (shared KubeTime instances); a bad one refuses the object.
        t = self.creation_timestamp
        if t is not None:
            self.creation_timestamp = _TIMES.get(t) or parse_time(t)
        t = self.deletion_timestamp
        if t is not None:
            self.deletion_timestamp = _TIMES.get(t) or parse_time(t)


class ResourceRequirementsView(_View):
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}

    def __post_init__(self) -> None:
        _check_quantities(self.requests)
        _check_quantities(self.limits)


class ContainerPortView(_View):
    container_port: Optional[int] = None
    host_port: Optional[int] = None
    host_ip: Optional[str] = field(default=None, name="hostIP")
    protocol: Optional[str] = None
    name: Optional[str] = None


class ContainerView(_View):
    name: Optional[str] = None
    resources: ResourceRequirementsView = field(default_factory=ResourceRequirementsView)
    ports: list[ContainerPortView] = []
    restart_policy: Optional[str] = None      # "Always" on an init container: a sidecar


class SharedList(list):  # type: ignore[type-arg]
    """A pod's decoded containers, init containers or tolerations: one list shared by every
    pod whose JSON for them is the same bytes (`key`), as the replicas of a job or Deployment
    ask for the same. At 10,000 nodes (105,898 pods, 155 distinct container lists, 3 toleration
    lists) decoding each pod's own took ~0.25 s of the load and ~75 MB, and the state build
    rebuilt a hashable summary of each from its items: `kai_cp.resources.cached_pod_request`
    reads `key` instead, `kai_cp.predicates.predicate_key` keeps its summary in `frozen`."""

    __slots__ = ("key", "frozen")

    def __init__(self, items: list, key: bytes) -> None:
        super().__init__(items)
        self.key = key
        self.frozen: Any = None


#: Distinct lists kept per field: past it (pods that each carry their own, e.g. per-pod env
#: values) a list is decoded for its pod alone, at the cost of the old path plus a look-up.
_SHARED_MAX = 4096
_EMPTY_LIST = msgspec.Raw(b"[]")


def _shared(raw: msgspec.Raw, decoder: msgspec.json.Decoder, seen: dict[bytes, SharedList]) -> list:
    """The decoded list of a pod's JSON list, shared (raises msgspec.ValidationError as the
    field's own decode would: the pod's view is refused)."""
    key = bytes(raw)
    found = seen.get(key)
    if found is None:
        items = decoder.decode(key)
        if len(seen) >= _SHARED_MAX:
            return items
        found = seen[key] = SharedList(items, key)
    return found


class NodeSelectorRequirementView(_View):
    key: str
    operator: str
    values: list[str] = []


class NodeSelectorTermView(_View):
    match_expressions: list[NodeSelectorRequirementView] = []
    match_fields: list[NodeSelectorRequirementView] = []


class NodeSelectorView(_View):
    node_selector_terms: list[NodeSelectorTermView] = []


class PreferredSchedulingTermView(_View):
    weight: int
    preference: NodeSelectorTermView


class NodeAffinityView(_View):
    required_during_scheduling_ignored_during_execution: Optional[NodeSelectorView] = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTermView] = []


class LabelSelectorRequirementView(_View):
    key: str
    operator: str
    values: list[str] = []


class LabelSelectorView(_View):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirementView] = []


class PodAffinityTermView(_View):
    label_selector: Optional[LabelSelectorView] = None
    namespaces: list[str] = []
    topology_key: str = ""
    namespace_selector: Optional[LabelSelectorView] = None
    match_label_keys: list[str] = []
    mismatch_label_keys: list[str] = []


class WeightedPodAffinityTermView(_View):
    weight: int
    pod_affinity_term: PodAffinityTermView


class PodAffinityView(_View):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTermView] = []
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTermView] = []


class AffinityView(_View):
    node_affinity: Optional[NodeAffinityView] = None
    pod_affinity: Optional[PodAffinityView] = None
    pod_anti_affinity: Optional[PodAffinityView] = None

    def model_dump(self, *, by_alias: bool = True, exclude_none: bool = True) -> dict[str, Any]:
        """The JSON form pydantic's `Affinity.model_dump(by_alias=True, exclude_none=True)`
        gives for the typed fields (kai_cp/pod_affinity.py reads the terms from it)."""
        assert by_alias and exclude_none, "views only give the JSON form"
        return _drop_none(msgspec.to_builtins(self))


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


class TolerationView(_View):
    key: Optional[str] = None
    operator: Optional[str] = None
    value: Optional[str] = None
    effect: Optional[str] = None
    toleration_seconds: Optional[int] = None


# Lists as JSON, each decoded into a SharedList by the pod spec's `__post_init__` (`_shared`)
_ContainersJSON = Annotated[msgspec.Raw, list[ContainerView]]
_TolerationsJSON = Annotated[msgspec.Raw, list[TolerationView]]
_SHARED_CONTAINERS: dict[bytes, SharedList] = {}
_SHARED_TOLERATIONS: dict[bytes, SharedList] = {}


class PodSchedulingGateView(_View):
    name: str


class PodSpecView(_View):
    scheduler_name: Optional[str] = None
    node_name: Optional[str] = None
    containers: _ContainersJSON = _EMPTY_LIST
    init_containers: _ContainersJSON = _EMPTY_LIST
    overhead: Optional[dict[str, str]] = None
    node_selector: dict[str, str] = {}
    affinity: Optional[AffinityView] = None
    tolerations: _TolerationsJSON = _EMPTY_LIST
    scheduling_gates: list[PodSchedulingGateView] = []
    priority_class_name: Optional[str] = None
    priority: Optional[int] = None
    preemption_policy: Optional[str] = None
    volumes: list[dict[str, Any]] = []
    resource_claims: list[dict[str, Any]] = []
    topology_spread_constraints: list[dict[str, Any]] = []
    host_network: Optional[bool] = None       # every container port is a host port (kai_cp/host_ports.py)

    def __post_init__(self) -> None:
        _check_quantities(self.overhead)
        self.containers = _shared(self.containers, _CONTAINERS_DECODER, _SHARED_CONTAINERS)
        self.init_containers = _shared(self.init_containers, _CONTAINERS_DECODER, _SHARED_CONTAINERS)
        self.tolerations = _shared(self.tolerations, _TOLERATIONS_DECODER, _SHARED_TOLERATIONS)


_CONTAINERS_DECODER = msgspec.json.Decoder(list[ContainerView])
_TOLERATIONS_DECODER = msgspec.json.Decoder(list[TolerationView])


class PodStatusView(_View):
    phase: Optional[str] = None
    nominated_node_name: Optional[str] = None


class PodView(_View, ObjectIdentity):
    """The typed part of a Pod, read like `models.Pod` (the attributes and properties the
    scheduler uses). Holds nothing else: a snapshot loaded with views cannot be written back."""

    KIND: ClassVar[str] = "Pod"
    API_VERSION: ClassVar[str] = "v1"
    NAMESPACED: ClassVar[bool] = True

    metadata: ObjectMetaView
    api_version: Optional[str] = None
    kind: Optional[str] = None
    spec: PodSpecView = field(default_factory=PodSpecView)
    status: PodStatusView = field(default_factory=PodStatusView)


class SnapshotEnvelope(Struct, forbid_unknown_fields=True):
    """A snapshot's top level with each rawObjects list left as JSON (kai_cp.loader decodes
    them one by one). UNSET: the key is absent (not null). Unknown keys refuse the document:
    the loader then takes the ordinary path, which reports them."""

    config: Any = msgspec.UNSET
    schedulerParams: Any = msgspec.UNSET
    rawObjects: Optional[dict[str, msgspec.Raw]] = msgspec.UNSET  # type: ignore[assignment]
    discovery: Any = msgspec.UNSET
