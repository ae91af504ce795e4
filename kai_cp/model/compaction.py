"""A better starting point for topology-constrained models: greedy's placement with the gangs it
spread compacted.

KAI's greedy places a gang with a preferred level pod by pod, so once the cluster has filled, a
gang that fits in two racks often ends up in five. On these models the one-worker search spends
its budget on the LP relaxation (the big-M domain links make it weak) and rarely leaves its hint,
so the hint itself is improved first, before candidates are chosen (the nodes it picks become
candidates, as greedy's own nodes are): every scope greedy spread over several preferred-level
domains is moved, in KAI's job order, onto the fewest such domains that hold all of its pods
(roomiest domain first, largest pods first, on nodes its pods' predicates and topology allow),
on idle capacity only, inside the required domain where that takes the fewest (greedy's own
among equals; a job with several constraints keeps greedy's). Repeated passes leave every gang
on the fewest preferred-level domains the others' placements leave it. The result places the
same pods of the same jobs, so it is a complete and feasible solution the model can only
improve on.
"""

from __future__ import annotations

import numpy as np

from kai_cp.actions.allocate import GreedyResult
from kai_cp.arrays import distinct
from kai_cp.model.base import PodClass
from kai_cp.model.topology import allowed_nodes
from kai_cp.pod_affinity import carries_anti_affinity
from kai_cp.state import ClusterState

PASSES = 3
CHOICES = 4        # required domains tried per scope, most promising first


def compact(state: ClusterState, greedy: GreedyResult, classes: list[PodClass],
            greedy_nodes: dict[int, list[int]]) -> dict[int, list[int]]:
    """Per class, one node per pod placed (greedy's, with spread scopes compacted)."""
    if not any(c.job.scope is not None for c in classes):
        return greedy_nodes
    out = {c: list(ns) for c, ns in greedy_nodes.items()}
    idle = greedy.session.idle.copy()
    by_job: dict[str, list[PodClass]] = {}
    for c in classes:
        by_job.setdefault(c.job.name, []).append(c)
    usable: dict[int, np.ndarray] = {}
    scopes = [(state.jobs[name], scope) for name in greedy.order
              if state.jobs[name].scope is not None and name in by_job and not _pipelined(greedy, by_job[name])
              for scope in state.jobs[name].scope.walk()]
    for _ in range(PASSES):          # a gang compacted frees room another can use in the next pass
        if not _compact_pass(classes, scopes, by_job, out, idle, usable, state):
            break
    return out


def _compact_pass(classes: list[PodClass], scopes: list, by_job: dict[str, list[PodClass]],
                  out: dict[int, list[int]], idle: np.ndarray, usable: dict[int, np.ndarray],
                  state: ClusterState) -> bool:
    """One pass over the scopes in KAI's order; True when some scope moved."""
    changed = False
    for job, scope in scopes:
        c = scope.constraint
        if c is None or c.preferred is None or c.preferred == c.required:
            continue
        mine = [k for k in by_job[job.name] if k.podset in scope.podsets and out.get(k.index)]
        if not mine or any(carries_anti_affinity(k.tasks[0]) for k in mine):
            continue
        pods = [(k.index, n) for k in mine for n in out[k.index]]
        pref = c.tree.domain_of(c.preferred)
        if len({int(pref[n]) for _, n in pods}) <= 1:
            continue
        for k in mine:
            if k.index not in usable:
                usable[k.index] = _usable(state, k)
        # Another domain only for a job's one constraint: moving a sub-group elsewhere could take
        # it out of its parent's domain, and a parent's move would split its sub-groups'.
        alone = sum(1 for s in job.scope.walk() if s.constraint is not None) == 1
        plan = _fewest_domains(classes, pods, idle, pref, c, usable, move=alone)
        if plan is None:
            continue
        for ci, n in pods:
            idle[n] += classes[ci].vec
        for k in mine:
            out[k.index] = []
        for ci, n in plan:
            idle[n] -= classes[ci].vec
            out[ci].append(n)
        changed = True
    return changed


def _pipelined(greedy: GreedyResult, classes: list[PodClass]) -> bool:
    placements = greedy.session.placements
    return any(placements[t.key].pipelined for k in classes for t in k.tasks if t.key in placements)


def _usable(state: ClusterState, c: PodClass) -> np.ndarray:
    ok = state.predicates.mask(c.tasks[0].predicate_key).copy()
    allowed = allowed_nodes(state, c.job, c.podset)
    if allowed is not None:
        ok &= allowed
    return ok


