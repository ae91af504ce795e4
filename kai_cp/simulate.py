"""Several cycles in a row, applying each cycle's decisions to the in-memory cluster the way a
cluster would react (interfaces.md section 3): bound pods run on their node, pipelined pods stay
Pending, evicted pods return to Pending (or stay Releasing one cycle if their job is deleted),
PodGroup annotations the cycle writes (stale-gang timestamps) are set on the PodGroup."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from kai_cp.cycle import CycleResult, CycleSettings, run_cycle
from kai_cp.gpu_sharing import GROUP_LABEL, group_labels
from kai_cp.loader import LoadedSnapshot, dump_snapshot
from kai_cp.progress import progress as progress_bar
from kai_cp.state import POD_GROUP_ANNOTATION
from kai_cp.state_cache import StateBuilder
from models import PodStatus

PROGRESS_DELAY = 2.0   # seconds: shorter runs print no bar


def apply_decisions(loaded: LoadedSnapshot, result: CycleResult, gone: set[str] = frozenset()) -> set[str]:
    """Apply one cycle's decisions; returns the pods now terminating that leave before the next
    cycle's decisions are applied (`gone` are those of the previous cycle: removed now).

    A changed object is replaced by a changed copy, never changed in place, as the watch cache
    does: the next cycle's StateBuilder (kai_cp.state_cache) re-derives exactly those objects."""
    raw = loaded.snapshot.raw_objects
    if gone:
        raw.pods = [p for p in raw.pods if f"{p.metadata.namespace or 'default'}/{p.metadata.name}" not in gone]
    at = {f"{p.metadata.namespace or 'default'}/{p.metadata.name}": i for i, p in enumerate(raw.pods)}
    deleted_groups = {(g.metadata.namespace or "default", g.metadata.name) for g in raw.pod_groups
                      if g.metadata.deletion_timestamp is not None}
    terminating: set[str] = set()
    for ev in result.session.evictions.values():
        i = at.get(ev.task.key)
        if i is None:
            continue
        pod = raw.pods[i]
        if (ev.task.namespace, ev.task.job) in deleted_groups:
            raw.pods[i] = _copy(pod, metadata=_copy(pod.metadata, deletion_timestamp=pod.metadata.deletion_timestamp
                                                    or _now()))
            terminating.add(ev.task.key)
            continue
        # The controller recreates it: a new pending pod of the same job, with no node or GPU group.
        labels = {k: v for k, v in (pod.metadata.labels or {}).items() if not k.startswith(GROUP_LABEL)}
        raw.pods[i] = _copy(pod, spec=_copy(pod.spec, node_name=None),
                            metadata=_copy(pod.metadata, deletion_timestamp=None, labels=labels),
                            status=_unnominated(_phase(pod.status, "Pending")))
    nominated = {at[k]: node for k, node in result.nominations().items() if k in at}
    for placement in result.session.placements.values():
        i = at.get(placement.task.key)
        if i is None or placement.pipelined:
            continue
        pod = raw.pods[i]
        metadata = pod.metadata
        if placement.gpu_groups:      # the pod runs in its shared GPU; a new group becomes a shared device
            metadata = _copy(metadata, labels={**(metadata.labels or {}), **group_labels(placement.gpu_groups)})
        raw.pods[i] = _copy(pod, spec=_copy(pod.spec, node_name=result.state.nodes[placement.node].name),
                            metadata=metadata, status=_unnominated(_phase(pod.status, "Running")))
    _nominate(raw.pods, nominated)
    if result.stale is not None:
        _apply_annotations(raw.pod_groups, result.stale.annotations())
    return terminating


def _nominate(pods: list, nominated: dict[int, str]) -> None:
    """What kai-cp writes on the pods of the preemptors it pipelines (`status.nominatedNodeName`,
    as kube-scheduler on a preemptor; which pods: CycleResult.nominations): the next cycles serve
    them first (kai_cp.actions.allocate.run_allocate), so the evictions made for them are not
    given to another job. Jobs pipelined onto pods that were terminating anyway are re-decided,
    as KAI does. A pending pod no longer nominated loses it."""
    for i, pod in enumerate(pods):
        node = nominated.get(i)
        status = pod.status
        if node is not None:
            if status is None or status.nominated_node_name != node:
                pods[i] = _copy(pod, status=_copy(status or PodStatus(phase="Pending"), nominated_node_name=node))
        elif status is not None and status.nominated_node_name is not None and (status.phase or "Pending") == "Pending":
            pods[i] = _copy(pod, status=_unnominated(status))


