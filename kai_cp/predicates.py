"""Static node predicates: node selector, required node affinity, taints and tolerations,
node readiness (spec 5.3, items 5 and 6).

They do not depend on what the cycle places, so they are evaluated once per distinct pod
predicate key and distinct node signature, and broadcast to a boolean mask over all nodes.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from kai_cp.nodes import NodeInfo
from kai_cp.pod_affinity import REASONS as POD_AFFINITY_REASONS, affinity_key

AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"


def _freeze(obj):
    if isinstance(obj, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return tuple(_freeze(v) for v in obj)
    return obj


def predicate_key(spec, labels: dict[str, str] | None = None, namespace: str = "default") -> tuple:
    """Hashable summary of everything the static predicates read from a pod: node selector,
    required node affinity, tolerations and required pod (anti-)affinity (with the pod's labels
    and namespace, which the terms are matched against; empty for pods without such terms)."""
    selector = _freeze(dict(spec.node_selector)) if spec.node_selector else ()
    terms: tuple = ()
    affinity = spec.affinity
    node_aff = getattr(affinity, "node_affinity", None) if affinity is not None else None
    required = getattr(node_aff, "required_during_scheduling_ignored_during_execution", None) if node_aff else None
    if required is not None:
        out = []
        for term in required.node_selector_terms or []:
            exprs = tuple((e.key, e.operator, tuple(e.values or ())) for e in (term.match_expressions or []))
            fields = tuple((e.key, e.operator, tuple(e.values or ())) for e in (term.match_fields or []))
            out.append((exprs, fields))
        terms = (tuple(out),)
    tolerations = _frozen_tolerations(spec.tolerations) if spec.tolerations else ()
    return (selector, terms, tolerations, affinity_key(spec, labels or {}, namespace))


def _frozen_tolerations(tolerations) -> tuple:
    frozen = getattr(tolerations, "frozen", None)      # a view's shared list (kai_cp/podview.SharedList)
    if frozen is None:
        frozen = tuple([(t.key or "", t.operator or "Equal", t.value or "", t.effect or "") for t in tolerations])
        if hasattr(tolerations, "frozen"):
            tolerations.frozen = frozen
    return frozen


def _match_expr(value_of, key: str, op: str, values: Sequence[str]) -> bool:
    present, value = value_of(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def affinity_ok(key: tuple, node: NodeInfo) -> bool:
    selector, terms = key[0], key[1]
    labels = node.labels
    if any(labels.get(k) != v for k, v in selector):
        return False
    if not terms:
        return True
    (term_list,) = terms
    if not term_list:        # an empty nodeSelectorTerms list matches nothing
        return False

    def label_of(k: str):
        return (k in labels, labels.get(k))

    def field_of(k: str):
        return (k == "metadata.name", node.name if k == "metadata.name" else None)

    for exprs, fields in term_list:
        if not exprs and not fields:
            continue           # an empty term matches no objects
        if all(_match_expr(label_of, *e) for e in exprs) and all(_match_expr(field_of, *f) for f in fields):
            return True
    return False


def _tolerates(tolerations: Iterable[tuple], taint: tuple[str, str, str]) -> bool:
    t_key, t_value, t_effect = taint
    for key, op, value, effect in tolerations:
        if effect and effect != t_effect:
            continue
        if op == "Exists":
            if not key or key == t_key:
                return True
        elif key == t_key and value == t_value:
            return True
    return False


def taint_reason(key: tuple, node: NodeInfo) -> str | None:
    tolerations = key[2]
    for taint in node.taints:
        if taint[2] not in ("NoSchedule", "NoExecute"):
            continue
        if not _tolerates(tolerations, taint):
            return f"node(s) had untolerated taint {{{taint[0]}: {taint[1]}}}" if taint[1] else \
                f"node(s) had untolerated taint {{{taint[0]}}}"
    return None


def static_reason(key: tuple, node: NodeInfo) -> str | None:
    """First failing static predicate in KAI's order (node condition, taints, affinity), or None."""
    if node.unreadable_pods:
        return "node runs pods whose resources cannot be read (see warnings)"
    if node.not_ready_reason:
        return node.not_ready_reason
    reason = taint_reason(key, node)
    if reason:
        return reason
    if not affinity_ok(key, node):
        return AFFINITY_REASON
    return None


