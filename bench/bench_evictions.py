#!/usr/bin/env python3
"""Eviction benchmark: KAI's eviction actions (consolidation, reclaim, preempt, stale gangs)
on full clusters, greedy vs CP-SAT.

Why: an eviction decision is only worth taking in a 1 s cycle if it is fast at production
sizes, frees what the pending work needs (the preemptor is pipelined on the freed capacity)
and never breaks KAI's victim rules. KAI's own reclaim benchmark needs ~8.4-9 s for one
reclaim action at 500 nodes (its BenchmarkReclaimLargeJobs table). Three shapes:

* ``reclaim``: KAI's BenchmarkReclaimLargeJobs at 500 and 1,000 nodes (``--reclaim-nodes``):
  8 GPUs a node, every GPU held by a 1-GPU running job of ``queue-0`` (quota 0, over-quota
  weight 0; priority class train = 50, so preemptible); one pending gang ``very-large-job`` of
  nodes / 2 pods x 8 GPUs (minMember = pods; ``--large-job-share``) in ``queue-1``, whose quota
  is every GPU. (KAI's file now sizes the job nodes / 10; the wider job is the harder case.)
* ``full``: a full cycle, 500 nodes x 8 GPUs, 4,000 running 1-GPU jobs on every GPU, 4,000
  pending 1-GPU jobs, four queues of equal quota. The running jobs sit in ``team-a`` and
  ``team-b`` (twice their fair share; train 70 %, build-preemptible 15 %, build 10 %,
  inference 5 %), the pending ones mostly in ``team-c`` and ``team-d`` (reclaimers), except an
  eighth in ``team-a`` / ``team-b`` of higher-priority classes (preempt's preemptors).
* ``contention``: bench/generate.py's 1,000-node cluster (5,000 pending pods in gangs) with
  ``contention=True`` (queues over and under fair share, mixed priorities, preemptible
  running jobs) at utilization 0.95.

Per shape and engine (``kai_cp.cycle.run_cycle`` on a freshly built state for every
repetition; wall time with ``time.perf_counter`` around it; median over ``--repeats``):
evictions (pods, GPUs, per action), GPUs bound and pipelined for the preemptors (the jobs
with pending pods in the snapshot), jobs decided (placed pods reach minMember) and of them
decided on evicted capacity (a pipelined pod on a node that lost a pod this cycle), and the
findings of ``check_decisions``: an engine-independent judge of the decisions against the
snapshot's raw objects (kai-semantics.md 6.8):

* an evicted pod must be running in the snapshot;
* consolidation, reclaim and preempt never evict a non-preemptible job's pod;
* preempt victims are in the preemptor's queue with strictly lower priority;
* reclaim victims are in other queues than the preemptor's;
* a consolidation victim is re-placed (pipelined) elsewhere;
* stale-gang eviction only takes gangs running fewer pods than minMember;
* a victim gang is left with zero pods or at least minMember (whole gangs, elastic surplus);
* per node, pods left running plus bound and pipelined pods fit the GPUs, and bound pods fit
  without the releasing ones.

The fair-share gates of reclaim (3.7.2-3.7.3) are not re-derived here.

    python bench/bench_evictions.py [--shapes reclaim,full,contention] [--reclaim-nodes 500 1000]
                                    [--repeats 3] [--time-limit 1.0] [--engines greedy,cp-sat]
                                    [--seed 0] [--quick] [--json out.json] [--write-snapshots DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate as gen  # noqa: E402  (bench/ is a folder of scripts)
from bench_cycle import pod_gpus, pod_key  # noqa: E402

from kai_cp.cycle import CycleSettings, run_cycle  # noqa: E402
from kai_cp.loader import load_snapshot_dict  # noqa: E402
from kai_cp.state import build_cluster_state  # noqa: E402

ENGINES = ("greedy", "cp-sat")
SHAPES = ("reclaim", "full", "contention")
GPUS_PER_NODE = 8
CPU_PER_GPU_M = 4000          # well under a node's 15.9 cores per GPU: GPUs bind
MEM_PER_GPU_B = 32 * gen.GIB
KAI_RECLAIM_SECONDS = {500: "8.4-9.0 s"}   # KAI's BenchmarkReclaimLargeJobs_500Node (its README table)
#: Job priority classes of the full-cycle shape.
FULL_RUNNING_CLASSES: dict[str, int] = {"train": 70, "build-preemptible": 15, "build": 10, "inference": 5}
FULL_PENDING_CLASSES: dict[str, int] = {"train": 60, "build-preemptible": 15, "build": 15, "inference": 10}
FULL_PREEMPTOR_CLASSES: dict[str, int] = {"build-preemptible": 30, "build": 40, "inference": 30}
FULL_PREEMPTOR_SHARE = 0.125  # of the pending jobs, in the over-share queues (same-queue preemptors)
CONTENTION_UTILIZATION = 0.95
EVICTING = ("consolidation", "reclaim", "preempt")
ACTIONS = (*EVICTING, "stalegangeviction")


# --------------------------------------------------------------------------------------------
# snapshot builders
# --------------------------------------------------------------------------------------------

def _nodes(count: int) -> list[gen.Node]:
    ntype = gen.NODE_TYPES[0]                  # 8-GPU H100 nodes
    return [gen.Node(f"node-{i:05d}", ntype, f"{gen.REGION}a", ntype.cores * 1000 - 500,
                     (ntype.memory_gib - 16) * gen.GIB) for i in range(count)]


def _queue(name: str, gpu_quota: int, weight: int, created: int, uid: gen.UidSource) -> dict[str, Any]:
    return gen.queue_object(name, gen.queue_spec(gpu_quota, -1, weight, None), created, None, uid())


def _gpu_pod(gpus: int, node: Optional[str] = None) -> gen.PodSpec:
    return gen.PodSpec(gpus, gpus * CPU_PER_GPU_M, gpus * MEM_PER_GPU_B, node)


def _running_job(name: str, project: gen.Project, pclass: str, node: gen.Node, created: int) -> gen.Job:
    node.free_gpus -= 1
    job = gen.Job(name, project, pclass, created, [_gpu_pod(1, node.name)], 1)
    job.started = created + 60
    return job


def _document(nodes: list[gen.Node], queues: list[dict[str, Any]], jobs: list[gen.Job],
              uid: gen.UidSource) -> dict[str, Any]:
    return gen.render_document(jobs, nodes, lambda n: ("block-000", "rack-0000"), queues, uid, topology=False)


def reclaim_large_jobs(nodes: int, large_job_share: float = 0.5) -> dict[str, Any]:
    """KAI's BenchmarkReclaimLargeJobs shape (module docstring): every GPU held by ``queue-0``'s
    1-GPU jobs (``running-job-<i>`` on node i mod nodes), one pending ``very-large-job`` of
    ``max(1, round(nodes * large_job_share))`` pods x 8 GPUs in ``queue-1``."""
    uid = gen.UidSource(random.Random(f"bench-evictions-reclaim-uid/{nodes}"))
    node_list = _nodes(nodes)
    total = nodes * GPUS_PER_NODE
    q0, q1 = gen.Project("queue-0", "runai-queue-0", 0), gen.Project("queue-1", "runai-queue-1", total)
    queues = [_queue("queue-0", 0, 0, -30 * 86400, uid), _queue("queue-1", total, 0, -30 * 86400 + 60, uid)]
    jobs = [_running_job(f"running-job-{i}", q0, "train", node_list[i % nodes], -7200 + i % 3600)
            for i in range(total)]
    size = max(1, round(nodes * large_job_share))
    jobs.append(gen.Job("very-large-job", q1, "train", -60, [_gpu_pod(GPUS_PER_NODE) for _ in range(size)], size))
    return _document(node_list, queues, jobs, uid)


def full_cycle(nodes: int = 500, running: int = 4000, pending: int = 4000, seed: int = 0) -> dict[str, Any]:
    """The full-cycle shape (module docstring): ``running`` 1-GPU jobs on GPUs drawn at random
    (all of them at the defaults), half in ``team-a``, half in ``team-b``; ``pending`` 1-GPU jobs,
    ``FULL_PREEMPTOR_SHARE`` of them in team-a/b with higher-priority classes, the rest in
    team-c/d; four queues whose quotas split the GPUs equally."""
    total = nodes * GPUS_PER_NODE
    if running > total:
        raise ValueError(f"{running} running 1-GPU jobs do not fit {total} GPUs")
    rng = random.Random(f"bench-evictions-full/{seed}")
    uid = gen.UidSource(random.Random(f"bench-evictions-full-uid/{seed}"))
    names = gen.NameSource(rng)
    node_list = _nodes(nodes)
    quotas = gen.split_integer(total, [1.0] * 4)
    teams = [gen.Project(f"team-{c}", f"runai-team-{c}", q) for c, q in zip("abcd", quotas)]
    queues = [_queue(t.name, t.gpu_quota, 1, -30 * 86400 + 60 * i, uid) for i, t in enumerate(teams)]
    slots = [n for n in node_list for _ in range(GPUS_PER_NODE)]
    rng.shuffle(slots)
    jobs: list[gen.Job] = []
    for i in range(running):
        pclass = rng.choices(list(FULL_RUNNING_CLASSES), weights=list(FULL_RUNNING_CLASSES.values()))[0]
        jobs.append(_running_job(names.job(pclass), teams[i % 2], pclass, slots[i], -rng.randint(600, 72 * 3600)))
    own = round(pending * FULL_PREEMPTOR_SHARE)
    for i in range(pending):
        mix = FULL_PREEMPTOR_CLASSES if i < own else FULL_PENDING_CLASSES
        pclass = rng.choices(list(mix), weights=list(mix.values()))[0]
        team = teams[i % 2] if i < own else teams[2 + i % 2]
        jobs.append(gen.Job(names.job(pclass), team, pclass, -rng.randint(30, 6 * 3600), [_gpu_pod(1)], 1))
    return _document(node_list, queues, jobs, uid)


def contention(nodes: int = 1000, pending: int = 5000, seed: int = 0,
               utilization: float = CONTENTION_UTILIZATION) -> dict[str, Any]:
    """bench/generate.py's cluster with ``contention=True`` at a high utilization."""
    return gen.generate_cluster(nodes, pending, seed=seed, utilization=utilization, contention=True)


