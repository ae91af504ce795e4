"""`kai-cp run`: schedule a live cluster in place of KAI's scheduler.

It takes the flags KAI's operator passes to KAI's scheduler (an unknown flag is a warning, so
KAI's operator can run kai-cp's image unchanged), finds its cluster the usual way (in-cluster
service account, else `--kubeconfig` / KUBECONFIG), waits for its watch cache to sync, then runs
one cycle every `--schedule-period` measured from the end of the previous one (KAI's sliding
period): snapshot from the cache -> cluster state -> decisions (kai_cp.cycle) -> the writes
planned and assumed in the cache -> status -> metrics. The writes (BindRequests, or bindings with
`--bind`; evictions) go out behind the cycle (integration/writer.py), as kube-scheduler's
binding cycle; `--async-writes=false` makes each cycle wait for its own.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import logging
import os
import signal
import sys
import threading
import time
from fractions import Fraction
from typing import Any, Sequence

from kai_cp.cycle import (DEFAULT_SEED, DEFAULT_TIME_LIMIT, DEFAULT_WORKERS, ENGINES, CycleSettings, load_engine,
                          run_cycle)
from kai_cp.defaults import positive_int, positive_seconds, solver_seed
from kai_cp.gcpause import collected_after
from kai_cp.loader import dump_snapshot
from kai_cp.state_cache import StateBuilder
from models import duration_seconds

from .apply import Applier
from .backoff import BindBackoff
from .cache import Cache
from .kube import Kube, load_api_client
from .leader import LeaderElector, default_identity
from .metrics import Metrics
from .server import parse_address, serve, snapshot_zip
from .status import StatusWriter
from .writer import Writer

log = logging.getLogger("kai_cp.run")
BACKOFF_GATE = "kai-cp.run/bind-backoff"


# ----------------------------------------------------------------------------------- flags
def _bool(text: str | None) -> bool:
    if text is None:
        return True
    t = text.strip().lower()
    if t in ("1", "t", "true", "yes", "y"):
        return True
    if t in ("0", "f", "false", "no", "n"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def _duration(text: str) -> float:
    try:
        return float(duration_seconds(text))
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a duration (e.g. 1s, 500ms): {text!r}") from None


def _flag(p: argparse._ActionsContainer, name: str, default: bool, help: str) -> None:
    p.add_argument(name, type=_bool, nargs="?", const=True, default=default, metavar="BOOL",
                   help=f"{help} (default {str(default).lower()})")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="kai-cp run", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Schedule a live cluster in place of KAI's scheduler: watch, decide (one CP-SAT model per "
                    "cycle), bind through KAI's binder (BindRequests) or with --bind, report status and metrics.",
        epilog="Flags of KAI's scheduler that kai-cp does not know are logged as warnings and ignored, so KAI's "
               "operator can start kai-cp's image with KAI's arguments.\n"
               "Booleans take --flag, --flag=true or --flag=false, as KAI's (Go pflag) flags do.")
    k = ap.add_argument_group("KAI scheduler flags")
    k.add_argument("--scheduler-name", default="kai-scheduler",
                   help="pods with this spec.schedulerName are scheduled; also the leader-election Lease name (default kai-scheduler)")
    k.add_argument("--namespace", default="kai-scheduler",
                   help="the scheduler's namespace: Lease and scheduler ConfigMaps live here (default kai-scheduler)")
    k.add_argument("--scheduler-conf", default="", help="scheduler configuration file (KAI's YAML/JSON: actions, tiers, "
                   "queueDepthPerAction); re-read when it changes. Default: KAI's built-in configuration")
    k.add_argument("--schedule-period", type=_duration, default=1.0,
                   help="time from the end of one cycle to the start of the next, Go duration (default 1s)")
    _flag(k, "--leader-elect", False, "take the Lease before scheduling; run several replicas with it")
    k.add_argument("--metrics-namespace", default="kai", help="prefix of the Prometheus metrics (default kai)")
    k.add_argument("--listen-address", default=":8080", help="address of /metrics, /healthz (default :8080)")
    k.add_argument("--plugin-server-port", type=int, default=8081,
                   help="port of the plugin server on 127.0.0.1 with /get-snapshot (default 8081; 0 disables)")
    k.add_argument("--nodepool-label-key", default="kai.scheduler/node-pool",
                   help="node-pool label key; empty: all nodes (default kai.scheduler/node-pool)")
    k.add_argument("--partition-label-value", default="",
                   help="this shard's node-pool value; empty: nodes without the label (default empty)")
    k.add_argument("--queue-label-key", default="kai.scheduler/queue", help="queue label key (default kai.scheduler/queue)")
    _flag(k, "--restrict-node-scheduling", False, "only nodes labelled as GPU or CPU workers")
    k.add_argument("--max-consolidation-preemptees", type=int, default=16, help="consolidation victims cap (default 16)")
    _flag(k, "--use-scheduling-signatures", True, "skip jobs no easier than ones that failed")
    _flag(k, "--full-hierarchy-fairness", True, "fairness across the whole queue tree")
    _flag(k, "--allow-consolidating-reclaim", True, "pipelined pods do not count as reclaimed")
    k.add_argument("--default-staleness-grace-period", type=_duration, default=60.0,
                   help="stale-gang grace period, Go duration; negative: never (default 60s)")
    _flag(k, "--detailed-fit-errors", False, "per-node fit errors in messages")
    _flag(k, "--update-pod-eviction-condition", False, "DisruptionTarget condition before evicting")
    _flag(k, "--schedule-csi-storage", False, "storage-capacity aware placement (accepted; not modelled by kai-cp yet)")
    k.add_argument("--num-of-status-recording-workers", type=int, default=5,
                   help="parallel status/event writers (default 5)")
    k.add_argument("--resource-reservation-app-label", default="kai-resource-reservation",
                   help="app label of GPU reservation pods (default kai-resource-reservation)")
    k.add_argument("--cpu-worker-node-label-key", default="node-role.kubernetes.io/cpu-worker", help="CPU worker label")
    k.add_argument("--gpu-worker-node-label-key", default="node-role.kubernetes.io/gpu-worker", help="GPU worker label")
    k.add_argument("--mig-worker-node-label-key", default="node-role.kubernetes.io/mig-enabled", help="MIG worker label")
    k.add_argument("--qps", type=float, default=50,
                   help="client-side rate limit of status writes (events, conditions, annotations, queue status), "
                        "requests per second (default 50; 0: none). BindRequests, bindings and evictions are not "
                        "throttled")
    k.add_argument("--burst", type=int, default=300, help="status writes allowed at once above --qps (default 300)")
    k.add_argument("--v", type=int, default=3, help="log verbosity: <=2 warnings, 3 info, >=4 debug (default 3)")
    _flag(k, "--version", True, "log the version at start")
    c = ap.add_argument_group("kai-cp flags")
    c.add_argument("--kubeconfig", default=None,
                   help="kubeconfig file; default: in-cluster service account, else KUBECONFIG / ~/.kube/config")
    c.add_argument("--context", default=None, help="kubeconfig context")
    _flag(c, "--bind", False, "bind pods itself through pods/binding instead of writing BindRequests for KAI's binder "
          "(whole GPUs only: fractional GPU pods need KAI's binder)")
    _flag(c, "--evict-with-delete", False, "evict by deleting pods, as KAI does, instead of the eviction API "
          "(which respects PodDisruptionBudgets)")
    c.add_argument("--engine", choices=ENGINES, default="cp-sat", help="decision engine (default cp-sat)")
    c.add_argument("--time-limit", type=positive_seconds, default=DEFAULT_TIME_LIMIT,
                   help=f"seconds for each cycle's decisions (default {DEFAULT_TIME_LIMIT})")
    c.add_argument("--seed", type=solver_seed, default=DEFAULT_SEED, help=f"solver seed (default {DEFAULT_SEED})")
    c.add_argument("--workers", type=positive_int, default=DEFAULT_WORKERS, help=f"solver workers (default {DEFAULT_WORKERS})")
    c.add_argument("--leader-elect-lease-duration", type=_duration, default=15.0, help="Lease duration (default 15s, as KAI)")
    c.add_argument("--leader-elect-renew-deadline", type=_duration, default=10.0,
                   help="stop applying when not renewed for this long; must be below the lease duration (default 10s)")
    c.add_argument("--leader-elect-retry-period", type=_duration, default=5.0, help="renew/retry interval (default 5s)")
    c.add_argument("--api-timeout", type=_duration, default=10.0, help="timeout of each API request (default 10s)")
    c.add_argument("--sync-timeout", type=_duration, default=300.0,
                   help="give up when the cache has not synced in this time (default 5m)")
    c.add_argument("--identity", default=None, help="leader-election identity (default POD_NAME or hostname_uuid)")
    c.add_argument("--idle-resync", type=_duration, default=10.0,
                   help="when nothing changed in the cluster since a cycle that decided nothing, the next cycle is "
                        "skipped (same input, same decisions) for up to this long (default 10s; 0: never skip)")
    c.add_argument("--status-refresh", type=_duration, default=60.0,
                   help="a pending job's status message (events, PodGroup and pod conditions) whose only change is in "
                        "its numbers (allocation, fair share) is rewritten at most this often; a change of reason is "
                        "written at once (default 60s; 0: every change)")
    c.add_argument("--cycles", type=int, default=0, help="stop after this many cycles as leader (default 0: run forever)")
    _flag(c, "--async-writes", True, "send each cycle's BindRequests, bindings and evictions behind it, as "
          "kube-scheduler's binding cycle: the cycle assumes its decisions in the cache and returns; false: each "
          "cycle waits for its writes")
    return ap


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    args, unknown = parser().parse_known_args(list(argv))
    args.unknown = unknown
    return args


# ---------------------------------------------------------------------------- configuration
def scheduler_params(a: argparse.Namespace) -> dict[str, Any]:
    """KAI's schedulerParams (spec 9.2): omitempty, durations in nanoseconds."""
    p: dict[str, Any] = {"schedulerName": a.scheduler_name,
                         "partitionParams": {"NodePoolLabelKey": a.nodepool_label_key,
                                             "NodePoolLabelValue": a.partition_label_value},
                         "maxNumberConsolidationPreemptees": a.max_consolidation_preemptees,
                         "numOfStatusRecordingWorkers": a.num_of_status_recording_workers,
                         "globalDefaultStalenessGracePeriod": int(a.default_staleness_grace_period * 1e9),
                         "schedulePeriod": int(a.schedule_period * 1e9),
                         "queueLabelKey": a.queue_label_key}
    for key, val in (("restrictSchedulingNodes", a.restrict_node_scheduling),
                     ("scheduleCSIStorage", a.schedule_csi_storage),
                     ("useSchedulingSignatures", a.use_scheduling_signatures),
                     ("fullHierarchyFairness", a.full_hierarchy_fairness),
                     ("allowConsolidatingReclaim", a.allow_consolidating_reclaim),
                     ("detailedFitErrors", a.detailed_fit_errors),
                     ("updatePodEvictionCondition", a.update_pod_eviction_condition)):
        if val:
            p[key] = True
    return {k: v for k, v in p.items() if v not in ("", 0, None)}


