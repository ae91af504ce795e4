"""A better hint for topology-constrained models: greedy's solution with spread gangs compacted.

KAI's greedy places a gang with a preferred level pod by pod, so after the cluster has filled a
gang that could sit in one rack often ends up in several. On these models the one-worker search
spends its budget on the LP relaxation (big-M domain links make it weak) and rarely moves away
from its hint, so the hint itself is improved first: every scope greedy spread over several
preferred-level domains is moved, in KAI's job order, onto the fewest such domains (inside its
required domain and its classes' candidate nodes, roomiest domain first), on idle capacity only. The result is a complete, feasible solution of the same jobs and
pods, so the model starts from it and can only do better.
"""

from __future__ import annotations

import numpy as np

from kai_cp.model.base import ModelContext
from kai_cp.pod_affinity import carries_anti_affinity


def compact_hint(ctx: ModelContext) -> dict[int, int]:
    counts = dict(ctx.greedy_counts)
    if not any(c.job.scope is not None for c in ctx.classes):
        return counts
    session = ctx.greedy.session
    idle = session.idle.copy()
    pair_index = {(int(c), int(n)): i for i, (c, n) in enumerate(zip(ctx.pair_class.tolist(), ctx.pair_node.tolist()))}
    class_nodes: dict[int, np.ndarray] = {}
    for c in ctx.classes:
        class_nodes[c.index] = ctx.pair_node[ctx.pair_class == c.index]
    for name in ctx.greedy.order:
        job = ctx.state.jobs[name]
        if job.scope is None:
            continue
        for scope in job.scope.walk():
            c = scope.constraint
            if c is None or c.preferred is None or c.preferred == c.required:
                continue
            pods = _placed_pods(ctx, counts, scope, job.name)
            if not pods or any(carries_anti_affinity(ctx.classes[ci].tasks[0]) for ci, _ in pods):
                continue
            pref = c.tree.domain_of(c.preferred)
            used = {int(pref[n]) for _, n in pods}
            if len(used) <= 1 or -1 in used:
                continue
            move = _best_domain(ctx, pods, idle, pref, c, class_nodes)
            if move is None:
                continue
            for ci, n in pods:
                i = pair_index[(ci, n)]
                counts[i] -= 1
                idle[n] += ctx.classes[ci].vec
            for ci, n in move:
                i = pair_index[(ci, n)]
                counts[i] = counts.get(i, 0) + 1
                idle[n] -= ctx.classes[ci].vec
    return {i: v for i, v in counts.items() if v > 0}


def _placed_pods(ctx: ModelContext, counts: dict[int, int], scope, job: str) -> list[tuple[int, int]]:
    """(class, node) per pod of the scope the hint places, none of them pipelined."""
    out = []
    for i, v in counts.items():
        cls = ctx.classes[int(ctx.pair_class[i])]
        if cls.job.name == job and cls.podset in scope.podsets:
            out += [(cls.index, int(ctx.pair_node[i]))] * v
    placements = ctx.greedy.session.placements
    if any(placements[t.key].pipelined for ci, _ in out for t in ctx.classes[ci].tasks if t.key in placements):
        return []
    return out


def _best_domain(ctx: ModelContext, pods: list[tuple[int, int]], idle: np.ndarray, pref: np.ndarray, c,
                 class_nodes: dict[int, np.ndarray]) -> list[tuple[int, int]] | None:
    """The scope's pods on the fewest preferred-level domains (roomiest first, pods largest first),
    or None when that is no fewer than the hint's."""
    free = idle.copy()
    for ci, n in pods:
        free[n] += ctx.classes[ci].vec
    nodes = np.unique(np.concatenate([class_nodes[ci] for ci in {ci for ci, _ in pods}]))
    if c.required is not None:
        req = c.tree.domain_of(c.required)
        nodes = nodes[req[nodes] == req[pods[0][1]]]
    nodes = nodes[pref[nodes] >= 0]
    allowed = {ci: set(class_nodes[ci].tolist()) for ci, _ in pods}
    left = sorted(pods, key=lambda p: -int(ctx.classes[p[0]].vec[2]))
    domains = np.unique(pref[nodes])
    room = free[nodes].copy()
    holds = np.array([_fit_count(ctx, left, room[pref[nodes] == d], nodes[pref[nodes] == d], allowed)
                      for d in domains.tolist()], dtype=np.int64)
    plan: list[tuple[int, int]] = []
    used = 0
    for k in np.lexsort((domains, -holds)).tolist():
        if not left:
            break
        here = pref[nodes] == domains[k]
        placed, left = _fill(ctx, left, room, nodes, here, allowed)
        if placed:
            plan += placed
            used += 1
    current = len({int(pref[n]) for _, n in pods})
    return plan if not left and used < current else None


def _fit_count(ctx: ModelContext, pods, room: np.ndarray, nodes: np.ndarray, allowed) -> int:
    room = room.copy()
    n = 0
    for ci, _ in pods:
        vec = ctx.classes[ci].vec
        for k in np.nonzero(np.all(room >= vec, axis=1))[0].tolist():
            if int(nodes[k]) in allowed[ci]:
                room[k] -= vec
                n += 1
                break
    return n


def _fill(ctx: ModelContext, pods, room: np.ndarray, nodes: np.ndarray, here: np.ndarray, allowed):
    """First-fit of pods into the nodes where `here`; updates `room`; returns (placed, left)."""
    placed, left = [], []
    idx = np.nonzero(here)[0]
    for ci, old in pods:
        vec = ctx.classes[ci].vec
        k = next((k for k in idx.tolist() if int(nodes[k]) in allowed[ci] and np.all(room[k] >= vec)), None)
        if k is None:
            left.append((ci, old))
            continue
        room[k] -= vec
        placed.append((ci, int(nodes[k])))
    return placed, left
