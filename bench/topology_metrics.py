"""Topology figures of one cycle's decisions, from the snapshot document alone.

Why: the topology benchmarks must judge the engines without sharing their code, the way
kai_cp/validate.py does for resources (a bug in the engine's domain logic must not hide in the
measurement). Everything here reads the generated document (node labels, Topology objects,
PodGroup constraints, pods) plus the (pod, node) decisions of a cycle.

Definitions (kai-semantics.md 8.1, 8.2):

* A domain at level L of topology T is the path of a node's label values of T's levels down to
  L, so ``rack-1`` under two blocks is two domains. A node missing any of T's level labels
  belongs to no domain of T.
* **Required-level violation**: a placed gang with a required level whose placed pods (this
  cycle's plus its already running ones) are not all inside one domain of that level, or sit
  on a node outside the topology.
* **Racks used** by a placed multi-pod gang: distinct domains at the rack level among the nodes
  of the pods placed this cycle.
* **Minimum racks** (``min_racks``): the fewest rack domains whose pod slots hold the pods the
  gang placed this cycle, where a rack's slots for a gang of ``g``-GPU pods are
  ``sum over its nodes of floor(free GPUs / g)`` and free GPUs are those of the cycle start
  (allocatable minus running pods, on Ready uncordoned nodes). Taking the racks with the most
  slots first is exact for this count. With a required level the racks must lie in one domain
  of that level: the minimum over all such domains (not only the one the engine chose);
  without one, and for a gang that violates its required level, over all racks of the
  topology. It is optimistic in two ways: it ignores other
  gangs placed in the same cycle (``min_racks_given_others`` subtracts them) and CPU, memory,
  taints and selectors (GPUs bind in bench_topology.py's clusters). Gangs whose pods ask for
  different GPU counts get no minimum (None). ``min_racks_in_domain`` is the same minimum
  inside the one required-level domain the engine chose (so excess there is spreading inside
  the domain, not the choice of domain); for gangs without a required level it equals
  ``min_racks``.
* **Excess racks** = racks used - minimum racks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

GPU = "nvidia.com/gpu"
POD_GROUP_ANNOTATION = "pod-group-name"
RACK_LABEL = "cloud.provider.com/topology-rack"


def pod_key(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', 'default')}/{meta['name']}"


def pod_gpus(pod: dict[str, Any]) -> float:
    """Whole GPUs requested by a pod's containers (fractions are not used by these benches)."""
    total = 0.0
    for c in pod.get("spec", {}).get("containers") or []:
        try:
            total += float(((c.get("resources") or {}).get("requests") or {}).get(GPU, 0))
        except ValueError:
            pass
    return total


