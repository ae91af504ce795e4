"""What the cluster's users see of a cycle (spec 10.2-10.3): PodGroup scheduling conditions with
KAI's reason strings, pod `PodScheduled=False` conditions, events (written once per change, not
every cycle), KAI's `last-start-timestamp` and stale-gang annotations, and Queue status.

Everything is a patch (never a whole-object update), sent by a small pool of workers
(`--num-of-status-recording-workers`, as KAI) from a queue keyed by object and kind of write:
a newer write for the same key replaces one not yet sent, so a slow API server gets the latest
status, not a backlog. Unlike KAI the cycle does not wait for these writes (on a large cluster
the first cycle would otherwise wait for thousands of them); no decision reads them back except
schedulingBackoff, which at worst tries a node pool once more. A failed status write is logged
and tried again at the next change; it never stops a cycle.

A message that differs from the one last written for the same object only in its numbers (a
queue's allocation, a fair share that moved as jobs arrived) is written at most once per
`refresh` seconds (`--status-refresh`): with a thousand jobs held back by their queues' limits
such drifts change every job's message every cycle, and writing each (an event and a condition
per pod, per PodGroup) kept ~11,000 writes queued and the API server and the cycle busy. A
change of wording (another reason) is written at once, as before.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import threading
import time
import itertools
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Callable

from kai_cp.cycle import CycleResult
from kai_cp.jobs import ACTIVE_ALLOCATED, PENDING

from .apply import ApplyOutcome, Batch
from .kube import STRATEGIC_PATCH, ApiError, Kube, object_path
from .ratelimit import TokenBucket

log = logging.getLogger("kai_cp.status")

PG_GV = "scheduling.run.ai/v2alpha2"
QUEUE_GV = "scheduling.run.ai/v2"
LAST_START = "kai.scheduler/last-start-timestamp"
STALE = "kai.scheduler/stale-podgroup-timestamp"
CONDITION_TYPE = "UnschedulableOnNodePool"


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@functools.lru_cache(maxsize=4096)
def message_shape(message: str) -> str:
    """The message with its numbers blanked: two messages of one shape say the same thing."""
    return _NUMBER.sub("#", message)


class LastWritten:
    """Per object, the last message written, its shape and when: whether a new message is worth
    a write now (see the module docstring)."""

    __slots__ = ("refresh", "_last")

    def __init__(self, refresh: float):
        self.refresh = refresh
        self._last: dict[Any, tuple[str, str, float]] = {}

    def claim(self, key: Any, message: str) -> bool:
        """True (and recorded as written) when `message` should be written now."""
        last = self._last.get(key)
        if last is not None and last[0] == message:
            return False
        shape, now = message_shape(message), time.monotonic()
        if last is not None and shape == last[1] and now - last[2] < self.refresh:
            return False
        self._last[key] = (message, shape, now)
        return True

    def forget(self, key: Any, message: str) -> None:
        """The write of `message` failed: the next cycle writes again."""
        last = self._last.get(key)
        if last is not None and last[0] == message:
            del self._last[key]

    def get(self, key: Any) -> str | None:
        last = self._last.get(key)
        return last[0] if last is not None else None

    def prune(self, keep: Callable[[Any], bool]) -> None:
        self._last = {k: v for k, v in self._last.items() if keep(k)}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def extra(model: Any, key: str) -> Any:
    """A field the models keep unparsed (status written by KAI), by its JSON name."""
    if model is None:
        return None
    ex = getattr(model, "__pydantic_extra__", None) or {}
    return ex.get(key)


def reason_code(message: str) -> str:
    """KAI's JobFitError reason for a message (spec 10.1)."""
    if message.startswith("QueueDoesNotExist") or "does not exist" in message and message.startswith("Queue"):
        return "QueueDoesNotExist"
    if "quota has reached the allowable limit" in message:
        return "OverLimit"
    if message.startswith("Non-preemptible workload is over quota"):
        return "NonPreemptibleOverQuota"
    if "node-group" in message:
        return "Not enough resources for the workload"
    return "PodSchedulingErrors"


