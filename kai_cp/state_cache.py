"""The cluster state of many cycles, each object derived once (issues 9 and 10).

`kai-cp run` and `kai-cp simulate` build a state every cycle from a cluster that changes a
little between cycles. What kai_cp.state derives from one object alone (a pod's request,
predicate key, task order and status; a node's capacity, taints and readiness; a PodGroup's
PodSets, priority class and annotation times: kai_cp.records) is kept here and reused while
the object is the same one; only new or replaced objects are derived again. The state itself
is still assembled every cycle (tasks, jobs, node usage, queue accounting, fair share), from
these records, by the same code as a one-shot build, so the two give the same state.

The contract with the callers: an object is never changed in place between cycles; a change
is a new object. The watch cache (integration/cache.py) stores a new model per event and the
simulation (kai_cp.simulate) copies what it changes, so object identity tells what changed.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from kai_cp.loader import LoadedSnapshot
from kai_cp.nodes import NodeInfo
from kai_cp.records import GroupRecord, PodRecord, group_record, node_at, node_template, pod_record
from kai_cp.state import ClusterState, Derive, build_cluster_state

R = TypeVar("R")


class _Memo:
    """Values derived from objects, by object identity; a build keeps only what it used."""

    def __init__(self) -> None:
        self.kept: dict[int, tuple[Any, Any]] = {}     # id(object) -> (object, value); the object keeps its id unique
        self.used: dict[int, tuple[Any, Any]] = {}
        self.hits = self.misses = 0

    def get(self, obj: Any, make: Callable[[Any], R]) -> R:
        key = id(obj)
        entry = self.kept.get(key)
        if entry is None or entry[0] is not obj:
            entry = (obj, make(obj))
            self.misses += 1
        else:
            self.hits += 1
        self.used[key] = entry
        return entry[1]

    def start(self) -> None:
        self.used = {}
        self.hits = self.misses = 0

    def finish(self) -> None:
        self.kept, self.used = self.used, {}


class _Reuse(Derive):
    """kai_cp.state.Derive that keeps each object's records across builds."""

    def __init__(self) -> None:
        super().__init__()
        self.pods, self.nodes, self.groups = _Memo(), _Memo(), _Memo()

    def start(self) -> None:
        for m in (self.pods, self.nodes, self.groups):
            m.start()

    def pod(self, pod) -> PodRecord:
        return self.pods.get(pod, self._pod_record)

    def _pod_record(self, pod) -> PodRecord:
        return pod_record(pod, self.shared_keys)

    def node(self, node, index: int) -> NodeInfo:
        return node_at(self.nodes.get(node, node_template), index)

    def pod_group(self, pg) -> GroupRecord:
        return self.groups.get(pg, group_record)

    def done(self) -> None:
        for m in (self.pods, self.nodes, self.groups):
            m.finish()
        if len(self.shared_keys) > 2 * len(self.pods.kept) + 1024:
            # Predicate keys of pods gone: keep one tuple per value still in use.
            self.shared_keys = {}
            for _, rec in self.pods.kept.values():
                self.shared_keys.setdefault(rec.predicate_key, rec.predicate_key)


class StateBuilder:
    """Builds each cycle's ClusterState, reusing what unchanged objects derived last time.

    Every state is new and owned by its cycle (a session's changes never reach the next one);
    only the immutable per-object records are shared between cycles."""

    def __init__(self) -> None:
        self._derive = _Reuse()

    def build(self, loaded: LoadedSnapshot) -> ClusterState:
        self._derive.start()
        return build_cluster_state(loaded, self._derive)

    def stats(self) -> dict[str, int]:
        """Objects of the last build whose records were reused / derived anew."""
        d = self._derive
        return {"reused": d.pods.hits + d.nodes.hits + d.groups.hits,
                "derived": d.pods.misses + d.nodes.misses + d.groups.misses}
