"""Leader election on a coordination.k8s.io/v1 Lease, named and placed as KAI's scheduler names
and places it (the scheduler name, in the scheduler's namespace), with KAI's timings (lease
15 s, renew deadline 10 s, retry 5 s by default), so kai-cp and KAI can never both lead one shard.

Safety: `is_leader()` is true only while the last successful renewal is younger than the renew
deadline, which is shorter than the lease: another replica can take the lease only after
`leaseDurationSeconds` without renewal, by which time this one has stopped applying. The
expiry of another holder's lease is judged on this replica's own clock from when it last saw
the record change (client-go's rule), so clock skew between replicas does not matter.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Callable

from .kube import ApiError, Kube, object_path

log = logging.getLogger("kai_cp.leader")


def _micro_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str | None = None,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 5.0,
                 on_started: Callable[[], None] | None = None, on_stopped: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if not renew_deadline < lease_duration:
            raise ValueError("the renew deadline must be shorter than the lease duration")
        if not retry_period < renew_deadline:
            raise ValueError("the retry period must be shorter than the renew deadline")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity or f"{socket.gethostname()}_{uuid.uuid4()}"
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.clock = clock
        self._renewed_at: float | None = None     # monotonic time of our last successful write
        self._observed: tuple | None = None       # (holder, renewTime, transitions) last seen
        self._observed_at = 0.0
        self._leading = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.transitions = 0

    @property
    def path(self) -> str:
        return object_path("coordination.k8s.io/v1", "leases", self.namespace, self.name)

    def is_leader(self) -> bool:
        r = self._renewed_at
        return r is not None and self.clock() - r < self.renew_deadline

    def _record(self, acquire_time: str, transitions: int) -> dict:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(round(self.lease_duration)),
                "acquireTime": acquire_time, "renewTime": _micro_now(), "leaseTransitions": transitions}

    def try_acquire_or_renew(self) -> bool:
        start = self.clock()
        try:
            cur = self.kube.get(self.path)
        except ApiError as e:
            if e.status != 404:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._record(_micro_now(), 0)}
            self.kube.create(object_path("coordination.k8s.io/v1", "leases", self.namespace), body)
            self._renewed_at = start
            return True
        spec = cur.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        seen = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if seen != self._observed:
            self._observed, self._observed_at = seen, start
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and start - self._observed_at < duration:
            return False                                  # someone else holds a live lease
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != self.identity:
            transitions += 1
            acquire = _micro_now()
        else:
            acquire = spec.get("acquireTime") or _micro_now()
        cur["spec"] = self._record(acquire, transitions)
        self.kube.request("PUT", self.path, cur)            # resourceVersion in cur: optimistic lock
        self._renewed_at = start
        self._observed = (self.identity, cur["spec"]["renewTime"], transitions)
        self._observed_at = start
        return True

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                ok = self.try_acquire_or_renew()
            except ApiError as e:
                ok = False
                if e.status != 409:
                    log.info("lease %s/%s: %s", self.namespace, self.name, e)
            except Exception as e:   # never let the elector die silently
                ok = False
                log.exception("lease %s/%s: %s", self.namespace, self.name, e)
            leading = self.is_leader()
            if leading and not self._leading:
                self._leading = True
                self.transitions += 1
                log.info("became leader (%s)", self.identity)
                if self.on_started:
                    self.on_started()
            elif not leading and self._leading:
                self._leading = False
                log.warning("lost leadership (%s)", self.identity)
                if self.on_stopped:
                    self.on_stopped()
            # A leader renews every retry period; a candidate polls at the same rate.
            self._stop.wait(self.retry_period if ok or not self._leading else min(1.0, self.retry_period))

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop; with `release`, hand the lease back so a standby takes over at once."""
        self._stop.set()
        if release and self.is_leader():
            self._renewed_at = None
            try:
                cur = self.kube.get(self.path)
                if (cur.get("spec") or {}).get("holderIdentity") == self.identity:
                    cur["spec"]["holderIdentity"] = ""
                    cur["spec"]["leaseDurationSeconds"] = 1
                    self.kube.request("PUT", self.path, cur)
            except ApiError as e:
                log.info("could not release the lease: %s", e)


def default_identity() -> str:
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4()}"