# --------------------------------------------------------------------------------------------
# facts from the snapshot (raw objects only, no kai_cp code) and the validity judge
# --------------------------------------------------------------------------------------------

@dataclass
class GroupFact:
    namespace: str
    name: str
    queue: str
    priority: int
    preemptible: bool
    min_member: int
    sub_groups: bool
    active: int = 0            # pods holding a node in the snapshot
    pending: int = 0           # pods with no node


@dataclass
class PodFact:
    key: str
    group: Optional[tuple[str, str]]
    node: Optional[str]
    gpus: float
    active: bool


@dataclass
class Facts:
    pods: dict[str, PodFact]
    groups: dict[tuple[str, str], GroupFact]
    by_name: dict[str, list[tuple[str, str]]]
    node_gpus: dict[str, float]

    def group_named(self, name: Optional[str], namespace: Optional[str] = None) -> Optional[GroupFact]:
        """A PodGroup by name (decisions name groups without namespace): the one in ``namespace``
        first, else the only one of that name."""
        keys = self.by_name.get(name or "", [])
        if namespace is not None and (namespace, name) in self.groups:
            return self.groups[(namespace, name)]
        return self.groups[keys[0]] if len(keys) == 1 else None

    def preemptors(self) -> list[GroupFact]:
        return [g for g in self.groups.values() if g.pending]


