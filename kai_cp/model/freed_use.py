"""Only the pods of jobs allowed to evict a unit use what evicting it frees (model/evictions.py).

For each group of units on a node with the same legal preemptors, every other pod placed there
fits in the node's free capacity plus what the other units there free; a reclaiming queue's
pods count as legal only when the queue reclaims (r_R), so its fair-share cap applies, and only
for jobs KAI's gate 1 lets ask (victim_pool.may_reclaim). And a job
that may evict nobody on a node places there no more than KAI's allocate did while the node loses
pods (`ev`): otherwise the eviction would make room for it, with the preemptor merely taking its
idle share; so does one that may evict there only as a reclaimer, while its queue does not reclaim.

At 1,000 nodes this is ~5,000 rows of ~10 terms (up to ~60 where many classes reach a node): the
rows are built as arrays, one entry per (row, term), and written into the proto in bulk
(model/linear_rows.py), in the order and form the one-row-at-a-time loop wrote them.
"""

from __future__ import annotations

import numpy as np

from kai_cp.arrays import distinct
from kai_cp.jobs import JobInfo
from kai_cp.model.base import ModelContext
from kai_cp.model.linear_rows import UNBOUNDED, add_le_rows, upper_bound
from kai_cp.model.victim_pool import pairs_may_reclaim

EV_ROWS, OUTSIDER_ROWS, GROUP_ROWS, RECLAIMER_ROWS = 0, 1, 2, 3      # the order of a node's rows


