"""A job that loses pods in a cycle gains none that KAI's actions would not have placed.

Evicting one pod of a job while starting another of the same job is churn: the job ends the cycle
the same size, a pod restarts, and the recreated pod is in the same place next cycle
(tests/fixtures/evictions/cpsat_victim_job_regrows.json: run0-1 reclaimed for pend0 while run0's
pending run0-2 is bound on the idle GPU, then run0-2 reclaimed and run0-1 bound, every cycle).
KAI's order never does it for a job its allocate left pending, and the model may not either:
per victim unit, one indicator "this unit loses pods", which forbids placing pods of its job.
Only jobs greedy both grew and shrank are exempt (KAI's allocate may grow an elastic job that a
later action then shrinks), so greedy's decisions stay a solution. A job greedy grew without
shrinking is not: the model took a pod of run0 for run9 while binding run0's recreated pod in
the limit room the eviction freed, every other cycle (tests/fixtures/evictions/
cpsat_victim_regrows_in_freed_limit_room.json, a queue over its limit).
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from kai_cp.model.base import ModelContext


class NoVictimGrowth:
    name = "no-victim-growth"

    def contribute(self, ctx: ModelContext) -> None:
        units = ctx.extensions.get("eviction-units")
        if not units:
            return
        greedy = ctx.greedy.session
        pairs = ctx.pairs_by_job(excluding={p.task.job for p in greedy.placements.values()}
                                 & {e.task.job for e in greedy.evictions.values()})
        m = ctx.model
        for u, plan in units:
            job = u.tasks[0].job if u.tasks else None
            mine = pairs.get(job)
            if not mine:
                continue
            loses = m.new_bool_var("")
            for _, var, _ in plan:
                m.add(var == 0).only_enforce_if(~loses)
            m.add(cp_model.LinearExpr.sum([ctx.x[i] for i in mine]) == 0).only_enforce_if(loses)
            # follows the unit's evictions, greedy's and then the constructive eviction hint's
            ctx.derive_hint(lambda loses=loses, plan=plan: ctx.hint(loses, 1 if any(ctx.hinted(var) for _, var, _ in plan) else 0))
