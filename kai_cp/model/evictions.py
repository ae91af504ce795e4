"""Evictions in the model: reclaim and preempt decided together with the placements (spec 6).

The running pods that may be evicted come as the victim pool's units (model/victim_pool.py).
What a unit frees on a node adds to that node's capacity (node_capacity.py, pipeline.py,
gpu_sharing.py read `freed_terms`); a pod placed on freed capacity is pipelined (decode).

Which evictions are allowed (hard constraints):
- only preemptible pods, not protected by their minimum runtime (protected elastic jobs only
  lose surplus pods), never non-preemptible ones (6.1, 6.7);
- preempt: a unit may leave a node only if a job of its own queue with strictly higher priority
  places a pod on one of the unit's nodes (6.5);
- reclaim: only if a job of another queue that reclaims places a pod there, a job gate 1 lets
  ask (victim_pool.may_reclaim); a reclaiming queue ends within its fair share in every
  resource (gates 1 and 3 where the reclaimer stays within its share), and each
  victim queue level above the reclaimer's loses victims only while it is above its allocatable
  share (or its quota, for a reclaimer whose own level stays within its quota: quota reclaim):
  all but the largest take strictly less than that excess, KAI's test-before-subtract (gate 2,
  3.7.2).
Objective: below KAI's order (so evictions serve the jobs KAI would serve) and in utilisation's
level, each pod evicted outweighing any one pod placed: fewest pods evicted, then cheaper ones
(over-quota queues before in-quota ones, lower priority first), each GPU taken below a victim
queue's fair share counting as four pods, but never so far that more pods go than KAI's own
actions evict (a pod beyond greedy's count outweighs what greedy took below the shares).
(A level of its own between utilisation and KAI's order does not stay exact in a double on
1,000-node clusters.)

Consolidation moves and shared-GPU victims are not modelled: when KAI's greedy actions make one,
the model decides the allocation alone and the greedy eviction actions run on its answer
(cycle.py, actions/pipeline.py `unmodelled_evictions`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable
from fractions import Fraction

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.actions.reclaim_rules import quota_floor_applies
from kai_cp.fairshare import allocatable
from kai_cp.model.base import ModelContext
from kai_cp.model.freed_use import only_preemptors_use_freed
from kai_cp.model.linear_rows import add_at_most_if, add_enforced_le, upper_bound as _ub
from kai_cp.model.victim_pool import BASE_COST, Pool, Unit, pairs_may_reclaim
from kai_cp.queues import UNLIMITED
from kai_cp.state import ClusterState

NAME = "evictions"
BELOW_SHARE_COST = 4 * BASE_COST // 100   # per hundredth of a GPU taken below the victim queue's fair share


def _before_last(q, alloc: Fraction, quota: bool = True) -> int | None:
    """Gate 2 checked before each victim is subtracted (3.7.2): a level above its allocatable
    share (or, with `quota`, its quota) by `over` may lose victims while it stays above, so all
    but the last victim take strictly less than `over`. GPUs x 100, the most those victims may
    take; None when the level is not above (it loses nothing)."""
    over = Fraction(-1)
    a = allocatable(q.deserved["gpu"], q.limit["gpu"], q.fair_share["gpu"])
    if a != -1:
        over = max(over, alloc - a)
    if quota and q.deserved["gpu"] != -1:
        over = max(over, alloc - q.deserved["gpu"])
    if over <= 0:
        return None
    return math.ceil(over * 100) - 1


# Gate 3's ratio row `a x mine <= b x theirs - 1` as written while a and b stay within this (a
# row's terms then stay far inside int64); RATIO_DENOMINATOR for one past it.
RATIO_MAX = 1 << 31
RATIO_DENOMINATOR = 1 << 10


def _held_ratio(a: int, b: int, have_theirs: int, theirs_terms: list) -> tuple[int, int]:
    """(a, b) of gate 3's row, or a row CP-SAT can hold that admits no reclaim the exact one
    refuses: a relcaimerSaturationMultiplier of 1e20 (or fair shares with huge denominators)
    made coefficients past int64, an internal error. Past the most the sibling can end with
    (GPUs x 100: `have_theirs` and its terms at their bounds, worked out only then) the ratio
    only says `mine` ends at 0, as that most + 1 does; below, it is rounded up to
    RATIO_DENOMINATOR-ths (stricter by less than one part in 1,024)."""
    if a <= RATIO_MAX and b <= RATIO_MAX:
        return a, b
    theirs_max = have_theirs + sum(max(c, 0) * _ub(v) for v, c in theirs_terms)
    if a > b * theirs_max:
        return theirs_max + 1, 1
    return -(-a * RATIO_DENOMINATOR // b), RATIO_DENOMINATOR


def _beside(state: ClusterState, queue: str, level):
    """The ancestor of `queue` (or itself) that is a sibling of `level`; None when there is none."""
    return next((q for q in state.queue_path(queue) if q.parent == level.parent), None)


def _quota_floor(q, alloc: Fraction) -> int | None:
    """GPUs x 100 a level at or above its quota may lose by reclaim without going below it,
    where the quota floor applies (actions/reclaim_rules.py quota_floor_applies: KAI's last
    chunk may cross it, and the level then reclaims back within its quota). None when the
    level has no quota or is below it already (gate 2 decides alone)."""
    quota = q.deserved["gpu"]
    if quota == -1 or alloc < quota:
        return None
    return math.floor((alloc - quota) * 100)


class Evictions:
    """Runs before node capacity: its variables free capacity the other constraints count."""
    name = NAME

    def contribute(self, ctx: ModelContext) -> None:
        pool: Pool | None = ctx.extensions.get("victim-pool")
        if pool is None or len(ctx.pair_node) == 0:
            return
        m = ctx.model
        state = ctx.state
        table = state.table
        pair_job = [ctx.classes[c].job for c in ctx.pair_class.tolist()]
        by_node_queue: dict[tuple[int, str], list[int]] = {}     # (node, queue) -> pairs, in pair order
        by_queue_pairs: dict[str, list[int]] = {}
        reclaims_ok = pairs_may_reclaim(ctx, pair_job)
        by_node_reclaimer: dict[tuple[int, str], list[int]] = {}  # (node, queue) -> pairs whose job may reclaim
        for i, n in enumerate(ctx.pair_node.tolist()):
            q = pair_job[i].queue
            by_node_queue.setdefault((n, q), []).append(i)
            by_queue_pairs.setdefault(q, []).append(i)
            if reclaims_ok[i]:
                by_node_reclaimer.setdefault((n, q), []).append(i)
        freed: dict[int, list[tuple[cp_model.IntVar, np.ndarray]]] = {}
        by_queue: dict[str, list[tuple[cp_model.IntVar, np.ndarray]]] = {}   # what evictions take off each leaf queue
        preemptors: set[str] = set()             # jobs whose placement may justify a preempt
        reclaimers_used: set[str] = set()        # queues whose placements may justify a reclaim
        evict_vars: list[cp_model.IntVar] = []
        unit_vars: list[tuple] = []              # (unit, evicted-pods expression parts, var list)
        z: dict[tuple[str, int], cp_model.IntVar] = {}
        r_of: dict[str, cp_model.IntVar] = {}
        costs_v, costs_c = [], []
        pod_terms: list[tuple[cp_model.IntVar, int]] = []     # (variable, pods it evicts per unit)
        # victim queue -> reclaimable GPU terms: (variable, GPUs x 100 per unit of it, unit, the
        # largest gate-2 chunk it evicts, GPUs x 100)
        gpu_terms: dict[str, list[tuple[cp_model.IntVar, int, Unit, int]]] = {}
        # whole job unit with pods above a minimum -> its "goes whole" Boolean: its evictions are
        # counted per pod (surplus variables), and only the whole job's is its core's chunk
        core_of: dict[int, cp_model.IntVar] = {}
        greedy_ev = ctx.greedy.session.evictions
        greedy_reclaimed = {k for k, e in greedy_ev.items() if e.action == "reclaim" and e.for_job in state.jobs}
        units = pool.justified(ctx.pair_node, pair_job, reclaims_ok)
        pairs_of: dict[str, list[int]] = {}      # job -> its candidate pairs
        for i, job in enumerate(pair_job):
            pairs_of.setdefault(job.name, []).append(i)

        def justification(u, nodes) -> list:
            lits = []
            reclaimers = sorted(u.reclaimers)
            for n in nodes:
                if u.preempt:
                    for i in by_node_queue.get((n, u.queue), ()):
                        job = pair_job[i]
                        if job.priority > u.priority:
                            lits.append(ctx.x[i])
                            preemptors.add(job.name)
                for r in reclaimers:
                    key = (r, n)
                    if key not in z:
                        xs = [ctx.x[i] for i in by_node_reclaimer.get((n, r), ())]
                        if not xs:
                            continue
                        reclaimers_used.add(r)
                        if r not in r_of:
                            r_of[r] = m.new_bool_var("")
                        zv = m.new_bool_var("")
                        m.add(zv <= sum(xs))
                        m.add(zv <= r_of[r])
                        z[key] = zv
                    lits.append(z[key])
            return lits

        def kai_preemptor_placed(u) -> cp_model.IntVar:
            """1 only where a pod of a job KAI evicted the unit's pods for is placed: greedy's
            evictions stay possible without a candidate pair beside them (below), but not
            without their preemptor. KAI's started jobs are not all kept started (order.py
            `kept_started`, where KAI moved victims), and an eviction for no placed job frees
            capacity nobody may take and names no preemptor (decode.py)."""
            b = m.new_bool_var("")
            xs = [ctx.x[i] for j in {greedy_ev[t.key].for_job for t in u.tasks if t.key in greedy_ev}
                  for i in pairs_of.get(j, ())]
            m.add(b <= sum(xs))
            ctx.derive_hint(lambda: ctx.hint(b, 1 if any(ctx.hinted(x) for x in xs) else 0))
            return b

        for u in units:
            lits = justification(u, u.nodes)
            # KAI's actions evict victims on nodes their preemptor then does not use (a scenario
            # evicts before it simulates): what greedy evicted stays possible without a candidate
            # pair beside it, while its preemptor is placed.
            kai = sum(1 for t in u.tasks if t.key in greedy_ev)
            if not lits and not kai:
                continue
            kai_ok = kai_preemptor_placed(u) if kai else None
            if u.kind == "pods":
                n = u.nodes[0]
                k = m.new_int_var(0, len(u.tasks), "")
                ctx.hint(k, kai)
                m.add((k <= len(u.tasks) * sum(lits) + kai * kai_ok) if kai else (k <= len(u.tasks) * sum(lits)))
                freed.setdefault(n, []).append((k, u.vec))
                by_queue.setdefault(u.queue, []).append((k, u.vec))
                unit_vars.append((u, [(u.tasks, k, "first")]))
                evict_vars.append(k)
                pod_terms.append((k, 1))
                costs_v.append(k)
                costs_c.append(u.cost)
                if u.reclaim:
                    gpu_terms.setdefault(u.queue, []).append((k, u.centi, u, u.chunk))
                continue
            evicted_all = all(t.key in greedy_ev for t in u.tasks)
            y = m.new_bool_var("") if u.whole else None
            if y is not None:
                ctx.hint(y, 1 if evicted_all else 0)
                # A job evicted whole gets no new pods this cycle: they would run below its gang
                # minimum (an elastic job's pending pods are modelled as growth of a started job).
                own = pairs_of.get(u.tasks[0].job)
                if own:
                    m.add(cp_model.LinearExpr.sum([ctx.x[i] for i in own]) == 0).only_enforce_if(y)
            parts = []
            total_pods = []
            plan = []
            gpu_parts = []          # (variable, GPUs x 100 per unit of it, its largest chunk)
            for n, by_ps in u.node_tasks.items():
                for ps, ts in ((ps, ts) for ps, pods in by_ps.items() for ts in _same_request(table, pods)):
                    vec = table.vector(ts[0])
                    pod_c = _task_centi(ts[0])
                    if u.surplus.get(ps):
                        w = m.new_int_var(0, len(ts), "")
                        ctx.hint(w, sum(1 for t in ts if t.key in greedy_ev))
                        if y is not None:
                            m.add(w >= len(ts) * y)
                        parts.append((ps, w))
                        freed.setdefault(n, []).append((w, vec))
                        by_queue.setdefault(u.queue, []).append((w, vec))
                        total_pods.append((w, 1))
                        plan.append((ts, w, "last"))
                        # a pod above the PodSet's minimum is a chunk of its own (3.7.2)
                        gpu_parts.append((w, pod_c, pod_c))
                    elif y is not None:
                        freed.setdefault(n, []).append((y, vec * len(ts)))
                        by_queue.setdefault(u.queue, []).append((y, vec * len(ts)))
                        total_pods.append((y, len(ts)))
                        plan.append((ts, y, "all"))
                        gpu_parts.append((y, pod_c * len(ts), u.chunk))
            for ps, extra in u.surplus.items():
                ws = [w for p, w in parts if p == ps]
                minimum = state.jobs[u.tasks[0].job].podsets[ps].min_available
                m.add(sum(ws) <= extra + (minimum * y if y is not None else 0))
            if not total_pods:
                continue
            if y is not None and parts and all(how == "last" for _, _, how in plan):
                core_of[id(u)] = y          # (an "all" part's variable is y itself, at the core's chunk)
            # Each variable once, in order of first use: a set of IntVars (hashed by address)
            # ordered these rows differently from run to run, and the model proto with them.
            for v in dict.fromkeys(v for v, _ in total_pods):
                ub = len(u.tasks)
                kept = ctx.hinted(v)        # (greedy's evictions: see the pods units above)
                m.add((v <= ub * sum(lits) + kept * kai_ok) if kept else (v <= ub * sum(lits)))
            unit_vars.append((u, plan))
            evict_vars.extend(v for v, _ in total_pods)
            pod_terms.extend(total_pods)
            for v, c in total_pods:
                costs_v.append(v)
                costs_c.append(u.cost * c)
            if u.reclaim:
                # Each term counts its own pods' GPUs, and its own chunk: a surplus pod's eviction
                # is no step to the core's chunk (counting every term at the unit's largest chunk
                # let one 1-GPU surplus pod open a 2-GPU step of gate 2, and a department 1 GPU
                # over its quota lose 3 GPUs: random objectives over generated clusters).
                for v, c, chunk in gpu_parts:
                    gpu_terms.setdefault(u.queue, []).append((v, c, u, chunk))
        if not unit_vars:
            return
        # Gate 2 at each victim-side level the reclaimers do not share (3.7.2).
        from kai_cp.model.utilisation import pair_centi_gpus
        centi = pair_centi_gpus(ctx)
        alloc = {q: v.allocated for q, v in state.queues.items()}          # the snapshot's
        jobs = state.jobs
        kai_reclaims = {(jobs[e.for_job].queue, jobs[e.task.job].queue) for e in ctx.greedy.session.evictions.values()
                        if e.action == "reclaim" and e.for_job in jobs}
        allowances: list[tuple[dict[int, int], int]] = []
        caps: dict[str, int] = {}
        var_nodes: dict[int, set[int]] = {}            # eviction variable -> the nodes it frees
        for _, plan in unit_vars:
            for ts, var, _ in plan:
                var_nodes.setdefault(var.index, set()).add(ctx.state.table.index[ts[0].node])
        for qname in gpu_terms:
            for level in state.queue_path(qname):
                sub = self._subtree(state, level.name)
                # A unit only queues inside this level may reclaim is reclaimed below it (not gated
                # here). One that queues inside and outside may reclaim counts here unless a queue
                # inside places a pod on a node the evicted pods free (decode then names that
                # queue's job).
                terms = []            # (counted variable, GPUs x 100 per unit, unit, unit variable, chunk)
                for q in sorted(sub):         # (a frozenset: its order follows the hash seed)
                    for v, c, u, chunk in gpu_terms.get(q, []):
                        inside = u.reclaimers & sub
                        if inside == u.reclaimers:
                            continue
                        frees = sorted(var_nodes.get(v.index, u.nodes))
                        ys = [z[(r, n)] for r in sorted(inside) for n in frees if (r, n) in z]
                        if not ys:
                            terms.append((v, c, u, v, chunk))
                            continue
                        y = m.new_bool_var("")
                        m.add(y <= cp_model.LinearExpr.sum(ys))
                        w = m.new_int_var(0, _ub(v), "")
                        m.add(w >= v - _ub(v) * y)
                        m.add(w <= v)
                        ctx.derive_hint(lambda y=y, w=w, v=v, ys=ys: _hint_inside(ctx, y, w, v, ys))
                        terms.append((w, c, u, v, chunk))
                if not terms:
                    continue
                before = _before_last(level, alloc[level.name]["gpu"])
                share = _before_last(level, alloc[level.name]["gpu"], quota=False)
                # What KAI's reclaims took here (greedy's, the hint): they judged gate 2 on the
                # cycle's allocation, after allocate, where these rules read the snapshot's; the
                # level may lose at least that much to reclaim, so greedy's decisions stay a
                # solution. (Its preemptions inside the level are no allowance for a reclaim.)
                # Gate 2 passed KAI's last chunk with the level above its share by more than the
                # chunks before it, so all but the last victim may take what KAI took less its
                # largest chunk; the row's slack adds the solution's largest (allowing KAI's whole
                # take there let the level lose one chunk more than KAI's gate allows: random
                # objectives over generated clusters found a queue reclaimed to 0 under a 2-GPU quota).
                # Only reclaims for a queue outside the level passed its gate 2 (one inside is
                # gated below it, and counts here as little as a preempt does).
                across = {k for k in greedy_reclaimed if jobs[greedy_ev[k].for_job].queue not in sub}
                kai_units = [u for u in {id(u): u for _, _, u, _, _ in terms}.values()
                             if any(t.key in across for t in u.tasks)]
                kai_took = sum(_task_centi(t) for u in kai_units for t in u.tasks if t.key in across)
                if kai_took:
                    kai_before = kai_took - max(_largest_chunk(u, [t for t in u.tasks if t.key in across])
                                                for u in kai_units)
                    before = kai_before if before is None else max(before, kai_before)
                    share = None if share is None else max(share, kai_before)
                # a whole job's evictions end with its core, the chunk of its terms' unit
                cores = {id(u): u for _, _, u, _, _ in terms if id(u) in core_of}
                chunks = sorted({chunk for _, _, _, _, chunk in terms} | {u.chunk for u in cores.values()})
                worst = sum(c * (_ub(v)) for v, c, _, _, _ in terms)
                # Past what these victims can take at all the gate bounds nothing: the same rows,
                # with coefficients CP-SAT holds (a -1e20 GPU quota put one past int64).
                before = None if before is None else min(before, worst)
                share = None if share is None else min(share, worst)
                beside = [_beside(state, r, level)
                          for r in sorted({r for _, _, u, _, _ in terms for r in u.reclaimers if r not in sub})]
                floor = _quota_floor(level, alloc[level.name]["gpu"]) if any(
                    b is not None and quota_floor_applies(state, b, level) for b in beside) else None
                # the quota route below is conditional: what the share route allows decides the skip
                quota_wider = before is not None and (share is None or share < before)
                widest = share if quota_wider else before
                if floor is not None:
                    floor = max(floor, kai_took)
                floored = floor is not None and worst > floor
                gate2_holds = worst <= (widest + chunks[-1] if widest is not None else 0)
                if not floored and gate2_holds:
                    continue
                total = cp_model.LinearExpr.weighted_sum([v for v, *_ in terms], [c for _, c, *_ in terms])
                # improve_hint charges the unit variables (a mixed unit as if counted: the safe side)
                charged: dict[int, int] = {}
                for _, c, _, uv, _ in terms:          # a gang's Boolean is counted once per node and PodSet
                    charged[uv.index] = charged.get(uv.index, 0) + c
                if floored:         # not below its quota (actions/reclaim_rules.py quota_floor_applies)
                    m.add(total <= floor)
                    allowances.append((charged, floor))
                if gate2_holds:
                    continue
                if before is None:
                    m.add(total <= 0)
                    allowances.append((charged, 0))
                    continue
                # Test before subtract, with the largest victim last: the others take strictly less
                # than the level holds above its share, the largest one chunk more. `steps[k]`: a
                # victim of chunk >= chunks[k] goes.
                whole = []          # (the job goes whole and is counted here, its core's chunk)
                for k, u in cores.items():
                    counted = [v for v, _, tu, _, _ in terms if id(tu) == k]
                    gone = m.new_bool_var("")
                    m.add(gone <= core_of[k])
                    m.add(gone <= cp_model.LinearExpr.sum(counted))
                    ctx.derive_hint(lambda g=gone, y=core_of[k], counted=counted: ctx.hint(
                        g, int(bool(ctx.hinted(y)) and any(ctx.hinted(v) for v in counted))))
                    whole.append((gone, u.chunk))
                steps, prev = [], 0
                for c in chunks:
                    b = m.new_bool_var("")
                    mine = [v for v, _, _, _, chunk in terms if chunk >= c] + [g for g, chunk in whole if chunk >= c]
                    m.add(b <= cp_model.LinearExpr.sum(mine))
                    ctx.derive_hint(lambda b=b, mine=mine: ctx.hint(b, 1 if any(ctx.hinted(v) for v in mine) else 0))
                    steps.append((b, c - prev))
                    prev = c
                slack = cp_model.LinearExpr.weighted_sum([b for b, _ in steps], [d for _, d in steps])
                quota_route = self._quota_route(ctx, state, level, terms, sub, r_of, by_queue_pairs, centi,
                                                kai_reclaims) if quota_wider else None
                if quota_route is None:
                    m.add(total <= before + slack)
                else:
                    m.add(total <= (share or 0) + (before - (share or 0)) * quota_route + slack)
                    if share is None:
                        m.add(total <= 0).only_enforce_if(quota_route.Not())
                    # the route is taken when the share route (its last victim's chunk included) is short
                    ctx.derive_hint(lambda r=quota_route, terms=terms, steps=steps, share=share: ctx.hint(
                        r, int(_hinted(ctx, [(v, c) for v, c, *_ in terms]) > (
                            0 if share is None else share + _hinted(ctx, steps)))))
                    before = share or 0
                # improve_hint adds victims within `before` only, so the steps hold
                allowances.append((charged, before))
        # Reclaiming queues end within their fair share (GPUs x 100), and in CPU and memory too
        # (gate 1 tests every resource).
        for r, rv in r_of.items():
            q = state.queues[r]
            idx = by_queue_pairs.get(r, [])
            fair = int(q.fair_share["gpu"] * 100)
            have = int(alloc[r]["gpu"] * 100)
            m.add(cp_model.LinearExpr.weighted_sum([ctx.x[i] for i in idx], [centi[i] for i in idx])
                  <= fair - have).only_enforce_if(rv)
            caps[r] = fair - have
            for res in ("cpu", "memory"):
                if q.fair_share[res] == UNLIMITED:
                    continue
                amounts = [getattr(ctx.classes[c].tasks[0].request, res) for c in ctx.pair_class[idx].tolist()]
                m.add(cp_model.LinearExpr.weighted_sum([ctx.x[i] for i in idx], amounts)
                      <= math.floor(q.fair_share[res] - alloc[r][res])).only_enforce_if(rv)
        self._gate3_above_leaf(ctx, state, r_of, by_queue_pairs, gpu_terms, centi, alloc)
        only_preemptors_use_freed(ctx, unit_vars, r_of, pair_job)
        ev_of = ctx.extensions.get("eviction-node", {})
        self._hint_reclaim(ctx, z, r_of)
        ctx.extensions["freed"] = freed
        ctx.extensions["evicted-by-queue"] = by_queue
        ctx.extensions["eviction-beneficiaries"] = (evict_vars, preemptors, reclaimers_used)
        ctx.extensions["eviction-model"] = EvictionModel(z, r_of, allowances, caps, ev_of)
        ctx.extensions["eviction-units"] = unit_vars
        ctx.aux += [v for _, plan in unit_vars for _, v, _ in plan]
        # Cheap victims do not take a queue below its fair share: every GPU reclaimed beyond what
        # the queue holds above its share costs as much as four pods (KAI's gate 2 lets the last
        # chunk cross the share; its victim order then prefers the small jobs that do not).
        below_weight = BELOW_SHARE_COST
        greedy_below = 0
        for qname, terms in gpu_terms.items():
            q = state.queues[qname]
            above = int((alloc[qname]["gpu"] - q.fair_share["gpu"]) * 100)
            worst = sum(c * _ub(v) for v, c, *_ in terms)
            if worst <= max(above, 0):
                continue
            below = m.new_int_var(0, worst - min(above, 0), "")    # a queue below its share: all it loses, and more
            m.add(below >= cp_model.LinearExpr.weighted_sum([v for v, *_ in terms], [c for _, c, *_ in terms]) - above)
            pairs = [(v, c) for v, c, *_ in terms]
            ctx.derive_hint(lambda below=below, pairs=pairs, above=above:
                            ctx.hint(below, max(0, _hinted(ctx, pairs) - above)))
            greedy_below += max(0, _hinted(ctx, pairs) - above)
            costs_v.append(below)
            costs_c.append(below_weight)
        # No more pods evicted than KAI's actions evict for the same outcome above this level:
        # sparing a queue's share is worth pods only up to what greedy's own choice took below
        # the shares, so each pod beyond greedy's count costs more than that could save.
        if greedy_below:
            greedy_pods = _hinted(ctx, pod_terms)
            worst = sum(c * _ub(v) for v, c in pod_terms)
            excess = m.new_int_var(0, max(0, worst - greedy_pods), "")
            m.add(excess >= cp_model.LinearExpr.weighted_sum([v for v, _ in pod_terms], [c for _, c in pod_terms])
                  - greedy_pods)
            ctx.derive_hint(lambda: ctx.hint(excess, max(0, _hinted(ctx, pod_terms) - greedy_pods)))
            costs_v.append(excess)
            costs_c.append(below_weight * greedy_below + 1)
        ctx.extensions["eviction-costs"] = (costs_v, costs_c)

    def _quota_route(self, ctx: ModelContext, state: ClusterState, level, terms: list, sub: frozenset,
                     r_of: dict, by_queue_pairs: dict[str, list[int]], centi,
                     kai_reclaims: set[tuple[str, str]]) -> cp_model.IntVar | None:
        """Gate 2's quota reclaim (3.7.2 `guarantee_quota`): a level may lose victims down to its
        quota, below its allocatable share, only for a reclaimer whose own level (its ancestor
        beside `level`) stays within its quota with what it places. Without this the model took
        a whole gang from a queue at its fair share for a queue that ended above its quota, and
        the next cycle took it back: a reclaim loop. Called where the quota route is the wider;
        the indicator returned is 1 when the level loses more than its share route allows.
        `kai_reclaims`: (reclaiming queue, victim queue) of KAI's actions' reclaims this cycle."""
        reclaimers = sorted({r for _, _, u, *_ in terms for r in u.reclaimers if r not in sub and r in r_of})
        levels = {r: _beside(state, r, level) for r in reclaimers}
        if not reclaimers or any(q is None for q in levels.values()):
            # A reclaimer from another branch is gated at a higher level, not this one; the victims
            # are not attributed to reclaimers, so the level keeps its wider allowance for all.
            return None
        if any(r in levels and v in sub for r, v in kai_reclaims):
            # KAI's actions reclaimed here: their gate 2 counts what this cycle placed in the level
            # before (its share route may hold where the snapshot's allocation does not), so their
            # reclaims stay possible, as the pool keeps them (build_pool).
            return None
        m = ctx.model
        route = m.new_bool_var("")
        for r in reclaimers:
            mine = levels[r]
            if mine.deserved["gpu"] == -1:
                continue          # no quota to stay within
            room = int((mine.deserved["gpu"] - mine.allocated["gpu"]) * 100)
            idx = [i for q in sorted(self._subtree(state, mine.name)) for i in by_queue_pairs.get(q, ())]
            if len(idx) > 1:
                add_enforced_le(m, [ctx.x[i].index for i in idx], [centi[i] for i in idx], room,
                                [route.index, r_of[r].index])
            else:
                placed = cp_model.LinearExpr.weighted_sum([ctx.x[i] for i in idx], [int(centi[i]) for i in idx])
                m.add(placed <= room).only_enforce_if([route, r_of[r]])
        return route

    def _gate3_above_leaf(self, ctx: ModelContext, state: ClusterState, r_of: dict, by_queue_pairs: dict,
                          gpu_terms: dict, centi, alloc: dict) -> None:
        """Gate 3 at the reclaimer's ancestors (3.7.3): at each level above a reclaiming leaf
        (the leaf itself ends within its fair share, rows above), the level ends within its fair
        share or strictly poorer (saturation x multiplier) than each sibling it takes victims
        from, in GPUs. Without it a queue reclaimed from a department while its own department
        went past its share, and KAI reclaimed it back, every four cycles (tests/fixtures/
        evictions/cpsat_reclaims_against_kai_every_four_cycles.json).

        Levels count their final allocation: the snapshot's, plus this cycle's placements, less
        the reclaimed pods (KAI checks each reclaim in turn, on the allocation so far)."""
        m = ctx.model
        mult = state.config.reclaimer_saturation_multiplier
        checks = Gate3Checks(ctx)
        after: dict[str, tuple] = {}
        within_of: dict[str, cp_model.IntVar] = {}

        def level_after(name: str) -> tuple:
            """A queue's final GPUs x 100 as (snapshot's, terms, their variable indices and
            coefficients as arrays): the snapshot's, plus the placements in its subtree, less the
            pods reclaimed there. (An integer variable per level made its rows short but, as hard
            equalities in the LP, slowed the search: on kai-differential small-s2-full the solver
            no longer left greedy's hint.) The rows over it are written in bulk from the arrays."""
            if name not in after:
                sub = sorted(self._subtree(state, name))
                terms = [(ctx.x[i], int(centi[i])) for q in sub for i in by_queue_pairs.get(q, ())]
                terms += [(v, -c) for q in sub for v, c, *_ in gpu_terms.get(q, ())]
                have = int(alloc[name]["gpu"] * 100)
                after[name] = (have, terms, np.array([v.index for v, _ in terms], dtype=np.int64),
                               np.array([c for _, c in terms], dtype=np.int64))
                checks.level(name, have, terms)
            return after[name]

        def expression(have: int, terms: list) -> cp_model.LinearExpr:
            """A level's final GPUs as cp_model's expression, for the rows of a level with one
            term or none (cp_model writes those in other forms than the bulk rows')."""
            return have + cp_model.LinearExpr.weighted_sum([v for v, _ in terms], [c for _, c in terms])

        for r in sorted(r_of):
            rv = r_of[r]
            for level in state.queue_path(r)[1:]:
                fs_mine = level.fair_share["gpu"]
                if fs_mine < 0:                        # unlimited: saturation 0, never above
                    continue
                siblings = []
                for s in state.queues.values():
                    if s.parent != level.parent or s.name == level.name or not s.fair_share["gpu"] > 0:
                        continue
                    sub = self._subtree(state, s.name)
                    for_r = [v for q in sorted(sub) for v, _, u, _ in gpu_terms.get(q, ()) if r in u.reclaimers]
                    if for_r:
                        siblings.append((s, for_r))
                if not siblings:
                    continue
                have, terms, mv, mc = level_after(level.name)
                fair = math.floor(fs_mine * 100)
                within = within_of.get(level.name)
                if within is None:
                    within = within_of[level.name] = m.new_bool_var("")
                    if len(terms) > 1:
                        add_enforced_le(m, mv, mc, fair - have, [within.index])
                    else:
                        m.add(expression(have, terms) <= fair).only_enforce_if(within)
                    ctx.derive_hint(lambda w=within, have=have, terms=terms, f=fair: ctx.hint(
                        w, 1 if have + _hinted(ctx, terms) <= f else 0))
                for s, victims in siblings:
                    lost = m.new_bool_var("")
                    add_at_most_if(m, [v.index for v in victims], [_ub(v) for v in victims], lost.index)
                    ctx.derive_hint(lambda lost=lost, victims=victims: ctx.hint(
                        lost, 1 if any(ctx.hinted(v) for v in victims) else 0))
                    have_theirs, theirs_terms, tv, tc = level_after(s.name)
                    # mine / fs_mine x mult < theirs / fs_theirs, in integers
                    k_mine = mult * s.fair_share["gpu"]
                    k_theirs = fs_mine
                    d = math.lcm(k_mine.denominator, k_theirs.denominator)
                    a, b = _held_ratio(int(k_mine * d), int(k_theirs * d), have_theirs, theirs_terms)
                    if len(terms) > 1 and len(theirs_terms) > 1:     # (cp_model's form for such sums)
                        add_enforced_le(m, np.concatenate([mv, tv]), np.concatenate([a * mc, -b * tc]),
                                        b * have_theirs - 1 - a * have, [rv.index, lost.index, -within.index - 1])
                    else:
                        m.add(a * expression(have, terms) <= b * expression(have_theirs, theirs_terms) - 1
                              ).only_enforce_if([rv, lost, within.Not()])
                    checks.add(Gate3Check(level.name, fair, s.name, victims, a, b))
        ctx.extensions["gate3-checks"] = checks

    @staticmethod
    def _subtree(state: ClusterState, name: str) -> frozenset:
        out, stack = set(), [name]
        while stack:
            q = stack.pop()
            out.add(q)
            stack += state.queues[q].children
        return frozenset(out)

    @staticmethod
    def _hint_reclaim(ctx: ModelContext, z: dict, r_of: dict) -> None:
        """z[R, n] = R placed a pod on n in greedy and greedy reclaimed there for one of R's jobs."""
        took = _greedy_reclaims(ctx)
        for key, var in z.items():
            ctx.hint(var, 1 if key in took else 0)
        for r, var in r_of.items():
            ctx.hint(var, 1 if any(k[0] == r and k in took for k in z) else 0)


@dataclass
class Gate3Check:
    """One of gate 3's rows above the leaf, for the constructive hint (eviction_hint.py), which
    raises hint values and must keep them a solution: taken with the reclaimer's indicator set
    (the safe side), level `mine` ends within `fair` or `a x mine <= b x theirs - 1` while any
    of `victims` is evicted."""
    mine: str
    fair: int
    theirs: str
    victims: list
    a: int
    b: int


class Gate3Checks:
    """Gate 3's rows above the leaf, checked on the hint as it would be after some changes. The
    levels' final allocations are kept as running totals of the hint (`commit`), so a check
    reads only what the changes touch."""

    def __init__(self, ctx: ModelContext):
        self.ctx = ctx
        self.rows: list[Gate3Check] = []
        self.levels: dict[str, tuple[int, list]] = {}          # level -> (snapshot's, terms)
        self.in_levels: dict[int, list[tuple[str, int]]] = {}   # variable index -> (level, coefficient)
        self.by_level: dict[str, list[int]] = {}               # level -> rows reading it
        self.by_victim: dict[int, list[int]] = {}              # victim variable index -> rows
        self.totals: dict[str, int] | None = None

    def level(self, name: str, have: int, terms: list) -> None:
        self.levels[name] = (have, terms)
        for v, c in terms:
            self.in_levels.setdefault(v.index, []).append((name, c))

    def add(self, row: Gate3Check) -> None:
        r = len(self.rows)
        self.rows.append(row)
        for name in (row.mine, row.theirs):
            self.by_level.setdefault(name, []).append(r)
        for v in row.victims:
            self.by_victim.setdefault(v.index, []).append(r)

    def _deltas(self, changes: list[tuple[int, int]]) -> tuple[dict[str, int], dict[int, int]]:
        by_level: dict[str, int] = {}
        by_var: dict[int, int] = {}
        for index, by in changes:
            by_var[index] = by_var.get(index, 0) + by
            for name, c in self.in_levels.get(index, ()):
                by_level[name] = by_level.get(name, 0) + c * by
        return by_level, by_var

    def fits(self, changes: list[tuple[int, int]]) -> bool:
        """Whether the hint with each variable (index) raised by its amount keeps every row."""
        if self.totals is None:      # the hint as the constructive pass starts from it
            self.totals = {name: have + _hinted(self.ctx, terms) for name, (have, terms) in self.levels.items()}
        by_level, by_var = self._deltas(changes)
        touched = {r for name in by_level for r in self.by_level.get(name, ())}
        touched |= {r for index in by_var for r in self.by_victim.get(index, ())}
        hinted = self.ctx.hinted
        for r in sorted(touched):
            row = self.rows[r]
            mine = self.totals[row.mine] + by_level.get(row.mine, 0)
            if mine <= row.fair or not any(hinted(v) + by_var.get(v.index, 0) for v in row.victims):
                continue
            if row.a * mine > row.b * (self.totals[row.theirs] + by_level.get(row.theirs, 0)) - 1:
                return False
        return True

    def commit(self, changes: list[tuple[int, int]]) -> None:
        """The changes were made to the hint: the totals follow."""
        if self.totals is not None:
            for name, d in self._deltas(changes)[0].items():
                self.totals[name] += d


def _hint_inside(ctx: ModelContext, y, w, v, ys: list) -> None:
    """A mixed unit's pods count at a level unless a queue inside reclaims on their nodes (y)."""
    inside = any(ctx.hinted(z) for z in ys)
    ctx.hint(y, 1 if inside else 0)
    ctx.hint(w, 0 if inside else ctx.hinted(v))


def _same_request(table, pods: list) -> list[list]:
    """A PodSet's pods on one node by request, in pod order: they may differ (a launcher beside its
    workers), and each variable frees what its own pods hold (one variable for all counted the
    first pod's request for every pod: random objectives found a queue at a 0-GPU limit placing
    half a GPU on a GPU the model thought a victim's 0-GPU pod freed)."""
    groups: dict[bytes, list] = {}
    for t in pods:
        groups.setdefault(table.vector(t).tobytes(), []).append(t)
    return list(groups.values())


def _task_centi(t) -> int:
    """GPUs x 100 a pod frees (rounded up: gate 2 counts a victim never below what it takes)."""
    return math.ceil(100 * t.request.gpus)


def _largest_chunk(u: Unit, tasks: list) -> int:
    """Gate 2's largest chunk among `tasks`, pods of `u` evicted together (3.7.2): a job's core
    when the whole job goes, else its largest pod (each pod above a minimum is a chunk)."""
    if u.kind == "job" and u.whole and len(tasks) == len(u.tasks):
        return u.chunk
    return max(_task_centi(t) for t in tasks)


def _hinted(ctx: ModelContext, terms: Iterable[tuple[cp_model.IntVar, int]]) -> int:
    return sum(c * ctx.hinted(v) for v, c in terms)


def _greedy_reclaims(ctx: ModelContext) -> set[tuple[str, int]]:
    """(queue R, node n): greedy placed a pod of R on n and reclaimed there for one of R's jobs."""
    s = ctx.greedy.session
    used: set[tuple[str, int]] = set()
    for e in s.evictions.values():
        if e.action == "reclaim" and e.for_job in ctx.state.jobs:
            used.add((ctx.state.jobs[e.for_job].queue, e.node))
    placed = {(ctx.state.jobs[p.task.job].queue, p.node) for p in s.placements.values()}
    return used & placed


@dataclass
class EvictionModel:
    """What the constructive hint (model/eviction_hint.py) must respect."""
    z: dict                                    # (reclaiming queue, node) -> Boolean
    r_of: dict                                 # reclaiming queue -> Boolean
    allowances: list                           # ({var index: GPUs x 100}, room) per victim level
    caps: dict                                 # reclaiming queue -> GPUs x 100 it may add
    ev_of: dict                                # node -> "loses pods" Boolean (where outsiders are kept off)


class VictimCost:
    """Fewest, then cheapest victims (in utilisation's level, below KAI's order)."""
    name = "victims"

    def contribute(self, ctx: ModelContext) -> None:
        costs = ctx.extensions.get("eviction-costs")
        if not costs:
            return
        variables, weights = costs
        scale = ctx.levels.scale
        ctx.add_term(self.name, variables, [-w * scale for w in weights])
        ctx.levels.added(sum(w * int(_ub(v)) for v, w in zip(variables, weights)) * scale)


def freed_terms(ctx: ModelContext, n: int, col: int) -> tuple[list, list[int]]:
    """Variables and coefficients of what evictions free on node n in one resource column."""
    out_v, out_c = [], []
    for v, vec in ctx.extensions.get("freed", {}).get(n, []):
        c = int(vec[col])
        if c:
            out_v.append(v)
            out_c.append(c)
    return out_v, out_c


def freed_max(ctx: ModelContext) -> np.ndarray | None:
    """Per node and resource, the most evictions may free (for constraints that skip when safe)."""
    freed = ctx.extensions.get("freed")
    if not freed:
        return None
    out = np.zeros_like(ctx.free)
    nodes = [n for n, terms in freed.items() for _ in terms]
    if nodes:           # (integer sums: the order of the additions does not matter)
        vecs = np.array([vec for terms in freed.values() for _, vec in terms], dtype=out.dtype).reshape(len(nodes), -1)
        ubs = np.array([_ub(v) for terms in freed.values() for v, _ in terms], dtype=out.dtype)
        np.add.at(out, np.array(nodes, dtype=np.int64), vecs * ubs[:, None])
    return out
