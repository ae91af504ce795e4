"""List+watch cache of the objects a cycle reads, parsed once into kai-cp's models.

One informer thread per kind: a paginated list, then a watch from the list's resourceVersion
with bookmarks; 410 Gone (or an ERROR event) re-lists, a dropped connection resumes the watch
from the last resourceVersion seen. Every object is trimmed (integration/trim.py) and
validated into its model once, when it changes; a cycle takes references to the cached
models (no re-list, no re-parse of the world per cycle). An object that fails validation is
kept as raw JSON with its warnings, exactly as the snapshot loader keeps invalid objects, so
it is reported and never stops the others.

Assumptions (kube-scheduler's assume cache): when a cycle decides a write (a BindRequest, a
binding, an eviction, the deletion of a failed BindRequest) the cache shows its result at once,
before the write is even sent (integration/writer.py sends it behind the cycle), so the next
cycle never decides the same pod twice. An assumption is an overlay on the watched object, not
a replacement: it survives re-lists and unrelated watch updates of the object, and is dropped
when the watch shows the write (or shows that the world moved on: the pod deleted or bound by
someone else), when the writer forgets it (the write failed or was dropped), or a while after
the write landed if the watch never showed it (a re-list raced with it).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Callable

from pydantic import ValidationError

from kai_cp.errors import ObjectWarning
from kai_cp.loader import LoadedSnapshot, _validation_warnings
from models import RAW_OBJECT_KINDS, RawObjects, Snapshot

from .kube import ApiError, Kube, dumps_sorted, object_path
from .trim import trimmer

log = logging.getLogger("kai_cp.cache")
_MODELS = {info.key: info for info in RAW_OBJECT_KINDS}


@dataclass(frozen=True)
class Kind:
    key: str                 # rawObjects key of the snapshot
    group_version: str
    plural: str
    namespace: str | None = None   # watch one namespace only (the scheduler's ConfigMaps)
    alternatives: tuple[str, ...] = ()   # other group/versions of the kind, tried in turn when this one is not served
    # Scheduling goes on without it where the scheduler may not read it (403: RBAC from before
    # the kind was watched), as where it is not served; the state then skips what it checks.
    optional: bool = False

    @property
    def path(self) -> str:
        return object_path(self.group_version, self.plural, self.namespace)

    @property
    def kind(self) -> str:
        return _MODELS[self.key].kind


def default_kinds(namespace: str) -> list[Kind]:
    return [
        Kind("pods", "v1", "pods"),
        Kind("nodes", "v1", "nodes"),
        Kind("queues", "scheduling.run.ai/v2", "queues"),
        Kind("podGroups", "scheduling.run.ai/v2alpha2", "podgroups"),
        Kind("bindRequests", "scheduling.run.ai/v1alpha2", "bindrequests"),
        Kind("topologies", "kai.scheduler/v1alpha1", "topologies", alternatives=("kai.scheduler/v1",)),
        Kind("priorityClasses", "scheduling.k8s.io/v1", "priorityclasses"),
        Kind("configMaps", "v1", "configmaps", namespace),
        # a pending pod's claims (kai_cp/volumes.py, Kubernetes' VolumeBinding pre-filter)
        Kind("persistentVolumeClaims", "v1", "persistentvolumeclaims", optional=True),
        Kind("storageClasses", "storage.k8s.io/v1", "storageclasses", optional=True),
    ]


def fingerprint(key: str, trimmed: dict) -> bytes:
    """What a cycle reads of an object: without its resourceVersion and the status kai-cp itself
    writes (pod PodScheduled conditions, Queue status, PodGroup status unless the PodGroup uses
    schedulingBackoff, which reads it). Two versions with the same fingerprint schedule alike."""
    meta = {k: v for k, v in (trimmed.get("metadata") or {}).items() if k != "resourceVersion"}
    out = dict(trimmed, metadata=meta)
    if key == "pods":
        out["status"] = {k: v for k, v in (trimmed.get("status") or {}).items() if k != "conditions"}
    elif key == "queues":
        out.pop("status", None)
    elif key == "podGroups" and (trimmed.get("spec") or {}).get("schedulingBackoff") in (None, -1):
        out.pop("status", None)
    return dumps_sorted(out)


class Gone(Exception):
    """The watch's resourceVersion is too old (410): re-list."""


ASSUMED_TTL = 30.0      # seconds an assumption whose write landed waits for the watch to show it

