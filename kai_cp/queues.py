"""The queue tree of one cycle (spec 1.2, 2.2 step 5, 3.2.2).

Units are converted once here: CPU in millicores, memory quota/limit from MB to bytes
(`-1` stays `-1`), GPUs in devices. Omitted quota/limit/weight are 0, not unlimited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterable

from kai_cp.errors import ObjectWarning
from kai_cp.jobs import ts_key
from models.duration import duration_seconds

RESOURCES = ("cpu", "memory", "gpu")
UNLIMITED = Fraction(-1)
DEFAULT_QUEUE_PRIORITY = 100
MB = 1_000_000


def zero_vec() -> dict[str, Fraction]:
    return {r: Fraction(0) for r in RESOURCES}


@dataclass
class QueueInfo:
    name: str
    display_name: str
    parent: str | None
    priority: int
    creation: tuple
    deserved: dict[str, Fraction]
    limit: dict[str, Fraction]
    weight: dict[str, Fraction]
    children: list[str] = field(default_factory=list)
    allocated: dict[str, Fraction] = field(default_factory=zero_vec)
    allocated_np: dict[str, Fraction] = field(default_factory=zero_vec)
    request: dict[str, Fraction] = field(default_factory=zero_vec)
    fair_share: dict[str, Fraction] = field(default_factory=zero_vec)
    preempt_min_runtime: Fraction | None = None   # spec.preemptMinRuntime in seconds; None = unset (6.7)
    reclaim_min_runtime: Fraction | None = None   # spec.reclaimMinRuntime in seconds; None = unset (6.7)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def label(self) -> str:
        """Name used in messages: the display name when set (spec 10.1)."""
        return self.display_name or self.name


# Magnitudes past any cluster's total (2^64 millicores, bytes or GPUs) are read as this: a
# quota, limit or weight of 1e302 MB (1.8e308 bytes) made the queue order's floats overflow, an
# internal error for every job. Any value this large decides the same as another.
VALUE_CAP = Fraction(1 << 64)


def _resource(spec_resources, r: str, where: str, warnings: list[ObjectWarning]) -> tuple[Fraction, Fraction, Fraction]:
    res = getattr(spec_resources, r, None) if spec_resources is not None else None

    def val(x, name: str, unit: int = 1) -> Fraction:
        if x is None:
            return Fraction(0)
        v = Fraction(str(x)) * unit
        if r == "memory" and name != "overQuotaWeight":
            v = max(UNLIMITED, v)
        if abs(v) > VALUE_CAP:
            warnings.append(ObjectWarning(where, f"spec.resources.{r}.{name}",
                                          f"{x} is beyond any cluster's total; read as {'-' if v < 0 else ''}2^64"))
            v = VALUE_CAP if v > 0 else -VALUE_CAP
        return v

    if res is None:
        return Fraction(0), Fraction(0), Fraction(0)
    unit = MB if r == "memory" else 1
    return (val(res.quota, "quota", unit), val(res.limit, "limit", unit),
            val(res.over_quota_weight, "overQuotaWeight"))


def _seconds(duration: str | None) -> Fraction | None:
    """A queue's min-runtime; the model already refused malformed durations, so this parses."""
    return None if duration is None else duration_seconds(duration)


def build_queues(queue_objs: Iterable, full_hierarchy_fairness: bool) -> tuple[dict[str, QueueInfo], list[ObjectWarning]]:
    """Queues by name with children filled in; orphans (and their subtrees) dropped with a warning."""
    warnings: list[ObjectWarning] = []
    queues: dict[str, QueueInfo] = {}
    for q in queue_objs:
        spec = q.spec
        name = q.metadata.name
        deserved, limit, weight = {}, {}, {}
        for r in RESOURCES:
            deserved[r], limit[r], weight[r] = _resource(spec.resources if spec else None, r, f"Queue/{name}", warnings)
        priority = spec.priority if spec is not None and spec.priority is not None else DEFAULT_QUEUE_PRIORITY
        queues[name] = QueueInfo(
            name=name,
            display_name=(spec.display_name if spec and spec.display_name else ""),
            parent=(spec.parent_queue or None) if spec else None,
            priority=int(priority),
            creation=(ts_key(q.metadata.creation_timestamp), name),
            deserved=deserved, limit=limit, weight=weight,
            preempt_min_runtime=_seconds(spec.preempt_min_runtime if spec else None),
            reclaim_min_runtime=_seconds(spec.reclaim_min_runtime if spec else None),
        )
    if not full_hierarchy_fairness:
        queues = _flatten(queues)
    # Orphan removal: a queue whose ancestor chain leaves the snapshot goes, with its subtree.
    alive: dict[str, bool] = {}

    def is_alive(name: str, seen: tuple = ()) -> bool:
        if name in alive:
            return alive[name]
        q = queues[name]
        if q.parent is None:
            ok = True
        elif q.parent not in queues or q.parent in seen or q.parent == name:
            ok = False
        else:
            ok = is_alive(q.parent, seen + (name,))
        alive[name] = ok
        return ok

    for name in list(queues):
        if not is_alive(name):
            q = queues[name]
            reason = (f"parent queue '{q.parent}' does not exist" if q.parent not in queues
                      else f"an ancestor of queue '{name}' is missing or the parent chain has a cycle")
            warnings.append(ObjectWarning(f"Queue/{name}", "spec.parentQueue", reason + "; queue and its subtree are not scheduled"))
    queues = {n: q for n, q in queues.items() if alive[n]}
    for q in sorted(queues.values(), key=lambda q: q.creation):
        if q.parent is not None:
            queues[q.parent].children.append(q.name)
    return queues, warnings


def _flatten(queues: dict[str, QueueInfo]) -> dict[str, QueueInfo]:
    """Project-level fairness (spec 3.5): leaves re-parented under a synthetic unlimited `default`."""
    out: dict[str, QueueInfo] = {}
    for q in queues.values():
        if q.parent is None:
            continue
        q.parent = "default"
        out[q.name] = q
    out["default"] = QueueInfo(
        name="default", display_name="", parent=None, priority=DEFAULT_QUEUE_PRIORITY, creation=(0.0, "default"),
        deserved={r: UNLIMITED for r in RESOURCES}, limit={r: UNLIMITED for r in RESOURCES},
        weight={r: Fraction(1) for r in RESOURCES},
    )
    return out


def ancestors(queues: dict[str, QueueInfo], name: str) -> list[QueueInfo]:
    """The queue itself followed by its ancestors up to the root."""
    out = []
    cur: str | None = name
    while cur is not None and cur in queues:
        out.append(queues[cur])
        cur = queues[cur].parent
    return out