def snapshot_facts(doc: dict[str, Any]) -> Facts:
    """Queue, priority, preemptibility (kai-semantics.md 1.8), minMember and pod counts per
    PodGroup; node, GPUs and state per pod; GPUs per node."""
    raw = doc["rawObjects"]
    values = {pc["metadata"]["name"]: int(pc.get("value", 0)) for pc in raw.get("priorityClasses") or []}
    default = next((int(pc.get("value", 0)) for pc in raw.get("priorityClasses") or [] if pc.get("globalDefault")), 50)
    groups: dict[tuple[str, str], GroupFact] = {}
    by_name: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for pg in raw.get("podGroups") or []:
        meta, spec = pg["metadata"], pg.get("spec") or {}
        key = (meta.get("namespace", "default"), meta["name"])
        pc = spec.get("priorityClassName")
        prio = values.get(pc, default) if pc else default
        mode = spec.get("preemptibility") or ""
        groups[key] = GroupFact(key[0], key[1], spec.get("queue", ""), prio,
                                mode == "preemptible" or (mode != "non-preemptible" and prio < 100),
                                max(1, int(spec.get("minMember") or 1)), bool(spec.get("subGroups")))
        by_name[key[1]].append(key)
    pods: dict[str, PodFact] = {}
    for p in raw.get("pods") or []:
        meta = p["metadata"]
        ns = meta.get("namespace", "default")
        gname = (meta.get("annotations") or {}).get(gen.POD_GROUP_ANNOTATION)
        gkey = (ns, gname) if gname and (ns, gname) in groups else None
        node = p.get("spec", {}).get("nodeName")
        phase = (p.get("status") or {}).get("phase")
        active = bool(node) and phase not in ("Succeeded", "Failed")
        pods[pod_key(p)] = PodFact(pod_key(p), gkey, node, pod_gpus(p), active)
        if gkey is not None:
            if active:
                groups[gkey].active += 1
            elif not node and phase == "Pending":
                groups[gkey].pending += 1
    node_gpus = {n["metadata"]["name"]: float(n["status"]["allocatable"].get(gen.GPU, 0)) for n in raw["nodes"]}
    return Facts(pods, groups, dict(by_name), node_gpus)


