"""Error and warning types shared by the loader, the engine and the CLI.

Two levels, as interfaces.md section 4 requires: a `SnapshotError` means the file as a
whole is unusable (the CLI prints it and exits 2); an `ObjectWarning` means one object
was unusable and was left out, while everything else is still scheduled.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SnapshotError", "ObjectWarning"]


class SnapshotError(Exception):
    """The snapshot file cannot be used. str() is one line naming the file and the problem."""

    def __init__(self, source: str, problem: str | None = None) -> None:
        # SnapshotError("file.json", "what is wrong") or SnapshotError("full message")
        self.source = source if problem is not None else ""
        self.problem = problem if problem is not None else source
        super().__init__(f"{source}: {problem}" if problem is not None else source)


@dataclass(frozen=True)
class ObjectWarning:
    """One object (or one field of it) that kai-cp could not use.

    object: "Kind/namespace/name" or "Kind/name" (cluster-scoped / namespace unknown)
    field:  dotted path inside the object, e.g. "spec.containers[0].resources.requests.cpu";
            "" when the problem is the object as a whole
    reason: human-readable cause
    """

    object: str
    field: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"object": self.object, "field": self.field, "reason": self.reason}
