"""Queue limits and the non-preemptible quota at every level of the queue tree (spec 3.6).

What this cycle adds to a queue (and each ancestor) must stay within `limit - allocated` for
every limited resource the added jobs request; non-preemptible jobs must also stay within
`quota - allocatedNonPreemptible`. Resources a job does not request are not checked, as in KAI.
Pods the cycle evicts from a queue leave its allocation, as in KAI's session (a preemptor may
use the room its same-queue victims held under the queue's limit); victims are preemptible, so
the non-preemptible quota gains nothing from them. A queue already over its limit (a limit
lowered, or usage from before it) keeps its exact, negative room: it places nothing unless its
evictions bring it back under the limit with the placement, as KAI checks a job against the
session's allocation; placing nothing, it is not made to evict.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from kai_cp.capacity import exact_room, room
from kai_cp.model.base import ModelContext
from kai_cp.model.linear_rows import upper_bound
from kai_cp.model.utilisation import pair_centi_gpus
from kai_cp.queues import RESOURCES

_COL = {"cpu": 0, "memory": 1, "gpu": 2}


class QueueQuota:
    name = "quota"

    def contribute(self, ctx: ModelContext) -> None:
        state = ctx.state
        pairs_of: dict[int, list[int]] = {}
        for i, c in enumerate(ctx.pair_class.tolist()):
            pairs_of.setdefault(c, []).append(i)
        subtree: dict[str, list[int]] = {}
        for c in ctx.classes:
            for q in state.queue_path(c.job.queue):
                subtree.setdefault(q.name, []).append(c.index)
        evicted: dict[str, list] = {}
        for leaf, terms in ctx.extensions.get("evicted-by-queue", {}).items():
            for q in state.queue_path(leaf):
                evicted.setdefault(q.name, []).extend(terms)
        for qname, cls in subtree.items():
            q = state.queues[qname]
            for r in RESOURCES:
                col = _COL[r]
                # GPUs in hundredths: shared pods count their portion (3.2.2)
                unit = 100 if r == "gpu" else 1
                if q.limit[r] != -1:
                    self._cap(ctx, [c for c in cls], pairs_of, col, exact_room(unit * q.limit[r], unit * q.allocated[r]),
                              [(v, unit * int(vec[col])) for v, vec in evicted.get(qname, ()) if vec[col]])
                if q.deserved[r] != -1:
                    np_cls = [c for c in cls if not ctx.classes[c].job.preemptible]
                    if np_cls:
                        self._cap(ctx, np_cls, pairs_of, col, room(unit * q.deserved[r], unit * q.allocated_np[r]))

    @staticmethod
    def _cap(ctx: ModelContext, cls: list[int], pairs_of: dict[int, list[int]], col: int, room: int,
             freed: list[tuple] = ()) -> None:
        """Placed amounts within `room` plus what `freed` (variable, amount) evictions return; a
        negative room binds only when something is placed."""
        variables, coeffs = [], []
        worst = 0
        centi = pair_centi_gpus(ctx) if col == 2 else None
        for c in cls:
            pairs = pairs_of.get(c, [])
            for p in pairs:
                amount = centi[p] if centi is not None else int(ctx.classes[c].vec[col])
                if amount <= 0:
                    continue
                worst += amount * min(ctx.classes[c].size, int(ctx.pair_ub[p]))
                variables.append(ctx.x[p])
                coeffs.append(amount)
        if worst <= room or not variables:
            return                    # cannot be exceeded: no constraint needed
        # Below what every eviction here frees, no placement meets the room whatever it is: the
        # same row with a bound CP-SAT can hold (a -1e20 GPU limit was past int64). A variable
        # may count several pods of a unit (eviction_units' "first" / "last" plans), so each frees
        # up to its upper bound times its amount (a sum of amounts let a queue 24 GPUs over its
        # limit evict 26 and place 5 more: random objectives over generated clusters found it).
        room = max(room, -sum(amount * upper_bound(v) for v, amount in freed) - 1)
        placed = list(variables)
        for v, amount in freed:
            variables.append(v)
            coeffs.append(-amount)
        row = ctx.model.add(cp_model.LinearExpr.weighted_sum(variables, coeffs) <= room)
        if room < 0:
            places = ctx.model.new_bool_var("")
            row.only_enforce_if(places)
            ctx.model.add(cp_model.LinearExpr.sum(placed) == 0).only_enforce_if(places.Not())
            ctx.derive_hint(lambda: ctx.hint(places, 1 if any(ctx.hinted(v) for v in placed) else 0))
        ctx.extensions.setdefault("hint-rows", []).append((variables, coeffs, room))   # for eviction_hint
