"""A churning workload for fault tests: gangs arrive, run, finish (are deleted), while faults
hit the scheduler; plus the invariant checks run on what the API server holds at the end."""

from __future__ import annotations

import random
import threading
import time

from integration.kube import ApiError, Kube, object_path
from integration.testing.cluster import create, pod, podgroup

PG = "scheduling.run.ai/v2alpha2"


class Churn:
    def __init__(self, kube: Kube, ns: str, queue: str, pool: str, seed: int = 0, every: float = 0.3,
                 sizes=(1, 4), gpus_per_pod: int = 1, max_running_gangs: int = 20, run_seconds: float = 1.0):
        self.kube, self.ns, self.queue, self.pool = kube, ns, queue, pool
        self.rng = random.Random(seed)
        self.every, self.sizes, self.gpus = every, sizes, gpus_per_pod
        self.max_running, self.run_seconds = max_running_gangs, run_seconds
        self.created: dict[str, int] = {}      # gang -> size
        self.finished: set[str] = set()        # gangs completing (pods being deleted) or completed
        self._running_since: dict[str, float] = {}
        self._stop = threading.Event()
        self._creating = threading.Event()
        self._creating.set()
        self._thread: threading.Thread | None = None
        self.n = 0

    def start(self) -> "Churn":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop_creating(self) -> None:
        """No new gangs; running ones still finish (capacity keeps freeing up)."""
        self._creating.clear()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(30)

    def _retry(self, fn, tries: int = 300):
        """Retried through API server restarts; True once the write is known to have happened."""
        for _ in range(tries):
            try:
                fn()
                return True
            except ApiError as e:
                if e.status in (404, 409):
                    return e.status == 409
                time.sleep(0.2)
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._creating.is_set():
                self._create_one()
            self._reap()
            self._stop.wait(self.every)

    def _create_one(self) -> None:
        name = f"g{self.n}"
        self.n += 1
        size = self.rng.randint(*self.sizes)
        if not self._retry(lambda: create(self.kube, podgroup(name, self.ns, self.queue, size, pool=self.pool))):
            return
        for i in range(size):
            self._retry(lambda i=i: create(self.kube, pod(f"{name}-{i}", self.ns, name, gpus=self.gpus)))
        self.created[name] = size

    def _reap(self) -> None:
        """Gangs that have all their pods running for `run_seconds` finish: their pods are deleted."""
        try:
            pods = self.kube.get(object_path("v1", "pods", self.ns)).get("items") or []
        except ApiError:
            return
        by_gang: dict[str, list] = {}
        for p in pods:
            by_gang.setdefault(p["metadata"]["annotations"].get("pod-group-name"), []).append(p)
        now = time.monotonic()
        for gang, ps in by_gang.items():
            if gang not in self.created or gang in self.finished:
                continue
            if len(ps) == self.created[gang] and all((p.get("status") or {}).get("phase") == "Running" for p in ps):
                since = self._running_since.setdefault(gang, now)
                if now - since >= self.run_seconds:
                    # Marked before the deletes: a report taken mid-deletion sees a gang with
                    # fewer pods than its size that is finishing, not partly placed.
                    self.finished.add(gang)
                    for p in ps:
                        self._retry(lambda p=p: self.kube.delete(
                            object_path("v1", "pods", self.ns, p["metadata"]["name"]), gracePeriodSeconds=0))


def gang_report(kube: Kube, ns: str, sizes: dict[str, int]) -> dict:
    """Per gang on the API server now: pods bound (nodeName) and pods with a pending BindRequest.
    Gangs that finished (pods deleted) are absent."""
    pods = kube.get(object_path("v1", "pods", ns)).get("items") or []
    brs = kube.get(object_path("scheduling.run.ai/v1alpha2", "bindrequests", ns)).get("items") or []
    with_br = {b["spec"]["podName"] for b in brs if (b.get("status") or {}).get("phase") != "Failed"}
    out: dict[str, dict] = {}
    for p in pods:
        g = p["metadata"]["annotations"].get("pod-group-name")
        r = out.setdefault(g, {"pods": 0, "placed": 0})
        r["pods"] += 1
        if p["spec"].get("nodeName") or p["metadata"]["name"] in with_br:
            r["placed"] += 1
    return out


def partial_gangs(report: dict, min_members: dict[str, int], finishing: set[str] = frozenset()) -> list[str]:
    """Gangs with some but fewer than minMember pods placed. `finishing`: gangs the workload was
    completing (deleting pod by pod) when the report was taken; every one of them had all its
    pods running first, so their missing pods are deleted ones, not unplaced ones."""
    return sorted(g for g, r in report.items() if g not in finishing and 0 < r["placed"] < min_members.get(g, 1))


def successful_bindings_per_pod(log) -> dict[str, int]:
    """pods/binding calls the API server accepted (201), per pod UID, excluding dry runs."""
    out: dict[str, int] = {}
    for e in log:
        if e.method == "POST" and e.path.endswith("/binding") and e.status in (200, 201) \
                and e.query.get("dryRun") != "All" and e.query.get("rogue") != "1" and e.body:
            uid = (e.body.get("metadata") or {}).get("uid") or e.path
            out[uid] = out.get(uid, 0) + 1
    return out
