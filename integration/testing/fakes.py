"""Stand-ins for the parts of a cluster the tests do not run: a kubelet that starts bound pods,
and KAI's binder (BindRequest -> pods/binding -> status Succeeded)."""

from __future__ import annotations

import threading
import time

from integration.kube import ApiError, Kube, object_path


class _Loop:
    def __init__(self, period: float = 0.2):
        self.period = period
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except ApiError:
                pass
            self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)

    def step(self) -> None:
        raise NotImplementedError


class Kubelet(_Loop):
    """Marks every bound Pending pod Running (there is no kubelet behind the test API server)."""

    def __init__(self, kube: Kube, namespace: str | None = None, period: float = 0.2):
        super().__init__(period)
        self.kube, self.namespace = kube, namespace
        self.started = 0

    def step(self) -> None:
        pods = self.kube.get(object_path("v1", "pods", self.namespace), fieldSelector="status.phase=Pending")
        for p in pods.get("items") or []:
            if not (p.get("spec") or {}).get("nodeName"):
                continue
            meta = p["metadata"]
            try:
                self.kube.patch(object_path("v1", "pods", meta["namespace"], meta["name"], "status"),
                                {"status": {"phase": "Running"}})
                self.started += 1
            except ApiError:
                pass


class Binder(_Loop):
    """KAI's binder in its simplest form: binds the pod of each pending BindRequest and marks the
    request Succeeded (or Failed with the error, as KAI's binder does)."""

    def __init__(self, kube: Kube, namespace: str | None = None, period: float = 0.2):
        super().__init__(period)
        self.kube, self.namespace = kube, namespace
        self.bound = 0
        self.conflicts = 0      # requests naming a pod already bound to another node (a double bind)

    def step(self) -> None:
        gv = "scheduling.run.ai/v1alpha2"
        brs = self.kube.get(object_path(gv, "bindrequests", self.namespace))
        for br in brs.get("items") or []:
            phase = (br.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                continue
            meta, spec = br["metadata"], br["spec"]
            pod_path = object_path("v1", "pods", meta["namespace"], spec["podName"])
            status = {"phase": "Succeeded"}
            try:
                pod = self.kube.get(pod_path)
                if pod["spec"].get("nodeName") and pod["spec"]["nodeName"] != spec["selectedNode"]:
                    self.conflicts += 1
                    status = {"phase": "Failed", "reason": f"pod is bound to {pod['spec']['nodeName']}"}
                elif not pod["spec"].get("nodeName"):
                    self.kube.create(pod_path + "/binding", {
                        "apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": spec["podName"], "namespace": meta["namespace"], "uid": pod["metadata"]["uid"]},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": spec["selectedNode"]}})
                    self.bound += 1
            except ApiError as e:
                if e.status == 404:
                    continue
                status = {"phase": "Failed", "reason": str(e)}
            try:
                self.kube.patch(object_path(gv, "bindrequests", meta["namespace"], meta["name"], "status"),
                                {"status": status})
            except ApiError:
                pass


def wait_for(cond, timeout: float = 30.0, period: float = 0.2, what: str = "condition"):
    """Poll `cond` until it returns something true. A transient answer of the API server to the
    test's own reads (a transport failure, 429 while its storage re-initialises after an etcd
    fault, 5xx) means "not yet", as it does to the scheduler: a CI run of the faults tier failed
    on one ("429 storage is (re)initializing") while the scheduler itself rode it out."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            last = cond()
        except ApiError as e:
            if not (e.status == 0 or e.status == 429 or e.status >= 500):
                raise
            last = e
        else:
            if last:
                return last
        time.sleep(period)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