_UNSET = object()


class Assumption:
    """One decided write, shown over the watched object (or its absence) until the watch shows it.
    `view` maps the watched object (None: absent) to what a cycle sees; `confirmed` says the
    watched object shows the write, or makes it moot. Views are cached per base object so a
    cycle sees the same model object from cycle to cycle (the state build may cache on it)."""

    def __init__(self) -> None:
        self.written_uid: str | None = None   # uid of the object the write made (BindRequest created)
        self.expires: float | None = None     # monotonic; set once the write landed
        self._base: Any = _UNSET
        self._out: Any = None

    def view(self, obj: Any) -> Any:
        if obj is not self._base:
            self._base, self._out = obj, self._make(obj)
        return self._out

    def _make(self, obj: Any) -> Any:
        raise NotImplementedError

    def confirmed(self, obj: Any) -> bool:
        raise NotImplementedError


class AssumedCreate(Assumption):
    """An object kai-cp creates (a BindRequest): shown as built until the watch holds the object
    the create made (same uid)."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model

    def _make(self, obj: Any) -> Any:
        return self.model

    def confirmed(self, obj: Any) -> bool:
        return self.written_uid is not None and obj is not None and obj.metadata.uid == self.written_uid


class AssumedDelete(Assumption):
    """An object kai-cp deletes (a failed BindRequest, by uid): hidden until the watch no longer
    holds that uid."""

    def __init__(self, uid: str | None):
        super().__init__()
        self.uid = uid

    def _make(self, obj: Any) -> Any:
        return None if obj is not None and obj.metadata.uid == self.uid else obj

    def confirmed(self, obj: Any) -> bool:
        return obj is None or obj.metadata.uid != self.uid


class AssumedPod(Assumption):
    """A pod kai-cp binds to `node` or evicts (`deleting`): the watched pod with that change,
    until the watched pod shows it, is gone, is another pod of the same name, or was bound by
    someone else (what the API server holds wins)."""

    def __init__(self, uid: str | None, node: str | None = None, deleting: bool = False):
        super().__init__()
        self.uid, self.node, self.deleting = uid, node, deleting

    def _make(self, obj: Any) -> Any:
        if obj is None:
            return None
        if self.node:
            obj = obj.model_copy(update={"spec": obj.spec.model_copy(update={"node_name": self.node})})
        if self.deleting:
            obj = obj.model_copy(update={"metadata": obj.metadata.model_copy(
                update={"deletion_timestamp": datetime.now(timezone.utc)})})
        return obj

    def confirmed(self, obj: Any) -> bool:
        if obj is None or (self.uid and obj.metadata.uid != self.uid):
            return True
        if self.deleting:
            return obj.metadata.deletion_timestamp is not None
        return bool(obj.spec.node_name)


def obj_key(meta: dict[str, Any] | None) -> str:
    meta = meta or {}
    ns = meta.get("namespace") or ""
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


class Informer:
    def __init__(self, kube: Kube, kind: Kind, on_change: Callable[[str], None] | None = None,
                 page_size: int = 500, watch_seconds: int = 240, stats: dict | None = None):
        self.kube = kube
        self.kind = kind
        # the versions to try, the configured one first (a newer KAI may serve only a later one)
        self._versions = [kind] + [replace(kind, group_version=gv, alternatives=()) for gv in kind.alternatives]
        self._version_at = 0
        self.page_size = page_size
        self.watch_seconds = watch_seconds
        self.on_change = on_change
        self.model = _MODELS[kind.key].model
        self.trim = trimmer(kind.key)
        self.store: dict[str, Any] = {}
        self.invalid: dict[str, tuple[dict, list[ObjectWarning]]] = {}
        self.fingerprints: dict[str, bytes] = {}     # key -> what a cycle reads of it (see fingerprint)
        self.assumed: dict[str, dict[str, Assumption]] = {}   # key -> aspect -> decided write not yet watched
        self.rv: str | None = None
        self.lock = threading.RLock()
        self.synced = threading.Event()
        self.epoch = 0              # bumped by every list: a watch started before it stops applying
        self.version = 0            # bumped by every change of store or invalid (see sorted_values)
        self._sorted: tuple | None = None     # (version, models in key order, invalid, warnings)
        self.stats = stats if stats is not None else {}
        self._stop = threading.Event()
        self._relist = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp_lock = threading.Lock()

    # -- parsing -------------------------------------------------------------------------
    def _parse(self, raw: dict) -> tuple[str, Any, list[ObjectWarning] | None, dict]:
        trimmed = self.trim(raw)
        key = obj_key(trimmed.get("metadata"))
        if self.model is None:
            return key, trimmed, None, trimmed
        try:
            return key, self.model.__pydantic_validator__.validate_python(trimmed, by_alias=True, by_name=False), None, trimmed
        except ValidationError as exc:
            ident = f"{self.kind.kind}/{key}"
            return key, None, _validation_warnings(ident, trimmed, exc), trimmed

    def _put(self, raw: dict) -> bool:
        """Store an object; False when nothing a cycle reads changed (only our own status echoes)."""
        key, model, warnings, trimmed = self._parse(raw)
        fp = fingerprint(self.kind.key, trimmed)
        changed = self.fingerprints.get(key) != fp
        self.fingerprints[key] = fp
        self.version += 1
        if model is not None:
            self.store[key] = model
            self.invalid.pop(key, None)
        else:
            self.store.pop(key, None)
            self.invalid[key] = (trimmed, warnings or [])
        return changed

    def _delete(self, raw: dict) -> None:
        key = obj_key(raw.get("metadata"))
        self.store.pop(key, None)
        self.invalid.pop(key, None)
        self.fingerprints.pop(key, None)
        self.version += 1

    # -- list / watch --------------------------------------------------------------------
    def list_now(self) -> None:
        """A full list, swapped in atomically; later events of an older watch are ignored."""
        items: list[dict] = []
        cont = None
        while True:
            doc = self.kube.get(self.kind.path, limit=self.page_size, **({"continue": cont} if cont else {}))
            items.extend(doc.get("items") or [])
            cont = (doc.get("metadata") or {}).get("continue")
            rv = (doc.get("metadata") or {}).get("resourceVersion")
            if not cont:
                break
        fresh = Informer.__new__(Informer)
        fresh.store, fresh.invalid, fresh.fingerprints, fresh.version = {}, {}, {}, 0
        fresh.trim, fresh.model, fresh.kind = self.trim, self.model, self.kind
        for raw in items:
            Informer._put(fresh, raw)
        with self.lock:
            self.store, self.invalid = fresh.store, fresh.invalid
            self.fingerprints = fresh.fingerprints
            self.version += 1
            self.rv = rv
            self.epoch += 1
        self.stats["lists"] = self.stats.get("lists", 0) + 1
        self.synced.set()
        if self.on_change:
            self.on_change(self.kind.key)

    def _watch(self) -> None:
        with self.lock:
            rv, epoch = self.rv, self.epoch
        query = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(self.watch_seconds)}
        for ev in self.kube.stream_lines(self.kind.path, query, read_timeout=self.watch_seconds + 30):
            if self._stop.is_set() or self._relist.is_set():
                return
            typ = ev.get("type")
            obj = ev.get("object") or {}
            if typ == "ERROR":
                code = obj.get("code")
                if code == 410 or obj.get("reason") in ("Expired", "Gone"):
                    raise Gone(obj.get("message", "resource version too old"))
                raise ApiError(int(code or 0), obj.get("message", "watch error"), obj, "WATCH", self.kind.path)
            new_rv = (obj.get("metadata") or {}).get("resourceVersion")
            with self.lock:
                if self.epoch != epoch:
                    return      # a re-list happened meanwhile; resume from its version
                if typ == "BOOKMARK":
                    self.rv = new_rv or self.rv
                    continue
                changed = True
                if typ in ("ADDED", "MODIFIED"):
                    changed = self._put(obj)
                elif typ == "DELETED":
                    self._delete(obj)
                if new_rv:
                    self.rv = new_rv
            self.stats["events"] = self.stats.get("events", 0) + 1
            if changed and self.on_change:
                self.on_change(self.kind.key)

    def run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                if self.rv is None or self._relist.is_set():
                    self._relist.clear()
                    self.list_now()
                self._watch()
                backoff = 0.2
            except Gone as e:
                log.info("%s: watch expired (%s); re-listing", self.kind.key, e)
                self.stats["gone"] = self.stats.get("gone", 0) + 1
                with self.lock:
                    self.rv = None
            except ApiError as e:
                if e.status == 404 and self.rv is None:
                    tried = self.kind
                    self._version_at = (self._version_at + 1) % len(self._versions)
                    self.kind = self._versions[self._version_at]
                    if self._version_at:
                        log.info("%s: %s not served; trying %s", tried.key, tried.group_version, self.kind.group_version)
                        continue
                    # The kind is not served (a CRD not installed): schedule without it, say so, look again.
                    if not self.synced.is_set():
                        log.warning("%s: %s is not served by the API server (CRD missing?); scheduling without "
                                    "it and checking again every 30s", self.kind.key,
                                    " nor ".join(k.path for k in self._versions))
                    self._without(30)
                    continue
                if e.status == 403 and self.kind.optional and self.rv is None:
                    if not self.synced.is_set():
                        log.warning("%s: not permitted to list %s (RBAC from before kai-cp read it? see "
                                    "deploy/rbac.yaml); scheduling without it and asking again every 60s",
                                    self.kind.key, self.kind.path)
                    self._without(60)
                    continue
                if e.status == 410:
                    self.stats["gone"] = self.stats.get("gone", 0) + 1
                    with self.lock:
                        self.rv = None
                    continue
                self.stats["errors"] = self.stats.get("errors", 0) + 1
                log.warning("%s: %s; retrying in %.1fs", self.kind.key, e, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception as e:  # a bug must not kill the informer: log and carry on
                self.stats["errors"] = self.stats.get("errors", 0) + 1
                log.exception("%s: unexpected error: %s", self.kind.key, e)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _without(self, seconds: float) -> None:
        """Schedule without this kind (none of its objects, synced) and look again later."""
        with self.lock:
            self.store, self.invalid = {}, {}
            self.version += 1
        self.synced.set()
        self._stop.wait(seconds)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.kind.key}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def request_relist(self) -> None:
        self._relist.set()

    # -- reads and assumptions -----------------------------------------------------------
    def _view(self, key: str, obj: Any, now: float) -> Any:
        """The watched object `obj` with the assumptions on `key` over it (lock held); drops the
        assumptions the watch confirmed or that expired."""
        chain = self.assumed.get(key)
        if not chain:
            return obj
        out = obj
        for aspect, a in list(chain.items()):
            if a.confirmed(obj) or (a.expires is not None and now > a.expires):
                del chain[aspect]
                continue
            out = a.view(out)
        if not chain:
            del self.assumed[key]
        return out

    def values(self) -> tuple[list[Any], list[dict], list[ObjectWarning]]:
        with self.lock:
            if self.assumed:
                now = time.monotonic()
                models = [v if k not in self.assumed else self._view(k, v, now) for k, v in self.store.items()]
                models += [self._view(k, None, now) for k in list(self.assumed) if k not in self.store]
                models = [m for m in models if m is not None]
            else:
                models = list(self.store.values())
            invalid = list(self.invalid.values())
        return models, [raw for raw, _ in invalid], [w for _, ws in invalid for w in ws]

    def sorted_values(self) -> tuple[list[Any], list[dict], list[ObjectWarning]]:
        """`values` with the models in key order (namespace, name): the same cluster gives the
        same order, so the same decisions. Kept until the next change: most cycles find most
        kinds unchanged, and sorting thousands of pods each cycle costs more than the rest of
        reading them."""
        with self.lock:
            now = time.monotonic()
            if any(a.expires is not None and now > a.expires for chain in self.assumed.values() for a in chain.values()):
                self.version += 1          # an assumption the watch never showed ran out: read again
            cached = self._sorted
            if cached is None or cached[0] != self.version:
                models, invalid, warnings = self.values()
                models.sort(key=_sort_key)
                cached = self._sorted = (self.version, models, invalid, warnings)
        return list(cached[1]), list(cached[2]), list(cached[3])

    def get(self, key: str) -> Any:
        """The object as a cycle sees it: watched, with kai-cp's assumptions over it."""
        with self.lock:
            obj = self.store.get(key)
            return self._view(key, obj, time.monotonic()) if key in self.assumed else obj

    def observed(self, key: str) -> Any:
        """The object as the watch last showed it (no assumptions): what a write is checked against."""
        with self.lock:
            return self.store.get(key)

    def assumption(self, key: str, aspect: str) -> Assumption | None:
        with self.lock:
            return (self.assumed.get(key) or {}).get(aspect)

    def assume(self, key: str, aspect: str, assumption: Assumption) -> None:
        """Show a decided write at once (see the module docstring)."""
        with self.lock:
            self.assumed.setdefault(key, {})[aspect] = assumption
            self.version += 1

    def settle(self, key: str, aspect: str, assumption: Assumption, uid: str | None = None,
               model: Any = None, ttl: float = ASSUMED_TTL) -> None:
        """The write landed (it made `model`, uid `uid`): keep showing it until the watch does, at
        most `ttl` seconds."""
        with self.lock:
            if (self.assumed.get(key) or {}).get(aspect) is assumption:
                assumption.written_uid = uid
                assumption.expires = time.monotonic() + ttl
                if model is not None and isinstance(assumption, AssumedCreate):
                    assumption.model, assumption._base = model, _UNSET
                self.version += 1

    def unassume(self, key: str, aspect: str, assumption: Assumption | None = None) -> None:
        """The write failed or will not be sent: show the watched object again (a change)."""
        with self.lock:
            chain = self.assumed.get(key)
            if not chain or aspect not in chain or (assumption is not None and chain[aspect] is not assumption):
                return
            del chain[aspect]
            if not chain:
                del self.assumed[key]
            self.version += 1
        if self.on_change:
            self.on_change(self.kind.key)

    def clear_assumed(self) -> None:
        with self.lock:
            had = bool(self.assumed)
            self.assumed = {}
            self.version += 1
        if had and self.on_change:
            self.on_change(self.kind.key)

    def forget(self, key: str) -> None:
        """Drop the watched object (kai-cp deleted it; the watch will say so too)."""
        with self.lock:
            self.store.pop(key, None)
            self.version += 1


