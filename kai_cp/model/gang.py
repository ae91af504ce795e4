"""Gangs: a job starts only with at least minMember pods in every PodSet (sub-group), counting
the pods it already runs; elastic pods beyond the minimum may be added once it has started
(spec 4.4, 5.2, 5.5). One Boolean per job says whether it is placed this cycle."""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from kai_cp.model.base import ModelContext
from kai_cp.model.linear_rows import add_le_rows


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
        # A class has only so many pods: where its pairs could hold more, their sum is at most its
        # size (written in bulk, linear_rows, as cp_model writes sum(...) <= size).
        pair_class = np.asarray(ctx.pair_class, dtype=np.int64)
        sizes = np.array([c.size for c in ctx.classes], dtype=np.int64)
        room = np.bincount(pair_class, weights=ctx.pair_ub, minlength=len(ctx.classes))   # exact: small ints
        capped = room > sizes
        row_of = np.cumsum(capped) - 1
        pairs = np.flatnonzero(capped[pair_class])
        x_index = np.array([v.index for v in ctx.x], dtype=np.int64)
        add_le_rows(m, row_of[pair_class[pairs]], x_index[pairs], np.ones(len(pairs), dtype=np.int64),
                    sizes[capped])
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
                    # The PodSet cannot reach its minimum (a pod of it has no candidate node, or
                    # its classes were left out): the job does not start, and none of the pods
                    # that could be placed is, as the rows below would say with start at 0.
                    m.add(start == 0)
                    if pairs:
                        m.add(total == 0)
                    continue
                if pairs:
                    m.add(total >= need * start)
                    m.add(total <= modelled * start)
                    placed.append(total)
            total_placed = cp_model.LinearExpr.sum(placed) if placed else 0
            # A start means pods are placed now, also for a job already at its minimum (elastic growth).
            m.add(total_placed >= start)
            ctx.placed[job_name] = total_placed
