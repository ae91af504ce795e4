"""Prometheus metrics under KAI's names and types (namespace `--metrics-namespace`, default
`kai`), plus kai-cp's own (`<namespace>_cp_*`: solver status, objective gap, model size, API
writes, cache). prometheus-client appends `_total` to every counter; KAI's counters
`podgroups_scheduled_by_action`, `podgroups_acted_on_by_action`, `scenarios_*_by_action` and
`total_preemption_attempts` have no such suffix, so the exposition is rewritten for those names
and a KAI dashboard reads kai-cp unchanged."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

_EXP_BUCKETS = tuple(5 * 2 ** i for i in range(10))   # KAI: ExponentialBuckets(5, 2, 10)
_QUEUE_LABELS = ("queue_name", "queue_metadata_name", "queue_display_name")
_UNSUFFIXED = ("podgroups_scheduled_by_action", "podgroups_acted_on_by_action", "scenarios_simulation_by_action",
               "scenarios_filtered_by_action", "total_preemption_attempts")


class Metrics:
    def __init__(self, namespace: str = "kai"):
        self.namespace = namespace
        r = self.registry = CollectorRegistry()
        ns = namespace
        self.e2e = Gauge("e2e_scheduling_latency_milliseconds",
                         "E2e scheduling latency in milliseconds (scheduling algorithm + binding), as a gauge",
                         namespace=ns, registry=r)
        self.open_session = Gauge("open_session_latency_milliseconds",
                                  "Open session latency in milliseconds, including all plugins, as a gauge",
                                  namespace=ns, registry=r)
        self.close_session = Gauge("close_session_latency_milliseconds",
                                   "Close session latency in milliseconds, including all plugins, as a gauge",
                                   namespace=ns, registry=r)
        self.action = Gauge("action_scheduling_latency_milliseconds", "Action scheduling latency in milliseconds, as a gauge",
                            ["action"], namespace=ns, registry=r)
        self.task_latency = Histogram("task_scheduling_latency_milliseconds", "Task scheduling latency in milliseconds",
                                      namespace=ns, registry=r, buckets=_EXP_BUCKETS)
        self.bind_latency = Histogram("task_bind_latency_milliseconds", "Task bind latency histogram in milliseconds",
                                      namespace=ns, registry=r, buckets=_EXP_BUCKETS)
        self.scheduled = Counter("podgroups_scheduled_by_action", "Count of podgroups scheduled per action", ["action"],
                                 namespace=ns, registry=r)
        self.considered = Counter("podgroups_acted_on_by_action", "Count of podgroups tried per action", ["action"],
                                  namespace=ns, registry=r)
        self.preemption_attempts = Counter("total_preemption_attempts", "Total preemption attempts in the cluster till now",
                                           namespace=ns, registry=r)
        self.fs_cpu = Gauge("queue_fair_share_cpu_cores", "CPU Fair share of queue, as a gauge. Value is in Cores",
                            _QUEUE_LABELS, namespace=ns, registry=r)
        self.fs_mem = Gauge("queue_fair_share_memory_gb", "Memory Fair share of queue, as a gauge. Value is in GB",
                            _QUEUE_LABELS, namespace=ns, registry=r)
        self.fs_gpu = Gauge("queue_fair_share_gpu", "GPU Fair share of queue, as a gauge. Values in GPU devices",
                            _QUEUE_LABELS, namespace=ns, registry=r)
        self.evicted = Counter("pod_group_evicted_pods", "Total number of pods evicted per pod group",
                               ["podgroup", "namespace", "uid", "nodepool", "action"], namespace=ns, registry=r)
        # kai-cp's own
        self.solver_status = Gauge("cp_solver_status", "1 for the status of the last cycle's solve (OPTIMAL, FEASIBLE, "
                                   "FALLBACK, GREEDY, ...), 0 for the others", ["status"], namespace=ns, registry=r)
        self.engine = Gauge("cp_cycle_engine", "1 for the engine whose decisions the last cycle applied", ["engine"],
                            namespace=ns, registry=r)
        self.gap = Gauge("cp_objective_gap", "Relative gap between the solver's objective and bound in the last cycle",
                         namespace=ns, registry=r)
        self.model_vars = Gauge("cp_model_variables", "Variables of the last cycle's CP-SAT model", namespace=ns, registry=r)
        self.model_cons = Gauge("cp_model_constraints", "Constraints of the last cycle's CP-SAT model", namespace=ns, registry=r)
        self.cycles = Counter("cp_cycles", "Scheduling cycles run", namespace=ns, registry=r)
        self.model_faults = Counter("cp_model_faults", "Cycles whose CP-SAT model failed (a kai-cp bug: build, solve "
                                    "or decode) and that applied KAI's decisions instead", namespace=ns, registry=r)
        self.cycle_seconds = Histogram("cp_cycle_seconds", "Whole cycle time: snapshot, state, decisions, apply, status",
                                       namespace=ns, registry=r,
                                       buckets=(.05, .1, .25, .5, .75, 1, 1.5, 2, 3, 5, 10))
        self.api_writes = Counter("cp_api_writes", "API writes by verb, resource and HTTP status (0: no answer)",
                                  ["verb", "resource", "code"], namespace=ns, registry=r)
        self.bind_failures = Counter("cp_bind_failures", "Pods whose BindRequest or binding failed", namespace=ns, registry=r)
        self.gang_rollbacks = Counter("cp_gang_rollbacks", "Gangs whose apply was undone or refused as a whole",
                                      namespace=ns, registry=r)
        self.partial_gangs = Counter("cp_partial_gangs", "Gangs left partly bound by a failed binding (completed later)",
                                     namespace=ns, registry=r)
        self.leader = Gauge("cp_is_leader", "1 while this replica holds the lease (or runs without election)",
                            namespace=ns, registry=r)
        self.cache_objects = Gauge("cp_cache_objects", "Objects in the watch cache", ["resource"], namespace=ns, registry=r)
        self.write_backlog = Gauge("cp_write_backlog", "Writes (BindRequests, bindings, evictions) decided and "
                                   "not yet sent: the binding cycle's queue", namespace=ns, registry=r)
        self.pending_pods = Gauge("cp_pending_pods", "Pods of this scheduler waiting to be placed after the last cycle",
                                  namespace=ns, registry=r)

    def exposition(self) -> tuple[bytes, str]:
        text = generate_latest(self.registry).decode()
        for name in _UNSUFFIXED:
            text = text.replace(f"{self.namespace}_{name}_total", f"{self.namespace}_{name}")
        text = "\n".join(line for line in text.split("\n") if f"{self.namespace}_" not in line or "_created" not in line)
        return (text if text.endswith("\n") else text + "\n").encode(), CONTENT_TYPE_LATEST
