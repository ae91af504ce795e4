"""The fragmentation walk's placements as the model's hint (model/frag_rows.py), where they are
a solution with a better objective than greedy's decisions.

Why: the solver gets a fraction of a second. On the FGD benchmark's cycles (100 shared-GPU pods,
~4,000 variables) it ended where greedy's hint started in most cycles, while the walk's
placements are what FGD itself would choose, pod after pod. Greedy's decisions stay what the
cycle falls back to and what the objective is compared with.
"""

from __future__ import annotations

from kai_cp.model.base import ModelContext, greedy_placements
from kai_cp.model.frag_rows import walked
from kai_cp.model.gpu_sharing import hint_devices
from kai_cp.model.hint_check import broken, values_of

# The check reads every constraint in Python: 0.09 s for 4,270 constraints (an FGD benchmark
# cycle on 60 nodes, tests/test_frag_walk.py's cluster); larger models keep greedy's hint.
HINT_CHECK_ROWS = 8_000


def walk_hint(ctx: ModelContext) -> bool:
    """Hint the walk's placements instead of greedy's for every class both place the same number
    of pods of (others keep greedy's), if that hint is a solution with a better objective; else the
    hint stays greedy's. True when the walk's hint is kept."""
    placed = walked(ctx.state)
    if not placed or ctx.greedy.session.evictions or len(ctx.model.proto.constraints) > HINT_CHECK_ROWS:
        return False
    index = {(int(c), int(n)): i for i, (c, n) in enumerate(zip(ctx.pair_class.tolist(), ctx.pair_node.tolist()))}
    greedy = greedy_placements(ctx.greedy, ctx.classes)
    devices, counts, moved = [], {}, False
    for c in ctx.classes:
        mine = [(c.index, n, g) for n, g in greedy.get(c.index, ())]
        walk = [(c.index, n, g) for n, g in placed.get(c.index, ())]
        use = walk if (walk and len(walk) == len(mine) and all((c.index, n) in index for _, n, _ in walk)) else mine
        moved |= use is walk and sorted(n for _, n, _ in walk) != sorted(n for _, n, _ in mine)
        for _, n, g in use:
            i = index.get((c.index, n))
            if i is None:
                return False
            counts[i] = counts.get(i, 0) + 1
        if c.tasks[0].request.is_shared_gpu:
            devices += use
    if not moved:
        return False
    saved = dict(ctx.hints)
    for i, x in enumerate(ctx.x):
        ctx.hint(x, counts.get(i, 0))
    ok = hint_devices(ctx, devices, strict=True)
    if ok:
        for derive in ctx.extensions.get("derived-hints", ()):
            derive()
        values = values_of(ctx.hints.values(), len(ctx.model.proto.variables))
        ok = ctx.hinted_objective() > ctx.greedy_objective and not broken(ctx.model.proto, values, first=True)
    if ok:
        ctx.extensions["hint"] = "fragmentation walk"      # reported in the cycle's stats
    else:
        ctx.hints.clear()
        ctx.hints.update(saved)
    return ok

