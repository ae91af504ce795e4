"""What the cluster state reads of one object, derived from that object alone.

Why a module of its own: kai_cp.state assembles a cycle's state from these records, and
kai_cp.state_cache keeps them across cycles (an unchanged object is not derived again). Each
function here reads nothing but its object, so a record may be reused for as long as its
object is the same, unmodified one; everything that depends on other objects (BindRequests,
the PodGroup's sub-groups, queues, topologies, the configuration) is added per cycle by
kai_cp.state. Records are never changed once made: the per-cycle objects built from them
(TaskInfo, JobInfo, NodeInfo) are new each cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from kai_cp.errors import ObjectWarning
from models.cache import remember
from kai_cp.gpu_sharing import RESERVATION_APP
from kai_cp.jobs import BOUND, DEFAULT_PODSET, FAILED, RELEASING, RUNNING, SUCCEEDED, UNKNOWN, PodSet, ts_key
from kai_cp.mig import legacy_mig
from kai_cp.nodes import NodeInfo, make_node
from kai_cp.predicates import predicate_key
from kai_cp.resources import PodRequest, cached_pod_request, some_key_contains

POD_GROUP_ANNOTATION = "pod-group-name"
LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"
STALE_ANNOTATION = "kai.scheduler/stale-podgroup-timestamp"
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
TASK_PRIORITY_LABEL = "kai.scheduler/task-priority"
GPU_GROUP_LABEL = "runai-gpu-group"
UTILITY_APPS = ("kai-resource-reservation", "scaling-pod")
_GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=timezone.utc).timestamp()


# ------------------------------------------------------------------------------------------ pods
@dataclass(eq=False, slots=True)
class PodRecord:
    """A pod's task fields that do not depend on other objects (spec 1.4, 4.3, 5.3)."""

    uid: str
    name: str
    namespace: str                  # "default" when unset
    bind_key: tuple[str, str]       # (namespace as written, name): how BindRequests name the pod
    status: str | None              # task status, None while it depends on the pod's BindRequest
    node: str | None
    gated: bool                     # scheduling gates (a Pending pod without node or BindRequest is Gated)
    request: PodRequest
    gpu_groups: tuple[str, ...]     # from its runai-gpu-group labels
    group: str | None               # its PodGroup (pod-group-name annotation)
    subgroup: str | None            # its sub-group label
    order_key: tuple
    predicate_key: tuple
    nominated_node: str | None
    scheduler_name: str
    utility: bool
    legacy_mig: bool
    pod: object


def _task_priority(labels: dict[str, str]) -> tuple:
    raw = labels.get(TASK_PRIORITY_LABEL)
    if raw is None:
        return (1, 0)
    try:
        return (0, -int(raw))
    except ValueError:
        return (0, 1 << 62)  # unparsable loses against parsable labels


def task_order_key(pod) -> tuple:
    labels = pod.metadata.labels or {}
    role = 0 if labels.get("training.kubeflow.org/job-role") in ("master", "launcher") else 1
    head = 0 if labels.get("ray.io/node-type") == "head" else 1
    return (role, head, _task_priority(labels), ts_key(pod.metadata.creation_timestamp), pod.metadata.uid or "")


def static_status(pod) -> tuple[str | None, str | None]:
    """The task status the pod alone decides (spec 1.4); (None, None) for a Pending pod without
    node and not deleting: Binding, Gated or Pending, which its BindRequest decides."""
    phase = (pod.status.phase if pod.status else None) or "Pending"
    node = pod.spec.node_name or None
    deleting = pod.metadata.deletion_timestamp is not None
    if phase == "Running":
        return (RELEASING if deleting else RUNNING), node
    if phase == "Pending":
        if deleting:
            return RELEASING, node
        if node:
            return BOUND, node
        return None, None
    if phase == "Succeeded":
        return SUCCEEDED, node
    if phase == "Failed":
        return FAILED, node
    return UNKNOWN, node


def pod_record(pod, shared_keys: dict[tuple, tuple]) -> PodRecord:
    """`shared_keys`: one predicate-key tuple per distinct value (~0.5 KB a pod saved)."""
    meta = pod.metadata
    labels = meta.labels or {}
    annotations = meta.annotations or {}
    request = cached_pod_request(pod.spec, annotations)
    if labels.get("app") == RESERVATION_APP:
        request = replace(request, gpus=0)     # a reservation pod's GPU is its shared group's (7.3, 7.6)
    status, node = static_status(pod)
    pk = predicate_key(pod.spec, labels, meta.namespace or "default")
    # positional, in PodRecord's field order (named in the comments): keywords cost ~1.9 us more a
    # pod, 0.2 s at 10,000 nodes
    return PodRecord(
        meta.uid or meta.name, meta.name, meta.namespace or "default",          # uid, name, namespace
        (meta.namespace or "", meta.name), status, node,                        # bind_key, status, node
        bool(pod.spec.scheduling_gates), request, gpu_groups_of(labels),         # gated, request, gpu_groups
        annotations.get(POD_GROUP_ANNOTATION), labels.get(SUBGROUP_LABEL),      # group, subgroup
        task_order_key(pod), shared_keys.setdefault(pk, pk),                    # order_key, predicate_key
        pod.status.nominated_node_name if pod.status else None,                 # nominated_node
        pod.spec.scheduler_name or "default-scheduler",                         # scheduler_name
        labels.get("app") in UTILITY_APPS, legacy_mig(annotations), pod)         # utility, legacy_mig, pod