def _expand(owner_node: np.ndarray, start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each owner joined with the items of its node (items of node n at start[n] .. start[n] +
    count[n] - 1): (owner, item position) per pair, owners in order, items in order within."""
    lengths = count[owner_node]
    owner = np.repeat(np.arange(len(owner_node)), lengths)
    offsets = np.cumsum(lengths) - lengths
    pos = np.arange(int(lengths.sum())) - np.repeat(offsets, lengths) + np.repeat(start[owner_node], lengths)
    return owner, pos


def only_preemptors_use_freed(ctx: ModelContext, unit_vars: list, r_of: dict, pair_job: list[JobInfo]) -> None:
    """Add the rule's rows (see the module's docstring); sets ctx.extensions["eviction-node"]."""
    m = ctx.model
    table = ctx.state.table
    per_node: dict[int, list[tuple]] = {}
    for u, plan in unit_vars:
        for ts, var, how in plan:
            n = table.index[ts[0].node]
            mult = len(ts) if how == "all" else 1
            per_node.setdefault(n, []).append((u, var, table.vector(ts[0]) * mult))
    ev_of = ctx.extensions.setdefault("eviction-node", {})
    if not per_node:
        return
    evicted_nodes = {e.node for e in ctx.greedy.session.evictions.values()}
    width = ctx.free.shape[1]
    n_nodes = ctx.free.shape[0]
    pair_vec = np.array([ctx.classes[c].vec for c in ctx.pair_class.tolist()]).astype(np.int64).reshape(-1, width)
    pair_node = np.asarray(ctx.pair_node, dtype=np.int64)
    pair_ub = np.asarray(ctx.pair_ub, dtype=np.int64)
    x_index = np.array([v.index for v in ctx.x], dtype=np.int64)

    # Queues as codes; per pair its job's queue and priority; pairs by node, in pair order.
    names = {j.queue for j in pair_job} | set(r_of)
    for u, _, _ in (e for entries in per_node.values() for e in entries):
        names.add(u.queue)
        names |= u.reclaimers
    code = {q: i for i, q in enumerate(sorted(names))}
    n_queues = len(code)
    pair_q = np.array([code[j.queue] for j in pair_job], dtype=np.int64)
    pair_prio = np.array([j.priority for j in pair_job], dtype=np.int64)
    may_reclaim = pairs_may_reclaim(ctx, pair_job)      # gate 1: a job KAI refuses uses nothing reclaimed
    by_node = np.argsort(pair_node, kind="stable")
    pair_count = np.bincount(pair_node, minlength=n_nodes)
    pair_start = np.cumsum(pair_count) - pair_count
    reclaims = np.zeros(n_queues, dtype=bool)
    reclaims[[code[q] for q in r_of]] = True
    r_index = np.zeros(n_queues, dtype=np.int64)
    for q, v in r_of.items():
        r_index[code[q]] = v.index

    # Entries (a unit's variable on a node) flat in node order; groups of units with the same
    # legal preemptors, numbered in node order and, within a node, in order of first entry.
    nodes = list(per_node)
    e_node, e_group, e_var, e_ub, e_vec = [], [], [], [], []
    e_preempt, e_queue, e_prio, e_reclaimers = [], [], [], []
    g_node, g_queue, g_prio, g_has_prio, g_reclaimers, g_vec = [], [], [], [], [], []
    for n in nodes:
        groups: dict[tuple, int] = {}
        for u, var, vec in per_node[n]:
            key = (u.queue, u.priority if u.preempt else None, u.reclaimers)
            g = groups.get(key)
            if g is None:
                g = groups[key] = len(g_node)
                g_node.append(n)
                g_queue.append(code[u.queue])
                g_prio.append(u.priority)
                g_has_prio.append(u.preempt)
                g_reclaimers.append([code[r] for r in u.reclaimers])
                g_vec.append(vec.astype(np.int64))
            else:
                g_vec[g] = g_vec[g] + vec
            e_node.append(n)
            e_group.append(g)
            e_var.append(var.index)
            e_ub.append(upper_bound(var))
            e_vec.append(vec)
            e_preempt.append(u.preempt)
            e_queue.append(code[u.queue])
            e_prio.append(u.priority)
            e_reclaimers.append([code[r] for r in u.reclaimers])
    node_rank = np.full(n_nodes, -1, dtype=np.int64)
    node_rank[nodes] = np.arange(len(nodes))
    e_node_a = np.array(e_node, dtype=np.int64)
    e_var_a = np.array(e_var, dtype=np.int64)
    e_ub = np.array(e_ub, dtype=np.int64)
    e_vec_a = np.array(e_vec, dtype=np.int64).reshape(-1, width)
    e_group_a = np.array(e_group, dtype=np.int64)
    e_count = np.bincount(e_node_a, minlength=n_nodes)
    e_start = np.zeros(n_nodes, dtype=np.int64)     # entries are contiguous per node, nodes in per_node's order
    e_start[nodes] = np.cumsum(e_count[nodes]) - e_count[nodes]

    def membership(lists: list[list[int]]) -> np.ndarray:
        out = np.zeros((len(lists), n_queues), dtype=bool)
        rows = np.repeat(np.arange(len(lists)), [len(x) for x in lists])
        out[rows, [c for x in lists for c in x]] = True
        return out

    # Outsiders: pairs on an entry's node whose job may evict none of the node's units (evictions._legal).
    e_recl = membership(e_reclaimers)
    owner, pos = _expand(e_node_a, pair_start, pair_count)
    k = by_node[pos]
    by_preempt = (np.array(e_preempt, dtype=bool)[owner] & (pair_q[k] == np.array(e_queue, dtype=np.int64)[owner])
                  & (pair_prio[k] > np.array(e_prio, dtype=np.int64)[owner]))
    legal = by_preempt | (e_recl[owner, pair_q[k]] & reclaims[pair_q[k]] & may_reclaim[k])
    legal_count = np.bincount(k[legal], minlength=len(pair_job))
    on_entry_node = np.zeros(n_nodes, dtype=bool)
    on_entry_node[nodes] = True
    outsider = on_entry_node[pair_node] & (legal_count == 0)
    # Legal only as a reclaimer: an outsider too while its queue does not reclaim (r_R = 0); else
    # such a queue, past its fair share, placed on a node's idle capacity while another queue's
    # reclaim there took the freed (found by the generated loop test).
    by_reclaim = on_entry_node[pair_node] & (legal_count > 0) \
        & (np.bincount(k[by_preempt], minlength=len(pair_job)) == 0)
    ev_nodes = distinct(pair_node[outsider | by_reclaim])
    ev_index = np.full(n_nodes, -1, dtype=np.int64)
    for n in sorted(ev_nodes.tolist(), key=lambda n: node_rank[n]):      # created in node order
        ev = ev_of[n] = m.new_bool_var("")
        ev_index[n] = ev.index
        ctx.hint(ev, 1 if n in evicted_nodes else 0)

    rows_key: list[np.ndarray] = []      # per row: (node rank, section, order within) -> its position
    terms: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []     # (row id, variable, coefficient)
    limits: list[np.ndarray] = []
    n_rows = 0

    def add_rows(rank: np.ndarray, section: int, within: np.ndarray, ub: np.ndarray) -> int:
        nonlocal n_rows
        rows_key.append(np.stack([rank, np.full(len(rank), section), within]))
        limits.append(ub)
        first, n_rows = n_rows, n_rows + len(rank)
        return first

    # var <= ub(var) * ev, for each entry on a node with outsiders.
    e_ev = np.flatnonzero(ev_index[e_node_a] >= 0)
    first = add_rows(node_rank[e_node_a[e_ev]], EV_ROWS, e_ev, np.zeros(len(e_ev), dtype=np.int64))
    ids = first + np.arange(len(e_ev))
    terms.append((np.concatenate([ids, ids]), np.concatenate([e_var_a[e_ev], ev_index[e_node_a[e_ev]]]),
                  np.concatenate([np.ones(len(e_ev), dtype=np.int64), -e_ub[e_ev]])))
    # x <= g + (ub - g) * (1 - ev), i.e. x + (ub - g) * ev <= ub, for outsiders below their bound.
    greedy = np.zeros(len(pair_job), dtype=np.int64)
    for i, g in ctx.greedy_counts.items():
        greedy[i] = g
    out = np.flatnonzero(outsider & (greedy < pair_ub))
    first = add_rows(node_rank[pair_node[out]], OUTSIDER_ROWS, out, pair_ub[out])
    ids = first + np.arange(len(out))
    terms.append((np.concatenate([ids, ids]), np.concatenate([x_index[out], ev_index[pair_node[out]]]),
                  np.concatenate([np.ones(len(out), dtype=np.int64), pair_ub[out] - greedy[out]])))
    # ... and x + (ub - g) * ev - (ub - g) * r_R <= ub for the pairs legal only as reclaimers.
    cond = np.flatnonzero(by_reclaim & (greedy < pair_ub))
    first = add_rows(node_rank[pair_node[cond]], RECLAIMER_ROWS, cond, pair_ub[cond])
    ids = first + np.arange(len(cond))
    slack = pair_ub[cond] - greedy[cond]
    terms.append((np.concatenate([ids, ids, ids]),
                  np.concatenate([x_index[cond], ev_index[pair_node[cond]], r_index[pair_q[cond]]]),
                  np.concatenate([np.ones(len(cond), dtype=np.int64), slack, -slack])))

    # Group rows: per group and resource it frees, the pods of jobs that are not its legal
    # preemptors there, less what the node's other units free, less the reclaim relaxation.
    g_vec_a = np.array(g_vec, dtype=np.int64).reshape(-1, width)
    g_node_a = np.array(g_node, dtype=np.int64)
    cand_g, cand_r = np.nonzero(g_vec_a > 0)                     # group-major, resources ascending
    owner, pos = _expand(g_node_a[cand_g], pair_start, pair_count)
    k = by_node[pos]
    g_of, r_of_term = cand_g[owner], cand_r[owner]
    amount = pair_vec[k, r_of_term]
    preemptor = (np.array(g_has_prio, dtype=bool)[g_of] & (pair_q[k] == np.array(g_queue, dtype=np.int64)[g_of])
                 & (pair_prio[k] > np.array(g_prio, dtype=np.int64)[g_of]))
    lhs = (amount > 0) & ~preemptor
    owner, k, amount = owner[lhs], k[lhs], amount[lhs]
    has_lhs = np.zeros(len(cand_g), dtype=bool)
    has_lhs[owner] = True
    live = np.flatnonzero(has_lhs)
    row_of = np.full(len(cand_g), -1, dtype=np.int64)
    group_limit = ctx.free[g_node_a[cand_g[live]], cand_r[live]].astype(np.int64)
    first = add_rows(node_rank[g_node_a[cand_g[live]]], GROUP_ROWS, live, group_limit)
    row_of[live] = first + np.arange(len(live))
    terms.append((row_of[owner], x_index[k], amount))
    # What KAI's own decisions (the hint) put there beyond the row's capacity: KAI pipelines a job
    # onto what an earlier preemptor's evictions freed and it left over, so the rows admit that
    # much more (greedy's decisions stay a solution; no more than KAI did goes to other jobs).
    kai_use = np.zeros(len(cand_g), dtype=np.int64)
    np.add.at(kai_use, owner, amount * greedy[k])
    kai_use = kai_use[live]
    # Reclaim relaxation: per row and reclaiming queue among the group's reclaimers, that
    # queue's pods' most (amount x pair bound), offset when the queue reclaims.
    g_recl = membership(g_reclaimers)
    q = pair_q[k]
    relax = g_recl[cand_g[owner], q] & reclaims[q] & may_reclaim[k]
    if relax.any():
        key = row_of[owner[relax]] * n_queues + q[relax]
        load = amount[relax] * pair_ub[k[relax]]
        order = np.argsort(key, kind="stable")
        key, load = key[order], load[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        key = key[starts]
        terms.append((key // n_queues, r_index[key % n_queues], -np.add.reduceat(load, starts)))
    # What the node's other units free (entries of other groups on the node).
    owner, pos = _expand(g_node_a[cand_g[live]], e_start, e_count)
    other = (e_group_a[pos] != cand_g[live][owner]) & (e_vec_a[pos, cand_r[live][owner]] > 0)
    owner, pos = owner[other], pos[other]
    terms.append((row_of[live][owner], e_var_a[pos], -e_vec_a[pos, cand_r[live][owner]]))
    e_hint = np.array([ctx.hinted_index(v) for v in e_var], dtype=np.int64)
    kai_freed = np.zeros(len(live), dtype=np.int64)
    np.add.at(kai_freed, owner, e_vec_a[pos, cand_r[live][owner]] * e_hint[pos])
    group_limit += np.maximum(0, kai_use - kai_freed - group_limit)

    if not n_rows:
        return
    keys = np.concatenate(rows_key, axis=1)
    position = np.empty(n_rows, dtype=np.int64)
    position[np.lexsort((keys[2], keys[1], keys[0]))] = np.arange(n_rows)
    ub = np.concatenate(limits)
    ub_sorted = np.empty(n_rows, dtype=np.int64)
    ub_sorted[position] = ub
    # Variables' upper bounds (unknown ones unbounded): rows the bounds satisfy are left out.
    var_ub = np.full(len(m.proto.variables), UNBOUNDED, dtype=np.int64)
    var_ub[x_index] = pair_ub
    var_ub[e_var_a] = e_ub
    var_ub[ev_index[ev_index >= 0]] = 1
    var_ub[r_index[reclaims]] = 1
    add_le_rows(m, position[np.concatenate([t[0] for t in terms])], np.concatenate([t[1] for t in terms]),
                np.concatenate([t[2] for t in terms]), ub_sorted, var_ub)
