"""Topology trees and the topology scopes of jobs (spec 8.1, 8.2, 8.5).

A Topology object becomes arrays over the node table: per level, the domain every node belongs
to (a domain is the path of label values down to that level, so `rack-1` under two blocks is
two domains) or -1 for nodes missing any level label, which constrained jobs never use.

A job's scopes mirror its sub-group tree: the job root, inner sub-group sets and PodSets, each
with its own constraint. Only jobs with at least one honoured constraint get scopes; every other
job keeps the unconstrained fast paths of the engines. Inter-pod affinity among a gang's own pods
(spec 5.3, seed 002) is expressed with the same machinery: a required affinity term whose
`topologyKey` the gang's pods share becomes a required level on a one-level tree of that key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kai_cp.arrays import distinct
from kai_cp.jobs import ACTIVE_ALLOCATED

ROOT = -1          # level index of the synthetic root domain (the whole topology)


@dataclass(eq=False)
class TopologyTree:
    name: str
    levels: list[str]                 # node label keys, top level first
    member: np.ndarray                # bool per node: carries every level label
    domain: np.ndarray                # (levels, nodes) int64: domain index at each level, -1 outside
    names: list[list[str]]            # per level: domain ids ("zoneA.rack7")
    parent: list[np.ndarray]          # per level: index of the parent domain one level up (-1 at level 0)

    def level_index(self, label: str | None) -> int | None:
        if not label:
            return None
        try:
            return self.levels.index(label)
        except ValueError:
            return None

    def count(self, level: int) -> int:
        return 1 if level == ROOT else len(self.names[level])

    def domain_of(self, level: int) -> np.ndarray:
        """Domain index per node at a level; the root is domain 0 for members."""
        if level == ROOT:
            return np.where(self.member, 0, -1)
        return self.domain[level]

    def domain_name(self, level: int, d: int) -> str:
        return "root" if level == ROOT else self.names[level][d]

    def ancestors(self, level: int, up_to: int) -> np.ndarray:
        """Per domain of `level`, its ancestor at level `up_to` (<= level; the root is 0); cached."""
        cache = self.__dict__.setdefault("_anc", {})
        key = (level, up_to)
        out = cache.get(key)
        if out is None:
            out = np.arange(self.count(level), dtype=np.int64)
            lv = level
            while lv > up_to:
                out = self.parent[lv][out] if lv > 0 else np.zeros_like(out)
                lv -= 1
            cache[key] = out
        return out

    def name_rank(self, level: int) -> np.ndarray:
        """Rank of every domain's id in string order (KAI's tie-break); cached."""
        cache = self.__dict__.setdefault("_rank", {})
        out = cache.get(level)
        if out is None:
            names = self.names[level] if level >= 0 else ["root"]
            out = np.empty(len(names), dtype=np.int64)
            out[np.array(sorted(range(len(names)), key=names.__getitem__), dtype=np.int64)] = np.arange(len(names))
            cache[level] = out
        return out

    def name_order(self, level: int) -> np.ndarray:
        """The level's domains in string order of their ids (name_rank's inverse); cached."""
        cache = self.__dict__.setdefault("_name_order", {})
        out = cache.get(level)
        if out is None:
            out = cache[level] = np.argsort(self.name_rank(level), kind="stable")
        return out


def build_tree(name: str, levels: list[str], node_labels: list[dict[str, str]]) -> TopologyTree:
    n = len(node_labels)
    member = np.array([all(k in labels for k in levels) for labels in node_labels], dtype=bool)
    domain = np.full((len(levels), n), -1, dtype=np.int64)
    names: list[list[str]] = []
    parents: list[np.ndarray] = []
    for i in range(len(levels)):
        index: dict[str, int] = {}
        parent: list[int] = []
        for j in np.nonzero(member)[0].tolist():
            labels = node_labels[j]
            path = ".".join(labels[k] for k in levels[: i + 1])
            d = index.get(path)
            if d is None:
                d = index[path] = len(index)
                parent.append(int(domain[i - 1, j]) if i > 0 else -1)
            domain[i, j] = d
        names.append(list(index))
        parents.append(np.array(parent, dtype=np.int64))
    return TopologyTree(name, list(levels), member, domain, names, parents)


def build_trees(topologies, node_labels: list[dict[str, str]]) -> tuple[dict[str, TopologyTree], list[tuple[str, str]]]:
    """Trees by name, plus (object, reason) for Topology objects that cannot be used."""
    trees: dict[str, TopologyTree] = {}
    problems: list[tuple[str, str]] = []
    for t in topologies:
        name = t.metadata.name
        levels = [lv.node_label for lv in (t.spec.levels or []) if lv.node_label]
        if name in trees:
            problems.append((name, "another Topology has the same name; this one is ignored"))
            continue
        if len(set(levels)) != len(levels):
            problems.append((name, "a level label is repeated; the topology is not used"))
            continue
        trees[name] = build_tree(name, levels, node_labels)
    return trees, problems


@dataclass(frozen=True, eq=False)
class Constraint:
    tree: TopologyTree
    required: int | None              # level index, None when not required
    preferred: int | None
    source: str = "topology"          # "topology" or "pod-affinity" (for messages)

    @property
    def lowest(self) -> int:
        """The lowest level searched first (8.3): the preferred level, else the required one."""
        return self.preferred if self.preferred is not None else self.required  # type: ignore[return-value]

    @property
    def highest(self) -> int:
        return self.required if self.required is not None else ROOT

    @property
    def required_name(self) -> str:
        return self.tree.levels[self.required] if self.required is not None else "root"


@dataclass(eq=False)
class Scope:
    """A job, an inner sub-group set or a PodSet, with the PodSets (leaves) under it."""

    name: str
    constraint: Constraint | None
    podsets: list[str]
    children: list["Scope"] = field(default_factory=list)
    is_podset: bool = False
    depth: int = 0

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    @property
    def label(self) -> str:
        return "workload" if self.depth == 0 else f"sub-group {self.name}"


def _constraint(raw, trees: dict[str, TopologyTree], who: str) -> tuple[Constraint | None, str | None]:
    """Constraint or KAI's error message (8.2). Only a non-empty topology name is honoured."""
    if raw is None or not raw.topology:
        return None, None
    tree = trees.get(raw.topology)
    if tree is None:
        return None, f"Requested topology {raw.topology} does not exist"
    if not tree.levels:
        return None, f"topology constraint error: the topology tree '{raw.topology}' has no levels"
    req_label, pref_label = raw.required_topology_level, raw.preferred_topology_level
    if not req_label and not pref_label:
        return None, (f"no topology constraints were found for {who} with topology name {raw.topology}: "
                      "set a required or a preferred topology level")
    req, pref = tree.level_index(req_label), tree.level_index(pref_label)
    for label, idx, kind in ((req_label, req, "required"), (pref_label, pref, "preferred")):
        if label and idx is None:
            return None, (f"topology constraint error: {who} specified '{label}' as the {kind} topology constraint "
                          f"level, but the topology tree '{raw.topology}' does not contain a level with this name")
    if req is not None and pref is not None and pref < req:
        pref = req          # a preference above the requirement adds nothing
    return Constraint(tree, req, pref), None


