"""Inter-pod affinity and anti-affinity, required terms (spec 5.3: Kubernetes' InterPodAffinity).

Against pods already on nodes the terms are static for the cycle, so they become a node mask
per pod kind, folded into the predicate cache. Among the pods of one gang, a required affinity
term the gang's pods satisfy themselves ("all workers in one zone") is the seed-002 case: KAI
places the first pod anywhere and holds the rest to its domain, never trying another. kai-cp
turns it into a required level on a one-level topology of the term's `topologyKey`, so the
model picks the domain for the whole gang at once (kai_cp/topology.py), while the greedy engine
keeps KAI's first-pod rule (kai_cp/topology_fit.py) as hint and fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from kai_cp import host_ports

AFFINITY_REASON = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_REASON = "node(s) didn't satisfy existing pods anti-affinity rules"
#: A term's namespaces when it selects pods of every namespace (`namespaceSelector: {}`, host ports).
ANY_NAMESPACE = ("*",)         # no namespace is named "*"


@dataclass(frozen=True)
class Term:
    match_labels: tuple                   # ((key, value), ...)
    expressions: tuple                    # ((key, operator, (values...)), ...)
    namespaces: tuple | None              # None: the pod's own namespace
    topology_key: str

    def selects(self, labels: dict[str, str], namespace: str, owner_namespace: str) -> bool:
        if self.namespaces != ANY_NAMESPACE and \
                namespace not in (self.namespaces if self.namespaces is not None else (owner_namespace,)):
            return False
        if any(labels.get(k) != v for k, v in self.match_labels):
            return False
        for k, op, values in self.expressions:
            present = k in labels
            if op == "In" and not (present and labels[k] in values):
                return False
            if op == "NotIn" and present and labels[k] in values:
                return False
            if op == "Exists" and not present:
                return False
            if op == "DoesNotExist" and present:
                return False
        return True


def _terms(raw) -> tuple[Term, ...]:
    out = []
    for t in raw or []:
        t = t if isinstance(t, dict) else t.model_dump(by_alias=True, exclude_none=True)
        sel = t.get("labelSelector") or {}
        if not t.get("topologyKey") or not sel:
            continue      # an empty selector matches nothing (Kubernetes)
        exprs = tuple((e.get("key"), e.get("operator"), tuple(e.get("values") or ())) for e in sel.get("matchExpressions") or [])
        # An empty namespaceSelector selects every namespace; one with terms would need the
        # Namespace objects, which no snapshot holds: it adds nothing to the listed ones then.
        nsel = t.get("namespaceSelector")
        every = isinstance(nsel, dict) and not nsel.get("matchLabels") and not nsel.get("matchExpressions")
        ns = ANY_NAMESPACE if every else tuple(t["namespaces"]) if t.get("namespaces") else None
        out.append(Term(tuple(sorted((sel.get("matchLabels") or {}).items())), exprs, ns, t["topologyKey"]))
    return tuple(out)


def _weighted(raw) -> tuple[tuple[int, Term], ...]:
    out = []
    for w in raw or []:
        terms = _terms([w.get("podAffinityTerm") or {}])
        if terms and int(w.get("weight") or 0):
            out.append((int(w["weight"]), terms[0]))
    return tuple(out)


def _port_terms(ports: tuple[tuple[str, int], ...]) -> tuple[Term, ...]:
    """Host ports as required anti-affinity (kai_cp/host_ports.py): per port, the pods that want
    it, in every namespace, one a node."""
    return tuple(Term(((host_ports.label(proto, port), "1"),), (), ANY_NAMESPACE, host_ports.NODE_KEY)
                 for proto, port in ports)


def affinity_key(spec, labels: dict[str, str], namespace: str) -> tuple:
    """The hashable pod-affinity part of a predicate key: (namespace, labels, required affinity,
    required anti-affinity, preferred affinity, preferred anti-affinity); () for pods without any.
    Host ports are in it as anti-affinity terms with the labels they match."""
    ports = host_ports.wanted(spec)
    aff = spec.affinity
    if not ports and (aff is None or (getattr(aff, "pod_affinity", None) is None
                                      and getattr(aff, "pod_anti_affinity", None) is None)):
        return ()
    raw = aff.model_dump(by_alias=True, exclude_none=True) if aff is not None else {}
    pa, anti = raw.get("podAffinity") or {}, raw.get("podAntiAffinity") or {}
    parts = (_terms(pa.get("requiredDuringSchedulingIgnoredDuringExecution")),
             _terms(anti.get("requiredDuringSchedulingIgnoredDuringExecution")) + _port_terms(ports),
             _weighted(pa.get("preferredDuringSchedulingIgnoredDuringExecution")),
             _weighted(anti.get("preferredDuringSchedulingIgnoredDuringExecution")))
    if not any(parts):
        return ()
    if ports:
        labels = {**labels, **host_ports.labels(ports)}
    return (namespace, tuple(sorted(labels.items())), *parts)


def preferred_scores(index: "PodAffinityIndex | None", task) -> np.ndarray | None:
    key = task.predicate_key[3]
    return index.preferred_scores(key) if index is not None and key else None


@dataclass
class ExistingPod:
    labels: dict[str, str]
    namespace: str
    node: int
    anti: tuple[Term, ...]               # its own required anti-affinity terms (symmetric check)


class PodAffinityIndex:
    """Pods on nodes at cycle start, and node label values per topology key."""

    def __init__(self, node_labels: list[dict[str, str]], pods: Callable[[], list[ExistingPod]]):
        self.node_labels = node_labels
        self._make_pods = pods            # built on first use: most clusters have no pod affinity at all
        self._pods: list[ExistingPod] | None = None
        self._codes: dict[str, tuple[np.ndarray, dict[str, int]]] = {}

    @property
    def pods(self) -> list[ExistingPod]:
        if self._pods is None:
            self._pods = self._make_pods()
        return self._pods

    def codes(self, key: str) -> tuple[np.ndarray, dict[str, int]]:
        """Per node, the code of its value for `key` (-1 without the label); for host_ports.NODE_KEY
        each node is its own domain."""
        c = self._codes.get(key)
        if c is None and key == host_ports.NODE_KEY:
            n = len(self.node_labels)
            c = self._codes[key] = (np.arange(n, dtype=np.int64), {str(i): i for i in range(n)})
        if c is None:
            values: dict[str, int] = {}
            arr = np.array([values.setdefault(l[key], len(values)) if key in l else -1 for l in self.node_labels],
                           dtype=np.int64)
            c = self._codes[key] = (arr, values)
        return c

    def self_matching(self, key: tuple) -> list[Term]:
        """Affinity terms no existing pod satisfies but the pod satisfies itself: the gang decides."""
        if not key:
            return []
        namespace, labels, affinity = key[0], dict(key[1]), key[2]
        return [t for t in affinity if not any(t.selects(p.labels, p.namespace, namespace) for p in self.pods)
                and t.selects(labels, namespace, namespace)]

    def reasons(self, key: tuple) -> np.ndarray:
        """Per node: 0 passes, 1 affinity, 2 anti-affinity, 3 existing pods' anti-affinity, 4 a
        host port another pod there holds."""
        n = len(self.node_labels)
        out = np.zeros(n, dtype=np.int64)
        if not key:
            return out
        namespace, labels, affinity, anti = key[0], dict(key[1]), key[2], key[3]
        for t in affinity:
            codes, _ = self.codes(t.topology_key)
            hosts = [p.node for p in self.pods if t.selects(p.labels, p.namespace, namespace)]
            if hosts:
                ok = np.isin(codes, codes[hosts][codes[hosts] >= 0])
            elif t.selects(labels, namespace, namespace):
                ok = codes >= 0               # the gang's first pod opens the domain (Kubernetes' rule)
            else:
                ok = np.zeros(n, dtype=bool)
            out[(out == 0) & ~ok] = 1
        for t in anti:
            codes, _ = self.codes(t.topology_key)
            hosts = [p.node for p in self.pods if t.selects(p.labels, p.namespace, namespace)]
            if hosts:
                bad = np.isin(codes, codes[hosts][codes[hosts] >= 0]) & (codes >= 0)
                out[(out == 0) & bad] = 4 if host_ports.is_port_term(t) else 2
        for p in self.pods:
            for t in p.anti:
                if t.selects(labels, namespace, p.namespace):
                    codes, _ = self.codes(t.topology_key)
                    if codes[p.node] >= 0:
                        out[(out == 0) & (codes == codes[p.node])] = 4 if host_ports.is_port_term(t) else 3
        return out


    def preferred_scores(self, key: tuple) -> np.ndarray | None:
        """Kubernetes' InterPodAffinity score, 0..100 per node: per preferred term, its weight for each
        existing pod it selects in the node's domain (minus for anti-affinity), normalised over nodes.
        None when the pod has no preferred terms."""
        if not key or not (key[4] or key[5]):
            return None
        namespace = key[0]
        raw = np.zeros(len(self.node_labels), dtype=np.float64)
        for sign, weighted in ((1.0, key[4]), (-1.0, key[5])):
            for weight, t in weighted:
                codes, values = self.codes(t.topology_key)
                hosts = [p.node for p in self.pods if t.selects(p.labels, p.namespace, namespace)]
                if not hosts:
                    continue
                per_domain = np.bincount(codes[hosts][codes[hosts] >= 0], minlength=len(values))
                raw += np.where(codes >= 0, sign * weight * per_domain[np.maximum(codes, 0)], 0.0)
        lo, hi = raw.min(initial=0.0), raw.max(initial=0.0)
        return np.zeros_like(raw) if hi == lo else 100.0 * (raw - lo) / (hi - lo)


REASONS = {1: AFFINITY_REASON, 2: ANTI_AFFINITY_REASON, 3: EXISTING_ANTI_AFFINITY_REASON, 4: host_ports.REASON}


def labels_of(task) -> dict[str, str]:
    """The labels terms match a task by: its key's (with its host ports' synthetic labels), or
    its pod's where it has no key."""
    key = task.predicate_key[3]
    if key:
        return dict(key[1])
    return (task.pod.metadata.labels or {}) if task.pod is not None else {}


def in_cycle_exclusion(index: PodAffinityIndex, task, placed: list) -> np.ndarray | None:
    """Nodes a task may not take because of pods placed earlier in this cycle (KAI's session sees
    them as running): its own anti-affinity against them, and theirs against it. None: no conflict."""
    mine = anti_terms_of(task)
    labels = labels_of(task)
    bad: np.ndarray | None = None

    def exclude(term: Term, node: int) -> None:
        nonlocal bad
        codes, _ = index.codes(term.topology_key)
        if codes[node] < 0:
            return
        hit = codes == codes[node]
        bad = hit if bad is None else (bad | hit)

    for other, node in placed:
        if other is task:
            continue
        for t in mine:
            if t.selects(labels_of(other), other.namespace, task.namespace):
                exclude(t, node)
        for t in anti_terms_of(other):
            if t.selects(labels, task.namespace, other.namespace):
                exclude(t, node)
    return bad


def anti_terms_of(task) -> tuple[Term, ...]:
    """The task's required anti-affinity terms, host ports' included (its predicate key's)."""
    key = task.predicate_key[3]
    return key[3] if key else ()


def carries_anti_affinity(task) -> bool:
    return bool(anti_terms_of(task))