def _unnominated(status: PodStatus) -> PodStatus:
    """The status without a nomination (unchanged when it has none: nothing is written)."""
    return status if status.nominated_node_name is None else _copy(status, nominated_node_name=None)


def _copy(model, **changes):
    """The model with `changes` set, as assignments would set them (they count as written)."""
    return model.model_copy(update=changes)


def _phase(status, phase: str) -> PodStatus:
    return PodStatus(phase=phase) if status is None else _copy(status, phase=phase)


def _apply_annotations(pod_groups: list, writes: list[dict]) -> None:
    """What KAI's status updater patches on PodGroups at session close (spec 2.7), so the next
    cycle reads it back (the stale-gang grace period spans cycles). Changed PodGroups are
    replaced by changed copies."""
    at = {(g.metadata.namespace or "default", g.metadata.name): i for i, g in enumerate(pod_groups)}
    for w in writes:
        i = at.get((w["namespace"], w["podGroup"]))
        if i is None:
            continue
        pg = pod_groups[i]
        annotations = dict(pg.metadata.annotations or {})
        if w["value"] is None:
            annotations.pop(w["annotation"], None)
        else:
            annotations[w["annotation"]] = w["value"]
        pod_groups[i] = _copy(pg, metadata=_copy(pg.metadata, annotations=annotations))


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def _pod_status(pod, pipelined: dict[str, str]) -> tuple[str, str | None]:
    key = f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"
    phase = (pod.status.phase if pod.status else None) or "Pending"
    node = pod.spec.node_name or None
    if key in pipelined:
        return "Pipelined", pipelined[key]
    if pod.metadata.deletion_timestamp is not None and phase in ("Running", "Pending"):
        return "Releasing", node
    if phase == "Pending" and node:
        return "Running", node           # bound: the kubelet starts it
    if phase in ("Running", "Succeeded", "Failed"):
        return phase, node
    return "Pending", None


def pods_report(loaded: LoadedSnapshot, pipelined: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for pod in loaded.snapshot.raw_objects.pods:
        status, node = _pod_status(pod, pipelined)
        labels = pod.metadata.labels or {}
        groups = sorted({v for k, v in labels.items() if k == "runai-gpu-group" or k.startswith("runai-gpu-group/")})
        out.append({"namespace": pod.metadata.namespace or "default", "name": pod.metadata.name,
                    "podGroup": (pod.metadata.annotations or {}).get(POD_GROUP_ANNOTATION),
                    "status": status, "node": node, "gpuGroups": groups})
    for raw in loaded.raw_invalid.get("pods", []):
        meta = raw.get("metadata") if isinstance(raw, dict) and isinstance(raw.get("metadata"), dict) else {}
        out.append({"namespace": meta.get("namespace", "default"), "name": meta.get("name"),
                    "podGroup": (meta.get("annotations") or {}).get(POD_GROUP_ANNOTATION)
                    if isinstance(meta.get("annotations"), dict) else None,
                    "status": "Pending", "node": None, "gpuGroups": []})
    return out


def schedule_period(loaded: LoadedSnapshot) -> float:
    """Seconds between cycles on a given clock (`schedulerParams.schedulePeriod`, Go duration in
    nanoseconds; KAI's default 1 s): with `--now` the simulated clock advances by it per cycle."""
    params = loaded.snapshot.scheduler_params
    value = params.get("schedulePeriod") if isinstance(params, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return value / 1e9
    return 1.0


def simulate(loaded: LoadedSnapshot, cycles: int, settings: CycleSettings,
             progress: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Returns (RESULT.json document, final snapshot document). `progress`: a bar on stderr
    once the run has taken more than PROGRESS_DELAY seconds."""
    outputs: list[dict[str, Any]] = []
    pipelined: dict[str, str] = {}
    gone: set[str] = set()
    period = schedule_period(loaded)
    states = StateBuilder()      # each cycle re-derives only the objects the last one changed
    for i in progress_bar(range(cycles), desc="simulate", enabled=progress, delay=PROGRESS_DELAY):
        state = states.build(loaded)
        cycle_settings = settings if settings.now is None else replace(settings, now=settings.now + i * period)
        result = run_cycle(state, cycle_settings)
        outputs.append(result.to_json())
        gone = apply_decisions(loaded, result, gone)
        pipelined = {p["pod"]: p["node"] for p in outputs[-1]["pipelined"]}
    return ({"pods": pods_report(loaded, pipelined), "cycles": outputs},
            dump_snapshot(loaded.snapshot, loaded.raw_invalid))
