"""`kai-cp run` at scale against a real kube-apiserver + etcd: N nodes and M pending pods created
in the API server, then the scheduler starts; prints the first cycle after the cache synced,
the steady-state cycle (the state comes from the watch cache, nothing re-listed or re-parsed),
and the scheduler's memory.

    .venv/bin/python bench/bench_incluster.py                 # 1,000 nodes, 5,000 pending pods
    .venv/bin/python bench/bench_incluster.py --queue-gpu-limit 50   # most pods stay pending (over quota)

The API server is built on first use (integration/testing/build_apiserver.sh). Cycle figures are
kai-cp's own log lines: state = snapshot from the cache + cluster state, decide = greedy + CP-SAT,
enqueue = the writes planned and assumed in the cache, status queued. The writes themselves
(BindRequests, 16 in parallel) go out behind the cycle (integration/writer.py); their line says
when the first cycle's were all written. Steady-state cycles are counted once those writes are
done (and, separately, while they were going out). `--sync-writes` runs kai-cp with
`--async-writes=false` (each cycle waits for its writes, as before).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import urllib3  # noqa: E402

from integration.kube import Kube, load_api_client  # noqa: E402
from integration.testing.apiserver import ApiServer, apply_crds, build_binaries, free_port  # noqa: E402
from integration.testing.cluster import create, create_node, namespace, node, pod, podgroup, queue  # noqa: E402

CYCLE = re.compile(r"cycle (\d+): (\d+) to bind, (\d+) to evict, (\d+) unschedulable jobs; "
                   r"state ([\d.]+)s decide ([\d.]+)s enqueue ([\d.]+)s")
WRITES = re.compile(r"cycle (\d+) writes: (\d+) bound, (\d+) failed, (\d+) evicted, (\d+) gangs rolled back.*?; "
                    r"done ([\d.]+)s after the cycle queued them")


def rss_kib(pid: int) -> tuple[int, int]:
    cur = peak = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1])
    return cur, peak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--gang", type=int, default=4, help="pods per PodGroup (default 4)")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--queues", type=int, default=10)
    ap.add_argument("--queue-gpu-limit", type=float, default=-1, help="GPU limit of each leaf queue (default -1: none)")
    ap.add_argument("--steady-cycles", type=int, default=10)
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--save-snapshot", metavar="ZIP",
                    help="write the scheduler's /get-snapshot at the end here (replay with kai-cp solve)")
    ap.add_argument("--sync-writes", action="store_true", help="kai-cp --async-writes=false: each cycle waits for its writes")
    args = ap.parse_args()
    urllib3.disable_warnings()

    t0 = time.monotonic()
    server = ApiServer(build_binaries()).start()
    print(f"API server up in {time.monotonic() - t0:.1f} s (build included when it ran)")
    try:
        kube = Kube(load_api_client(str(server.kubeconfig)))
        apply_crds(kube)
        ns, pool = "bench", "bench"
        namespace(kube, ns)
        t1 = time.monotonic()
        with ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda i: create_node(kube, node(f"node-{i:05d}", cpu="64", memory="512Gi",
                                                         gpus=args.gpus_per_node, pool=pool)), range(args.nodes)))
            create(kube, queue("root", pool=pool))
            list(ex.map(lambda q: create(kube, queue(f"q{q}", parent="root", pool=pool, gpu_limit=args.queue_gpu_limit)),
                        range(args.queues)))
            groups = (args.pods + args.gang - 1) // args.gang

            def make_group(g: int) -> None:
                size = min(args.gang, args.pods - g * args.gang)
                create(kube, podgroup(f"pg-{g:05d}", ns, f"q{g % args.queues}", size, pool=pool))
                for i in range(size):
                    create(kube, pod(f"pg-{g:05d}-{i}", ns, f"pg-{g:05d}", cpu="1", memory="4Gi", gpus=1))
            list(ex.map(make_group, range(groups)))
        print(f"created {args.nodes} nodes, {groups} PodGroups, {args.pods} pending pods in {time.monotonic() - t1:.1f} s")

        log_path = Path(tempfile.mkdtemp(prefix="kai-cp-bench-")) / "scheduler.log"
        metrics_port = free_port()
        plugin_port = free_port() if args.save_snapshot else 0
        with open(log_path, "wb") as log:
            t_start = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "-m", "kai_cp", "run", f"--kubeconfig={server.kubeconfig}", f"--namespace={ns}",
                 f"--partition-label-value={pool}", f"--listen-address=127.0.0.1:{metrics_port}",
                 f"--plugin-server-port={plugin_port}", f"--time-limit={args.time_limit}", "--schedule-period=1s",
                 f"--async-writes={'false' if args.sync_writes else 'true'}"],
                stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=dict(os.environ, PYTHONUNBUFFERED="1"))
            cycles: list[tuple] = []
            writes: dict[int, tuple] = {}
            synced_at = None
            arrivals = [0]

            def arrive() -> None:
                """Steady state: one new single-pod job per second (so every cycle has a change to take in)."""
                while proc.poll() is None and arrivals[0] < 200:
                    n = arrivals[0]
                    arrivals[0] += 1
                    create(kube, podgroup(f"late-{n:04d}", ns, f"q{n % args.queues}", 1, pool=pool))
                    create(kube, pod(f"late-{n:04d}-0", ns, f"late-{n:04d}", cpu="1", memory="4Gi", gpus=1))
                    time.sleep(1.0)
            arriver = None
            peak = (0, 0)
            deadline = time.monotonic() + 600
            def after_first_writes() -> list[tuple]:
                """Cycles that started once the first cycle's writes were done (their log line came first)."""
                text = log_path.read_text(errors="replace")
                first = WRITES.search(text)
                if first is None or int(first.group(1)) != 1:
                    return []
                return [tuple(float(x) for x in m.groups()) for m in CYCLE.finditer(text, first.end())]
            while time.monotonic() < deadline and len(after_first_writes()) < args.steady_cycles + 1:
                time.sleep(0.5)
                text = log_path.read_text(errors="replace")
                if synced_at is None and "cache synced" in text:
                    synced_at = time.monotonic() - t_start
                cycles = [tuple(float(x) for x in m.groups()) for m in CYCLE.finditer(text)]
                writes = {int(m.group(1)): tuple(float(x) for x in m.groups()) for m in WRITES.finditer(text)}
                if cycles and arriver is None:
                    import threading
                    arriver = threading.Thread(target=arrive, daemon=True)
                    arriver.start()
                try:
                    cur, hwm = rss_kib(proc.pid)
                    peak = (max(peak[0], cur), max(peak[1], hwm))
                except OSError:
                    break
            if args.save_snapshot:
                import urllib.request
                with urllib.request.urlopen(f"http://127.0.0.1:{plugin_port}/get-snapshot", timeout=60) as r:
                    Path(args.save_snapshot).write_bytes(r.read())
            proc.terminate()
            proc.wait(30)
        if not cycles:
            print(log_path.read_text()[-3000:])
            return 1
        first = cycles[0]
        after = after_first_writes()
        steady = after[1:1 + args.steady_cycles] or after
        during = [c for c in cycles[1:] if c not in after]
        tot = lambda c: c[4] + c[5] + c[6]  # noqa: E731
        print(f"cache synced {synced_at:.1f} s after start (list of every kind, parse into models)")
        print(f"first cycle after sync: {tot(first):.2f} s = state {first[4]:.2f} + decide {first[5]:.2f} + "
              f"enqueue {first[6]:.2f} ({int(first[1])} pods to bind, {int(first[3])} jobs left pending)")
        w = writes.get(1)
        if w is not None:
            # Async: queued at the end of the cycle; sync: inside the cycle's enqueue.
            end = tot(first) if args.sync_writes else tot(first) + w[5]
            print(f"first cycle's writes: {int(w[1])} BindRequests written ({int(w[2])} failed) {w[5]:.2f} s after the "
                  f"cycle queued them, {end:.2f} s after the cycle started")

        def line(name: str, cs: list[tuple]) -> None:
            if not cs:
                print(f"{name}: none")
                return
            st = [tot(c) for c in cs]
            print(f"{name} ({len(cs)} cycles): median {statistics.median(st):.3f} s, max {max(st):.3f} s "
                  f"(state {statistics.median(c[4] for c in cs):.3f} + decide {statistics.median(c[5] for c in cs):.3f}"
                  f" + enqueue {statistics.median(c[6] for c in cs):.3f})")
        line("cycles while the first cycle's writes went out", during)
        line("steady-state cycle with one job arriving per second, after them", steady)
        print(f"scheduler memory: RSS {peak[0] / 1024:.0f} MiB, peak (VmHWM) {peak[1] / 1024:.0f} MiB")
        print(f"log: {log_path}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
