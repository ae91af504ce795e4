"""ObjectMeta and the `KubeObject` base shared by every top-level object.

Only what the scheduler reads is typed; everything else (resourceVersion, managedFields,
...) is kept verbatim as an extra field so write-back is lossless.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Optional

from pydantic import Field, StringConstraints

from .base import Bool, Int, KubeModel, NullList, Str, StrMap, Time, new_dict, new_list
from .identity import ObjectIdentity

__all__ = ["OwnerReference", "ObjectMeta", "KubeObject"]

NonEmptyStr = Annotated[str, StringConstraints(strict=True, min_length=1)]


class OwnerReference(KubeModel):
    """metav1.OwnerReference (podgrouper top-owner walk, BindRequest -> Pod)."""

    api_version: Optional[Str] = None
    kind: Optional[Str] = None
    name: Optional[Str] = None
    uid: Optional[Str] = None
    controller: Optional[Bool] = None
    block_owner_deletion: Optional[Bool] = None


class ObjectMeta(KubeModel):
    """metav1.ObjectMeta. `name` is required: an object without one cannot be referenced."""

    name: NonEmptyStr
    namespace: Optional[Str] = None
    uid: Optional[Str] = None
    labels: StrMap = Field(default_factory=new_dict)
    annotations: StrMap = Field(default_factory=new_dict)
    creation_timestamp: Optional[Time] = None
    deletion_timestamp: Optional[Time] = None
    owner_references: Annotated[list[OwnerReference], NullList] = Field(default_factory=new_list)
    finalizers: Annotated[list[Str], NullList] = Field(default_factory=new_list)
    resource_version: Optional[Str] = None
    generation: Optional[Int] = None


class KubeObject(KubeModel, ObjectIdentity):
    """A top-level Kubernetes object. Subclasses narrow `spec`/`status` to typed models.

    `KIND` names the object in warnings and keys (`ref`), independent of whether the JSON
    carried apiVersion/kind (informer-listed objects usually do not).
    """

    KIND: ClassVar[str] = ""
    API_VERSION: ClassVar[str] = ""
    NAMESPACED: ClassVar[bool] = True

    api_version: Optional[Str] = None
    kind: Optional[Str] = None
    metadata: ObjectMeta
    spec: Any = None
    status: Any = None