class ConfigFile:
    """`--scheduler-conf`, re-read when its modification time changes; a bad edit keeps the last good one."""

    def __init__(self, path: str):
        self.path = path
        self.mtime: float | None = None
        self.doc: dict | None = None

    def get(self) -> dict | None:
        if not self.path:
            return None
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError as e:
            if self.doc is None:
                log.warning("scheduler configuration %s unreadable (%s); using KAI's defaults", self.path, e)
                self.mtime = -1
            return self.doc
        if mtime != self.mtime:
            self.mtime = mtime
            try:
                import yaml
                with open(self.path, encoding="utf-8") as f:
                    doc = yaml.safe_load(f)
                if not isinstance(doc, dict):
                    raise ValueError("not a mapping")
                self.doc = doc
                log.info("scheduler configuration loaded from %s", self.path)
            except Exception as e:
                log.warning("scheduler configuration %s unusable (%s); keeping the previous one", self.path, e)
        return self.doc


# ------------------------------------------------------------------------------------- loop
class Scheduler:
    def __init__(self, args: argparse.Namespace, kube: Kube):
        self.args = args
        self.kube = kube
        self.metrics = Metrics(args.metrics_namespace)
        self.cache = Cache(kube, args.namespace)
        self.config = ConfigFile(args.scheduler_conf)
        self.params = scheduler_params(args)
        self.backoff = BindBackoff()
        self.states = StateBuilder()      # per-object records kept across cycles: only changed objects are re-derived
        self.settings = CycleSettings(engine=args.engine, time_limit=args.time_limit, seed=args.seed,
                                      workers=args.workers)
        self.stop = threading.Event()
        self.need_relist = threading.Event()
        self.elector: LeaderElector | None = None
        if args.leader_elect:
            # A write must land before another replica may take the lease: cap each request's
            # timeout to the margin between the renew deadline and the lease's end.
            margin = args.leader_elect_lease_duration - args.leader_elect_renew_deadline
            if kube.timeout > margin:
                log.info("API request timeout %.1fs capped to %.1fs (lease duration - renew deadline)", kube.timeout, margin)
                kube.timeout = margin
            self.elector = LeaderElector(kube, args.namespace, args.scheduler_name,
                                         identity=args.identity or default_identity(),
                                         lease_duration=args.leader_elect_lease_duration,
                                         renew_deadline=args.leader_elect_renew_deadline,
                                         retry_period=args.leader_elect_retry_period,
                                         on_started=self.need_relist.set)
        on_write = lambda verb, res, code: self.metrics.api_writes.labels(verb, res, str(code)).inc()  # noqa: E731
        self.applier = Applier(kube, self.cache, bind_mode=args.bind, pool_key=args.nodepool_label_key,
                               pool_value=args.partition_label_value, evict_with_delete=args.evict_with_delete,
                               eviction_condition=args.update_pod_eviction_condition,
                               is_leader=self.may_write, backoff=self.backoff, on_write=on_write)
        self.status = StatusWriter(kube, args.scheduler_name, args.partition_label_value or "default",
                                   workers=args.num_of_status_recording_workers, can_write=self.may_write,
                                   on_write=on_write, refresh=args.status_refresh,
                                   qps=args.qps, burst=args.burst)
        self.writer = Writer(self.applier, on_done=self._written)
        self.last: tuple[Any, dict] | None = None     # (LoadedSnapshot, decisions) of the last cycle with decisions
        self.cycles = 0
        self.skipped = 0
        self.last_cycle: dict[str, float] = {}
        self._last_input: tuple | None = None      # (cache generation, gated pods) of the last quiet cycle
        self._last_full = 0.0
        self._stale_deadline: float | None = None  # when the earliest stale-gang grace period ends (epoch s)

    def may_write(self) -> bool:
        """Leading, with time left on the lease for a write to land (API timeout) before anyone else may lead."""
        if self.elector is None:
            return True
        e = self.elector
        if not e.is_leader() or e._renewed_at is None:
            return False
        return e.clock() + self.kube.timeout < e._renewed_at + e.lease_duration

    # -- one cycle -------------------------------------------------------------------------
    def unchanged(self) -> bool:
        """True when the last cycle decided nothing and its input has not changed since."""
        if self._last_input is None or not self.args.idle_resync:
            return False
        if time.monotonic() - self._last_full >= self.args.idle_resync:
            return False
        if self._stale_deadline is not None and time.time() >= self._stale_deadline:
            return False      # a stale gang's grace period ended: the same input now decides an eviction
        return self._last_input == (self.cache.generation, frozenset(self.backoff.active_keys()))

    def cycle(self) -> dict:
        t0 = time.perf_counter()
        generation = self.cache.generation
        gated = self.backoff.active_keys()

        def gate(pod):
            key = f"{pod.metadata.namespace}/{pod.metadata.name}"
            if key not in gated or pod.spec.node_name:
                return pod
            gates = list(pod.spec.scheduling_gates) + [{"name": BACKOFF_GATE}]
            return pod.model_copy(update={"spec": pod.spec.model_copy(update={"scheduling_gates": gates})})

        loaded = self.cache.snapshot(self.config.get(), self.params, gate if gated else None)
        state = self.states.build(loaded)
        t1 = time.perf_counter()
        result = run_cycle(state, self.settings)
        doc = result.to_json()
        t2 = time.perf_counter()
        batch = self.writer.submit(self.applier.plan(result, doc, self.cycles + 1))
        if not self.args.async_writes:
            self.writer.wait(batch)
        placing = batch.placing
        self.status.record(result, doc, None, queue_objects=set(self.cache.informers["queues"].store), placing=placing)
        t3 = time.perf_counter()
        self._observe(result, doc, placing, t0, t1, t2, t3)
        self._stale_deadline = result.stale.deadline if result.stale is not None else None
        if doc["binds"] or doc["evictions"] or doc["pipelined"]:
            self.last = (loaded, doc)
            self._last_input = None
        else:
            self._last_input = (generation, frozenset(gated))
        self._last_full = time.monotonic()
        self.cycles += 1
        self.last_cycle = {"snapshotAndState": t1 - t0, "decide": t2 - t1, "enqueueAndStatus": t3 - t2, "total": t3 - t0,
                           "binds": len(placing), "evictions": len(batch.evictions)}
        log.info("cycle %d: %d to bind, %d to evict, %d unschedulable jobs; state %.3fs decide %.3fs enqueue %.3fs "
                 "(%s %s; %d writes queued, %d status writes queued)", self.cycles, len(placing), len(batch.evictions),
                 len(doc["unschedulable"]), t1 - t0, t2 - t1, t3 - t2, doc["cycle"]["engine"], doc["cycle"]["status"],
                 self.writer.backlog(), self.status.backlog())
        if log.isEnabledFor(logging.DEBUG):
            for u in doc["unschedulable"]:
                log.debug("pending %s: %s", u["podGroup"], " | ".join(u["reasons"])[:500])
        return doc

    def _written(self, batch, out) -> None:
        """A batch of writes is done (writer thread): what landed goes to status and metrics."""
        self.status.applied(batch, out)
        m = self.metrics
        if out.gangs_applied:
            m.scheduled.labels("allocate").inc(out.gangs_applied)
        for s in out.bind_seconds:
            m.bind_latency.observe(s * 1000)
        if out.failed:
            m.bind_failures.inc(len(out.failed))
        if out.gangs_rolled_back:
            m.gang_rollbacks.inc(out.gangs_rolled_back)
        if out.partial_gangs:
            m.partial_gangs.inc(out.partial_gangs)
        done = set(out.evicted)
        for e in batch.evictions:
            if e.ev.get("pod") in done:
                m.evicted.labels(e.ev.get("podGroup") or "", e.job_namespace, e.job_uid,
                                 self.args.partition_label_value or "default", e.ev.get("action") or "").inc()
        m.write_backlog.set(self.writer.backlog())
        if batch.size():
            now = time.monotonic()
            log.info("cycle %d writes: %d bound, %d failed, %d evicted, %d gangs rolled back%s; done %.3fs after "
                     "the cycle queued them", batch.cycle, len(out.bound), len(out.failed), len(out.evicted),
                     out.gangs_rolled_back, " (stopped: not leading)" if out.stopped_not_leader else "",
                     now - batch.queued_at)

    def _observe(self, result, doc, placing, t0, t1, t2, t3) -> None:
        m = self.metrics
        m.e2e.set((t3 - t0) * 1000)
        m.open_session.set((t1 - t0) * 1000)
        m.action.labels("allocate").set((t2 - t1) * 1000)
        m.close_session.set((t3 - t2) * 1000)
        m.cycles.inc()
        m.cycle_seconds.observe(t3 - t0)
        m.considered.labels("allocate").inc(len(getattr(result.greedy, "order", []) or []))
        m.write_backlog.set(self.writer.backlog())
        cyc = doc["cycle"]
        m.solver_status.clear()
        m.solver_status.labels(str(cyc.get("status"))).set(1)
        m.engine.clear()
        m.engine.labels(str(cyc.get("engine"))).set(1)
        obj, bound = cyc.get("objective"), cyc.get("bound")
        if isinstance(obj, (int, float)) and isinstance(bound, (int, float)):
            m.gap.set(abs(bound - obj) / max(1.0, abs(obj)))
        if "modelFault" in cyc:
            m.model_faults.inc()
        if "variables" in cyc:
            m.model_vars.set(cyc["variables"])
            m.model_cons.set(cyc.get("constraints", 0))
        m.fs_cpu.clear(), m.fs_mem.clear(), m.fs_gpu.clear()
        for q in result.state.queues.values():
            labels = (q.display_name or q.name, q.name, q.display_name or "")
            fs = q.fair_share
            m.fs_cpu.labels(*labels).set(float(Fraction(fs.get("cpu", 0))) / 1000)
            m.fs_mem.labels(*labels).set(float(Fraction(fs.get("memory", 0))) / 1e9)
            m.fs_gpu.labels(*labels).set(float(Fraction(fs.get("gpu", 0))))
        preempt = (result.actions or {}).get("preempt")
        if preempt is not None and preempt.attempts:
            m.preemption_attempts.inc(preempt.attempts)
        m.pending_pods.set(sum(len(j.waiting) for j in result.state.jobs.values()) - len(placing))
        for k, n in self.cache.counts().items():
            m.cache_objects.labels(k).set(n)

    # -- endpoints -------------------------------------------------------------------------
    def get_snapshot(self, query: dict) -> tuple[int, bytes, dict]:
        headers = {"Content-Type": "application/zip", "Content-Disposition": "attachment; filename=snapshot.zip"}
        if query.get("cycle", [""])[0] == "last":
            if self.last is None:
                return 404, b"no cycle has made decisions yet\n", {"Content-Type": "text/plain"}
            loaded, doc = self.last
            return 200, snapshot_zip(dump_snapshot(loaded.snapshot, loaded.raw_invalid), {"decisions.json": doc}), headers
        loaded = self.cache.snapshot(self.config.get(), self.params)
        return 200, snapshot_zip(dump_snapshot(loaded.snapshot, loaded.raw_invalid)), headers

    def routes(self):
        def metrics(_q):
            self.metrics.leader.set(1 if self.may_write() else 0)
            body, ctype = self.metrics.exposition()
            return 200, body, {"Content-Type": ctype}

        def healthz(_q):
            return 200, b"ok\n", {"Content-Type": "text/plain"}

        def readyz(_q):
            ok = all(inf.synced.is_set() for inf in self.cache.informers.values())
            return (200, b"ok\n", {"Content-Type": "text/plain"}) if ok else (503, b"cache not synced\n", {"Content-Type": "text/plain"})
        return {"/metrics": metrics, "/healthz": healthz, "/readyz": readyz}

    # -- main loop -------------------------------------------------------------------------
    def run(self) -> int:
        a = self.args
        servers = []
        if a.listen_address:
            servers.append(serve(parse_address(a.listen_address), self.routes()))
        if a.plugin_server_port:
            servers.append(serve(("127.0.0.1", a.plugin_server_port), {"/get-snapshot": self.get_snapshot}))
        self.cache.start()
        if not self.cache.wait_synced(a.sync_timeout):
            log.error("the watch cache did not sync within %.0fs; is the API server reachable and are the CRDs "
                      "installed (crds/)?", a.sync_timeout)
            return 1
        log.info("cache synced: %s", self.cache.counts())
        load_engine(self.settings.engine)       # the first cycle does not pay OR-Tools' import
        gc.freeze()
        if self.elector:
            self.elector.start()
        try:
            while not self.stop.is_set():
                if self.elector and not self.may_write():
                    self.writer.drop("not leading")
                    self.stop.wait(0.2)
                    continue
                if self.need_relist.is_set():
                    log.info("leading: re-listing every kind before the first cycle")
                    self.writer.drop("became leader")       # nothing decided in an earlier term is sent
                    self.cache.clear_assumed()
                    try:
                        self.cache.relist_all()
                    except Exception as e:
                        log.warning("re-list on becoming leader failed (%s); trying again", e)
                        self.stop.wait(0.5)
                        continue
                    self.need_relist.clear()
                if self.unchanged():
                    self.skipped += 1
                    self.stop.wait(a.schedule_period)
                    continue
                try:
                    with collected_after():     # its garbage after its writes are queued, not before
                        self.cycle()
                except Exception as e:      # one bad cycle never ends the scheduler
                    log.exception("cycle failed: %s", e)
                if a.cycles and self.cycles >= a.cycles:
                    break
                self.stop.wait(a.schedule_period)
        finally:
            # Queued writes go out while this replica still leads (all of them after --cycles; for a
            # while on a signal), then the lease is handed back.
            self.writer.close(timeout=600.0 if not self.stop.is_set() else 2 * self.kube.timeout)
            if self.elector:
                self.elector.stop(release=True)
            self.cache.stop()
            self.status.close()
            for s in servers:
                s.shutdown()
        return 0


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    level = logging.WARNING if args.v <= 2 else logging.INFO if args.v == 3 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for u in args.unknown:
        if u.startswith("-"):
            log.warning("unknown flag %s ignored (a KAI flag kai-cp does not use)", u.split("=", 1)[0])
    if args.leader_elect and not args.leader_elect_renew_deadline < args.leader_elect_lease_duration:
        print("kai-cp run: error: --leader-elect-renew-deadline must be below --leader-elect-lease-duration", file=sys.stderr)
        return 2
    try:
        api = load_api_client(args.kubeconfig, args.context)
    except Exception as e:
        print(f"kai-cp run: error: no cluster found ({e}); run in a pod, or pass --kubeconfig / set KUBECONFIG",
              file=sys.stderr)
        return 2
    sched = Scheduler(args, Kube(api, timeout=args.api_timeout))

    def on_signal(signum, _frame):
        log.info("signal %d: stopping", signum)
        sched.stop.set()
    faulthandler.register(signal.SIGUSR1)     # `kill -USR1` dumps every thread's stack to stderr
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.version:
        log.info("kai-cp run starting (scheduler %s, namespace %s, mode %s)", args.scheduler_name, args.namespace,
                 "bind" if args.bind else "BindRequest")
    return sched.run()