def check_decisions(facts: Facts, decisions: dict[str, Any]) -> list[str]:
    """Every way ``decisions`` (binds, pipelined, evictions as `kai-cp solve` writes them) breaks
    KAI's eviction rules (module docstring) against the snapshot ``facts``; empty when valid."""
    out: list[str] = []
    pipelined = {d["pod"]: d for d in decisions.get("pipelined") or []}
    evicted_by_group: Counter = Counter()
    for e in decisions.get("evictions") or []:
        key, action = e.get("pod"), e.get("action")
        pod = facts.pods.get(key)
        if pod is None or not pod.active:
            out.append(f"{action}: evicts {key}, which is not running in the snapshot")
            continue
        victim = facts.groups.get(pod.group) if pod.group else None
        if victim is None:
            out.append(f"{action}: evicts {key}, which belongs to no PodGroup")
            continue
        if key not in pipelined:
            # a moved pod (evicted and pipelined elsewhere, 6.2.4) stays a member of its gang:
            # with consolidating reclaim KAI moves a gang and leaves in place the pods the
            # simulation re-placed on their own node
            evicted_by_group[pod.group] += 1
        if action not in ACTIONS:
            out.append(f"{key}: unknown eviction action {action!r}")
            continue
        if action == "stalegangeviction":
            if victim.active >= victim.min_member:
                out.append(f"stalegangeviction: evicts {key} of {victim.name}, which runs {victim.active} pods "
                           f"of minMember {victim.min_member} (not stale)")
            continue
        if not victim.preemptible:
            out.append(f"{action}: evicts {key} of non-preemptible job {victim.name} (priority {victim.priority})")
        preemptor = facts.group_named(e.get("forPodGroup"), victim.namespace)
        if preemptor is None:
            out.append(f"{action}: evicts {key} for unknown or ambiguous preemptor {e.get('forPodGroup')!r}")
            continue
        if action == "preempt":
            if preemptor.queue != victim.queue:
                out.append(f"preempt: victim {key} is in queue {victim.queue}, preemptor {preemptor.name} "
                           f"in {preemptor.queue}")
            if victim.priority >= preemptor.priority:
                out.append(f"preempt: victim {key} has priority {victim.priority}, not lower than preemptor "
                           f"{preemptor.name}'s {preemptor.priority}")
        elif action == "reclaim" and preemptor.queue == victim.queue:
            out.append(f"reclaim: victim {key} is in the preemptor {preemptor.name}'s own queue {victim.queue}")
        elif action == "consolidation":
            moved = pipelined.get(key)
            if moved is None or moved.get("node") == pod.node:
                out.append(f"consolidation: victim {key} is not re-placed on another node")
    for gkey, n in evicted_by_group.items():
        g = facts.groups[gkey]
        left = g.active - n
        if not g.sub_groups and g.active >= g.min_member and 0 < left < g.min_member:
            out.append(f"job {g.name}: evictions leave {left} running pods of minMember {g.min_member} (gang broken)")
    out += _capacity_findings(facts, decisions)
    return out


