"""A constructive hint for evictions: KAI's victim search is quadratic and only hints the model
under a work budget (actions/pipeline.py), so on large clusters the greedy hint often has no
eviction at all and the solver would have to find a whole gang's evictions by search. This pass
extends the hint: for each job greedy left pending, in KAI's order, it places the job's pods on
free capacity first and then on capacity freed by its cheapest legal victims, within gate 2's
allowances and the reclaimer's fair share, and keeps the result only if the whole gang fits.

It only sets hint values; the model's constraints stay the judge, but the complete hint must
be a solution (CP-SAT takes a complete hint that breaks one row as none and spends the cycle
repairing it): a gang's whole-eviction Boolean is raised once, with its surplus counts; elastic
jobs keep their minimum; evictions on a node where nothing is then placed are undone; capacity
freed by victims a job may not evict is fenced off; queue limits (model/quota.py's rows), gate 2
and the reclaimer's cap are kept; a job never both loses pods and gains some; jobs other rules
keep pending (ModelContext.keep_pending) are left alone; and the indicators other rules derive
from evictions follow (ModelContext.derive_hint). tests/test_model_hint.py checks every row.
Single-class jobs without topology or shared GPUs are handled (the shape of large reclaims);
others keep greedy's hint.
"""

from __future__ import annotations

import numpy as np

from kai_cp.model.base import ModelContext
from kai_cp.model.evictions import _ub
from kai_cp.model.victim_pool import _legal, _preempts, _reclaims


def improve_hint(ctx: ModelContext) -> int:
    em = ctx.extensions.get("eviction-model")
    units = ctx.extensions.get("eviction-units")
    if em is None or not units:
        return 0
    state = ctx.state
    table = state.table
    val = ctx.hinted
    avail = ctx.free.astype(np.int64).copy()
    queue_centi: dict[str, int] = {}            # GPUs x 100 hinted per queue, kept in step
    growing: set[str] = set()                   # jobs with pods hinted placed
    for i, x in enumerate(ctx.x):
        k = val(x)
        if k:
            c = ctx.classes[int(ctx.pair_class[i])]
            avail[int(ctx.pair_node[i])] -= k * c.vec
            queue_centi[c.job.queue] = queue_centi.get(c.job.queue, 0) + 100 * int(c.gpus) * k
            growing.add(c.job.name)
    on_node: dict[int, list] = {}
    freed_on: dict[int, list] = {}         # node -> (unit, what its hinted evictions free there)
    frees: dict[int, list[tuple[int, np.ndarray]]] = {}     # var index -> (node, what one step frees)
    follows: dict[int, list] = {}          # whole-gang Boolean -> its surplus counts (w >= pods x y)
    surplus: dict[int, tuple[list, int]] = {}     # surplus count -> (its PodSet's counts, pods above the minimum)
    for u, plan in units:
        by_ps: dict[str, list] = {}
        for ts, var, how in plan:
            if how == "last":
                by_ps.setdefault(ts[0].podset, []).append(var)
        for ps, ws in by_ps.items():
            for w in ws:
                surplus[w.index] = (ws, u.surplus.get(ps, 0))
        whole = [var for _, var, how in plan if how == "all"]
        for ts, var, how in plan:
            n = table.index[ts[0].node]
            per = table.vector(ts[0]) * (len(ts) if how == "all" else 1)
            avail[n] += per * val(var)
            if val(var):
                freed_on.setdefault(n, []).append((u, per * val(var)))
            frees.setdefault(var.index, []).append((n, per))
            if how == "last" and whole:
                follows.setdefault(whole[0].index, []).append(var)
            on_node.setdefault(n, []).append((u, var, per, _ub(var)))
    spread = _Spread(frees, follows, val, surplus)
    unit_of_var = {var.index: u for u, plan in units for _, var, _ in plan}
    rows = _Rows(ctx.extensions.get("hint-rows", []), val)
    gate3 = ctx.extensions.get("gate3-checks")
    for n in on_node:
        on_node[n].sort(key=lambda e: (e[0].cost, -e[0].priority))
    allow_used = [sum(c * val_by_index(ctx, i) for i, c in terms.items()) for terms, _ in em.allowances]
    pairs_of: dict[int, list[int]] = {}
    for i, c in enumerate(ctx.pair_class.tolist()):
        pairs_of.setdefault(c, []).append(i)
    started = ctx.greedy.started_jobs
    keep = ctx.extensions.get("hint-keep-pending", set())
    by_job: dict[str, list] = {}
    for c in ctx.classes:
        by_job.setdefault(c.job.name, []).append(c)
    added = 0
    # classes required anti-affinity binds (model/anti_affinity.py): their rows are not read here
    # (with host ports this pass hinted two pods wanting one port onto one node)
    anti = ctx.extensions.get("anti-affine-classes", set())
    # A job never both loses pods and gains some (evictions.py, victim_growth.py): victims are
    # taken from jobs with nothing placed (growing), and a job losing pods is not placed.
    losing = {u.tasks[0].job for u, plan in units if any(val(var) for _, var, _ in plan)}
    for name in ctx.greedy.order:
        if name in started or name in keep or name in losing or name not in ctx.starts or val(ctx.starts[name]) or len(by_job.get(name, [])) != 1:
            continue
        c = by_job[name][0]
        job = c.job
        if job.scope is not None or c.tasks[0].request.is_shared_gpu or not pairs_of.get(c.index) or c.index in anti:
            continue
        ps = job.podsets[c.podset]
        need = max(1, ps.min_available - ps.active_allocated)
        if need > c.size:
            continue
        plan = _plan(ctx, em, c, need, pairs_of[c.index], avail, on_node, allow_used, val,
                     queue_centi.get(job.queue, 0), spread, freed_on, growing)
        if plan is None:
            continue
        xs, ev, trial_avail, trial_allow = plan
        changes = [(ctx.x[i].index, k) for i, k in xs.items()] + [(var.index, k) for (var, _, _), k in ev.items()]
        changes += [(w.index, _ub(w) - val(w)) for (var, _, _), _ in ev.items() for w in spread.follows.get(var.index, ())]
        if gate3 is not None and not gate3.fits(changes):
            continue
        if not rows.fits(changes):
            continue
        if gate3 is not None:
            gate3.commit(changes)
        growing.add(name)
        losing.update(unit_of_var[var.index].tasks[0].job for (var, _, _) in ev)
        freed = {var.index: spread.everywhere(var) for (var, _, _) in ev}
        for (var, _, _), k in ev.items():
            for m, amount in freed[var.index]:
                freed_on.setdefault(m, []).append((unit_of_var[var.index], amount * k))
        avail[:] = trial_avail
        allow_used[:] = trial_allow
        for i, k in xs.items():
            ctx.hint(ctx.x[i], val(ctx.x[i]) + k)
            queue_centi[job.queue] = queue_centi.get(job.queue, 0) + 100 * int(c.gpus) * k
        ctx.hint(ctx.starts[name], 1)
        for (var, n, reclaim), k in ev.items():
            ctx.hint(var, val(var) + k)
            for w in spread.follows.get(var.index, ()):     # a gang evicted whole loses its surplus too
                ctx.hint(w, _ub(w))
            for m, _ in freed[var.index]:
                if m in em.ev_of:
                    ctx.hint(em.ev_of[m], 1)
            if reclaim and (job.queue, n) in em.z:
                ctx.hint(em.z[(job.queue, n)], 1)
                ctx.hint(em.r_of[job.queue], 1)
        added += 1
    return added