def job_summary(reasons: list[str]) -> str:
    """KAI's job summary: the reason when there is one, else `Unable to schedule podgroup`, then
    the messages counted, sorted and joined (spec 10.1)."""
    msgs = [r.rstrip(".") for r in reasons if r]
    codes = {reason_code(m) for m in msgs}
    head = codes.pop() if len(codes) == 1 and len(msgs) == 1 else "Unable to schedule podgroup"
    if not msgs:
        return head
    counted: dict[str, int] = {}
    for m in msgs:
        counted[m] = counted.get(m, 0) + 1
    body = ". \n".join(sorted(m if n == 1 else f"{n} {m}" for m, n in counted.items()))
    return f"{head}: {body}."


def quantity_list(vec: dict[str, Fraction]) -> dict[str, str]:
    """Queue status resources as Kubernetes quantities: cpu in millicores, memory bytes, GPUs. A
    negative amount is kai-cp's -1, unlimited, which a quantity cannot say: the resource is left out."""
    def num(v: Fraction, scale: int = 1) -> str:
        v = Fraction(v) * scale
        return str(int(v)) if v.denominator == 1 else f"{float(v):.3f}".rstrip("0").rstrip(".")
    rows = (("cpu", "cpu", lambda a: f"{int(a)}m"), ("memory", "memory", num), ("gpu", "nvidia.com/gpu", num))
    return {name: fmt(a) for r, name, fmt in rows if (a := Fraction(vec.get(r, 0))) >= 0}