def _capacity_findings(facts: Facts, decisions: dict[str, Any]) -> list[str]:
    running: dict[str, float] = defaultdict(float)
    for p in facts.pods.values():
        if p.active and p.node:
            running[p.node] += p.gpus
    releasing: dict[str, float] = defaultdict(float)
    for e in decisions.get("evictions") or []:
        p = facts.pods.get(e.get("pod"))
        if p is not None and p.active and p.node:
            releasing[p.node] += p.gpus
    bound: dict[str, float] = defaultdict(float)
    piped: dict[str, float] = defaultdict(float)
    for kind, acc in (("binds", bound), ("pipelined", piped)):
        for d in decisions.get(kind) or []:
            p = facts.pods.get(d.get("pod"))
            if p is not None:
                acc[d["node"]] += p.gpus
    out = []
    for node in sorted(set(bound) | set(piped)):
        cap = facts.node_gpus.get(node, 0.0)
        if running[node] + bound[node] > cap + 1e-9:
            out.append(f"node {node}: {bound[node]:g} GPUs bound on {cap - running[node]:g} idle")
        if running[node] - releasing[node] + bound[node] + piped[node] > cap + 1e-9:
            out.append(f"node {node}: {running[node] - releasing[node]:g} GPUs left running + {bound[node]:g} bound "
                       f"+ {piped[node]:g} pipelined > {cap:g}")
    return out


# --------------------------------------------------------------------------------------------
# runs
# --------------------------------------------------------------------------------------------

@dataclass
class EngineFigures:
    engine: str
    status: str = ""
    walls: list[float] = field(default_factory=list)
    evicted_pods: int = 0
    evicted_gpus: float = 0.0
    by_action: dict[str, int] = field(default_factory=dict)
    preemptor_gpus_bound: float = 0.0
    preemptor_gpus_pipelined: float = 0.0
    jobs_decided: int = 0
    jobs_decided_on_evicted: int = 0
    findings: list[str] = field(default_factory=list)
    deterministic: bool = True

    @property
    def wall(self) -> float:
        return statistics.median(self.walls) if self.walls else float("nan")


@dataclass
class ShapeRun:
    shape: str
    label: str
    nodes: int
    gpus: float
    running_pods: int
    pending_jobs: int
    pending_gpus: float
    engines: dict[str, EngineFigures] = field(default_factory=dict)


def decisions_of(result: Any) -> dict[str, Any]:
    """The parts of `kai-cp solve`'s output the benchmark judges (interfaces.md section 2)."""
    return {"cycle": {"engine": result.engine, "status": result.status, "wallSeconds": result.wall_seconds},
            "binds": result.binds(), "pipelined": result.pipelined(), "evictions": result.evictions()}


def run_engine_once(doc: dict[str, Any], engine: str, args: argparse.Namespace) -> tuple[dict[str, Any], float, str]:
    state = build_cluster_state(load_snapshot_dict(doc, "bench-evictions"))
    settings = CycleSettings(engine=engine, time_limit=args.time_limit)
    t0 = time.perf_counter()
    result = run_cycle(state, settings)
    wall = time.perf_counter() - t0
    stats = result.stats
    status = result.status if engine == "greedy" else f"{result.status}/{stats.get('solverStatus', '-')}"
    if stats.get("fallbackReason"):
        status += f" ({stats['fallbackReason']})"
    return decisions_of(result), wall, status


