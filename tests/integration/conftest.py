"""The real-API-server tier: kube-apiserver + etcd built from the Go module proxy on first use
(integration/testing/build_apiserver.sh, cached under ~/.cache/kai-cp/), started once per test
session on loopback, with the CRDs of crds/ applied. Each test works in its own namespace and
node pool (`--partition-label-value`), so schedulers of different tests never see each other's
nodes, queues or PodGroups."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import urllib3

from integration.kube import Kube, load_api_client
from integration.testing.apiserver import ApiServer, apply_crds, build_binaries, free_port
from integration.testing.cluster import namespace

REPO = Path(__file__).resolve().parents[2]
_counter = itertools.count()
urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)   # the test API server's self-signed cert


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory):
    bin_dir = build_binaries()
    server = ApiServer(bin_dir, tmp_path_factory.mktemp("apiserver")).start()
    kube = Kube(load_api_client(str(server.kubeconfig)))
    apply_crds(kube)
    server.kube = kube
    yield server
    server.stop()


@pytest.fixture
def shard(apiserver, request):
    """A fresh namespace and node-pool value for one test."""
    n = next(_counter)
    name = f"t{n}-{request.node.name.replace('_', '-').lower()[:30]}".rstrip("-")
    namespace(apiserver.kube, name)
    return name


class SchedulerProcess:
    """`kai-cp run` as a subprocess, the way it runs in a pod."""

    def __init__(self, kubeconfig: Path, shard: str, extra: list[str], log_path: Path):
        self.metrics_port = free_port()
        self.plugin_port = free_port()
        self.log_path = log_path
        args = [sys.executable, "-m", "kai_cp", "run", f"--kubeconfig={kubeconfig}", f"--namespace={shard}",
                f"--partition-label-value={shard}", f"--listen-address=127.0.0.1:{self.metrics_port}",
                f"--plugin-server-port={self.plugin_port}", "--schedule-period=200ms", "--time-limit=0.5",
                "--api-timeout=3s", *extra]
        self.log = open(log_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=REPO, env=env)

    def get(self, port: int, path: str, timeout: float = 5.0) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.read()

    def metrics(self) -> str:
        return self.get(self.metrics_port, "/metrics").decode()

    def logs(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, dump: bool = False) -> int:
        if self.proc.poll() is None:
            if dump:     # every thread's stack into the log, for a failing test's post-mortem
                self.proc.send_signal(signal.SIGUSR1)
                time.sleep(0.5)
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def start_scheduler(apiserver, shard, tmp_path):
    procs: list[SchedulerProcess] = []

    def start(*extra: str, kubeconfig: Path | None = None) -> SchedulerProcess:
        p = SchedulerProcess(kubeconfig or apiserver.kubeconfig, shard, list(extra),
                             tmp_path / f"scheduler-{len(procs)}.log")
        procs.append(p)
        return p
    yield start
    for p in procs:
        p.stop()


def wait_ready(sched: SchedulerProcess, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not sched.alive():
            raise AssertionError("kai-cp run exited:\n" + sched.logs()[-3000:])
        try:
            if sched.get(sched.metrics_port, "/readyz", timeout=1) == b"ok\n":
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("kai-cp run not ready:\n" + sched.logs()[-3000:])
