"""The rawObjects lists of a snapshot: JSON key, kind name, whether namespaced, and the model
that reads them (None: kept as plain dicts). The loader is driven by this table.

Kept apart from the pydantic models (models/snapshot.py) so that `kai-cp solve`, which reads
objects as lean views, can walk the table without importing pydantic (issue 9): a kind's
model class is resolved on first use of `RawKindInfo.model`.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

__all__ = ["RAW_OBJECT_KINDS", "RawKindInfo"]


class RawKindInfo:
    """How one rawObjects list is read: JSON key, kind name, model, namespaced or not."""

    __slots__ = ("key", "kind", "_model", "namespaced")

    def __init__(self, key: str, kind: str, model: Any, namespaced: bool) -> None:
        """`model`: the model class, its "module:Class" path inside models, or None."""
        self.key = key
        self.kind = kind
        self._model = model
        self.namespaced = namespaced

    @property
    def modelled(self) -> bool:
        return self._model is not None

    @property
    def model(self) -> Optional[type]:
        if isinstance(self._model, str):
            module, name = self._model.split(":")
            self._model = getattr(importlib.import_module(f"models.{module}"), name)
        return self._model

    def __repr__(self) -> str:
        return f"RawKindInfo({self.key!r}, {self.kind!r})"


RAW_OBJECT_KINDS: tuple[RawKindInfo, ...] = (
    RawKindInfo("pods", "Pod", "core:Pod", True),
    RawKindInfo("nodes", "Node", "core:Node", False),
    RawKindInfo("queues", "Queue", "kai:Queue", False),
    RawKindInfo("podGroups", "PodGroup", "kai:PodGroup", True),
    RawKindInfo("bindRequests", "BindRequest", "kai:BindRequest", True),
    RawKindInfo("priorityClasses", "PriorityClass", "core:PriorityClass", False),
    RawKindInfo("configMaps", "ConfigMap", "core:ConfigMap", True),
    RawKindInfo("persistentVolumeClaims", "PersistentVolumeClaim", None, True),
    RawKindInfo("csiStorageCapacities", "CSIStorageCapacity", None, True),
    RawKindInfo("storageClasses", "StorageClass", None, False),
    RawKindInfo("csiDrivers", "CSIDriver", None, False),
    RawKindInfo("resourceClaims", "ResourceClaim", None, True),
    RawKindInfo("resourceSlices", "ResourceSlice", None, False),
    RawKindInfo("deviceClasses", "DeviceClass", None, False),
    RawKindInfo("topologies", "Topology", "kai:Topology", False),
)
