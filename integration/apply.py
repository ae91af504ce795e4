"""Applying one cycle's decisions to the cluster.

Default mode: one BindRequest (scheduling.run.ai/v1alpha2) per bound pod, written exactly as
KAI's scheduler writes it, for KAI's binder. `--bind` mode: kai-cp binds itself through
pods/binding with the pod's UID as precondition (whole GPUs only: a fractional GPU pod needs
KAI's binder, which reserves its GPU, until kai-cp has a binder of its own).

Gangs: a job's placements of this cycle are applied together or not at all.
* BindRequest mode: if any request of the gang cannot be created, the ones created this
  cycle are deleted again and dropped from the cache.
* bind mode: every binding is first sent as a server-side dry run (the API server checks
  the UID precondition and that the pod is still unassigned); only when all pass are the
  real bindings sent. A binding can still fail between the two (another actor binds the
  pod); the gang's bound pods then count as allocated and the next cycle completes it.
A 409 "already assigned" to the node we chose is success (a retried request whose answer
was lost); to another node the pod is re-planned. A pod whose writes fail backs off.

Every write first checks that this replica still leads (integration/leader.py): a replica
that lost its lease applies nothing more.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from datetime import datetime, timezone
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

from kai_cp.cycle import CycleResult

from .backoff import BindBackoff
from .cache import Cache
from .kube import STRATEGIC_PATCH, ApiError, Kube, object_path

log = logging.getLogger("kai_cp.apply")

BR_GV = "scheduling.run.ai/v1alpha2"
_ASSIGNED_RE = re.compile(r'already assigned to node "?([^"\s]+)"?')


class NotLeader(Exception):
    """Leadership was lost while applying: stop writing at once."""


@dataclass
class ApplyOutcome:
    """What one cycle's apply did. Lists are appended from several threads (atomic in CPython);
    counters go through `inc`."""
    bound: list[tuple[str, str]] = field(default_factory=list)          # (pod key, node) applied
    failed: list[tuple[str, str]] = field(default_factory=list)         # (pod key, reason)
    gangs_applied: int = 0
    gangs_rolled_back: int = 0
    partial_gangs: int = 0
    evicted: list[str] = field(default_factory=list)
    evictions_retry: list[str] = field(default_factory=list)
    stopped_not_leader: bool = False
    writes: int = 0
    bind_seconds: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def inc(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)


def _portion(v: Fraction | float) -> str:
    return f"{float(v):.2f}"


def received(task, node_gpu_memory: int | None) -> tuple[str, int, str]:
    """(receivedResourceType, receivedGPU.count, receivedGPU.portion) as KAI's scheduler fills them."""
    r = task.request
    if r.kind == "MigInstance":
        return "MigInstance", 0, _portion(0)
    if r.kind == "Fraction":
        return "Fraction", max(r.devices, 1), _portion(r.gpu_portion)
    if r.kind == "GpuMemory":
        mem = node_gpu_memory or 0
        portion = Fraction(r.gpu_memory, mem) if mem else Fraction(0)
        return "Fraction", max(r.devices, 1), _portion(min(portion, Fraction(1)))
    if r.gpus > 0:
        return "Regular", int(r.gpus), _portion(1)
    return "Regular", 0, _portion(0)


def bind_request_body(task, pod, node: str, gpu_groups: list[str], node_gpu_memory: int | None,
                      pool_key: str, pool_value: str) -> dict[str, Any]:
    rtype, count, portion = received(task, node_gpu_memory)
    labels = {"selected-node": node}
    if pool_key and pool_value:
        labels[pool_key] = pool_value
    spec: dict[str, Any] = {"podName": pod.metadata.name, "selectedNode": node, "receivedResourceType": rtype,
                            "receivedGPU": {"count": count, "portion": portion}}
    if gpu_groups:
        spec["selectedGPUGroups"] = list(gpu_groups)
    return {
        "apiVersion": BR_GV, "kind": "BindRequest",
        "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace, "labels": labels,
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name,
                                          "uid": pod.metadata.uid}]},
        "spec": spec,
    }


