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

Every write first checks that this replica still leads (integration/leader.py) and that its
batch was not dropped: a replica that lost its lease applies nothing more.

`plan` runs in the cycle: it turns the decisions into a Batch that holds everything the writes
need (no cycle state) and assumes each write in the watch cache (integration/cache.py), so the
next cycle sees the pods Binding and the victims Releasing before the writes land. `run` sends
a batch (integration/writer.py calls it behind the cycle) and leaves every assumption settled
(the write landed: shown until the watch has it) or forgotten (it failed, or was not sent).
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
from .cache import AssumedCreate, AssumedDelete, AssumedPod, Assumption, Cache
from .kube import STRATEGIC_PATCH, ApiError, Kube, object_path

log = logging.getLogger("kai_cp.apply")

BR_GV = "scheduling.run.ai/v1alpha2"
_ASSIGNED_RE = re.compile(r'already assigned to node "?([^"\s]+)"?')


class NotLeader(Exception):
    """Leadership was lost while applying (or the batch was dropped): stop writing at once."""


@dataclass
class ApplyOutcome:
    """What the writes of one batch did. Lists are appended from several threads (atomic in CPython);
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
    started_jobs: list[str] = field(default_factory=list)               # jobs with a pod bound by this batch
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def inc(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)


@dataclass
class PodWrite:
    """One pod's bind, as decided: everything the write needs, so a queued batch holds no cycle state."""
    key: str
    namespace: str
    name: str
    uid: str | None
    node: str
    shared_gpu: bool
    body: dict | None = None                  # the BindRequest (BindRequest mode)
    assumption: Assumption | None = None


@dataclass
class GangWrite:
    """A job's binds of one cycle: written together or not at all."""
    job: str
    namespace: str
    uid: str | None
    pods: list[PodWrite]


@dataclass
class EvictWrite:
    ev: dict                                  # the decision's eviction entry (pod, podGroup, action, message ...)
    uid: str | None
    job_namespace: str
    job_uid: str
    evictor_namespace: str
    assumption: Assumption | None = None