def node_usable(node: dict[str, Any]) -> bool:
    """Ready and not cordoned."""
    if node.get("spec", {}).get("unschedulable"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions") or [])


@dataclass
class Gang:
    """A PodGroup with pending pods, and what its constraint asks."""

    name: str
    min_member: int
    topology: Optional[str]
    required: Optional[str]
    preferred: Optional[str]
    pending: list[str] = field(default_factory=list)       # pod keys
    running_nodes: list[str] = field(default_factory=list)
    gpus: list[float] = field(default_factory=list)        # per pending pod

    @property
    def pod_gpus(self) -> Optional[float]:
        """GPUs of every pending pod when they are all equal, else None."""
        return self.gpus[0] if self.gpus and all(g == self.gpus[0] for g in self.gpus) else None


@dataclass
class GangFigures:
    """Topology figures of one placed gang."""

    name: str
    pods: int
    gpus: float
    required: bool
    violation: Optional[str]
    racks: Optional[int]                 # None: single-pod gang or no rack level
    min_racks: Optional[int]
    min_racks_given_others: Optional[int]
    min_racks_in_domain: Optional[int] = None

    @property
    def excess(self) -> Optional[int]:
        return None if self.racks is None or self.min_racks is None else self.racks - self.min_racks

    @property
    def excess_in_domain(self) -> Optional[int]:
        if self.racks is None or self.min_racks_in_domain is None:
            return None
        return self.racks - self.min_racks_in_domain

    @property
    def excess_given_others(self) -> Optional[int]:
        if self.racks is None or self.min_racks_given_others is None:
            return None
        return self.racks - self.min_racks_given_others


class TopologyView:
    """Topologies, node domains, free GPUs at the cycle start and pending gangs of a document."""

    def __init__(self, doc: dict[str, Any], rack_label: str = RACK_LABEL) -> None:
        raw = doc["rawObjects"]
        self.rack_label = rack_label
        self.levels: dict[str, list[str]] = {
            t["metadata"]["name"]: [lv.get("nodeLabel") for lv in (t.get("spec") or {}).get("levels") or []]
            for t in raw.get("topologies") or []}
        self.labels: dict[str, dict[str, str]] = {
            n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in raw["nodes"]}
        self.free: dict[str, float] = {
            n["metadata"]["name"]: float(n["status"].get("allocatable", {}).get(GPU, 0))
            for n in raw["nodes"] if node_usable(n)}
        self.gpus_by_pod: dict[str, float] = {}
        self.gang_of_pod: dict[str, str] = {}
        groups = {g["metadata"]["name"]: g for g in raw.get("podGroups") or []}
        self.gangs: dict[str, Gang] = {}
        running: dict[str, list[str]] = defaultdict(list)
        for p in raw["pods"]:
            key, name = pod_key(p), (p["metadata"].get("annotations") or {}).get(POD_GROUP_ANNOTATION)
            g = pod_gpus(p)
            self.gpus_by_pod[key] = g
            node = p["spec"].get("nodeName")
            phase = p["status"].get("phase")
            if node and phase in ("Running", "Pending"):
                if node in self.free:
                    self.free[node] -= g
                running[name].append(node)
            elif phase == "Pending" and name in groups:
                self.gang_of_pod[key] = name
                if name not in self.gangs:
                    spec = groups[name].get("spec") or {}
                    tc = spec.get("topologyConstraint") or {}
                    topo = tc.get("topology") or None
                    self.gangs[name] = Gang(name, max(1, int(spec.get("minMember") or 1)), topo,
                                            tc.get("requiredTopologyLevel") if topo else None,
                                            tc.get("preferredTopologyLevel") if topo else None)
                self.gangs[name].pending.append(key)
                self.gangs[name].gpus.append(g)
        for name, gang in self.gangs.items():
            gang.running_nodes = running.get(name, [])
        self._paths: dict[tuple[str, str], dict[str, Optional[tuple[str, ...]]]] = {}

    # -- domains ------------------------------------------------------------------------------

    def domains(self, topology: str, level: str) -> dict[str, Optional[tuple[str, ...]]]:
        """node -> its domain (label path) at ``level`` of ``topology``; None outside it."""
        key = (topology, level)
        if key not in self._paths:
            levels = self.levels.get(topology) or []
            depth = levels.index(level) + 1 if level in levels else 0
            out: dict[str, Optional[tuple[str, ...]]] = {}
            for node, labels in self.labels.items():
                if depth and all(lv in labels for lv in levels):
                    out[node] = tuple(labels[lv] for lv in levels[:depth])
                else:
                    out[node] = None
            self._paths[key] = out
        return self._paths[key]

    def rack_topology(self, gang: Gang) -> Optional[str]:
        """The topology whose rack level counts racks for ``gang``: its own, else the first
        that has one."""
        if gang.topology and self.rack_label in (self.levels.get(gang.topology) or []):
            return gang.topology
        return next((t for t, lv in self.levels.items() if self.rack_label in lv), None)

    # -- figures ------------------------------------------------------------------------------

    def violation(self, gang: Gang, nodes: Iterable[str]) -> Optional[str]:
        """Why ``gang``'s pods on ``nodes`` break its required level; None when they keep it."""
        if not gang.required:
            return None
        if gang.topology not in self.levels or gang.required not in self.levels[gang.topology]:
            return f"placed although its constraint names no level {gang.required} of {gang.topology}"
        dom = self.domains(gang.topology, gang.required)
        paths = {dom.get(n) for n in nodes}
        if None in paths:
            return f"pods on nodes outside topology {gang.topology}"
        if len(paths) > 1:
            return f"spans {len(paths)} domains of {gang.required}: " + ", ".join(
                sorted("/".join(p) for p in paths if p is not None)[:4])
        return None

    def rack_scope(self, gang: Gang, scoped: bool = True) -> tuple[Optional[str], dict, Optional[dict]]:
        """The topology whose racks count for ``gang``, node -> rack, and node -> its domain of
        the gang's required level (None when not ``scoped`` or without one)."""
        topo = self.rack_topology(gang)
        if topo is None:
            return None, {}, None
        scope = None
        if scoped and gang.required and gang.topology == topo and gang.required in self.levels[topo]:
            scope = self.domains(topo, gang.required)
        return topo, self.domains(topo, self.rack_label), scope

    def rack_slots(self, gang: Gang, pods: int, free: dict[str, float],
                   scoped: bool = True) -> dict[Any, dict[tuple[str, ...], int]]:
        """Per domain of the gang's required level (``()`` without one; ``None`` for nodes
        outside the topology's levels), per rack, how many of its pods the racks' nodes hold
        with ``free`` GPUs per node (racks holding none left out); empty when the gang's pods
        differ in size or no topology has racks."""
        g = gang.pod_gpus
        topo, racks, scope = self.rack_scope(gang, scoped)
        slots: dict[Any, dict[tuple[str, ...], int]] = defaultdict(lambda: defaultdict(int))
        if g is None or topo is None:
            return slots
        for node, f in free.items():
            rack = racks.get(node)
            if rack is None:
                continue
            s = pods if g <= 0 else int(max(0.0, f) // g)
            if s:
                slots[scope.get(node) if scope is not None else ()][rack] += s
        return slots

    def min_racks(self, gang: Gang, pods: int, free: dict[str, float],
                  domain: Optional[tuple[str, ...]] = None, scoped: bool = True) -> Optional[int]:
        """Fewest racks holding ``pods`` pods of ``gang`` with ``free`` GPUs per node (module
        docstring), inside ``domain`` of its required level when given, cluster-wide when not
        ``scoped``; None when the gang's pods differ in size or nothing can hold them."""
        best: Optional[int] = None
        for key, per_rack in self.rack_slots(gang, pods, free, scoped).items():
            if key is None or (domain is not None and key != domain):
                continue
            total, k = 0, 0
            for s in sorted(per_rack.values(), reverse=True):
                total += s
                k += 1
                if total >= pods:
                    best = k if best is None else min(best, k)
                    break
        return best

    def judge(self, placements: Iterable[tuple[str, str]]) -> list[GangFigures]:
        """Figures of every gang with a pod in ``placements`` ((pod key, node name) pairs)."""
        by_gang: dict[str, list[tuple[str, str]]] = defaultdict(list)
        used: dict[str, float] = defaultdict(float)
        for pod, node in placements:
            name = self.gang_of_pod.get(pod)
            if name is not None:
                by_gang[name].append((pod, node))
            used[node] += self.gpus_by_pod.get(pod, 0.0)
        residual = {n: f - used.get(n, 0.0) for n, f in self.free.items()}
        out = []
        for name in sorted(by_gang):
            gang, placed = self.gangs[name], by_gang[name]
            nodes = [n for _, n in placed]
            gpus = sum(self.gpus_by_pod.get(p, 0.0) for p, _ in placed)
            racks = mine = mine_others = mine_domain = None
            topo = self.rack_topology(gang)
            if len(placed) >= 2 and topo is not None:
                rack_of = self.domains(topo, self.rack_label)
                racks = len({rack_of.get(n) for n in nodes})
                violation = self.violation(gang, nodes + gang.running_nodes)
                mine = mine_domain = self.min_racks(gang, len(placed), self.free, scoped=not violation)
                if gang.required and gang.topology == topo and not violation:
                    chosen = self.domains(topo, gang.required).get(nodes[0])
                    mine_domain = self.min_racks(gang, len(placed), self.free, chosen)
                own: dict[str, float] = defaultdict(float)
                for p, n in placed:
                    own[n] += self.gpus_by_pod.get(p, 0.0)
                mine_others = self.min_racks(gang, len(placed),
                                             {n: f + own.get(n, 0.0) for n, f in residual.items()},
                                             scoped=not violation)
            out.append(GangFigures(name, len(placed), gpus, bool(gang.required),
                                   self.violation(gang, nodes + gang.running_nodes), racks, mine, mine_others,
                                   mine_domain))
        return out


def placements_of(result: Any) -> list[tuple[str, str]]:
    """(pod key, node name) of a kai_cp CycleResult's binds and pipelined pods."""
    out = [(b["pod"], b["node"]) for b in result.binds()]
    out += [(b["pod"], b["node"]) for b in result.pipelined()]
    return out