def binding_body(pod, node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace, "uid": pod.metadata.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def assigned_node(err: ApiError) -> str | None:
    m = _ASSIGNED_RE.search(err.message or "")
    return m.group(1) if m else None


class Applier:
    def __init__(self, kube: Kube, cache: Cache, *, bind_mode: bool = False, pool_key: str = "",
                 pool_value: str = "", evict_with_delete: bool = False, eviction_condition: bool = False,
                 is_leader: Callable[[], bool] = lambda: True, backoff: BindBackoff | None = None,
                 on_write: Callable[[str, str, int], None] | None = None, parallel: int = 16):
        self.kube = kube
        self.cache = cache
        self.bind_mode = bind_mode
        self.pool_key = pool_key
        self.pool_value = pool_value
        self.evict_with_delete = evict_with_delete
        self.eviction_condition = eviction_condition      # --update-pod-eviction-condition (spec 10.4)
        self.is_leader = is_leader
        self.backoff = backoff or BindBackoff()
        self.on_write = on_write      # (verb, resource, status) for metrics
        self._pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="apply")

    # -- helpers ---------------------------------------------------------------------------
    def _guard(self) -> None:
        if not self.is_leader():
            raise NotLeader()

    def _write(self, verb: str, resource: str, fn: Callable[[], Any]) -> Any:
        self._guard()
        try:
            out = fn()
            if self.on_write:
                self.on_write(verb, resource, 200)
            return out
        except ApiError as e:
            if self.on_write:
                self.on_write(verb, resource, e.status)
            raise

    # -- entry point -------------------------------------------------------------------------
    def apply(self, result: CycleResult, doc: dict) -> ApplyOutcome:
        out = ApplyOutcome()
        gpu_groups = {b["pod"]: b.get("gpuGroups") or [] for b in doc.get("binds", [])}
        by_job: dict[str, list] = {}
        for p in sorted(result.session.placements.values(), key=lambda p: p.task.key):
            if not p.pipelined:
                by_job.setdefault(p.task.job, []).append(p)
        def one(job_name: str) -> None:
            plan = by_job[job_name]
            if self.bind_mode:
                self._bind_gang(result, job_name, plan, out)
            else:
                self._request_gang(result, job_name, plan, gpu_groups, out)
        try:
            self._cleanup_bind_requests(result, out)
            # Gangs are independent: their writes go out in parallel (one gang's pods in order).
            jobs = sorted(by_job)
            if len(jobs) <= 1:
                for j in jobs:
                    one(j)
            else:
                for f in [self._pool.submit(one, j) for j in jobs]:
                    try:
                        f.result()
                    except NotLeader:
                        out.stopped_not_leader = True
            if out.stopped_not_leader:
                raise NotLeader()
            self._evict(doc.get("evictions") or [], result, out)
        except NotLeader:
            out.stopped_not_leader = True
            log.warning("leadership lost while applying; the rest of this cycle's decisions are dropped")
        return out

    def _current(self, task) -> Any | None:
        """The pod as the cache sees it now, if the plan for it still holds."""
        pod = self.cache.informers["pods"].get(task.key)
        if pod is None or (task.uid and pod.metadata.uid and pod.metadata.uid != task.uid):
            return None
        if pod.spec.node_name or pod.metadata.deletion_timestamp is not None:
            return None
        return pod

    def _fail(self, out: ApplyOutcome, key: str, reason: str) -> None:
        delay = self.backoff.fail(key)
        out.failed.append((key, reason))
        log.info("pod %s: %s; backing off %.0fs", key, reason, delay)

    # -- BindRequest mode ---------------------------------------------------------------------
    def _request_gang(self, result: CycleResult, job: str, plan: list, gpu_groups: dict, out: ApplyOutcome) -> None:
        state = result.state
        pods = [self._current(p.task) for p in plan]
        if any(p is None for p in pods):
            return          # the world moved since the snapshot: re-plan next cycle
        brs = self.cache.informers["bindRequests"]
        created: list[tuple[str, str]] = []
        for p, pod in zip(plan, pods):
            node = state.nodes[p.node]
            body = bind_request_body(p.task, pod, node.name, gpu_groups.get(p.task.key, []), node.gpu_memory,
                                     self.pool_key, self.pool_value)
            path = object_path(BR_GV, "bindrequests", pod.metadata.namespace)
            t0 = time.perf_counter()
            try:
                made = self._write("create", "bindrequests", lambda: self.kube.create(path, body))
            except ApiError as e:
                if e.status == 409 and self._same_request(pod, node.name):
                    made = None
                else:
                    self._fail(out, p.task.key, f"BindRequest not created: {e}")
                    if e.status == 0 or e.status >= 500:
                        # No answer, or a server error: the request may exist all the same; withdraw it too.
                        created.append((pod.metadata.namespace, pod.metadata.name))
                    self._rollback(created)
                    out.inc("gangs_rolled_back")
                    return
            out.inc("writes")
            out.bind_seconds.append(time.perf_counter() - t0)
            created.append((pod.metadata.namespace, pod.metadata.name))
            if made is not None:
                model = brs.model.__pydantic_validator__.validate_python(brs.trim(made), by_alias=True, by_name=False)
                brs.assume(p.task.key, model)
        for p in plan:
            self.backoff.success(p.task.key)
            out.bound.append((p.task.key, state.nodes[p.node].name))
        out.inc("gangs_applied")

    def _same_request(self, pod, node: str) -> bool:
        try:
            cur = self.kube.get(object_path(BR_GV, "bindrequests", pod.metadata.namespace, pod.metadata.name))
        except ApiError:
            return False
        spec = cur.get("spec") or {}
        phase = (cur.get("status") or {}).get("phase")
        owners = (cur.get("metadata") or {}).get("ownerReferences") or []
        same_pod = not owners or any(o.get("uid") == pod.metadata.uid for o in owners)
        return spec.get("selectedNode") == node and phase != "Failed" and same_pod

    def _rollback(self, created: list[tuple[str, str]]) -> None:
        brs = self.cache.informers["bindRequests"]
        for ns, name in created:
            try:
                self._write("delete", "bindrequests",
                            lambda: self.kube.delete(object_path(BR_GV, "bindrequests", ns, name)))
            except ApiError as e:
                if e.status != 404:
                    log.warning("could not delete BindRequest %s/%s of a rolled-back gang: %s", ns, name, e)
            brs.forget(f"{ns}/{name}")

    def _cleanup_bind_requests(self, result: CycleResult, out: ApplyOutcome) -> None:
        """KAI deletes failed BindRequests and those for nodes outside the shard (spec 1.7)."""
        if self.bind_mode:
            return
        nodes = {n.name for n in result.state.nodes}
        brs = self.cache.informers["bindRequests"]
        for br in brs.values()[0]:
            labels = br.metadata.labels or {}
            ours = (labels.get(self.pool_key) == self.pool_value) if (self.pool_key and self.pool_value) \
                else not (self.pool_key and self.pool_key in labels)
            failed = br.status is not None and br.status.phase == "Failed" and br.spec.backoff_limit is None
            gone = br.spec.selected_node and br.spec.selected_node not in nodes and ours
            if failed or gone:
                ns, name = br.metadata.namespace, br.metadata.name
                try:
                    self._write("delete", "bindrequests",
                                lambda: self.kube.delete(object_path(BR_GV, "bindrequests", ns, name)))
                except ApiError as e:
                    if e.status != 404:
                        continue
                brs.forget(f"{ns}/{name}")

    # -- bind mode -------------------------------------------------------------------------------
    def _bind_gang(self, result: CycleResult, job: str, plan: list, out: ApplyOutcome) -> None:
        state = result.state
        pods = [self._current(p.task) for p in plan]
        if any(p is None for p in pods):
            return
        for p in plan:
            if p.task.request.is_shared_gpu:
                self._fail(out, p.task.key, "kai-cp --bind cannot bind fractional GPU pods; run KAI's binder "
                                            "(BindRequest mode) for them")
                return
        # Phase 1: the whole gang as a dry run.
        for p, pod in zip(plan, pods):
            node = state.nodes[p.node].name
            try:
                self._post_binding(pod, node, dry_run=True)
            except ApiError as e:
                if e.status == 409 and assigned_node(e) == node:
                    continue
                self._fail(out, p.task.key, f"binding refused (dry run): {e}")
                out.inc("gangs_rolled_back")
                return
        # Phase 2: for real.
        bound = 0
        pods_inf = self.cache.informers["pods"]
        for p, pod in zip(plan, pods):
            node = state.nodes[p.node].name
            t0 = time.perf_counter()
            ok = False
            try:
                self._post_binding(pod, node, dry_run=False)
                ok = True
            except ApiError as e:
                if e.status == 409 and assigned_node(e) == node:
                    ok = True
                elif e.status == 0 or e.status >= 500:
                    ok = self._bound_to(pod, node)      # the answer was lost: look
                if not ok:
                    self._fail(out, p.task.key, f"binding failed: {e}")
            out.inc("writes")
            out.bind_seconds.append(time.perf_counter() - t0)
            if ok:
                bound += 1
                self.backoff.success(p.task.key)
                out.bound.append((p.task.key, node))
                pods_inf.assume(p.task.key, pod.model_copy(update={"spec": pod.spec.model_copy(update={"node_name": node})}))
        if bound == len(plan):
            out.inc("gangs_applied")
        elif bound:
            out.inc("partial_gangs")

    def _post_binding(self, pod, node: str, dry_run: bool) -> None:
        path = object_path("v1", "pods", pod.metadata.namespace, pod.metadata.name, "binding")
        query = {"dryRun": "All"} if dry_run else {}
        self._write("create", "pods/binding", lambda: self.kube.create(path, binding_body(pod, node), **query))

    def _bound_to(self, pod, node: str) -> bool:
        try:
            cur = self.kube.get(object_path("v1", "pods", pod.metadata.namespace, pod.metadata.name))
        except ApiError:
            return False
        return (cur.get("spec") or {}).get("nodeName") == node and (cur.get("metadata") or {}).get("uid") == pod.metadata.uid

    # -- evictions -------------------------------------------------------------------------------
    def _evict_all(self, evictions: list[dict]) -> ApplyOutcome:
        """Evictions alone (tests, and actions that only evict)."""
        out = ApplyOutcome()
        try:
            self._evict(evictions, None, out)
        except NotLeader:
            out.stopped_not_leader = True
        return out

    def _disruption_target(self, ns: str, name: str, message: str) -> None:
        """KAI's DisruptionTarget condition, written before the pod is evicted (spec 10.4); a
        strategic merge keeps the pod's other conditions."""
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                                           "message": message, "lastTransitionTime": now}]}}
        self._write("patch", "pods/status", lambda: self.kube.patch(
            object_path("v1", "pods", ns, name, "status"), body, content_type=STRATEGIC_PATCH))

    def _evict(self, evictions: list[dict], result: CycleResult, out: ApplyOutcome) -> None:
        for ev in evictions:
            key = ev.get("pod") or ""
            ns, _, name = key.partition("/")
            pod = self.cache.informers["pods"].get(key)
            if pod is None or pod.metadata.deletion_timestamp is not None:
                continue
            pre = {"uid": pod.metadata.uid} if pod.metadata.uid else {}
            try:
                if self.eviction_condition:
                    try:
                        self._disruption_target(ns, name, ev.get("message") or "")
                    except ApiError as e:
                        if e.status == 404:
                            continue
                        log.warning("DisruptionTarget condition on %s failed (evicting anyway): %s", key, e)
                if self.evict_with_delete:
                    self._write("delete", "pods", lambda: self.kube.delete(
                        object_path("v1", "pods", ns, name), {"preconditions": pre}))
                else:
                    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns},
                            "deleteOptions": {"preconditions": pre}}
                    self._write("create", "pods/eviction", lambda: self.kube.create(
                        object_path("v1", "pods", ns, name, "eviction"), body))
                out.evicted.append(key)
            except ApiError as e:
                if e.status == 429:     # a PodDisruptionBudget says not now: next cycle decides again
                    out.evictions_retry.append(key)
                elif e.status != 404:
                    log.warning("eviction of %s failed: %s", key, e)
