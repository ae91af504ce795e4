"""Gangs: a job starts only with at least minMember pods in every PodSet (sub-group), counting
the pods it already runs; elastic pods beyond the minimum may be added once it has started
(spec 4.4, 5.2, 5.5). One Boolean per job says whether it is placed this cycle."""

from __future__ import annotations

from ortools.sat.python import cp_model

from kai_cp.model.base import ModelContext


class Gang:
    name = "gang"

    def contribute(self, ctx: ModelContext) -> None:
        m = ctx.model
        by_job: dict[str, dict[str, list[int]]] = {}
        for c in ctx.classes:
            by_job.setdefault(c.job.name, {}).setdefault(c.podset, []).append(c.index)
        pairs_of = {}
        for i, c in enumerate(ctx.pair_class.tolist()):
            pairs_of.setdefault(c, []).append(i)
        for c in ctx.classes:
            pairs = pairs_of.get(c.index, [])
            if pairs and int(ctx.pair_ub[pairs].sum()) > c.size:
                m.add(cp_model.LinearExpr.sum([ctx.x[p] for p in pairs]) <= c.size)   # a class has only so many pods
        for job_name, podsets in by_job.items():
            job = ctx.state.jobs[job_name]
            start = m.new_bool_var(f"start[{job_name}]")
            ctx.starts[job_name] = start
            placed = []
            for ps in job.podsets.values():
                pairs = [p for c in podsets.get(ps.name, []) for p in pairs_of.get(c, [])]
                modelled = sum(ctx.classes[c].size for c in podsets.get(ps.name, []))
                need = max(0, ps.min_available - ps.active_allocated)
                total = cp_model.LinearExpr.sum([ctx.x[p] for p in pairs]) if pairs else 0
                if need > modelled or (need > 0 and not pairs):
                    m.add(start == 0)
                    continue
                if pairs:
                    m.add(total >= need * start)
                    m.add(total <= modelled * start)
                    placed.append(total)
            total_placed = cp_model.LinearExpr.sum(placed) if placed else 0
            # A start means pods are placed now, also for a job already at its minimum (elastic growth).
            m.add(total_placed >= start)
            ctx.placed[job_name] = total_placed
