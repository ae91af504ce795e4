#!/usr/bin/env python3
"""kai-cp on the FGD benchmark: the Alibaba "openb" GPU-sharing trace (Weng et al., "Beware of
Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX
ATC'23), under the paper's protocol, beside the authors' published results.

Why: packing fractional GPUs well is what GPU sharing is for; this is the public benchmark for
it, and FGD is the best published scheduler on it.

    python bench/bench_fgd.py [--traces default gpushare100 ...] [--seeds 42 ... 51]
                              [--batch 100] [--engine cp-sat|greedy] [--time-limit 1.0]
                              [--data ../shared/data/fgd-openb] [--json out.json] [--curve]

Data: read in place from ``--data`` (default ``../shared/data/fgd-openb`` relative to the
repository root; never copied into the repository). Protocol (FGD's simulator, README there):

* cluster: ``openb_node_list_gpu_node.csv``, 1,213 nodes / 6,212 GPUs; each node a Kubernetes
  node with its CPU, memory and GPUs, label ``gpu-model=<model>`` and a per-GPU memory label of
  ``GPU_MEMORY`` MiB (a multiple of 1,000, so a ``gpu_milli`` fraction is an exact number of MiB:
  KAI sizes a fraction as floor(portion x memory)).
* workload: pods of ``openb_pod_list_<trace>.csv`` sampled with replacement (``random.Random(seed)``)
  until their total GPU request reaches 1.3 x 6,212 GPUs, then shuffled with the same generator;
  they arrive in that order. ``gpu_milli`` < 1000 is a ``gpu-fraction`` annotation
  (``gpu_milli/1000``), ``num_gpu`` whole GPUs otherwise, ``gpu_spec`` (``A|B``) a required node
  affinity on ``gpu-model`` In [A, B]; CPU and memory as requested. Each pod is its own PodGroup
  (minMember 1) in one queue without quota or limit.
* each cycle: the next ``--batch`` arrived pods become pending and one kai-cp cycle runs
  (``kai_cp.cycle.run_cycle``); bound pods run on their node for good (no departures); pods left
  pending failed (FGD counts them as failed; with no departures capacity only shrinks, so
  they would not fit later either) and are removed. A batch never straddles a whole
  percentage of arrived demand, so the figure at 100 % is taken exactly where FGD takes it.
* figure: GPU allocation ratio = GPUs allocated (fractions counted as gpu_milli/1000) / 6,212,
  at each whole percentage of arrived GPU demand; the headline is at 100 %.

Cycle time is the wall time of ``run_cycle`` alone (p50, p99); building the state from the
snapshot each cycle (``build_cluster_state``) is reported apart, as is process start-up (the
engine's imports included: OR-Tools for cp-sat, otherwise paid inside the first cycle) and the
garbage collector, which runs after each batch (``kai_cp.gcpause.collected_after``, p99
reported), as the in-cluster scheduler collects after each cycle. Left to itself, Python's
collector ran at the end of whichever cycle crossed its threshold: 40-120 ms of earlier
batches' garbage added to one cycle in ten.
FGD's figures are the means over the same seeds from ``fgd_expected_analysis_allo_discrete.csv``.

Running pods are kept in the snapshot as they are (one pod object each), the way the engine
sees a real cluster; there is no shortcut state between cycles.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

T_START = time.perf_counter()
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kai_cp.cycle import CycleSettings, load_engine, run_cycle  # noqa: E402
from kai_cp.gcpause import collected_after  # noqa: E402
from kai_cp.loader import load_snapshot_dict  # noqa: E402
from kai_cp.simulate import apply_decisions  # noqa: E402
from kai_cp.state import build_cluster_state  # noqa: E402

T_IMPORTED = time.perf_counter()

TRACES = ("default", "cpu250", "gpushare100", "gpuspec33", "multigpu50")
SEEDS = tuple(range(42, 52))
TUNE = 1.3
GPU_MEMORY = 32_000          # MiB per GPU label: a multiple of 1,000 (exact milli-GPU fractions)
MODEL_LABEL = "gpu-model"
#: FGD paper (ATC'23) headline numbers quoted by the issue, for the printout when the CSV lacks a trace
PUBLISHED = {"default": 95.23, "cpu250": 93.20, "gpushare100": 86.64, "gpuspec33": 87.84, "multigpu50": 97.09}


@dataclass
class PodSpec:
    name: str
    cpu: int            # millicores
    memory: int         # MiB
    gpus: int           # whole GPUs
    milli: int          # per-pod GPU demand in milli-GPU (fractions: < 1000)
    spec: str           # allowed GPU models, "A|B", or ""

    @property
    def gpu_demand(self) -> int:
        return self.milli if self.gpus <= 1 and self.milli < 1000 else 1000 * self.gpus


def read_nodes(data: Path) -> list[dict]:
    with open(data / "openb_node_list_gpu_node.csv") as f:
        return list(csv.DictReader(f))


def read_pods(data: Path, trace: str) -> list[PodSpec]:
    out = []
    with open(data / f"openb_pod_list_{trace}.csv") as f:
        for r in csv.DictReader(f):
            gpus = int(r["num_gpu"])
            milli = int(r["gpu_milli"]) if gpus else 0
            out.append(PodSpec(r["name"], int(r["cpu_milli"]), int(r["memory_mib"]), gpus,
                               milli if gpus == 1 else 1000 * gpus if gpus else 0, r.get("gpu_spec") or ""))
    return out


def sample(pods: list[PodSpec], capacity_gpus: int, seed: int) -> list[PodSpec]:
    """FGD's workload: sample with replacement up to TUNE x capacity, then shuffle (same RNG)."""
    rng = random.Random(seed)
    out, total = [], 0
    target = TUNE * capacity_gpus * 1000
    while total < target:
        p = rng.choice(pods)
        out.append(p)
        total += p.gpu_demand
    rng.shuffle(out)
    return out