class Cache:
    """All informers of one scheduler; `generation` counts changes (any kind)."""

    def __init__(self, kube: Kube, namespace: str, kinds: list[Kind] | None = None, page_size: int = 500):
        self.kube = kube
        self.generation = 0
        self.stats: dict[str, dict] = {}
        self._gen_lock = threading.Lock()
        self.informers = {k.key: Informer(kube, k, self._changed, page_size, stats=self.stats.setdefault(k.key, {}))
                          for k in (kinds or default_kinds(namespace))}

    def _changed(self, key: str) -> None:
        with self._gen_lock:
            self.generation += 1

    def start(self) -> None:
        for inf in self.informers.values():
            inf.start()

    def stop(self) -> None:
        for inf in self.informers.values():
            inf.stop()

    def wait_synced(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        for inf in self.informers.values():
            left = None if end is None else max(0.0, end - time.monotonic())
            if not inf.synced.wait(left):
                return False
        return True

    def relist_all(self) -> None:
        """A fresh list of every kind, in the caller's thread (on becoming leader)."""
        for inf in self.informers.values():
            inf.list_now()

    def counts(self) -> dict[str, int]:
        return {k: len(inf.store) for k, inf in self.informers.items()}

    def clear_assumed(self) -> None:
        """Forget every assumption (a replica that stops or starts leading trusts the API server only)."""
        for inf in self.informers.values():
            inf.clear_assumed()

    def snapshot(self, config: dict | None, params: dict | None,
                 replace_pods: Callable[[Any], Any] | None = None) -> LoadedSnapshot:
        """The cycle's input: references to the cached models, in a stable order (same cluster,
        same decisions). `replace_pods` may swap a pod for a modified copy (bind back-off)."""
        lists: dict[str, list] = {}
        raw_invalid: dict[str, list[dict]] = {info.key: [] for info in RAW_OBJECT_KINDS}
        warnings: list[ObjectWarning] = []
        for key, inf in self.informers.items():
            models, invalid, warns = inf.sorted_values()
            if key == "pods" and replace_pods is not None:
                models = [replace_pods(p) for p in models]
            lists[key] = models
            raw_invalid[key] = invalid
            warnings += warns
        raw = RawObjects.model_construct(**{_field(k): v for k, v in lists.items()})
        snap = Snapshot.model_construct(config=config, scheduler_params=params, raw_objects=raw)
        return LoadedSnapshot(snapshot=snap, warnings=warnings, raw_invalid=raw_invalid)


def _sort_key(m: Any) -> Any:
    return (m.metadata.namespace or "", m.metadata.name) if hasattr(m, "metadata") else obj_key(m.get("metadata"))


def _field(key: str) -> str:
    """rawObjects JSON key -> RawObjects attribute name."""
    out = []
    for ch in key:
        out.append("_" + ch.lower() if ch.isupper() else ch)
    return "".join(out)