@dataclass
class Batch:
    """One cycle's writes in the order apply sends them: failed BindRequests deleted, gangs bound
    (in parallel, one gang's pods in order), then evictions. `alive` is false once the batch was
    dropped (leadership lost): its next write stops it."""
    cycle: int
    cleanup: list[tuple[str, str, str | None, Assumption]] = field(default_factory=list)   # (ns, name, uid, assumption)
    gangs: list[GangWrite] = field(default_factory=list)
    evictions: list[EvictWrite] = field(default_factory=list)
    queued_at: float = field(default_factory=time.monotonic)
    alive: Callable[[], bool] = lambda: True

    @property
    def placing(self) -> set[str]:
        return {p.key for g in self.gangs for p in g.pods}

    def size(self) -> int:
        return len(self.cleanup) + sum(len(g.pods) for g in self.gangs) + len(self.evictions)


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
    """Plans a cycle's writes (`plan`: in the cycle, assumed in the cache at once) and sends them
    (`run`: behind the cycle, integration/writer.py, or at once with `apply`)."""

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
    def _guard(self, batch: Batch) -> None:
        if not batch.alive() or not self.is_leader():
            raise NotLeader()

    def _write(self, batch: Batch, verb: str, resource: str, fn: Callable[[], Any]) -> Any:
        self._guard(batch)
        try:
            out = fn()
            if self.on_write:
                self.on_write(verb, resource, 200)
            return out
        except ApiError as e:
            if self.on_write:
                self.on_write(verb, resource, e.status)
            raise

    @property
    def _pods(self):
        return self.cache.informers["pods"]

    @property
    def _brs(self):
        return self.cache.informers["bindRequests"]

    # -- entry points ------------------------------------------------------------------------
    def apply(self, result: CycleResult, doc: dict, cycle: int = 0) -> ApplyOutcome:
        """Plan and send one cycle's writes, waiting for them."""
        return self.run(self.plan(result, doc, cycle))

    def plan(self, result: CycleResult, doc: dict, cycle: int = 0) -> Batch:
        """The cycle's writes, each assumed in the cache at once (the next cycle sees the pods
        Binding / Releasing and the failed BindRequests gone). Cheap: no API call."""
        batch = Batch(cycle)
        try:
            self._plan(result, doc, batch)
        except BaseException:
            self.forget(batch)        # nothing half-assumed outlives a failed plan
            raise
        return batch

    def _plan(self, result: CycleResult, doc: dict, batch: Batch) -> None:
        state = result.state
        if not self.bind_mode:
            self._plan_cleanup(result, batch)
        gpu_groups = {b["pod"]: b.get("gpuGroups") or [] for b in doc.get("binds", [])}
        by_job: dict[str, list] = {}
        for p in sorted(result.session.placements.values(), key=lambda p: p.task.key):
            if not p.pipelined:
                by_job.setdefault(p.task.job, []).append(p)
        for job_name in sorted(by_job):
            plan = by_job[job_name]
            pods = [self._current(p.task) for p in plan]
            if any(pod is None for pod in pods):
                continue          # the world moved since the snapshot: re-plan next cycle
            job = state.jobs.get(job_name)
            gang = GangWrite(job_name, job.namespace if job else plan[0].task.namespace, job.uid if job else None, [])
            for p, pod in zip(plan, pods):
                node = state.nodes[p.node]
                w = PodWrite(p.task.key, pod.metadata.namespace, pod.metadata.name, pod.metadata.uid, node.name,
                             p.task.request.is_shared_gpu)
                if self.bind_mode:
                    w.assumption = AssumedPod(w.uid, node=w.node)
                    self._pods.assume(w.key, "bind", w.assumption)
                else:
                    w.body = bind_request_body(p.task, pod, node.name, gpu_groups.get(p.task.key, []),
                                               node.gpu_memory, self.pool_key, self.pool_value)
                    w.assumption = AssumedCreate(self._br_model(w.body))
                    self._brs.assume(w.key, "create", w.assumption)
                gang.pods.append(w)
                if len(gang.pods) == 1:
                    batch.gangs.append(gang)
        for ev in doc.get("evictions") or []:
            key = ev.get("pod") or ""
            pod = self._pods.observed(key)
            if pod is None or pod.metadata.deletion_timestamp is not None or self._pods.assumption(key, "evict"):
                continue
            job = state.jobs.get(ev.get("podGroup") or "")
            evictor = state.jobs.get(ev.get("forPodGroup") or "")
            w = EvictWrite(ev, pod.metadata.uid, job.namespace if job else "", job.uid if job else "",
                           evictor.namespace if evictor else "", AssumedPod(pod.metadata.uid, deleting=True))
            batch.evictions.append(w)
            self._pods.assume(key, "evict", w.assumption)

    def forget(self, batch: Batch) -> None:
        """Drop every assumption of a batch whose write was not made (dropped, or leadership lost)."""
        for ns, name, _, a in batch.cleanup:
            if a.expires is None:
                self._brs.unassume(f"{ns}/{name}", "delete", a)
        for g in batch.gangs:
            for w in g.pods:
                if w.assumption is not None and w.assumption.expires is None:
                    self._unassume_pod(w)
        for e in batch.evictions:
            if e.assumption is not None and e.assumption.expires is None:
                self._pods.unassume(e.ev.get("pod") or "", "evict", e.assumption)

    def _unassume_pod(self, w: PodWrite) -> None:
        if self.bind_mode:
            self._pods.unassume(w.key, "bind", w.assumption)
        else:
            self._brs.unassume(w.key, "create", w.assumption)

    def run(self, batch: Batch) -> ApplyOutcome:
        """Send a batch's writes (in this thread, gangs in parallel in the pool). Every assumption
        ends settled (written) or forgotten."""
        out = ApplyOutcome()
        try:
            self._cleanup_bind_requests(batch, out)
            # Gangs are independent: their writes go out in parallel (one gang's pods in order).
            if len(batch.gangs) <= 1:
                for g in batch.gangs:
                    self._gang(batch, g, out)
            else:
                for f in [self._pool.submit(self._gang, batch, g, out) for g in batch.gangs]:
                    try:
                        f.result()
                    except NotLeader:
                        out.stopped_not_leader = True
            if out.stopped_not_leader:
                raise NotLeader()
            self._evict(batch, out)
        except NotLeader:
            out.stopped_not_leader = True
            log.warning("leadership lost while applying; the rest of cycle %d's writes are dropped", batch.cycle)
            self.forget(batch)       # no-op for what was settled
        return out

    def _gang(self, batch: Batch, gang: GangWrite, out: ApplyOutcome) -> None:
        try:
            if self.bind_mode:
                self._bind_gang(batch, gang, out)
            else:
                self._request_gang(batch, gang, out)
        finally:
            for w in gang.pods:      # whatever did not land is shown as the watch sees it again
                a = w.assumption
                if a is not None and a.expires is None:
                    self._unassume_pod(w)

    def _current(self, task) -> Any | None:
        """The pod as the watch last showed it, if the plan for it still holds."""
        pod = self._pods.observed(task.key)
        if pod is None or (task.uid and pod.metadata.uid and pod.metadata.uid != task.uid):
            return None
        if pod.spec.node_name or pod.metadata.deletion_timestamp is not None:
            return None
        return pod

    def _still(self, w: PodWrite) -> Any | None:
        pod = self._pods.observed(w.key)
        if pod is None or (w.uid and pod.metadata.uid and pod.metadata.uid != w.uid):
            return None
        if pod.spec.node_name or pod.metadata.deletion_timestamp is not None:
            return None
        return pod

    def _fail(self, out: ApplyOutcome, key: str, reason: str) -> None:
        delay = self.backoff.fail(key)
        out.failed.append((key, reason))
        log.info("pod %s: %s; backing off %.0fs", key, reason, delay)

    def _br_model(self, made: dict) -> Any:
        brs = self._brs
        return brs.model.__pydantic_validator__.validate_python(brs.trim(made), by_alias=True, by_name=False)

    # -- BindRequest mode ---------------------------------------------------------------------
    def _request_gang(self, batch: Batch, gang: GangWrite, out: ApplyOutcome) -> None:
        if any(self._still(w) is None for w in gang.pods):
            return          # the world moved while the batch waited: re-plan next cycle
        created: list[tuple[str, str]] = []
        landed: list[tuple[PodWrite, str | None, Any]] = []
        for w in gang.pods:
            path = object_path(BR_GV, "bindrequests", w.namespace)
            t0 = time.perf_counter()
            try:
                made = self._write(batch, "create", "bindrequests", lambda: self.kube.create(path, w.body))
                uid = ((made or {}).get("metadata") or {}).get("uid")
            except ApiError as e:
                uid = self._same_request(w) if e.status == 409 else None
                if uid is None:
                    self._fail(out, w.key, f"BindRequest not created: {e}")
                    if e.status == 0 or e.status >= 500:
                        # No answer, or a server error: the request may exist all the same; withdraw it too.
                        created.append((w.namespace, w.name))
                    self._rollback(batch, created)
                    out.inc("gangs_rolled_back")
                    return
                made = None
            out.inc("writes")
            out.bind_seconds.append(time.perf_counter() - t0)
            created.append((w.namespace, w.name))
            landed.append((w, uid, made))
        for w, uid, made in landed:
            self._brs.settle(w.key, "create", w.assumption, uid=uid,
                             model=self._br_model(made) if made is not None else None)
            self.backoff.success(w.key)
            out.bound.append((w.key, w.node))
        out.started_jobs.append(gang.job)
        out.inc("gangs_applied")

    def _same_request(self, w: PodWrite) -> str | None:
        """On 409: the uid of an existing request for the same pod and node (a retried create whose
        answer was lost), else None."""
        try:
            cur = self.kube.get(object_path(BR_GV, "bindrequests", w.namespace, w.name))
        except ApiError:
            return None
        spec = cur.get("spec") or {}
        phase = (cur.get("status") or {}).get("phase")
        meta = cur.get("metadata") or {}
        owners = meta.get("ownerReferences") or []
        same_pod = not owners or any(o.get("uid") == w.uid for o in owners)
        if spec.get("selectedNode") == w.node and phase != "Failed" and same_pod:
            return meta.get("uid") or ""
        return None

    def _rollback(self, batch: Batch, created: list[tuple[str, str]]) -> None:
        for ns, name in created:
            try:
                self._write(batch, "delete", "bindrequests",
                            lambda: self.kube.delete(object_path(BR_GV, "bindrequests", ns, name)))
            except ApiError as e:
                if e.status != 404:
                    log.warning("could not delete BindRequest %s/%s of a rolled-back gang: %s", ns, name, e)
            self._brs.forget(f"{ns}/{name}")

    def _plan_cleanup(self, result: CycleResult, batch: Batch) -> None:
        """KAI deletes failed BindRequests and those for nodes outside the shard (spec 1.7). Each is
        deleted by uid and assumed gone, so later cycles do not delete it again."""
        nodes = {n.name for n in result.state.nodes}
        brs = self._brs
        for br in brs.values()[0]:
            labels = br.metadata.labels or {}
            ours = (labels.get(self.pool_key) == self.pool_value) if (self.pool_key and self.pool_value) \
                else not (self.pool_key and self.pool_key in labels)
            failed = br.status is not None and br.status.phase == "Failed" and br.spec.backoff_limit is None
            gone = br.spec.selected_node and br.spec.selected_node not in nodes and ours
            ns, name = br.metadata.namespace, br.metadata.name
            key = f"{ns}/{name}"
            if (failed or gone) and brs.observed(key) is br:      # a request the watch shows, not one being written
                a = AssumedDelete(br.metadata.uid)
                brs.assume(key, "delete", a)
                batch.cleanup.append((ns, name, br.metadata.uid, a))

    def _cleanup_bind_requests(self, batch: Batch, out: ApplyOutcome) -> None:
        brs = self._brs
        for ns, name, uid, a in batch.cleanup:
            key = f"{ns}/{name}"
            body = {"preconditions": {"uid": uid}} if uid else None
            try:
                self._write(batch, "delete", "bindrequests",
                            lambda: self.kube.delete(object_path(BR_GV, "bindrequests", ns, name), body))
            except ApiError as e:
                if e.status not in (404, 409):        # 409: a newer request of that name (uid precondition)
                    brs.unassume(key, "delete", a)
                    continue
            brs.settle(key, "delete", a)

    # -- bind mode -------------------------------------------------------------------------------
    def _bind_gang(self, batch: Batch, gang: GangWrite, out: ApplyOutcome) -> None:
        pods = [self._still(w) for w in gang.pods]
        if any(p is None for p in pods):
            return
        for w in gang.pods:
            if w.shared_gpu:
                self._fail(out, w.key, "kai-cp --bind cannot bind fractional GPU pods; run KAI's binder "
                                       "(BindRequest mode) for them")
                return
        # Phase 1: the whole gang as a dry run.
        for w, pod in zip(gang.pods, pods):
            try:
                self._post_binding(batch, pod, w.node, dry_run=True)
            except ApiError as e:
                if e.status == 409 and assigned_node(e) == w.node:
                    continue
                self._fail(out, w.key, f"binding refused (dry run): {e}")
                out.inc("gangs_rolled_back")
                return
        # Phase 2: for real.
        bound = 0
        for w, pod in zip(gang.pods, pods):
            t0 = time.perf_counter()
            ok = False
            try:
                self._post_binding(batch, pod, w.node, dry_run=False)
                ok = True
            except ApiError as e:
                if e.status == 409 and assigned_node(e) == w.node:
                    ok = True
                elif e.status == 0 or e.status >= 500:
                    ok = self._bound_to(pod, w.node)      # the answer was lost: look
                if not ok:
                    self._fail(out, w.key, f"binding failed: {e}")
            out.inc("writes")
            out.bind_seconds.append(time.perf_counter() - t0)
            if ok:
                bound += 1
                self.backoff.success(w.key)
                out.bound.append((w.key, w.node))
                self._pods.settle(w.key, "bind", w.assumption)
        if bound:
            out.started_jobs.append(gang.job)
        if bound == len(gang.pods):
            out.inc("gangs_applied")
        elif bound:
            out.inc("partial_gangs")

    def _post_binding(self, batch: Batch, pod, node: str, dry_run: bool) -> None:
        path = object_path("v1", "pods", pod.metadata.namespace, pod.metadata.name, "binding")
        query = {"dryRun": "All"} if dry_run else {}
        self._write(batch, "create", "pods/binding", lambda: self.kube.create(path, binding_body(pod, node), **query))

    def _bound_to(self, pod, node: str) -> bool:
        try:
            cur = self.kube.get(object_path("v1", "pods", pod.metadata.namespace, pod.metadata.name))
        except ApiError:
            return False
        return (cur.get("spec") or {}).get("nodeName") == node and (cur.get("metadata") or {}).get("uid") == pod.metadata.uid

    # -- evictions -------------------------------------------------------------------------------
    def _evict_all(self, evictions: list[dict]) -> ApplyOutcome:
        """Evictions alone (tests, and actions that only evict)."""
        batch = Batch(0)
        for ev in evictions:
            key = ev.get("pod") or ""
            pod = self._pods.observed(key)
            a = AssumedPod(pod.metadata.uid if pod else None, deleting=True)
            self._pods.assume(key, "evict", a)
            batch.evictions.append(EvictWrite(ev, pod.metadata.uid if pod else None, "", "", "", a))
        return self.run(batch)

    def _disruption_target(self, batch: Batch, ns: str, name: str, message: str) -> None:
        """KAI's DisruptionTarget condition, written before the pod is evicted (spec 10.4); a
        strategic merge keeps the pod's other conditions."""
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                                           "message": message, "lastTransitionTime": now}]}}
        self._write(batch, "patch", "pods/status", lambda: self.kube.patch(
            object_path("v1", "pods", ns, name, "status"), body, content_type=STRATEGIC_PATCH))

    def _evict(self, batch: Batch, out: ApplyOutcome) -> None:
        for w in batch.evictions:
            ev = w.ev
            key = ev.get("pod") or ""
            ns, _, name = key.partition("/")
            try:
                self._evict_one(batch, w, key, ns, name, out)
            finally:
                if w.assumption is not None and w.assumption.expires is None:
                    self._pods.unassume(key, "evict", w.assumption)

    def _evict_one(self, batch: Batch, w: EvictWrite, key: str, ns: str, name: str, out: ApplyOutcome) -> None:
        pod = self._pods.observed(key)
        if pod is None or pod.metadata.deletion_timestamp is not None or (w.uid and pod.metadata.uid != w.uid):
            return
        pre = {"uid": pod.metadata.uid} if pod.metadata.uid else {}
        try:
            if self.eviction_condition:
                try:
                    self._disruption_target(batch, ns, name, w.ev.get("message") or "")
                except ApiError as e:
                    if e.status == 404:
                        return
                    log.warning("DisruptionTarget condition on %s failed (evicting anyway): %s", key, e)
            if self.evict_with_delete:
                self._write(batch, "delete", "pods", lambda: self.kube.delete(
                    object_path("v1", "pods", ns, name), {"preconditions": pre}))
            else:
                body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns},
                        "deleteOptions": {"preconditions": pre}}
                self._write(batch, "create", "pods/eviction", lambda: self.kube.create(
                    object_path("v1", "pods", ns, name, "eviction"), body))
            out.evicted.append(key)
            self._pods.settle(key, "evict", w.assumption)
        except ApiError as e:
            if e.status == 429:     # a PodDisruptionBudget says not now: next cycle decides again
                out.evictions_retry.append(key)
            elif e.status != 404:
                log.warning("eviction of %s failed: %s", key, e)
