"""Names of an object with `metadata`, shared by the pydantic objects (models/meta.py) and the
lean views of `kai-cp solve` (kai_cp/podview.py, kai_cp/objectviews.py), which must not import
pydantic (issue 9)."""

from __future__ import annotations

from typing import Optional

__all__ = ["ObjectIdentity"]


class ObjectIdentity:
    """Names of an object with `metadata` (name, namespace), shared by the pydantic objects and
    the lean pod views (kai_cp/podview.py)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> Optional[str]:
        return self.metadata.namespace

    @property
    def key(self) -> str:
        """`namespace/name` for namespaced objects, `name` otherwise."""
        ns = self.metadata.namespace
        return f"{ns}/{self.metadata.name}" if ns else self.metadata.name

    @property
    def ref(self) -> str:
        """`Kind/namespace/name` or `Kind/name`, the form used in warnings."""
        return f"{self.KIND or self.kind or type(self).__name__}/{self.key}"
