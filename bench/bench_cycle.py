#!/usr/bin/env python3
"""Benchmark one scheduling cycle of kai-cp (CP-SAT and greedy) on generated clusters.

Why: the claim of kai-cp is that one CP-SAT model per cycle places more work than a greedy
pass within the cycle's time budget, at production sizes. This script measures that on
clusters from bench/generate.py (100, 1,000 and 10,000 nodes by default) and prints a table;
``--json`` also writes every figure. It is a measurement tool, not a test.

    python bench/bench_cycle.py [--sizes 100 1000 10000] [--repeats 5] [--time-limit 1.0]
                                [--workers 8] [--json bench.json]

Per size and seed (repeat r uses seed ``--seed + r``): generate the snapshot, load it
(``kai_cp.loader.load_snapshot_dict``), build the cluster state
(``kai_cp.state.build_cluster_state``), then run ``kai_cp.cycle.run_cycle`` once per engine on
a freshly built state (a cycle may mutate its state). The cycle wall time is taken with
``time.perf_counter`` around ``run_cycle`` only.

Topology: a third of the multi-pod pending GPU gangs carry a ``topologyConstraint``
(``--topology-share``, generate.py's default; 0 gives the same clusters without them). Per
engine the table is followed by the gangs requiring a level that were placed and how many of
them were placed across domains of that level (bench/topology_metrics.py; 0 once the engine
honours topology).

Memory: peak resident-set growth during ``run_cycle``: the kernel's high-water mark (VmHWM)
is reset through ``/proc/self/clear_refs`` before the cycle and compared with the RSS at
that moment, so OR-Tools' C++ memory is counted (tracemalloc would only see Python objects).
Memory the process had already mapped and freed (Python arenas) is reused without growing the
RSS, so a small pure-Python cycle can show 0; ``--tracemalloc`` adds the Python-heap peak of
one extra untimed cycle. Where that reset is unavailable, the ``ru_maxrss`` delta is used (it under-reports when an
earlier step already peaked higher); the method is printed and stored in the JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate import DEFAULT_TOPOLOGY_SHARE, generate_cluster  # noqa: E402  (bench/ is a folder of scripts)
from topology_metrics import TopologyView  # noqa: E402

#: nodes -> (pending pods, running pods or None for 10 per node)
SIZE_PRESETS: dict[int, tuple[int, Optional[int]]] = {100: (500, None), 1000: (5000, None),
                                                      10000: (5000, 100_000)}
ENGINES: tuple[str, ...] = ("cp-sat", "greedy")
#: EngineRun attribute -> CycleResult.stats keys that may carry it (snake_case per the agreed
#: API, camelCase as the JSON output spells them)
STAT_KEYS: dict[str, tuple[str, ...]] = {
    "build": ("build_seconds", "buildSeconds"), "solve": ("solve_seconds", "solveSeconds"),
    "greedy": ("greedy_seconds", "greedySeconds"), "variables": ("variables",),
    "constraints": ("constraints",)}


# --------------------------------------------------------------------------------------------
# snapshot facts (computed from the generated document, independently of the engine)
# --------------------------------------------------------------------------------------------

def pod_gpus(pod: dict[str, Any]) -> float:
    """GPUs a pod asks for: whole nvidia.com/gpu requests, or a gpu-fraction times devices."""
    ann = pod.get("metadata", {}).get("annotations") or {}
    if "gpu-fraction" in ann:
        try:
            return float(ann["gpu-fraction"]) * int(ann.get("gpu-fraction-num-devices", 1))
        except ValueError:
            return 0.0
    total = 0.0
    for c in pod.get("spec", {}).get("containers") or []:
        req = (c.get("resources") or {}).get("requests") or {}
        try:
            total += float(req.get("nvidia.com/gpu", 0))
        except ValueError:
            pass
    return total


def pod_key(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', 'default')}/{meta['name']}"


@dataclass
class SnapshotFacts:
    """What the benchmark needs to judge a result: GPUs per pod and the cluster's slack."""

    gpus_by_pod: dict[str, float]
    pending_gpus: float
    pending_gangs: int
    free_gpus: float          # allocatable minus running on Ready, uncordoned nodes


