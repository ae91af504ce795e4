"""Which nodes a request's GPU type may use (spec 5.3 predicate 2, 7.5): MIG instances only on
MIG nodes that admit them, whole GPUs and shared GPUs only where the node's MIG strategy allows.

A node is MIG-enabled by its `node-role.kubernetes.io/mig-enabled` label when that parses as a
bool, else when it advertises any `nvidia.com/mig-*` resource. Strategy `single` admits only
whole-GPU requests, `mixed` only MIG requests; a node running legacy-MIG pods (MIG asked through
annotations) admits no new MIG request. CPU-only requests are not restricted.
"""

from __future__ import annotations

import numpy as np

from kai_cp.resources import MIG_PREFIX, PodRequest, some_key_contains

MIG_ENABLED_LABEL = "node-role.kubernetes.io/mig-enabled"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
_BOOL = {"true": True, "1": True, "t": True, "false": False, "0": False, "f": False}


def mig_enabled(node) -> bool:
    raw = str(node.labels.get(MIG_ENABLED_LABEL, "")).strip().lower()
    if raw in _BOOL:
        return _BOOL[raw]
    return any(k.startswith(MIG_PREFIX) and v > 0 for k, v in node.capacity.items())


def legacy_mig(annotations) -> bool:
    """MIG asked through pod annotations (the pre-device-plugin way): KAI never schedules these."""
    return some_key_contains(annotations, MIG_PREFIX) and any(str(k).startswith(MIG_PREFIX) for k in annotations)


class ResourceTypes:
    """Static per-node masks by request type, computed once per state."""

    def __init__(self, nodes, legacy_nodes: set[str] | None = None):
        legacy_nodes = legacy_nodes or set()
        enabled = np.array([mig_enabled(n) for n in nodes], dtype=bool)
        strategy = np.array([str(n.labels.get(MIG_STRATEGY_LABEL, "")).strip().lower() for n in nodes])
        legacy = np.array([n.name in legacy_nodes for n in nodes], dtype=bool)
        self.mig_ok = enabled & (strategy != "single") & ~legacy
        self.gpu_ok = ~(enabled & (strategy == "mixed"))
        self.shared_ok = ~(enabled & np.isin(strategy, ("mixed", "single")))
        self.all = np.ones(len(nodes), dtype=bool)

    def mask(self, request: PodRequest) -> np.ndarray:
        if request.kind == "MigInstance":
            return self.mig_ok
        if request.is_shared_gpu:
            return self.shared_ok
        if request.gpus > 0:
            return self.gpu_ok
        return self.all


def types_of(state) -> ResourceTypes:
    """The state's masks, built once (the state is fixed for the cycle)."""
    cached = state.__dict__.get("_resource_types")
    if cached is None:
        cached = state.__dict__["_resource_types"] = ResourceTypes(state.nodes, getattr(state, "legacy_mig_nodes", None))
    return cached