def node_doc(r: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": r["sn"], "labels": {MODEL_LABEL: r["model"], "nvidia.com/gpu.memory": str(GPU_MEMORY),
                                                      "nvidia.com/gpu.count": r["gpu"]}},
            "spec": {},
            "status": {"allocatable": {"cpu": f"{r['cpu_milli']}m", "memory": f"{r['memory_mib']}Mi",
                                       "nvidia.com/gpu": r["gpu"], "pods": "1000"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod_docs(p: PodSpec, uid: str) -> tuple[dict, dict]:
    requests = {"cpu": f"{p.cpu}m", "memory": f"{p.memory}Mi"}
    annotations = {"pod-group-name": uid}
    if p.gpus == 1 and p.milli < 1000:
        annotations["gpu-fraction"] = f"{p.milli / 1000:g}"
    elif p.gpus:
        requests["nvidia.com/gpu"] = str(p.gpus)
    spec = {"schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "x", "resources": {"requests": requests}}]}
    if p.spec:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": MODEL_LABEL, "operator": "In", "values": p.spec.split("|")}]}]}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": uid, "namespace": "fgd", "uid": uid, "annotations": annotations,
                        "creationTimestamp": "2024-01-01T00:00:00Z"},
           "spec": spec, "status": {"phase": "Pending"}}
    pg = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
          "metadata": {"name": uid, "namespace": "fgd", "uid": "pg-" + uid, "creationTimestamp": "2024-01-01T00:00:00Z"},
          "spec": {"minMember": 1, "queue": "fgd"}}
    return pod, pg


def base_doc(nodes: list[dict]) -> dict:
    unlimited = {r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}
    dept = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "fgd-dept"},
            "spec": {"resources": unlimited}}
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "fgd"},
             "spec": {"parentQueue": "fgd-dept", "resources": unlimited}}
    return {"config": {"actions": "allocate"}, "schedulerParams": {"schedulerName": "kai-scheduler"},
            "rawObjects": {"nodes": [node_doc(r) for r in nodes], "queues": [dept, queue], "pods": [], "podGroups": []}}


@dataclass
class Run:
    trace: str
    seed: int
    engine: str
    batch: int
    curve: list[float] = field(default_factory=list)          # ratio (%) at 0..100 % arrived
    cycle_seconds: list[float] = field(default_factory=list)
    state_seconds: list[float] = field(default_factory=list)
    gc_seconds: list[float] = field(default_factory=list)
    fallbacks: int = 0
    final: object = None                                       # the last snapshot (for diagnostics)

    @property
    def at_100(self) -> float:
        return self.curve[100] if len(self.curve) > 100 else float("nan")


