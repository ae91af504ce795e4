"""The snapshot document (interfaces.md section 1, kai-semantics.md 9.2).

Kinds the scheduler does not model yet (storage, DRA) stay plain dicts so they survive a
round trip untouched. `RAW_OBJECT_KINDS` (models/kinds.py) maps each rawObjects key to the
kind name used in warnings and to its model (None = kept as dict); the loader is driven by it.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import Field

from .base import AnyDict, KubeModel, NullList, NullModel, new_list
from .core import ConfigMap, Node, Pod, PriorityClass
from .kai import BindRequest, PodGroup, Queue, Topology
from .kinds import RAW_OBJECT_KINDS, RawKindInfo

__all__ = ["RawObjects", "Snapshot", "RAW_OBJECT_KINDS", "RawKindInfo"]


_DictList = Annotated[list[AnyDict], NullList]


class RawObjects(KubeModel):
    """All object lists of a snapshot; a missing key is an empty list."""

    pods: Annotated[list[Pod], NullList] = Field(default_factory=new_list)
    nodes: Annotated[list[Node], NullList] = Field(default_factory=new_list)
    queues: Annotated[list[Queue], NullList] = Field(default_factory=new_list)
    pod_groups: Annotated[list[PodGroup], NullList] = Field(default_factory=new_list)
    bind_requests: Annotated[list[BindRequest], NullList] = Field(default_factory=new_list)
    priority_classes: Annotated[list[PriorityClass], NullList] = Field(default_factory=new_list)
    config_maps: Annotated[list[ConfigMap], NullList] = Field(default_factory=new_list)
    persistent_volume_claims: _DictList = Field(default_factory=new_list)
    csi_storage_capacities: _DictList = Field(default_factory=new_list)
    storage_classes: _DictList = Field(default_factory=new_list)
    csi_drivers: _DictList = Field(default_factory=new_list)
    resource_claims: _DictList = Field(default_factory=new_list)
    resource_slices: _DictList = Field(default_factory=new_list)
    device_classes: _DictList = Field(default_factory=new_list)
    topologies: Annotated[list[Topology], NullList] = Field(default_factory=new_list)


class Snapshot(KubeModel):
    """A whole snapshot. `config`/`schedulerParams` None means "absent or null": the
    engine then applies defaults (an absent key inside schedulerParams means false/0,
    kai-semantics.md 9.2)."""

    config: Optional[dict[str, Any]] = None
    scheduler_params: Optional[dict[str, Any]] = None
    raw_objects: Annotated[RawObjects, NullModel] = Field(default_factory=RawObjects)
    discovery: Optional[dict[str, Any]] = None

    def to_json(self) -> dict[str, Any]:
        """The snapshot as JSON-ready dict, in the input format (round-trip exact)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)