class StatusWriter:
    def __init__(self, kube: Kube, scheduler_name: str, node_pool: str, workers: int = 5,
                 can_write: Callable[[], bool] = lambda: True, on_write: Callable[[str, str, int], None] | None = None,
                 refresh: float = 60.0, qps: float = 0.0, burst: int = 300):
        self.kube = kube
        self.scheduler_name = scheduler_name
        self.node_pool = node_pool          # the shard's pool value, or "default"
        self._queue: dict[Any, Callable[[], None]] = {}     # key -> latest write not yet sent (insertion order)
        self._cv = threading.Condition()
        self._busy = 0
        self._holding = False       # a cycle's status is being queued: workers wait, the cycle keeps the CPU
        self._closed = False
        self._unique = itertools.count()
        self._limit = TokenBucket(qps, burst)
        self._threads = [threading.Thread(target=self._worker, name=f"status-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()
        self.can_write = can_write
        self.on_write = on_write
        self._events = LastWritten(refresh)                # (object uid, reason) -> last message written
        self._pod_conditions = LastWritten(refresh)        # pod uid -> last PodScheduled=False message
        self._queues: dict[str, dict] = {}                 # queue -> last status written
        self._pg_conditions = LastWritten(refresh)         # PodGroup uid -> last condition message written
        self._lock = threading.Lock()
        self._cycles = 0
        self._stale_sent: dict[str, bool] = {}             # PodGroup uid -> stale annotation set (True) / removed
        self._bind_failed: dict[str, str] = {}             # pod key -> why its write failed, for the next record
        self.written = {"events": 0, "conditions": 0, "podConditions": 0, "annotations": 0, "queues": 0,
                        "nominations": 0}

    # -- plumbing ----------------------------------------------------------------------------
    def _worker(self) -> None:
        while True:
            with self._cv:
                while (not self._queue or self._holding) and not self._closed:
                    self._cv.wait()
                if not self._queue and self._closed:
                    return
            self._limit.acquire()           # before taking a write: a newer one may replace it meanwhile
            with self._cv:
                if not self._queue:
                    continue
                key = next(iter(self._queue))
                job = self._queue.pop(key)
                self._busy += 1
            try:
                job()
            finally:
                with self._cv:
                    self._busy -= 1
                    self._cv.notify_all()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued write was sent (tests, shutdown)."""
        end = time.monotonic() + timeout
        with self._cv:
            while self._queue or self._busy:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def backlog(self) -> int:
        with self._cv:
            return len(self._queue) + self._busy

    def _submit(self, key: Any, kind: str, fn: Callable[[], Any], undo: Callable[[], None] | None = None) -> None:
        def run() -> None:
            if not self.can_write():
                if undo:
                    undo()
                return
            try:
                fn()
                with self._lock:
                    self.written[kind] += 1
                if self.on_write:
                    self.on_write("patch" if kind != "events" else "create", kind, 200)
            except ApiError as e:
                if undo:
                    undo()
                if self.on_write:
                    self.on_write("patch" if kind != "events" else "create", kind, e.status)
                if e.status != 404:
                    log.info("status write (%s) failed: %s", kind, e)
            except Exception as e:   # a bug in one write never stops the others
                if undo:
                    undo()
                log.exception("status write (%s) failed: %s", kind, e)
        with self._cv:
            if key is None:
                key = ("unique", next(self._unique))
            self._queue.pop(key, None)       # a newer write replaces the queued one
            self._queue[key] = run
            self._cv.notify()

    def event(self, futures: list, obj: dict, etype: str, reason: str, message: str, once: bool = True,
              annotations: dict[str, str] | None = None) -> None:
        """A core/v1 Event about `obj` ({kind, apiVersion, namespace, name, uid})."""
        key = (obj["uid"] or f"{obj['namespace']}/{obj['name']}", reason)
        if once:
            with self._lock:
                if not self._events.claim(key, message):
                    return
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        digest = hashlib.sha1(f"{key}{message}{now}".encode()).hexdigest()[:10]
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{obj['name']}.{digest}", "namespace": obj["namespace"],
                             **({"annotations": annotations} if annotations else {})},
                "involvedObject": {k: obj[k] for k in ("kind", "apiVersion", "namespace", "name", "uid") if obj.get(k)},
                "reason": reason, "message": message[:1024], "type": etype,
                "source": {"component": self.scheduler_name}, "reportingComponent": self.scheduler_name,
                "reportingInstance": self.scheduler_name,
                "firstTimestamp": now[:19] + "Z", "lastTimestamp": now[:19] + "Z", "count": 1}

        def undo() -> None:
            with self._lock:
                self._events.forget(key, message)
        self._submit(("event",) + key if once else None, "events",
                     lambda: self.kube.create(object_path("v1", "events", obj["namespace"]), body), undo if once else None)

    # -- one cycle -----------------------------------------------------------------------------
    def record(self, result: CycleResult, doc: dict, applied: ApplyOutcome | None = None,
               queue_objects: set[str] | None = None, placing: set[str] | frozenset = frozenset()) -> None:
        """One cycle's status. With `applied` (the cycle's writes, done), everything at once. Without
        (the writes go behind the cycle): `placing` are the pods whose binds are queued — neither
        pending nor reported yet; `applied()` reports the writes once they land, and the failures
        it saw join the next record's reasons."""
        with self._cv:
            self._holding = True
        try:
            self._record(result, doc, applied, queue_objects, placing)
        finally:
            with self._cv:
                self._holding = False
                self._cv.notify_all()

    def _record(self, result: CycleResult, doc: dict, applied: ApplyOutcome | None,
                queue_objects: set[str] | None, placing: set[str] | frozenset) -> None:
        futures: list = []
        state = result.state
        if applied is not None:
            applied_keys = {k for k, _ in applied.bound}
            failed = dict(applied.failed)
        else:
            applied_keys = set(placing)
            with self._lock:
                failed, self._bind_failed = self._bind_failed, {}
        unsched = {u["podGroup"]: u["reasons"] for u in doc.get("unschedulable", [])}
        if applied is not None:
            pods_by_key = {t.key: t.pod for t in state.tasks} if applied.bound else {}
            for key, node in applied.bound:
                task_pod = pods_by_key.get(key)
                if task_pod is not None:
                    self._scheduled(futures, self._ref_pod(task_pod), key, node)
            done = set(applied.evicted)
            jobs = state.jobs
            self._eviction_events(futures, [ev for ev in doc.get("evictions") or [] if ev.get("pod") in done],
                                  lambda name: (lambda j: (j.namespace, j.uid) if j else None)(jobs.get(name)))
        self._pipelined_events(futures, result, doc)
        self._nominations(result, applied_keys)
        for job in state.jobs.values():
            pg = job.pod_group
            pg_ref = {"kind": "PodGroup", "apiVersion": PG_GV, "namespace": job.namespace, "name": job.name,
                      "uid": job.uid}
            placed_now = [t for t in job.tasks if t.key in applied_keys]
            allocated = sum(1 for t in job.tasks if t.status in ACTIVE_ALLOCATED) + len(placed_now)
            self._annotations(futures, job, pg, placed_now if applied is not None else [], result.stale)
            stale = result.stale.jobs.get(job.name) if result.stale is not None else None
            if stale is not None and stale.event:
                self.event(futures, pg_ref, "Normal", "StaleJob", stale.event)
            waiting = [t for t in job.waiting if t.key not in applied_keys]
            if not waiting:
                continue
            reasons = list(unsched.get(job.name) or [])
            for t in waiting:
                if t.key in failed:
                    reasons.append(f"binding pod {t.key} failed: {failed[t.key]}")
            if not job.is_ready():
                from kai_cp.reasons import not_ready_message
                self.event(futures, pg_ref, "Normal", "NotReady", not_ready_message(job))
                continue
            if not reasons:
                continue          # placed this cycle, or nothing to say
            summary = job_summary(reasons)
            mark = True if pg is None or pg.spec is None or pg.spec.mark_unschedulable is None else bool(pg.spec.mark_unschedulable)
            backoff_pool = pg is not None and pg.spec is not None and pg.spec.scheduling_backoff == 1
            pod_msg = (f"Node-Pool '{self.node_pool}': " if backoff_pool else "") + summary
            for t in waiting:
                if t.status != PENDING or t.pod is None:
                    continue
                ref = self._ref_pod(t.pod)
                self.event(futures, ref, "Warning", "Unschedulable", pod_msg)
                if mark:
                    self._pod_condition(futures, t.pod, pod_msg)
            self.event(futures, pg_ref, "Normal", "Unschedulable", summary)
            if allocated == 0 and pg is not None:
                self._pg_condition(futures, pg, pod_msg, reasons)
        self._queue_status(futures, result, queue_objects)
        self._cycles += 1
        if self._cycles % 100 == 0:
            self._prune(state)

    def _prune(self, state) -> None:
        """Forget what was written about objects that are gone (pods and PodGroups churn)."""
        live = {t.uid for t in state.tasks} | {j.uid for j in state.jobs.values()}
        with self._lock:
            self._events.prune(lambda k: k[0] in live)
            self._pod_conditions.prune(lambda k: k in live)
            self._pg_conditions.prune(lambda k: k in live)
            self._stale_sent = {k: v for k, v in self._stale_sent.items() if k in live}

    def applied(self, batch: Batch, out: ApplyOutcome) -> None:
        """What a batch of writes did, once it is done: `Scheduled` events for the pods bound,
        `last-start-timestamp` on the jobs that started, `Evict` events for the pods evicted; the
        pods whose writes failed are remembered for the next record's reasons."""
        futures: list = []
        if out.failed:
            with self._lock:
                self._bind_failed.update(out.failed)
        writes = {w.key: w for g in batch.gangs for w in g.pods}
        for key, node in out.bound:
            w = writes.get(key)
            if w is not None:
                ref = {"kind": "Pod", "apiVersion": "v1", "namespace": w.namespace, "name": w.name, "uid": w.uid}
                self._scheduled(futures, ref, key, node)
        gangs = {g.job: g for g in batch.gangs}
        for name in out.started_jobs:
            g = gangs.get(name)
            if g is not None:
                path = object_path(PG_GV, "podgroups", g.namespace, g.job)
                patch = {"metadata": {"annotations": {LAST_START: _now()}}}
                self._submit(None, "annotations", lambda path=path, patch=patch: self.kube.patch(path, patch))
        done = set(out.evicted)
        evs = [e for e in batch.evictions if e.ev.get("pod") in done]
        refs = {e.ev.get("podGroup"): (e.job_namespace, e.job_uid) for e in evs if e.job_namespace}
        evictor_ns = {e.ev.get("forPodGroup"): e.evictor_namespace for e in evs}
        self._eviction_events(futures, [e.ev for e in evs], refs.get, evictor_ns.get)

    def _scheduled(self, futures: list, ref: dict, key: str, node: str) -> None:
        self.event(futures, ref, "Normal", "Scheduled",
                   f"Successfully assigned pod {key} to node {node} at node-pool {self.node_pool}", once=False)

    def _eviction_events(self, futures: list, evictions: list[dict], job_ref: Callable[[str], tuple[str, str] | None],
                         evictor_namespace: Callable[[str], str | None] | None = None) -> None:
        """KAI's `Evict` event on each victim's PodGroup, with the count and the evictor (6.2.5)."""
        by_group: dict[str, list[dict]] = {}
        for ev in evictions:
            by_group.setdefault(ev.get("podGroup") or "", []).append(ev)
        for name, evs in by_group.items():
            ref = job_ref(name)
            if ref is None:
                continue
            namespace, uid = ref
            first = evs[0]
            evictor = first.get("forPodGroup") or ""
            if evictor_namespace is not None:
                evictor_ns = evictor_namespace(evictor) or ""
            else:
                evictor_ns = (job_ref(evictor) or ("", ""))[0]
            annotations = {"num-evicted-pods": str(len(evs)), "evictor-pod-group-name": evictor,
                           "evictor-pod-group-namespace": evictor_ns,
                           "evictor-action-type": first.get("action") or ""}
            ref = {"kind": "PodGroup", "apiVersion": PG_GV, "namespace": namespace, "name": name, "uid": uid}
            self.event(futures, ref, "Normal", "Evict", first.get("message") or f"{len(evs)} pods evicted",
                       once=False, annotations=annotations)

    def _pipelined_events(self, futures: list, result: CycleResult, doc: dict) -> None:
        """KAI's `Pipelined` event on each pod pipelined this cycle (written once per node it is
        pipelined to: the decision is re-made every cycle until the pod binds)."""
        if not doc.get("pipelined"):
            return
        pods = {t.key: t.pod for t in result.state.tasks}
        for p in doc["pipelined"]:
            pod = pods.get(p.get("pod"))
            if pod is not None:
                self.event(futures, self._ref_pod(pod), "Normal", "Pipelined",
                           f"Pod {p['pod']} was pipelined to node {p['node']}")

    def _nominations(self, result: CycleResult, placed: set[str]) -> None:
        """`status.nominatedNodeName` on the pods of the preemptors pipelined this cycle, as
        kube-scheduler writes it on a preemptor, so the next cycles serve them first on that node
        (kai_cp/actions/allocate.py `run_allocate`; kai_cp/simulate.py does the same offline;
        which pods: CycleResult.nominations). It stays while the pod is pipelined again to that
        node (its victims take their grace period to leave, many cycles in a cluster) and is
        removed from a pending pod that is not."""
        want = result.nominations()
        for t in result.state.tasks:
            pod = t.pod
            have = pod.status.nominated_node_name if pod.status is not None else None
            node = want.get(t.key)
            if node is None and (have is None or t.key in placed or t.node is not None):
                continue
            if node == have:
                continue
            path = object_path("v1", "pods", pod.metadata.namespace, pod.metadata.name, "status")
            body = {"status": {"nominatedNodeName": node}}
            self._submit(("nominated", t.key), "nominations", lambda path=path, body=body: self.kube.patch(path, body))

    @staticmethod
    def _ref_pod(pod) -> dict:
        return {"kind": "Pod", "apiVersion": "v1", "namespace": pod.metadata.namespace, "name": pod.metadata.name,
                "uid": pod.metadata.uid}

    def _pod_condition(self, futures: list, pod, message: str) -> None:
        uid = pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"
        current = None
        for c in (extra(pod.status, "conditions") or []):
            if isinstance(c, dict) and c.get("type") == "PodScheduled":
                current = (c.get("status"), c.get("reason"), c.get("message"))
        with self._lock:
            if current == ("False", "Unschedulable", message) or not self._pod_conditions.claim(uid, message):
                return
        body = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                           "message": message, "lastTransitionTime": _now(), "lastProbeTime": None}]}}
        path = object_path("v1", "pods", pod.metadata.namespace, pod.metadata.name, "status")

        def undo() -> None:
            with self._lock:
                self._pod_conditions.forget(uid, message)
        self._submit(("podCondition", uid), "podConditions", lambda: self.kube.patch(path, body, STRATEGIC_PATCH), undo)

    def _pg_condition(self, futures: list, pg, message: str, reasons: list[str]) -> None:
        """Spec 10.3: nothing when the latest condition says the same; else this pool's conditions
        are replaced by the new one, appended last with the next transitionID."""
        conds = [c for c in (extra(pg.status, "schedulingConditions") or []) if isinstance(c, dict)]

        def tid(c: dict) -> int:
            try:
                return int(c.get("transitionID"))
            except (TypeError, ValueError):
                return 0
        latest = max(conds, key=tid) if conds else None
        if latest is not None and conds[-1] is latest and latest.get("type") == CONDITION_TYPE and \
                latest.get("nodePool") == self.node_pool and latest.get("reason") == "Unschedulable" and \
                latest.get("message") == message and latest.get("status") == "True":
            return
        uid = pg.metadata.uid or f"{pg.metadata.namespace}/{pg.metadata.name}"
        with self._lock:
            if not self._pg_conditions.claim(uid, message):
                return
        new = {"type": CONDITION_TYPE, "nodePool": self.node_pool, "reason": "Unschedulable", "message": message,
               "status": "True", "transitionID": str((tid(latest) if latest else 0) + 1), "lastTransitionTime": _now(),
               "reasons": [{"reason": reason_code(r), "message": r} for r in reasons]}
        kept = [c for c in conds if c.get("nodePool") != self.node_pool] + [new]
        path = object_path(PG_GV, "podgroups", pg.metadata.namespace, pg.metadata.name, "status")
        body = {"status": {"schedulingConditions": kept}}

        def undo() -> None:
            with self._lock:
                self._pg_conditions.forget(uid, message)
        self._submit(("pgCondition", uid), "conditions", lambda: self.kube.patch(path, body), undo)

    def _annotations(self, futures: list, job, pg, placed_now: list, stale_outcome) -> None:
        """last-start-timestamp when the job started, and the stale-gang timestamp as the cycle's
        stale-gang eviction decided it (set when the job became stale, removed when it is no
        longer; untouched when the action is not configured). Written once until the cache shows
        it: a cycle that still sees the old PodGroup must not move the stale time later."""
        if pg is None:
            return
        ann = pg.metadata.annotations or {}
        patch: dict[str, Any] = {}
        if placed_now:
            patch[LAST_START] = _now()
        decided = stale_outcome.jobs.get(job.name) if stale_outcome is not None else None
        uid = pg.metadata.uid or f"{pg.metadata.namespace}/{pg.metadata.name}"
        with self._lock:
            sent = self._stale_sent.get(uid)      # what was last sent, until the cache shows it
            if (STALE in ann) == sent:
                self._stale_sent.pop(uid, None)
                sent = None
            if decided is not None and decided.write:
                if decided.annotation is not None and sent is not True:
                    patch[STALE] = decided.annotation
                    self._stale_sent[uid] = True
                elif decided.annotation is None and sent is not False:
                    patch[STALE] = None
                    self._stale_sent[uid] = False
        if not patch:
            return
        path = object_path(PG_GV, "podgroups", pg.metadata.namespace, pg.metadata.name)

        def undo() -> None:
            with self._lock:
                self._stale_sent.pop(uid, None)
        self._submit(None, "annotations",
                     lambda: self.kube.patch(path, {"metadata": {"annotations": patch}}), undo)

    def _queue_status(self, futures: list, result: CycleResult, queue_objects: set[str] | None) -> None:
        state, session = result.state, result.session
        for name, q in state.queues.items():
            if queue_objects is not None and name not in queue_objects:
                continue          # the synthetic `default` parent of project-level fairness has no object
            status = {"allocated": quantity_list(session.allocated.get(name, q.allocated)),
                      "allocatedNonPreemptible": quantity_list(session.allocated_np.get(name, q.allocated_np)),
                      "requested": quantity_list(q.request),
                      "fairShare": quantity_list(q.fair_share)}
            with self._lock:
                if self._queues.get(name) == status:
                    continue
                self._queues[name] = status
            path = object_path(QUEUE_GV, "queues", None, name, "status")

            def undo(name=name, status=status) -> None:
                with self._lock:
                    if self._queues.get(name) == status:
                        del self._queues[name]
            self._submit(("queue", name), "queues", lambda path=path, status=status: self.kube.patch(path, {"status": status}), undo)

    def close(self, timeout: float = 10.0) -> None:
        self.flush(timeout)
        with self._cv:
            self._closed = True
            self._cv.notify_all()
