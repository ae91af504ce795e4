"""Start etcd + kube-apiserver on loopback for tests and benches.

No controller manager runs, so the ServiceAccount admission plugin is off (no `default`
ServiceAccount is needed), and no kubelet: `integration.testing.fakes.Kubelet` marks bound
pods Running. The admin authenticates with a static token in group system:masters; RBAC is on,
so deploy/'s least-privilege role can be checked with a real ServiceAccount token.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BUILD_SCRIPT = HERE / "build_apiserver.sh"
ADMIN_TOKEN = "kai-cp-test-admin-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_binaries(log=sys.stderr) -> Path:
    """Build (first run on a machine: minutes) or find the cached binaries; returns their folder."""
    env = dict(os.environ)
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"building kube-apiserver/etcd failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    took = time.monotonic() - t0
    if took > 5:
        print(f"[kai-cp] built kube-apiserver and etcd in {took:.0f} s", file=log)
    return Path(proc.stdout.strip().splitlines()[-1])


class ApiServer:
    def __init__(self, bin_dir: Path, workdir: Path | None = None, watch_cache: bool = True):
        self.bin_dir = Path(bin_dir)
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kai-cp-apiserver-"))
        self.own_workdir = workdir is None
        self.etcd_port = free_port()
        self.peer_port = free_port()
        self.port = free_port()
        self.watch_cache = watch_cache
        self.etcd: subprocess.Popen | None = None
        self.apiserver: subprocess.Popen | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    def _keys(self) -> None:
        key, pub = self.workdir / "sa.key", self.workdir / "sa.pub"
        if not key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
            subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)], check=True, capture_output=True)
        (self.workdir / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n')

    def start_etcd(self) -> None:
        log = open(self.workdir / "etcd.log", "ab")
        self.etcd = subprocess.Popen(
            [str(self.bin_dir / "etcd"), "--name", "default", "--data-dir", str(self.workdir / "etcd-data"),
             "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-cluster", f"default=http://127.0.0.1:{self.peer_port}",
             "--quota-backend-bytes", str(4 * 1024 ** 3), "--log-level", "warn", "--unsafe-no-fsync"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait(lambda: self._etcd_ok(), 30, "etcd")

    def _etcd_ok(self) -> bool:
        try:
            with urllib.request.urlopen(self.etcd_url + "/health", timeout=1) as r:
                return b"true" in r.read()
        except OSError:
            return False

    def start_apiserver(self) -> None:
        log = open(self.workdir / "apiserver.log", "ab")
        args = [str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}", f"--cert-dir={self.workdir / 'certs'}",
                f"--token-auth-file={self.workdir / 'tokens.csv'}", "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={self.workdir / 'sa.pub'}",
                f"--service-account-signing-key-file={self.workdir / 'sa.key'}",
                "--disable-admission-plugins=ServiceAccount", "--service-cluster-ip-range=10.96.0.0/16",
                "--endpoint-reconciler-type=none", "--enable-priority-and-fairness=false",
                f"--watch-cache={'true' if self.watch_cache else 'false'}",
                "--max-requests-inflight=1000", "--max-mutating-requests-inflight=500",
                "--v=0"]
        self.apiserver = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait(self._ready, 90, "kube-apiserver")

    def _ready(self) -> bool:
        import ssl
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(self.url + "/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        try:
            with urllib.request.urlopen(req, timeout=2, context=ctx) as r:
                return r.status == 200
        except OSError:
            return False

    def _wait(self, ok, seconds: float, what: str) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if ok():
                return
            for p in (self.etcd, self.apiserver):
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"{what} exited ({p.returncode}); see {self.workdir}")
            time.sleep(0.2)
        raise RuntimeError(f"{what} not ready after {seconds:.0f} s; see {self.workdir}")

    def start(self) -> "ApiServer":
        atexit.register(self.stop)      # never leave etcd / kube-apiserver behind a crashed caller
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._keys()
        self.start_etcd()
        self.start_apiserver()
        self.write_kubeconfig(self.workdir / "kubeconfig", self.url)
        return self

    def write_kubeconfig(self, path: Path, server: str, token: str = ADMIN_TOKEN) -> Path:
        cluster = {"server": server}
        if server.startswith("https"):
            cluster["insecure-skip-tls-verify"] = True
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
               "clusters": [{"name": "test", "cluster": cluster}],
               "users": [{"name": "test", "user": {"token": token}}],
               "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}]}
        Path(path).write_text(json.dumps(doc))
        return Path(path)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    def stop_apiserver(self) -> None:
        if self.apiserver and self.apiserver.poll() is None:
            self.apiserver.terminate()
            try:
                self.apiserver.wait(5)
            except subprocess.TimeoutExpired:
                self.apiserver.kill()
                self.apiserver.wait()

    def restart_apiserver(self, compact: bool = False) -> None:
        """Every watch drops; with `compact`, etcd forgets old revisions first, so clients resuming
        from their last resourceVersion get 410 Gone and must re-list."""
        self.stop_apiserver()
        if compact:
            self.compact_etcd()
        self.start_apiserver()
        self.restarts += 1

    def compact_etcd(self) -> int:
        def post(path: str, body: dict) -> dict:
            req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        rev = int(post("/v3/kv/range", {"key": base64.b64encode(b"/").decode(), "limit": 1})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    def stop(self) -> None:
        self.stop_apiserver()
        if self.etcd and self.etcd.poll() is None:
            self.etcd.terminate()
            try:
                self.etcd.wait(20)
            except subprocess.TimeoutExpired:
                self.etcd.kill()
        if self.own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def apply_crds(kube, folder: Path = REPO / "crds", timeout: float = 30.0) -> list[str]:
    """Create (or replace) every CRD in `folder` and wait until each is Established."""
    import yaml
    from integration.kube import ApiError
    names = []
    for f in sorted(folder.glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if not doc:
                continue
            path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
            try:
                kube.create(path, doc)
            except ApiError as e:
                if e.status != 409:
                    raise
                cur = kube.get(f"{path}/{doc['metadata']['name']}")
                doc["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
                kube.request("PUT", f"{path}/{doc['metadata']['name']}", doc)
            names.append(doc["metadata"]["name"])
    end = time.monotonic() + timeout
    for n in names:
        while True:
            cur = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
            if any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (cur.get("status") or {}).get("conditions") or []):
                break
            if time.monotonic() > end:
                raise RuntimeError(f"CRD {n} not established")
            time.sleep(0.1)
    return names
