"""A constructive hint for evictions: KAI's victim search is quadratic and only hints the model
under a work budget (actions/pipeline.py), so on large clusters the greedy hint often has no
eviction at all and the solver would have to find a whole gang's evictions by search. This pass
extends the hint: for each job greedy left pending, in KAI's order, it places the job's pods on
free capacity first and then on capacity freed by its cheapest legal victims, within gate 2's
allowances and the reclaimer's fair share, and keeps the result only if the whole gang fits.

It only sets hint values; the model's constraints stay the judge. Single-class jobs without
topology or shared GPUs are handled (the shape of large reclaims); others keep greedy's hint.
"""

from __future__ import annotations

import numpy as np

from kai_cp.model.base import ModelContext
from kai_cp.model.evictions import _legal, _ub


def improve_hint(ctx: ModelContext) -> int:
    em = ctx.extensions.get("eviction-model")
    units = ctx.extensions.get("eviction-units")
    if em is None or not units:
        return 0
    state = ctx.state
    table = state.table
    val = lambda var: ctx.hints.get(var.index, (var, 0))[1]     # noqa: E731
    avail = ctx.free.astype(np.int64).copy()
    for i, x in enumerate(ctx.x):
        k = val(x)
        if k:
            avail[int(ctx.pair_node[i])] -= k * ctx.classes[int(ctx.pair_class[i])].vec
    on_node: dict[int, list] = {}
    for u, plan in units:
        for ts, var, how in plan:
            n = table.index[ts[0].node]
            per = table.vector(ts[0]) * (len(ts) if how == "all" else 1)
            step = 1
            avail[n] += per * val(var)
            on_node.setdefault(n, []).append((u, var, per, _ub(var), step))
    for n in on_node:
        on_node[n].sort(key=lambda e: (e[0].cost, -e[0].priority))
    allow_used = [sum(c * val_by_index(ctx, i) for i, c in terms.items()) for terms, _ in em.allowances]
    pairs_of: dict[int, list[int]] = {}
    for i, c in enumerate(ctx.pair_class.tolist()):
        pairs_of.setdefault(c, []).append(i)
    started = ctx.greedy.started_jobs
    by_job: dict[str, list] = {}
    for c in ctx.classes:
        by_job.setdefault(c.job.name, []).append(c)
    queue_centi: dict[str, int] = {}            # GPUs x 100 hinted per queue, kept in step
    for i, x in enumerate(ctx.x):
        k = val(x)
        if k:
            c = ctx.classes[int(ctx.pair_class[i])]
            queue_centi[c.job.queue] = queue_centi.get(c.job.queue, 0) + 100 * int(c.gpus) * k
    added = 0
    for name in ctx.greedy.order:
        if name in started or name not in ctx.starts or val(ctx.starts[name]) or len(by_job.get(name, [])) != 1:
            continue
        c = by_job[name][0]
        job = c.job
        if job.scope is not None or c.tasks[0].request.is_shared_gpu or not pairs_of.get(c.index):
            continue
        ps = job.podsets[c.podset]
        need = max(1, ps.min_available - ps.active_allocated)
        if need > c.size:
            continue
        plan = _plan(ctx, em, c, need, pairs_of[c.index], avail, on_node, allow_used, val,
                     queue_centi.get(job.queue, 0))
        if plan is None:
            continue
        xs, ev, trial_avail, trial_allow = plan
        avail[:] = trial_avail
        allow_used[:] = trial_allow
        for i, k in xs.items():
            ctx.hint(ctx.x[i], val(ctx.x[i]) + k)
            queue_centi[job.queue] = queue_centi.get(job.queue, 0) + 100 * int(c.gpus) * k
        ctx.hint(ctx.starts[name], 1)
        pipeline_b = ctx.extensions.get("pipeline-b", {})
        for (var, n, reclaim), k in ev.items():
            ctx.hint(var, val(var) + k)
            if n in em.ev_of:
                ctx.hint(em.ev_of[n], 1)
            if n in pipeline_b:
                ctx.hint(pipeline_b[n], 1)
            if reclaim and (job.queue, n) in em.z:
                ctx.hint(em.z[(job.queue, n)], 1)
                ctx.hint(em.r_of[job.queue], 1)
        added += 1
    return added


def val_by_index(ctx: ModelContext, index: int) -> int:
    hit = ctx.hints.get(index)
    return hit[1] if hit is not None else 0


def _plan(ctx, em, c, need: int, pairs: list[int], avail: np.ndarray, on_node: dict, allow_used: list, val,
          have: int):
    """Pods per pair and evictions per unit variable, or None when the gang does not fit."""
    avail = avail.copy()
    allow = list(allow_used)
    vec = c.vec
    nz = vec > 0
    job = c.job
    centi = 100 * int(c.gpus)
    cap = em.caps.get(job.queue)
    cap_left = None
    if cap is not None:
        cap_left = cap - have
    xs: dict[int, int] = {}
    ev: dict[tuple, int] = {}
    placed = 0

    def fit(n: int) -> int:
        return int((avail[n, nz] // vec[nz]).min()) if nz.any() else need

    # nodes that fit without evicting first, then by node (fit() of every pair at once: pairs
    # of one class are on distinct nodes, so the order is sorted()'s on (fit <= 0, node))
    nodes = np.asarray(ctx.pair_node[pairs], dtype=np.int64)
    fits = (avail[nodes][:, nz] // vec[nz]).min(axis=1) if nz.any() else np.full(len(pairs), need)
    order = [pairs[j] for j in np.lexsort((nodes, fits <= 0)).tolist()]
    for i in order:
        if placed >= need:
            break
        n = int(ctx.pair_node[i])
        want = min(int(ctx.pair_ub[i]), need - placed)
        k = max(0, min(fit(n), want))
        for u, var, per, ub, _ in on_node.get(n, []):
            if k >= want:
                break
            if not _legal(u, job):
                continue
            reclaim = not (u.preempt and u.queue == job.queue and u.priority < job.priority)
            if reclaim and cap_left is not None and cap_left < centi * (placed + k + 1):
                break
            while k < want and val(var) + ev.get((var, n, reclaim), 0) < ub:
                if reclaim and not _charge(em, allow, var, 1):
                    break
                ev[(var, n, reclaim)] = ev.get((var, n, reclaim), 0) + 1
                avail[n] += per
                k = max(0, min(fit(n), want))
        if k > 0:
            xs[i] = k
            avail[n] -= k * vec
            placed += k
    if placed < need:
        return None
    if any(reclaim for (_, _, reclaim) in ev) and cap_left is not None and centi * placed > cap_left:
        return None
    return xs, ev, avail, allow


def _charge(em, allow: list, var, count: int) -> bool:
    for j, (terms, room) in enumerate(em.allowances):
        coef = terms.get(var.index)
        if coef and allow[j] + coef * count > room:
            return False
    for j, (terms, room) in enumerate(em.allowances):
        coef = terms.get(var.index)
        if coef:
            allow[j] += coef * count
    return True