def val_by_index(ctx: ModelContext, index: int) -> int:
    hit = ctx.hints.get(index)
    return hit[1] if hit is not None else 0


class _Rows:
    """Other concerns' rows the hint must keep (queue limits, model/quota.py), as running totals.
    A row with a negative room (a queue over its limit) binds only once it places something."""

    def __init__(self, rows: list, val):
        self.room = [room for _, _, room in rows]
        self.total = [sum(c * val(v) for v, c in zip(vs, cs)) for vs, cs, _ in rows]
        self.placed = [sum(c * val(v) for v, c in zip(vs, cs) if c > 0) for vs, cs, _ in rows]
        self.of: dict[int, list[tuple[int, int]]] = {}
        for r, (vs, cs, _) in enumerate(rows):
            for v, c in zip(vs, cs):
                self.of.setdefault(v.index, []).append((r, c))

    def fits(self, changes: list[tuple[int, int]]) -> bool:
        """Whether raising each variable (index, by) keeps every row; if so, the totals follow."""
        add: dict[int, int] = {}
        put: dict[int, int] = {}
        for index, by in changes:
            for r, c in self.of.get(index, ()):
                add[r] = add.get(r, 0) + c * by
                if c > 0:
                    put[r] = put.get(r, 0) + c * by
        if any(self.total[r] + a > self.room[r] and self.placed[r] + put.get(r, 0) > 0 for r, a in add.items()):
            return False
        for r, a in add.items():
            self.total[r] += a
            self.placed[r] += put.get(r, 0)
        return True