def _fewest_domains(classes: list[PodClass], pods: list[tuple[int, int]], idle: np.ndarray, pref: np.ndarray, c,
                    usable: dict[int, np.ndarray], move: bool = True) -> list[tuple[int, int]] | None:
    """The scope's pods on the fewest preferred-level domains, or None when that is no fewer.
    With a required level (and `move`), every required domain its pods may use is a choice,
    most promising first (fewest preferred-level domains by room), greedy's own first among
    equals: keeping greedy's required domain left a third of the gangs that could have used
    fewer racks in another domain spread (bench/bench_topology.py)."""
    free = idle.copy()
    for ci, n in pods:
        free[n] += classes[ci].vec
    any_usable = np.zeros(len(pref), dtype=bool)
    for ci in {ci for ci, _ in pods}:
        any_usable |= usable[ci]
    nodes = np.nonzero(any_usable & (pref >= 0))[0]
    left = sorted(pods, key=lambda p: -int(classes[p[0]].vec[2]))
    copies = _copies(classes, pods, free[nodes])
    current = len({int(pref[n]) for _, n in pods})
    if c.required is None:
        choices = [np.ones(len(nodes), dtype=bool)]
    else:
        req = c.tree.domain_of(c.required)
        mine = int(req[pods[0][1]])
        within = req[nodes]
        estimate = {}
        for d in distinct(within).tolist():
            here = within == d
            holds = np.sort(_holds(pref[nodes[here]], copies[here])[1])[::-1]
            k = int(np.searchsorted(np.cumsum(holds), len(pods))) + 1
            if k <= len(holds):
                estimate[d] = k
        ranked = sorted(estimate, key=lambda d: (estimate[d], d != mine, d))[:CHOICES] if move else []
        if mine not in ranked:
            ranked.append(mine)
        choices = [within == d for d in ranked if d == mine or estimate[d] < current]
    best: list[tuple[int, int]] | None = None
    best_used = current
    for here in choices:
        plan, used = _plan(classes, left, free[nodes[here]], nodes[here], copies[here], pref, usable)
        if plan is not None and used < best_used:
            best, best_used = plan, used
    return best


def _plan(classes: list[PodClass], left: list, room: np.ndarray, nodes: np.ndarray, copies: np.ndarray,
          pref: np.ndarray, usable) -> tuple[list[tuple[int, int]] | None, int]:
    """All of `left` on `nodes`, roomiest preferred-level domain first (`copies`: how many of the
    largest pod each node holds): (plan, domains used), or (None, 0) when they do not all fit."""
    domains, holds = _holds(pref[nodes], copies)
    plan: list[tuple[int, int]] = []
    used = 0
    for k in np.lexsort((domains, -holds)).tolist():
        if not left:
            break
        placed, left = _fill(classes, left, room, nodes, pref[nodes] == domains[k], usable)
        if placed:
            plan += placed
            used += 1
    return (plan, used) if not left else (None, 0)


def _holds(domain_of_node: np.ndarray, copies: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The preferred-level domains among these nodes and the pod copies each holds."""
    domains, inverse = np.unique(domain_of_node, return_inverse=True)
    return domains, np.bincount(inverse.reshape(-1), weights=copies, minlength=len(domains))


def _copies(classes: list[PodClass], pods: list[tuple[int, int]], room: np.ndarray) -> np.ndarray:
    """How many of the scope's largest pod each node's room holds (domains' room, summed)."""
    big = np.max([classes[ci].vec for ci, _ in pods], axis=0)
    need = big > 0
    if not need.any():
        return np.full(len(room), len(pods))
    return (np.maximum(room[:, need], 0) // big[need]).min(axis=1)


def _fill(classes: list[PodClass], pods, room: np.ndarray, nodes: np.ndarray, here: np.ndarray, usable):
    """First-fit of pods into the nodes where `here`; updates `room`; returns (placed, left)."""
    placed, left = [], []
    idx = np.nonzero(here)[0]
    for ci, old in pods:
        vec = classes[ci].vec
        ok = idx[usable[ci][nodes[idx]] & np.all(room[idx] >= vec, axis=1)]
        if len(ok) == 0:
            left.append((ci, old))
            continue
        k = int(ok[0])
        room[k] -= vec
        placed.append((ci, int(nodes[k])))
    return placed, left