def run_one(nodes: list[dict], pods: list[PodSpec], trace: str, seed: int, engine: str, batch: int,
            time_limit: float, progress: "Progress") -> Run:
    capacity = sum(int(r["gpu"]) for r in nodes)
    arrivals = sample(pods, capacity, seed)
    loaded = load_snapshot_dict(base_doc(nodes))
    raw = loaded.snapshot.raw_objects
    demand = {}                # pod uid -> milli-GPU
    settings = CycleSettings(engine=engine, time_limit=time_limit)
    out = Run(trace, seed, engine, batch, curve=[0.0])
    allocated = arrived = 0    # milli-GPU
    i = 0
    while len(out.curve) <= 100 and i < len(arrivals):
        # the next batch, cut at the next whole percentage of arrived demand
        next_pct = len(out.curve)
        chunk = []
        while i < len(arrivals) and len(chunk) < batch:
            p = arrivals[i]
            chunk.append((f"p{i:05d}", p))
            arrived += p.gpu_demand
            i += 1
            if arrived * 100 >= next_pct * capacity * 1000:
                break
        docs = [pod_docs(p, uid) for uid, p in chunk]
        mini = load_snapshot_dict({"rawObjects": {"pods": [d[0] for d in docs], "podGroups": [d[1] for d in docs]}})
        raw.pods.extend(mini.snapshot.raw_objects.pods)
        raw.pod_groups.extend(mini.snapshot.raw_objects.pod_groups)
        for uid, p in chunk:
            demand[uid] = p.gpu_demand
        with collected_after() as collection:      # the batch's garbage collected after it
            t0 = time.perf_counter()
            state = build_cluster_state(loaded)
            t1 = time.perf_counter()
            result = run_cycle(state, settings)
            t2 = time.perf_counter()
            out.fallbacks += result.status == "FALLBACK"
            apply_decisions(loaded, result)
            placed = {p.task.name for p in result.session.placements.values() if not p.pipelined}
            del state, result, mini, docs
        out.state_seconds.append(t1 - t0)
        out.cycle_seconds.append(t2 - t1)
        out.gc_seconds.append(collection.seconds)
        allocated += sum(demand[u] for u, _ in chunk if u in placed)
        # failed pods leave (FGD); placed ones keep running, their PodGroup is no longer needed
        batch_ids = {u for u, _ in chunk}
        raw.pods[:] = [p for p in raw.pods if p.metadata.name not in batch_ids or p.metadata.name in placed]
        raw.pod_groups[:] = [g for g in raw.pod_groups if g.metadata.name not in batch_ids]
        while len(out.curve) <= 100 and arrived * 100 >= len(out.curve) * capacity * 1000:
            out.curve.append(100.0 * allocated / (capacity * 1000))
        out.final = loaded
        progress.step(len(chunk), f"{trace} seed {seed} {engine} B={batch}: {min(len(out.curve) - 1, 100)}% arrived, "
                                  f"{100.0 * allocated / (capacity * 1000):.2f}% allocated")
    return out