class _Spread:
    """What one more step of an eviction variable frees, on every node it frees: a gang's whole-
    eviction Boolean frees all its nodes at once (and takes its surplus pods with it), so the
    hint may raise it once, not once per node it is counted on."""

    def __init__(self, frees: dict, follows: dict, val, surplus: dict):
        self.frees, self.follows, self.val, self.surplus = frees, follows, val, surplus

    def surplus_left(self, var, raised: dict) -> bool:
        """An elastic job keeps its minimum: its PodSet's surplus counts stay within the surplus."""
        hit = self.surplus.get(var.index)
        if hit is None:
            return True
        ws, extra = hit
        return sum(self.val(w) + raised.get(w.index, 0) for w in ws) < extra

    def everywhere(self, var) -> list[tuple[int, np.ndarray]]:
        out = list(self.frees.get(var.index, ()))
        for w in self.follows.get(var.index, ()):
            left = _ub(w) - self.val(w)
            out += [(n, per * left) for n, per in self.frees.get(w.index, ())]
        return out


def _plan(ctx, em, c, need: int, pairs: list[int], avail: np.ndarray, on_node: dict, allow_used: list, val,
          have: int, spread: _Spread, freed_on: dict, growing: set):
    """Pods per pair and evictions per unit variable, or None when the gang does not fit. What
    evictions free on a node is only for the jobs that may evict those pods (model/freed_use.py):
    the job counts without what the others free (fenced), which is put back in what it returns."""
    avail = avail.copy()
    fenced = np.zeros_like(avail)
    # a queue's pods use what reclaim-only victims free only while the queue reclaims (r_R)
    reclaims = c.job.queue in em.r_of and val(em.r_of[c.job.queue])
    for n, entries in freed_on.items():
        for u, amount in entries:
            if not (_preempts(u, c.job) or (reclaims and _reclaims(u, c.job, ctx.state))):
                fenced[n] += amount
    avail -= fenced
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
    raised: dict[int, int] = {}            # var index -> steps added by this plan, on any node
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
        if k < want and on_node.get(n):
            saved = (dict(ev), dict(raised), list(allow), avail.copy())
            entries = [e for e in on_node[n] if e[0].tasks[0].job not in growing and _legal(e[0], job, ctx.state)]
            k = _evict_for(em, job, n, k, want, placed, centi, cap_left, entries, ev, raised, allow, avail,
                           spread, val, fit)
            if k == 0:           # evictions that place nothing here would justify nothing: undo them
                ev, raised = saved[0], saved[1]
                allow[:] = saved[2]
                avail[:] = saved[3]
        if k > 0:
            xs[i] = k
            avail[n] -= k * vec
            placed += k
    if placed < need:
        return None
    # the cap binds every pod of a queue that reclaims this cycle (r_R), evicting here or not
    reclaiming = reclaims or any(reclaim for (_, _, reclaim) in ev)
    if reclaiming and cap_left is not None and centi * placed > cap_left:
        return None
    return xs, ev, avail + fenced, allow


def _evict_for(em, job, n: int, k: int, want: int, placed: int, centi: int, cap_left, entries: list, ev: dict,
               raised: dict, allow: list, avail: np.ndarray, spread: _Spread, val, fit) -> int:
    """Raise the cheapest of the legal eviction variables `entries` on node n until `want` pods
    fit; returns how many fit. A gang's whole-eviction Boolean goes once, with its surplus counts."""
    for u, var, per, ub in entries:
        if k >= want:
            break
        reclaim = not _preempts(u, job)
        if reclaim and cap_left is not None and cap_left < centi * (placed + k + 1):
            break
        follows = spread.follows.get(var.index, ())
        while k < want and val(var) + raised.get(var.index, 0) < ub and spread.surplus_left(var, raised):
            if any(raised.get(w.index) or val(w) for w in follows):
                break            # its surplus counts were raised on their own: keep the hint simple
            steps = [(var, 1)] + [(w, _ub(w)) for w in follows]
            if not _charge_all(em, allow, steps):      # gate 2 counts the pods whatever evicts them
                break
            freed = spread.everywhere(var)
            ev[(var, n, reclaim)] = ev.get((var, n, reclaim), 0) + 1
            for v, count in steps:
                raised[v.index] = raised.get(v.index, 0) + count
            for m, amount in freed:
                avail[m] += amount
            k = max(0, min(fit(n), want))
    return k


def _charge_all(em, allow: list, steps: list) -> bool:
    """Charge every (variable, count) to gate 2's allowances, all or nothing."""
    trial = list(allow)
    for var, count in steps:
        if not _charge(em, trial, var, count):
            return False
    allow[:] = trial
    return True


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