def judge(facts: Facts, decisions: dict[str, Any], fig: EngineFigures) -> None:
    """Fill ``fig``'s decision figures from one cycle's decisions."""
    evictions = decisions["evictions"]
    fig.evicted_pods = len(evictions)
    fig.evicted_gpus = sum(facts.pods[e["pod"]].gpus for e in evictions if e["pod"] in facts.pods)
    fig.by_action = dict(sorted(Counter(e["action"] for e in evictions).items()))
    freed_nodes = {facts.pods[e["pod"]].node for e in evictions if e["pod"] in facts.pods}
    preemptors = {(g.namespace, g.name): g for g in facts.preemptors()}
    placed: Counter = Counter()
    on_freed: set[tuple[str, str]] = set()
    fig.preemptor_gpus_bound = fig.preemptor_gpus_pipelined = 0.0
    for kind in ("binds", "pipelined"):
        for d in decisions[kind]:
            p = facts.pods.get(d["pod"])
            if p is None or p.group not in preemptors or p.active:
                continue
            placed[p.group] += 1
            if kind == "binds":
                fig.preemptor_gpus_bound += p.gpus
            else:
                fig.preemptor_gpus_pipelined += p.gpus
                if d["node"] in freed_nodes:
                    on_freed.add(p.group)
    decided = [k for k, n in placed.items() if preemptors[k].active + n >= preemptors[k].min_member]
    fig.jobs_decided = len(decided)
    fig.jobs_decided_on_evicted = sum(k in on_freed for k in decided)
    fig.findings = check_decisions(facts, decisions)


def run_shape(shape: str, label: str, build: Callable[[], dict[str, Any]], args: argparse.Namespace) -> ShapeRun:
    t0 = time.perf_counter()
    doc = build()
    built = time.perf_counter() - t0
    if args.write_snapshots:
        os.makedirs(args.write_snapshots, exist_ok=True)
        gen.write_snapshot(doc, os.path.join(args.write_snapshots, f"evictions-{label}.zip"))
    facts = snapshot_facts(doc)
    pre = facts.preemptors()
    run = ShapeRun(shape, label, len(facts.node_gpus), sum(facts.node_gpus.values()),
                   sum(p.active for p in facts.pods.values()), len(pre),
                   sum(p.gpus for p in facts.pods.values() if p.group and not p.active
                       and facts.groups[p.group].pending))
    print(f"\n== {label}: {run.nodes} nodes, {run.gpus:.0f} GPUs, {run.running_pods} running pods, "
          f"{run.pending_jobs} pending jobs ({run.pending_gpus:.0f} GPUs); built in {built:.1f} s ==")
    sys.stdout.flush()
    for engine in args.engines:
        fig = EngineFigures(engine)
        first: Optional[list] = None
        for _ in range(args.repeats):
            decisions, wall, fig.status = run_engine_once(doc, engine, args)
            fig.walls.append(wall)
            sig = [decisions["evictions"], decisions["binds"], decisions["pipelined"]]
            if first is None:
                first = sig
                judge(facts, decisions, fig)
            elif sig != first:
                fig.deterministic = False
        run.engines[engine] = fig
        print_row(run, fig)
        sys.stdout.flush()
    return run


HEADER = (f"  {'engine':<8}{'wall med':>9}{'evicted':>8}{'ev GPUs':>8}{'bound':>7}{'piped':>7}"
          f"{'decided':>8}{'on ev.':>7}{'invalid':>8}  status / actions")


def print_row(run: ShapeRun, f: EngineFigures) -> None:
    if f.engine == next(iter(run.engines)):
        print(HEADER)
    actions = ", ".join(f"{a} {n}" for a, n in f.by_action.items()) or "no evictions"
    print(f"  {f.engine:<8}{f.wall:>9.3f}{f.evicted_pods:>8}{f.evicted_gpus:>8.0f}{f.preemptor_gpus_bound:>7.0f}"
          f"{f.preemptor_gpus_pipelined:>7.0f}{f.jobs_decided:>8}{f.jobs_decided_on_evicted:>7}{len(f.findings):>8}"
          f"  {f.status}; {actions}" + ("" if f.deterministic else "; DECISIONS DIFFER BETWEEN REPEATS"))
    for finding in f.findings[:5]:
        print(f"    invalid: {finding}")