def fgd_published(data: Path) -> dict[tuple[str, str], dict[int, float]]:
    """(trace, policy) -> {seed: ratio at 100 %} from the authors' cached results."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    path = data / "fgd_expected_analysis_allo_discrete.csv"
    if not path.exists():
        return out
    with open(path) as f:
        for r in csv.DictReader(f):
            trace = r["workload"].replace("openb_pod_list_", "")
            try:
                out.setdefault((trace, r["sc_policy"]), {})[int(r["seed"])] = float(r["100"])
            except (KeyError, ValueError):
                continue
    return out


class Progress:
    """A one-line progress bar on stderr (pods arrived out of the total to reach 100 %)."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.done, self.enabled, self.t0 = max(total, 1), 0, enabled and sys.stderr.isatty(), time.time()
        self.plain = enabled and not sys.stderr.isatty()
        self.last = 0.0

    def step(self, n: int, text: str) -> None:
        self.done += n
        now = time.time()
        if not (self.enabled or self.plain) or now - self.last < (0.2 if self.enabled else 30):
            return
        self.last = now
        frac = min(self.done / self.total, 1.0)
        eta = (now - self.t0) / frac * (1 - frac) if frac > 0 else 0
        bar = "#" * int(30 * frac) + "-" * (30 - int(30 * frac))
        line = f"[{bar}] {100 * frac:5.1f}% eta {eta:5.0f}s  {text}"
        sys.stderr.write(("\r" + line[:150] + "\x1b[K") if self.enabled else line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT / ".." / "shared" / "data" / "fgd-openb")
    ap.add_argument("--traces", nargs="+", default=list(TRACES))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--engine", choices=("cp-sat", "greedy"), default="cp-sat")
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--curve", action="store_true", help="print the allocation curve every 10 %% arrived")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if not (args.data / "openb_node_list_gpu_node.csv").exists():
        print(f"no FGD data under {args.data} (pass --data)", file=sys.stderr)
        return 2
    nodes = read_nodes(args.data)
    capacity = sum(int(r["gpu"]) for r in nodes)
    published = fgd_published(args.data)
    traces = {t: read_pods(args.data, t) for t in args.traces}
    # pods to reach 100 % per (trace, seed), for the progress bar
    total = 0
    for t, pods in traces.items():
        for s in args.seeds:
            acc = 0
            for p in sample(pods, capacity, s):
                total += 1
                acc += p.gpu_demand
                if acc >= capacity * 1000:
                    break
    t = time.perf_counter()
    load_engine(args.engine)
    startup = T_IMPORTED - T_START + time.perf_counter() - t
    progress = Progress(total, not args.no_progress)
    runs: list[Run] = []
    for t, pods in traces.items():
        for s in args.seeds:
            runs.append(run_one(nodes, pods, t, s, args.engine, args.batch, args.time_limit, progress))
    progress.close()
    print(f"FGD benchmark (openb, {len(nodes)} nodes / {capacity} GPUs), engine {args.engine}, batch {args.batch}, "
          f"time limit {args.time_limit} s, seeds {args.seeds[0]}-{args.seeds[-1]} ({len(args.seeds)})")
    print(f"process start-up (imports, the engine's included): {startup:.2f} s")
    hdr = f"{'trace':<12} {'kai-cp %':>9} {'min':>6} {'max':>6} {'FGD %':>6} {'BestFit':>7} {'delta':>6} " \
          f"{'cycle p50':>9} {'p99':>6} {'state p50':>9} {'gc p99':>6} {'fallbk':>6}"
    print(hdr)
    summary = {}
    for t in traces:
        rs = [r for r in runs if r.trace == t]
        vals = [r.at_100 for r in rs]
        fgd = [published.get((t, "06-FGD"), {}).get(s) for s in args.seeds]
        bf = [published.get((t, "05-BestFit"), {}).get(s) for s in args.seeds]
        fgd_mean = statistics.mean(v for v in fgd if v is not None) if any(v is not None for v in fgd) else PUBLISHED.get(t, float("nan"))
        bf_mean = statistics.mean(v for v in bf if v is not None) if any(v is not None for v in bf) else float("nan")
        cyc = [c for r in rs for c in r.cycle_seconds]
        st = [c for r in rs for c in r.state_seconds]
        gcs = [c for r in rs for c in r.gc_seconds]
        mean = statistics.mean(vals)
        summary[t] = {"mean": mean, "min": min(vals), "max": max(vals), "fgd": fgd_mean, "bestfit": bf_mean,
                      "cycle_p50": pct(cyc, 0.5), "cycle_p99": pct(cyc, 0.99), "state_p50": pct(st, 0.5),
                      "gc_p99": pct(gcs, 0.99),
                      "fallbacks": sum(r.fallbacks for r in rs), "per_seed": dict(zip(args.seeds, vals))}
        print(f"{t:<12} {mean:9.2f} {min(vals):6.2f} {max(vals):6.2f} {fgd_mean:6.2f} {bf_mean:7.2f} {mean - fgd_mean:+6.2f} "
              f"{pct(cyc, 0.5):9.3f} {pct(cyc, 0.99):6.3f} {pct(st, 0.5):9.3f} {pct(gcs, 0.99):6.3f} "
              f"{summary[t]['fallbacks']:6d}")
        if args.curve:
            pts = [statistics.mean(r.curve[k] for r in rs if len(r.curve) > k) for k in range(0, 101, 10)]
            print("  curve (allocated % at 0,10,..,100 % arrived): " + " ".join(f"{v:.1f}" for v in pts))
    if args.json:
        args.json.write_text(json.dumps({"engine": args.engine, "batch": args.batch, "time_limit": args.time_limit,
                                         "seeds": args.seeds, "summary": summary,
                                         "runs": [{"trace": r.trace, "seed": r.seed, "curve": r.curve,
                                                   "cycle_seconds": r.cycle_seconds, "state_seconds": r.state_seconds,
                                                   "gc_seconds": r.gc_seconds}
                                                  for r in runs]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