def _unique_rows(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique` over the rows of these non-negative code columns: the first index of each
    distinct row (rows ascending) and each row's position among them. The rows are read as one
    mixed-radix integer: unique over rows (axis=0) sorts a structured view, ~4 ms at 10,000
    nodes, ten times the 1-D sort."""
    key = np.zeros(len(cols[0]), dtype=np.int64)
    span = 1
    for c in cols:
        radix = int(c.max()) + 1 if len(c) else 1
        span *= radix
        if span >= 1 << 62:          # too many distinct values for one integer
            _, first, inverse = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
            return first, inverse.reshape(-1)
        key = key * radix + c
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _label_keys(key: tuple) -> tuple[str, ...]:
    selector, terms = key[0], key[1]
    keys = {k for k, _ in selector}
    if terms:
        for exprs, _fields in terms[0]:
            keys.update(e[0] for e in exprs)
    return tuple(sorted(keys))


class PredicateCache:
    """Masks and first-failure reasons per pod predicate key.

    Nodes are grouped, per key, by what that key can see: the labels it names plus taints and
    readiness (a hostname label must not make every node distinct). Each group is evaluated once.
    """

    def __init__(self, nodes: list[NodeInfo], pod_index=None):
        self.nodes = nodes
        self.pod_index = pod_index        # kai_cp.pod_affinity.PodAffinityIndex: pods on nodes at cycle start
        base: dict[tuple, int] = {}
        self.base_group = np.array([base.setdefault((n.taints, n.not_ready_reason, bool(n.unreadable_pods)), len(base))
                                    for n in nodes], dtype=np.int64)
        self._label_codes: dict[str, np.ndarray] = {}
        self._groups: dict[tuple[str, ...], list[tuple[np.ndarray, NodeInfo]]] = {}
        self._masks: dict[tuple, np.ndarray] = {}
        self._reasons: dict[tuple, tuple[np.ndarray, list[str]]] = {}

    def _codes(self, label: str) -> np.ndarray:
        c = self._label_codes.get(label)
        if c is None:
            values: dict[str | None, int] = {}
            c = np.array([values.setdefault(n.labels.get(label), len(values)) for n in self.nodes], dtype=np.int64)
            self._label_codes[label] = c
        return c

    def groups(self, key: tuple) -> list[tuple[np.ndarray, NodeInfo]]:
        if self._uses_name(key):
            return [(np.array([n.index]), n) for n in self.nodes]
        labels = _label_keys(key)
        g = self._groups.get(labels)
        if g is None:
            if not self.nodes:
                g = []
            else:
                first, inverse = _unique_rows([self.base_group] + [self._codes(k) for k in labels])
                order = np.argsort(inverse, kind="stable")
                bounds = np.searchsorted(inverse[order], np.arange(len(first) + 1))
                g = [(order[bounds[i]:bounds[i + 1]], self.nodes[int(first[i])]) for i in range(len(first))]
            self._groups[labels] = g
        return g

    @staticmethod
    def _uses_name(key: tuple) -> bool:
        terms = key[1]
        return bool(terms) and any(fields for exprs, fields in terms[0])

    def mask(self, key: tuple) -> np.ndarray:
        m = self._masks.get(key)
        if m is None:
            m = np.zeros(len(self.nodes), dtype=bool)
            for idx, rep in self.groups(key):
                m[idx] = static_reason(key, rep) is None
            if key[3] and self.pod_index is not None:
                m &= self.pod_index.reasons(key[3]) == 0
            self._masks[key] = m
        return m

    def reasons(self, key: tuple) -> tuple[np.ndarray, list[str]]:
        """Per node, the index of its first failing static predicate's reason (-1 = passes)."""
        r = self._reasons.get(key)
        if r is None:
            codes = np.full(len(self.nodes), -1, dtype=np.int64)
            seen: dict[str, int] = {}
            for idx, rep in self.groups(key):
                reason = static_reason(key, rep)
                if reason is not None:
                    codes[idx] = seen.setdefault(reason, len(seen))
            if key[3] and self.pod_index is not None:
                pod = self.pod_index.reasons(key[3])
                for code, text in POD_AFFINITY_REASONS.items():
                    codes[(codes == -1) & (pod == code)] = seen.setdefault(text, len(seen))
            r = self._reasons[key] = (codes, list(seen))
        return r