def snapshot_facts(doc: dict[str, Any]) -> SnapshotFacts:
    """Facts about ``doc`` taken from its raw objects (no kai_cp code involved)."""
    raw = doc["rawObjects"]
    gpus_by_pod = {pod_key(p): pod_gpus(p) for p in raw["pods"]}
    usable = {n["metadata"]["name"]: float(n["status"]["allocatable"].get("nvidia.com/gpu", 0))
              for n in raw["nodes"] if node_usable(n)}
    pending_gpus = 0.0
    gangs = set()
    for p in raw["pods"]:
        node = p["spec"].get("nodeName")
        if p["status"].get("phase") == "Running" and node in usable:
            usable[node] -= gpus_by_pod[pod_key(p)]
        elif p["status"].get("phase") == "Pending" and not node:
            pending_gpus += gpus_by_pod[pod_key(p)]
            gangs.add((p["metadata"].get("namespace"), p["metadata"]["annotations"].get("pod-group-name")))
    return SnapshotFacts(gpus_by_pod, pending_gpus, len(gangs), sum(usable.values()))


def node_usable(node: dict[str, Any]) -> bool:
    """Ready and not cordoned."""
    if node.get("spec", {}).get("unschedulable"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions") or [])


# --------------------------------------------------------------------------------------------
# memory measurement
# --------------------------------------------------------------------------------------------

def _proc_status_kib(field_name: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    """Reset VmHWM (Linux >= 4.0); False where not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return _proc_status_kib("VmHWM") is not None
    except OSError:
        return False


class PeakMemory:
    """Peak RSS growth (MiB) over a block, by VmHWM reset or, failing that, ru_maxrss delta."""

    method = "VmHWM after /proc/self/clear_refs reset, minus VmRSS before"

    def __init__(self) -> None:
        self.use_hwm = _reset_hwm()
        if not self.use_hwm:
            PeakMemory.method = "ru_maxrss delta (under-reports when an earlier step peaked higher)"
        self.before_kib = 0
        self.peak_mib = 0.0

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        if self.use_hwm:
            _reset_hwm()
            self.before_kib = _proc_status_kib("VmRSS") or 0
        else:
            self.before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return self

    def __exit__(self, *exc: object) -> None:
        after = (_proc_status_kib("VmHWM") if self.use_hwm
                 else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) or 0
        self.peak_mib = max(0, after - self.before_kib) / 1024


# --------------------------------------------------------------------------------------------
# one run
# --------------------------------------------------------------------------------------------

@dataclass
class EngineRun:
    """Figures of one run_cycle call."""

    engine: str
    wall: Optional[float] = None
    build: Optional[float] = None
    solve: Optional[float] = None
    greedy: Optional[float] = None
    variables: Optional[int] = None
    constraints: Optional[int] = None
    peak_mib: Optional[float] = None
    status: Optional[str] = None
    objective: Optional[float] = None
    bound: Optional[float] = None
    gap: Optional[float] = None
    gpus_bound: float = 0.0
    gpus_pipelined: float = 0.0
    gpus_placed: float = 0.0
    gangs_placed: int = 0
    pods_bound: int = 0
    pods_pipelined: int = 0
    evictions: int = 0
    required_placed: int = 0          # placed gangs whose PodGroup requires a topology level
    topology_violations: int = 0      # of them, placed across domains of that level
    py_heap_peak_mib: Optional[float] = None   # --tracemalloc only, from an extra untimed cycle
    error: Optional[str] = None


@dataclass
class SeedRun:
    """One generated cluster and the engines' runs on it."""

    seed: int
    generate: float
    load: Optional[float] = None
    state: Optional[float] = None
    facts: dict[str, Any] = field(default_factory=dict)
    engines: dict[str, EngineRun] = field(default_factory=dict)
    error: Optional[str] = None


def gap_of(objective: Optional[float], bound: Optional[float]) -> Optional[float]:
    """(bound - objective) / max(1, |bound|); None when either is missing."""
    if objective is None or bound is None:
        return None
    return (bound - objective) / max(1.0, abs(bound))


def judge(run: EngineRun, out: dict[str, Any], stats: dict[str, Any], facts: SnapshotFacts,
          topology: Optional[TopologyView] = None) -> None:
    """Fill ``run`` from a CycleResult's JSON and stats (and topology figures, bench/topology_metrics.py)."""
    cycle = out.get("cycle") or {}
    run.status = cycle.get("status")
    run.objective, run.bound = cycle.get("objective"), cycle.get("bound")
    run.gap = gap_of(run.objective, run.bound)
    binds, pipelined = out.get("binds") or [], out.get("pipelined") or []
    run.pods_bound, run.pods_pipelined = len(binds), len(pipelined)
    run.gpus_bound = sum(facts.gpus_by_pod.get(b["pod"], 0.0) for b in binds)
    run.gpus_pipelined = sum(facts.gpus_by_pod.get(b["pod"], 0.0) for b in pipelined)
    run.gpus_placed = run.gpus_bound + run.gpus_pipelined
    run.gangs_placed = len({b.get("podGroup") for b in binds + pipelined})
    run.evictions = len(out.get("evictions") or [])
    if topology is not None:
        figs = topology.judge([(b["pod"], b["node"]) for b in binds + pipelined])
        run.required_placed = sum(f.required for f in figs)
        run.topology_violations = sum(1 for f in figs if f.violation)
    merged = {**cycle, **stats}      # the engine may report its stats in either place
    for attr, keys in STAT_KEYS.items():
        for key in keys:
            if merged.get(key) is not None:
                setattr(run, attr, merged[key])
                break


@dataclass
class Engine:
    """The kai_cp entry points, imported lazily so generation can be measured without them."""

    load: Callable[..., Any]
    build_state: Callable[..., Any]
    settings: Optional[Callable[..., Any]]
    run_cycle: Optional[Callable[..., Any]]
    missing: Optional[str] = None


def import_engine() -> Optional[Engine]:
    """kai_cp's loader/state/cycle; None (or no cycle) when they are not there yet."""
    try:
        from kai_cp.loader import load_snapshot_dict
        from kai_cp.state import build_cluster_state
    except ImportError as exc:
        print(f"kai_cp loader/state unavailable ({exc}); measuring generation only", file=sys.stderr)
        return None
    try:
        from kai_cp.cycle import CycleSettings, run_cycle
        # OR-Tools' import (~0.2-0.5 s, once per process) is left out of every cycle's wall time,
        # as the cycle's own clock leaves it out: else the first seed's cp-sat cycle carries it
        import kai_cp.model.build  # noqa: F401
    except ImportError as exc:
        print(f"kai_cp.cycle unavailable ({exc}); measuring up to the cluster state", file=sys.stderr)
        return Engine(load_snapshot_dict, build_cluster_state, None, None, str(exc))
    return Engine(load_snapshot_dict, build_cluster_state, CycleSettings, run_cycle)


def run_engine(engine: Engine, name: str, loaded: Any, state: Any, facts: SnapshotFacts,
               args: argparse.Namespace, seed: int, topology: Optional[TopologyView] = None) -> EngineRun:
    """One cycle with one engine, on ``state`` or a fresh state when ``state`` is None."""
    run = EngineRun(name)
    try:
        if state is None:
            state = engine.build_state(loaded)
        kwargs: dict[str, Any] = {"engine": name, "time_limit": args.time_limit, "seed": seed}
        if args.workers is not None:
            kwargs["workers"] = args.workers
        settings = engine.settings(**kwargs)
        with PeakMemory() as mem:
            t0 = time.perf_counter()
            result = engine.run_cycle(state, settings)
            run.wall = time.perf_counter() - t0
        run.peak_mib = mem.peak_mib
        judge(run, result.to_json(), dict(getattr(result, "stats", None) or {}), facts, topology)
    except Exception as exc:  # a failing engine must not end the benchmark of the others
        run.error = f"{type(exc).__name__}: {exc}"
    return run


def run_seed(engine: Optional[Engine], nodes: int, pending: int, running: Optional[int], seed: int,
             args: argparse.Namespace) -> SeedRun:
    """Generate, load, build the state and run every engine for one seed."""
    t0 = time.perf_counter()
    doc = generate_cluster(nodes, pending, running, seed=seed, fragmentation=args.fragmentation,
                           topology_share=args.topology_share)
    out = SeedRun(seed, time.perf_counter() - t0)
    facts = snapshot_facts(doc)
    topology = TopologyView(doc)
    out.facts = {"pendingGpus": facts.pending_gpus, "pendingGangs": facts.pending_gangs,
                 "freeGpus": facts.free_gpus, "pods": len(doc["rawObjects"]["pods"]),
                 "topologyGangs": sum(1 for g in topology.gangs.values() if g.topology),
                 "requiredTopologyGangs": sum(1 for g in topology.gangs.values() if g.required)}
    if engine is None:
        return out
    try:
        t0 = time.perf_counter()
        loaded = engine.load(doc, f"generated-{nodes}-seed{seed}")
        out.load = time.perf_counter() - t0
        del doc
        t0 = time.perf_counter()
        state = engine.build_state(loaded)
        out.state = time.perf_counter() - t0
    except Exception as exc:
        out.error = f"{type(exc).__name__}: {exc}"
        return out
    if engine.run_cycle is None:
        return out
    for i, name in enumerate(args.engines):
        out.engines[name] = run_engine(engine, name, loaded, state if i == 0 else None, facts, args, seed,
                                       topology)
        state = None                   # the next engine gets a state of its own
        gc.collect()
    if args.tracemalloc and seed == args.seed:
        for name, run in out.engines.items():
            run.py_heap_peak_mib = python_heap_peak(engine, name, loaded, args, seed)
    return out


def python_heap_peak(engine: Engine, name: str, loaded: Any, args: argparse.Namespace,
                     seed: int) -> Optional[float]:
    """Peak of Python allocations (MiB) during one extra, untimed cycle under tracemalloc.

    Separate from the timed run because tracemalloc slows Python code several times; it
    does not see OR-Tools' C++ memory (the RSS figure does)."""
    try:
        state = engine.build_state(loaded)
        kwargs: dict[str, Any] = {"engine": name, "time_limit": args.time_limit, "seed": seed}
        if args.workers is not None:
            kwargs["workers"] = args.workers
        settings = engine.settings(**kwargs)
        gc.collect()
        tracemalloc.start()
        try:
            engine.run_cycle(state, settings)
            return tracemalloc.get_traced_memory()[1] / 2 ** 20
        finally:
            tracemalloc.stop()
    except Exception:
        return None


# --------------------------------------------------------------------------------------------
# summaries and printing
# --------------------------------------------------------------------------------------------

def med(values: list[Optional[float]]) -> Optional[float]:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def mx(values: list[Optional[float]]) -> Optional[float]:
    xs = [v for v in values if v is not None]
    return max(xs) if xs else None


def engine_summary(runs: list[EngineRun]) -> dict[str, Any]:
    """Medians/maxima over the repeats of one engine at one size."""
    ok = [r for r in runs if r.error is None]
    return {
        "runs": len(runs), "errors": len(runs) - len(ok),
        "wallMedian": med([r.wall for r in ok]), "wallMax": mx([r.wall for r in ok]),
        "buildMedian": med([r.build for r in ok]), "solveMedian": med([r.solve for r in ok]),
        "greedyMedian": med([r.greedy for r in ok]),
        "variablesMedian": med([r.variables for r in ok]), "constraintsMedian": med([r.constraints for r in ok]),
        "peakMiBMedian": med([r.peak_mib for r in ok]), "peakMiBMax": mx([r.peak_mib for r in ok]),
        "gpusPlacedMedian": med([r.gpus_placed for r in ok]), "gangsPlacedMedian": med([r.gangs_placed for r in ok]),
        "optimal": sum(1 for r in ok if r.status == "OPTIMAL"),
        "statuses": {s: sum(1 for r in ok if r.status == s) for s in sorted({str(r.status) for r in ok})},
        "gapMedian": med([r.gap for r in ok]), "gapMax": mx([r.gap for r in ok]),
        "evictionsMedian": med([r.evictions for r in ok]),
        "requiredPlacedMedian": med([r.required_placed for r in ok]),
        "topologyViolationsMedian": med([r.topology_violations for r in ok]),
        "topologyViolationsMax": mx([r.topology_violations for r in ok]),
    }


def compare(seeds: list[SeedRun], a: str = "cp-sat", b: str = "greedy") -> dict[str, int]:
    """How often engine ``a`` placed more / as many / fewer GPUs than ``b`` on the same cluster."""
    out = {"more": 0, "equal": 0, "fewer": 0}
    for s in seeds:
        ra, rb = s.engines.get(a), s.engines.get(b)
        if not ra or not rb or ra.error or rb.error:
            continue
        diff = ra.gpus_placed - rb.gpus_placed
        out["more" if diff > 1e-9 else "fewer" if diff < -1e-9 else "equal"] += 1
    return out


def fmt(v: Optional[float], spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def print_size(nodes: int, pending: int, running: Optional[int], seeds: list[SeedRun],
               engines: list[str]) -> dict[str, Any]:
    """Print one size's block of the table; return its summary."""
    facts = seeds[0].facts if seeds else {}
    print(f"\n== {nodes} nodes, {pending} pending pods, {running if running is not None else 10 * nodes} "
          f"running pods asked; {len(seeds)} seeds ==")
    print(f"generate {fmt(med([s.generate for s in seeds]))}s   load {fmt(med([s.load for s in seeds]))}s   "
          f"state {fmt(med([s.state for s in seeds]))}s   (medians)   "
          f"seed {seeds[0].seed if seeds else '-'}: {fmt(facts.get('freeGpus'), '.0f')} free GPUs on usable nodes, "
          f"{fmt(facts.get('pendingGpus'), '.0f')} GPUs pending in {facts.get('pendingGangs', '-')} gangs, "
          f"{facts.get('topologyGangs', '-')} with a topologyConstraint ({facts.get('requiredTopologyGangs', '-')} "
          f"requiring a level)")
    for s in seeds:
        if s.error:
            print(f"  seed {s.seed}: {s.error}")
    summary: dict[str, Any] = {"nodes": nodes, "pending": pending, "running": running,
                               "generateMedian": med([s.generate for s in seeds]),
                               "loadMedian": med([s.load for s in seeds]),
                               "stateMedian": med([s.state for s in seeds]), "engines": {}}
    header = (f"{'engine':<8}{'wall med':>9}{'wall max':>9}{'build':>8}{'solve':>8}{'greedy':>8}"
              f"{'peak MiB':>10}{'GPUs placed':>12}{'gangs':>7}{'OPTIMAL':>9}{'gap med':>9}{'gap max':>9}{'err':>5}")
    print(header)
    for name in engines:
        runs = [s.engines[name] for s in seeds if name in s.engines]
        if not runs:
            continue
        es = engine_summary(runs)
        summary["engines"][name] = es
        print(f"{name:<8}{fmt(es['wallMedian']):>9}{fmt(es['wallMax']):>9}{fmt(es['buildMedian']):>8}"
              f"{fmt(es['solveMedian']):>8}{fmt(es['greedyMedian']):>8}{fmt(es['peakMiBMedian'], '.0f'):>10}"
              f"{fmt(es['gpusPlacedMedian'], '.0f'):>12}{fmt(es['gangsPlacedMedian'], '.0f'):>7}"
              f"{es['optimal']:>4}/{es['runs'] - es['errors']:<4}{fmt(es['gapMedian'], '.4f'):>9}"
              f"{fmt(es['gapMax'], '.4f'):>9}{es['errors']:>5}")
        for r in runs:
            if r.error:
                print(f"  {name} error: {r.error}")
    for name, es in summary["engines"].items():
        print(f"{name} topology: {fmt(es['requiredPlacedMedian'], '.0f')} gangs requiring a level placed, "
              f"{fmt(es['topologyViolationsMedian'], '.0f')} of them across domains of it (median; max "
              f"{fmt(es['topologyViolationsMax'], '.0f')})")
    for name, es in summary["engines"].items():      # (FALLBACK: the model's answer was not used)
        per_seed = ", ".join(f"{s.seed} {s.engines[name].status}" for s in seeds if name in s.engines)
        print(f"{name} statuses: " + ", ".join(f"{k} {v}" for k, v in es["statuses"].items()) + f" (seed status: {per_seed})")
    heap = {n: s.engines[n].py_heap_peak_mib for s in seeds[:1] for n in engines
            if n in s.engines and s.engines[n].py_heap_peak_mib is not None}
    if heap:
        summary["pythonHeapPeakMiB"] = heap
        print("Python heap peak (tracemalloc, extra untimed cycle, first seed): "
              + ", ".join(f"{n} {v:.0f} MiB" for n, v in heap.items()))
    if "cp-sat" in engines and "greedy" in engines:
        c = compare(seeds)
        summary["cpSatVsGreedyGpus"] = c
        print(f"cp-sat vs greedy, GPUs placed per seed: more {c['more']}, equal {c['equal']}, fewer {c['fewer']}")
    return summary


def seed_json(s: SeedRun) -> dict[str, Any]:
    return {"seed": s.seed, "generateSeconds": s.generate, "loadSeconds": s.load, "stateSeconds": s.state,
            "facts": s.facts, "error": s.error, "engines": {k: vars(v) for k, v in s.engines.items()}}


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------

def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Benchmark one kai-cp cycle (CP-SAT vs greedy) on generated clusters.")
    ap.add_argument("--sizes", nargs="+", default=["100", "1000", "10000"],
                    help="node counts (space or comma separated); presets: 100 -> 500 pending, "
                         "1000 -> 5000 pending, 10000 -> 5000 pending + 100000 running")
    ap.add_argument("--repeats", type=int, default=5, help="seeds per size (seed, seed+1, ...)")
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--time-limit", type=float, default=1.0, help="CP-SAT time limit per cycle (s)")
    ap.add_argument("--workers", type=int, default=None, help="CP-SAT workers (engine default if absent)")
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated engines")
    ap.add_argument("--pending", type=int, default=None, help="override the preset's pending pods")
    ap.add_argument("--running", type=int, default=None, help="override the preset's running pods")
    ap.add_argument("--fragmentation", type=float, default=0.6)
    ap.add_argument("--topology-share", type=float, default=DEFAULT_TOPOLOGY_SHARE,
                    help="share of multi-pod pending GPU gangs with a topologyConstraint (0: none; "
                         "the clusters are otherwise the same)")
    ap.add_argument("--tracemalloc", action="store_true",
                    help="also report the Python-heap peak of one extra untimed cycle per engine (first seed)")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write every figure here")
    args = ap.parse_args(argv)
    args.sizes = [int(x) for part in args.sizes for x in part.split(",") if x.strip()]
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    return args


def size_plan(nodes: int, args: argparse.Namespace) -> tuple[int, Optional[int]]:
    """Pending and running pods for ``nodes``: preset, else 5 pending per node up to 5000."""
    pending, running = SIZE_PRESETS.get(nodes, (min(5 * nodes, 5000), None))
    return (args.pending if args.pending is not None else pending,
            args.running if args.running is not None else running)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    engine = import_engine()
    print(f"kai-cp cycle benchmark: engines {', '.join(args.engines)}, time limit {args.time_limit}s, "
          f"workers {args.workers if args.workers is not None else 'default'}, {args.repeats} seeds from {args.seed}; "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"times in seconds; peak memory = {PeakMemory().method}")
    sizes_out = []
    for nodes in args.sizes:
        pending, running = size_plan(nodes, args)
        seeds = []
        for r in range(args.repeats):
            seeds.append(run_seed(engine, nodes, pending, running, args.seed + r, args))
            print(f"  .. {nodes} nodes seed {args.seed + r} done", file=sys.stderr, flush=True)
        summary = print_size(nodes, pending, running, seeds, args.engines)
        summary["seeds"] = [seed_json(s) for s in seeds]
        sizes_out.append(summary)
    if args.json:
        doc = {"settings": {"sizes": args.sizes, "repeats": args.repeats, "seed": args.seed,
                            "timeLimit": args.time_limit, "workers": args.workers, "engines": args.engines,
                            "fragmentation": args.fragmentation, "topologyShare": args.topology_share},
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "platform": platform.platform()},
               "memoryMethod": PeakMemory.method,
               "engineAvailable": engine is not None and engine.run_cycle is not None,
               "sizes": sizes_out}
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