def job_scopes(pg, podsets: dict, trees: dict[str, TopologyTree]) -> tuple[Scope | None, list[str]]:
    """The job's scope tree when any constraint is honoured (else None), and KAI's error messages."""
    spec = pg.spec
    if spec is None:
        return None, []
    errors: list[str] = []
    root_c, err = _constraint(spec.topology_constraint, trees, "workload")
    if err:
        errors.append(err)
    subs = list(spec.sub_groups or [])
    if not subs:
        root = Scope("", root_c, sorted(podsets), is_podset=False)
        root.children = [Scope(name, None, [name], is_podset=True, depth=1) for name in sorted(podsets)]
    else:
        by_parent: dict[str | None, list] = {}
        for s in subs:
            by_parent.setdefault(s.parent.lower() if s.parent else None, []).append(s)

        def make(sg, depth: int) -> Scope:
            c, e = _constraint(sg.topology_constraint, trees, f"sub-group {sg.name}")
            if e:
                errors.append(e)
            kids = [make(k, depth + 1) for k in sorted(by_parent.get(sg.name.lower(), []), key=lambda k: k.name)]
            if not kids:
                return Scope(sg.name, c, [sg.name] if sg.name in podsets else [], is_podset=True, depth=depth)
            return Scope(sg.name, c, [p for k in kids for p in k.podsets], kids, depth=depth)

        root = Scope("", root_c, [], depth=0)
        root.children = [make(s, 1) for s in sorted(by_parent.get(None, []), key=lambda s: s.name)]
        root.podsets = [p for k in root.children for p in k.podsets]
    if errors:
        return None, errors
    if not any(s.constraint is not None for s in root.walk()):
        return None, []
    return root, []


def pinned_domains(job, scope: Scope, c: Constraint, index: dict[str, int],
                   placed: dict | None = None, evicted: dict | None = None) -> np.ndarray | None:
    """Required-level domains already hosting the scope's active pods (8.3): running ones, plus
    those `placed` this cycle (task key -> placement); None when there are none. Pods on nodes
    outside the topology do not pin it, nor running pods `evicted` this cycle (task key ->
    eviction) and not placed again: they are releasing, not active-allocated, in KAI's scenario.
    A reclaim that evicted two pods of a zone-bound gang, one in each of the zones it ran in,
    moved one of them into the zone the other had left (tests/fixtures/evictions/)."""
    if c.required is None:
        return None
    nodes: list[int] = []
    for ps in scope.podsets:
        for t in job.podsets[ps].tasks:
            p = placed.get(t.key) if placed else None
            if p is not None:
                nodes.append(p.node)
            elif t.status in ACTIVE_ALLOCATED and t.node in index and not (evicted and t.key in evicted):
                nodes.append(index[t.node])
    if not nodes:
        return None
    dom = c.tree.domain_of(c.required)[nodes]
    inside = distinct(dom[dom >= 0])
    return inside if len(inside) else None


def plain_scopes(podsets: dict) -> Scope:
    """The scope tree of a job without sub-groups' own constraints: the root over its PodSets."""
    root = Scope("", None, sorted(podsets))
    root.children = [Scope(name, None, [name], is_podset=True, depth=1) for name in sorted(podsets)]
    return root


def affinity_constraint(trees: dict[str, TopologyTree], key: str, node_labels: list[dict[str, str]]) -> Constraint:
    """A gang's own required pod affinity on `key`: one domain of a one-level tree (seed 002)."""
    name = f"pod-affinity:{key}"
    tree = trees.get(name)
    if tree is None:
        tree = trees[name] = build_tree(name, [key], node_labels)
    return Constraint(tree, 0, None, source="pod-affinity")


def add_constraint(root: Scope, podset: str | None, c: Constraint) -> Scope:
    """Wrap the job (podset None) or one PodSet in an extra constrained scope; returns the root."""
    if podset is None:
        return Scope("", c, list(root.podsets), [root], depth=0)
    for s in root.walk():
        for i, child in enumerate(s.children):
            if child.is_podset and child.name == podset:
                s.children[i] = Scope(child.name, c, [podset], [child], depth=child.depth)
                return root
    return root