def gpu_groups_of(labels: dict[str, str]) -> tuple[str, ...]:
    """The pod's GPU groups, from its `runai-gpu-group` and `runai-gpu-group/...` labels."""
    if not some_key_contains(labels, GPU_GROUP_LABEL):
        return ()
    return tuple(sorted({v for k, v in labels.items() if k == GPU_GROUP_LABEL or k.startswith(GPU_GROUP_LABEL + "/")}))


# ----------------------------------------------------------------------------------------- nodes
def node_template(node) -> NodeInfo:
    """The node's NodeInfo at index 0; `node_at` gives each cycle its own copy."""
    return make_node(node, 0)


def node_at(template: NodeInfo, index: int) -> NodeInfo:
    """A fresh NodeInfo from a template: the per-cycle parts (shared GPUs in use, unreadable
    pods) are filled by the cycle, and its dicts are its own."""
    return replace(template, index=index, labels=dict(template.labels), capacity=dict(template.capacity),
                   gpu_groups={}, unreadable_pods=[])


# ------------------------------------------------------------------------------------ PodGroups
@dataclass(eq=False, slots=True)
class GroupRecord:
    """A PodGroup's job fields that do not depend on other objects (spec 1.3, 6.6, 6.7)."""

    name: str
    namespace: str
    uid: str
    queue: str
    priority_class: str | None
    preemptibility: str
    creation: float
    podsets: tuple[tuple[str, int], ...]    # (name, minAvailable) of each PodSet
    problems: tuple[str, ...]               # an unusable sub-group tree
    has_sub_groups: bool
    topology_constraint: object
    names_topology: bool                    # a constraint of the job or a sub-group names a topology
    stale_since: float | None
    stale_annotated: bool                   # the annotation is there (readable or not)
    last_start: float | None
    warnings: tuple[ObjectWarning, ...]     # unreadable time annotations, reported every cycle
    pod_group: object

    def new_podsets(self) -> dict[str, PodSet]:
        return {name: PodSet(name, minimum) for name, minimum in self.podsets}


def podsets_of(pg) -> tuple[tuple[tuple[str, int], ...], list[str]]:
    spec = pg.spec
    problems: list[str] = []
    subs = list(spec.sub_groups or []) if spec is not None else []
    if not subs:
        return ((DEFAULT_PODSET, max(int(spec.min_member or 0), 1)),), problems
    names = {s.name.lower(): s for s in subs if s.name}
    parents = {s.parent.lower() for s in subs if s.parent}
    bad = [s.parent for s in subs if s.parent and s.parent.lower() not in names]
    if bad or len(names) != len(subs):
        problems.append(f"sub-group tree is invalid (unknown parent {bad[0]!r})" if bad
                        else "sub-group names are missing or duplicated")
        return ((DEFAULT_PODSET, 1),), problems
    return tuple((s.name, max(int(s.min_member or 0), 1)) for s in subs if s.name.lower() not in parents), problems


def parse_rfc3339(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (as Go's time.RFC3339 reads it), else None."""
    if not isinstance(text, str):
        return None
    found = _RFC3339_SEEN.get(text, _UNSEEN)
    if found is _UNSEEN:
        found = None
        if _RFC3339.fullmatch(text):
            try:
                found = datetime.fromisoformat(text).timestamp()
            except ValueError:
                pass
        remember(_RFC3339_SEEN, 1 << 16, text, found)
    return found


# Annotation times by their text: a cluster's PodGroups repeat them (started in the same second).
_RFC3339_SEEN: dict[str, float | None] = {}
_UNSEEN = object()


def annotation_time(pg, annotations: dict, key: str, meaning: str, warnings: list | None) -> float | None:
    """A PodGroup time annotation KAI reads back each cycle: the last start (min-runtime, spec
    6.7) and the stale-since time (6.6). An unreadable value counts as unset, with a warning that
    says what that means for the job; Go's zero time is unset."""
    raw = annotations.get(key)
    if not raw:
        return None
    value = parse_rfc3339(raw)
    if value is None and warnings is not None:
        warnings.append(ObjectWarning(f"PodGroup/{pg.metadata.namespace or 'default'}/{pg.metadata.name}",
                                      f"metadata.annotations.{key}", f"{raw!r} is not an RFC 3339 time; {meaning}"))
    return None if value == _GO_ZERO_TIME else value


def group_record(pg) -> GroupRecord:
    spec = pg.spec
    podsets, problems = podsets_of(pg)
    warnings: list[ObjectWarning] = []
    meta = pg.metadata
    annotations = meta.annotations or {}
    stale = annotation_time(pg, annotations, STALE_ANNOTATION, "treated as unset", warnings)
    last = annotation_time(pg, annotations, LAST_START_ANNOTATION, "the job is not protected by min-runtime", warnings)
    if spec is None:
        queue, priority_class, preemptibility, constraint, subs = "", None, "", None, ()
    else:
        queue, priority_class, preemptibility = spec.queue or "", spec.priority_class_name, spec.preemptibility or ""
        constraint, subs = spec.topology_constraint, spec.sub_groups or ()
    names_topology = any(c is not None and bool(c.topology)
                         for c in (constraint, *(s.topology_constraint for s in subs)))
    # positional, in GroupRecord's field order (as for PodRecord: keywords cost more per object)
    return GroupRecord(
        meta.name, meta.namespace or "default", meta.uid or "",                 # name, namespace, uid
        queue, priority_class, preemptibility,
        ts_key(meta.creation_timestamp), podsets, tuple(problems),              # creation, podsets, problems
        bool(subs), constraint, names_topology,                                 # has_sub_groups, topology_constraint
        stale, STALE_ANNOTATION in annotations, last,                           # stale_since, stale_annotated, last_start
        tuple(warnings), pg)                                                    # warnings, pod_group
