"""A job the previous cycle pipelined, and KAI's allocate now binds, keeps those binds: the same
pods per node, on capacity no eviction of this cycle is for.

kai-cp writes `status.nominatedNodeName` on the pods it pipelines and serves those jobs first
next cycle (kai_cp/actions/allocate.py `run_allocate`), so the capacity their evictions freed
goes to them. The model could still give that capacity to a job greedy left pending (often a
recreated victim, whose queue may reclaim) and pipeline the nominated job once more by evicting
another pod for it; next cycle the same happens the other way round
(tests/fixtures/evictions/cpsat_nominated_job_pipelined_again.json: run7-0 and run2-0 evicted in
turn for pend3, which never binds). So, for such a job: its placements are greedy's; on a node
where the model may evict, its pods and those of the jobs no eviction there may serve fit in the
node's free capacity, so nothing evicted there makes room beside it; and decode places it first,
on idle capacity (ctx.extensions["nominated-first"]). Greedy's decisions satisfy all three.
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.actions.allocate import nominated_jobs
from kai_cp.model.base import ModelContext
from kai_cp.model.victim_pool import _legal


class NominatedFirst:
    name = "nominated-first"

    def contribute(self, ctx: ModelContext) -> None:
        state, session = ctx.state, ctx.greedy.session
        candidates = nominated_jobs(state, [state.jobs[n] for n in ctx.greedy.started_jobs])
        pipelined = {p.task.job for p in session.placements.values() if p.pipelined}
        fixed = {j.name for j in candidates if j.name not in pipelined}
        if not fixed:
            return
        ctx.extensions["nominated-first"] = fixed
        m = ctx.model
        pair_job = [ctx.classes[c].job for c in ctx.pair_class.tolist()]
        mine = [i for i, j in enumerate(pair_job) if j.name in fixed]
        for i in mine:
            m.add(ctx.x[i] == int(ctx.greedy_counts.get(i, 0)))
        units = [u for u, _ in ctx.extensions.get("eviction-units") or []]
        if not units:
            return
        on_node: dict[int, list] = {}
        for u in units:
            for n in u.nodes:
                on_node.setdefault(n, []).append(u)
        for n in sorted({int(ctx.pair_node[i]) for i in mine if ctx.greedy_counts.get(i, 0)}):
            here = on_node.get(n)
            if not here:
                continue
            pairs = [i for i in np.nonzero(ctx.pair_node == n)[0].tolist()
                     if pair_job[i].name in fixed or not any(_legal(u, pair_job[i], ctx.state) for u in here)]
            vecs = np.array([ctx.classes[int(ctx.pair_class[i])].vec for i in pairs], dtype=np.int64)
            for r in np.nonzero(vecs.sum(axis=0) > 0)[0].tolist():
                nz = [k for k in range(len(pairs)) if vecs[k, r] > 0]
                m.add(cp_model.LinearExpr.weighted_sum([ctx.x[pairs[k]] for k in nz], [int(vecs[k, r]) for k in nz])
                      <= int(ctx.free[n, r]))