def shape_plan(args: argparse.Namespace) -> list[tuple[str, str, Callable[[], dict[str, Any]]]]:
    plan: list[tuple[str, str, Callable[[], dict[str, Any]]]] = []
    q = args.quick
    if "reclaim" in args.shapes:
        for n in ([10] if q else args.reclaim_nodes):
            plan.append(("reclaim", f"reclaim-{n}", lambda n=n: reclaim_large_jobs(n, args.large_job_share)))
    if "full" in args.shapes:
        n, r, p = (10, 80, 80) if q else (args.full_nodes, args.full_running, args.full_pending)
        plan.append(("full", f"full-{n}", lambda n=n, r=r, p=p: full_cycle(n, r, p, args.seed)))
    if "contention" in args.shapes:
        n, p = (60, 300) if q else (args.contention_nodes, args.contention_pending)
        plan.append(("contention", f"contention-{n}", lambda n=n, p=p: contention(n, p, args.seed)))
    return plan


def summary(runs: list[ShapeRun]) -> None:
    print("\n== summary (median cycle wall s; evicted pods / GPUs; preemptor GPUs bound + pipelined; "
          "jobs decided (on evicted capacity); invalid decisions) ==")
    for r in runs:
        ref = f"  [KAI reclaim action alone: {KAI_RECLAIM_SECONDS[r.nodes]}]" if (
            r.shape == "reclaim" and r.nodes in KAI_RECLAIM_SECONDS) else ""
        print(f"  {r.label}{ref}")
        for f in r.engines.values():
            verdict = ""
            if r.shape == "reclaim":
                verdict = "  pending job decided on evicted capacity: " + ("yes" if f.jobs_decided_on_evicted else "no")
            print(f"    {f.engine:<7} {f.wall:.3f} s; {f.evicted_pods} / {f.evicted_gpus:.0f}; "
                  f"{f.preemptor_gpus_bound:.0f} + {f.preemptor_gpus_pipelined:.0f}; {f.jobs_decided} "
                  f"({f.jobs_decided_on_evicted}); {len(f.findings)}{verdict}")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Eviction actions on full clusters, greedy vs CP-SAT.")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--reclaim-nodes", type=int, nargs="+", default=[500, 1000])
    ap.add_argument("--large-job-share", type=float, default=0.5, help="pods of the pending job per node")
    ap.add_argument("--full-nodes", type=int, default=500)
    ap.add_argument("--full-running", type=int, default=4000)
    ap.add_argument("--full-pending", type=int, default=4000)
    ap.add_argument("--contention-nodes", type=int, default=1000)
    ap.add_argument("--contention-pending", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny clusters, one repeat (smoke test)")
    ap.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    ap.add_argument("--write-snapshots", metavar="DIR", help="also write each shape's snapshot ZIP here")
    args = ap.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    args.shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in args.shapes if s not in SHAPES] + [e for e in args.engines if e not in ENGINES]
    if unknown:
        ap.error(f"unknown shape or engine: {', '.join(unknown)}")
    if args.quick:
        args.repeats = 1
    print(f"kai-cp eviction benchmark: shapes {', '.join(args.shapes)}; engines {', '.join(args.engines)}, "
          f"time limit {args.time_limit}s, {args.repeats} repeats; {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print("columns: wall med = median cycle seconds; evicted / ev GPUs = pods evicted and their GPUs; "
          "bound / piped = GPUs of pending jobs bound / pipelined; decided = pending jobs placed up to "
          "minMember; on ev. = of them pipelined on a node that lost a pod; invalid = check_decisions findings")
    runs = [run_shape(shape, label, build, args) for shape, label, build in shape_plan(args)]
    summary(runs)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"settings": vars(args),
                       "runs": [{**asdict(r), "engines": {k: {**asdict(f), "wallMedian": f.wall}
                                                          for k, f in r.engines.items()}} for r in runs]},
                      fh, indent=1)
            fh.write("\n")
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
