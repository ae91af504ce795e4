"""Topology in the model (spec 8.2, 8.3, 8.5): each constrained scope (job, sub-group set, PodSet)
picks one domain at its required level when it places pods, and all of its pods go there; the
preferred level is a compactness term: fewest domains used at the preferred level, then at each
level between it and the required one.

Aggregated as the rest of the model: one Boolean per (scope, candidate domain), linked to the
summed pod counts of the scope's classes in that domain, never a Boolean per pod and domain.
Domains that cannot hold the scope's gang minimum (summed candidate capacity) are pruned, and a
scope with pods already running is held to the required domain(s) hosting them. Candidate nodes
outside the topology never reach the model (candidates.py asks `allowed_nodes`).

Where compactness sits in the lexicographic order: below KAI's job order and below utilisation
(GPUs and pods placed), in the level of soft per-node preferences, weighted to outweigh them for
the pods a scope must move to use one domain fewer. A gang that is compact but leaves GPUs idle
is worse for the cluster than one spread within its required domain that lets another job run;
the required level already guarantees what a job cannot run without. A level of its own was
measured first: on the 1,000-node benchmark cluster its range pushed the objective past what a
double holds exactly, and every cycle fell back to greedy.
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.arrays import distinct
from kai_cp.jobs import JobInfo
from kai_cp.model.base import ModelContext
from kai_cp.state import ClusterState
from kai_cp.topology import Constraint, Scope, pinned_domains

MOVE_COST = 15      # stability (20) plus binpack (<= 10) per pod moved, for half the scope's pods


def scopes_of(job: JobInfo, podset: str) -> list[Scope]:
    """Constrained scopes on the path from the job root to a PodSet."""
    return [s for s in job.scope.walk() if s.constraint is not None and podset in s.podsets] if job.scope else []


def allowed_nodes(state: ClusterState, job: JobInfo, podset: str) -> np.ndarray | None:
    """Nodes a PodSet's pods may use under every constraint above it (None: unconstrained)."""
    scopes = scopes_of(job, podset)
    if not scopes:
        return None
    ok = np.ones(len(state.nodes), dtype=bool)
    for s in scopes:
        c = s.constraint
        ok &= c.tree.member
        running = pinned_domains(job, s, c, state.table.index)
        if running is not None:
            ok &= np.isin(c.tree.domain_of(c.required), running)
    return ok


def grouping_level(job: JobInfo, podset: str) -> tuple[Constraint, int] | None:
    """The deepest level a PodSet's pods are grouped at (required first, else preferred), for
    choosing candidate nodes domain by domain."""
    best: tuple[Constraint, int] | None = None
    for s in scopes_of(job, podset):
        c = s.constraint
        level = c.required if c.required is not None else c.preferred
        if level is not None and (best is None or level > best[1]):
            best = (c, level)
    return best


def _scope_need(job: JobInfo, scope: Scope) -> int:
    return sum(max(0, job.podsets[ps].min_available - job.podsets[ps].active_allocated) for ps in scope.podsets)


class Topology:
    """Required levels as hard constraints (a constraint concern)."""

    name = "topology"

    def contribute(self, ctx: ModelContext) -> None:
        for job, scope, pairs in _constrained(ctx):
            c = scope.constraint
            if c.required is None:
                continue
            dom = c.tree.domain_of(c.required)[ctx.pair_node[pairs]]
            need = _scope_need(job, scope)
            cap = np.zeros(c.tree.count(c.required), dtype=np.int64)
            np.add.at(cap, np.maximum(dom, 0), np.where(dom >= 0, ctx.pair_ub[pairs], 0))
            running = pinned_domains(job, scope, c, ctx.state.table.index)
            ok = (dom >= 0) & (cap[np.maximum(dom, 0)] >= max(need, 1))
            if running is not None:
                ok &= np.isin(dom, running)
            for p in pairs[~ok]:
                ctx.model.add(ctx.x[p] == 0)
            pairs, dom = pairs[ok], dom[ok]
            if len(pairs) == 0:
                continue
            ys = _link(ctx, pairs, dom, f"topo[{job.name}/{scope.name}]")
            ctx.model.add(cp_model.LinearExpr.sum(list(ys.values())) <= 1)


class Compactness:
    """Preferred levels: fewest domains used. A soft preference, but one that outweighs keeping
    greedy's nodes and the binpack score for every pod the scope would have to move to save a
    domain, so the solver compacts gangs greedy spread."""

    name = "topology-compactness"

    def contribute(self, ctx: ModelContext) -> None:
        scale = ctx.levels.scale
        variables, coefficients = [], []
        reach = 0
        for job, scope, pairs in _constrained(ctx):
            c = scope.constraint
            if c.preferred is None:
                continue
            top = c.required if c.required is not None else -1
            size = int(sum(ctx.classes[ci].size for ci in set(ctx.pair_class[pairs].tolist())))
            for lv in (lv for lv in range(c.preferred, top, -1) if lv >= 0):
                dom = c.tree.domain_of(lv)[ctx.pair_node[pairs]]
                keep = dom >= 0
                us = _link(ctx, pairs[keep], dom[keep], f"used[{job.name}/{scope.name}/{lv}]")
                weight = MOVE_COST * size + 1 if lv == c.preferred else 1
                variables += list(us.values())
                coefficients += [-weight * scale] * len(us)
                reach += weight * min(len(us), size)       # at most one domain per placed pod
        ctx.add_term(self.name, variables, coefficients)
        ctx.levels.added(reach * scale)


def _constrained(ctx: ModelContext):
    """(job, constrained scope, its pair indices) for every scope with candidate pairs."""
    pairs_of: dict[tuple[str, str], list[int]] = {}
    for i, ci in enumerate(ctx.pair_class.tolist()):
        cls = ctx.classes[ci]
        if cls.job.scope is not None:
            pairs_of.setdefault((cls.job.name, cls.podset), []).append(i)
    jobs = {ctx.classes[ci].job.name: ctx.classes[ci].job for ci in set(ctx.pair_class.tolist())}
    for name in sorted(jobs):
        job = jobs[name]
        if job.scope is None:
            continue
        for scope in job.scope.walk():
            if scope.constraint is None:
                continue
            pairs = [p for ps in scope.podsets for p in pairs_of.get((name, ps), [])]
            if pairs:
                yield job, scope, np.array(sorted(pairs), dtype=np.int64)


def _link(ctx: ModelContext, pairs: np.ndarray, dom: np.ndarray, label: str) -> dict[int, cp_model.IntVar]:
    """One Boolean per domain, true when any of the pairs in that domain places a pod; hinted from greedy."""
    m = ctx.model
    out: dict[int, cp_model.IntVar] = {}
    for d in distinct(dom).tolist():
        members = pairs[dom == d]
        y = m.new_bool_var(f"{label}[{d}]")
        bound = int(ctx.pair_ub[members].sum())
        m.add(cp_model.LinearExpr.sum([ctx.x[p] for p in members]) <= bound * y)
        m.add(cp_model.LinearExpr.sum([ctx.x[p] for p in members]) >= y)
        used = sum(ctx.greedy_counts.get(int(p), 0) for p in members)
        ctx.hint(y, 1 if used else 0)
        out[int(d)] = y
    return out
