"""The lean model: what a cycle builds when the full model cannot be built in the time KAI's
actions left it.

Why: at 10,000 nodes KAI's actions take ~0.45 s and the full build ~0.8 s (the victim pool and
the eviction concerns a third of it, the fragmentation rows another), so a 1 s cycle fell back to
greedy without the solver ever running. The lean model keeps every constraint (capacity, gangs,
quotas and limits, topology, pipelining, priority order) and the objective's levels above the
soft preferences, and leaves out:

- the eviction variables (victim pool, eviction concerns): KAI's eviction actions run on the
  model's allocation afterwards, as they do when greedy made moves the model has no variables for
  (kai_cp/cycle.py); so it is built only where greedy's hint is allocate's own decisions;
- the fragmentation terms and rows (kai_cp/model/fragmentation.py, frag_rows.py): candidates are
  ranked by the placement strategy's free capacity, as KAI's own scoring does.

Only the time decides it, at the build's start (kai_cp/model/build.py): where the full model would
not be started at all (the least estimates of its steps), or would typically not end with time
left for its solver (typical estimates, scaled by the victim pool's pace once it is built). A
cycle with time for the full model builds it as before.
"""

from __future__ import annotations

from kai_cp.model.base import Concern

# The candidate selection without fragmentation rows, per class and node: 8-11 ns measured at
# 10,000 nodes (bench_scale's, bench/bench_build.py --lean), the least is taken (as build.py's
# estimates: a build that could end in time is started).
LEAN_SELECT_SECONDS_PER_CLASS_NODE = 8e-9
# Concerns (by name) the lean model leaves out of the objective.
LEFT_OUT = frozenset({"fragmentation"})


def lean_levels(levels: tuple[tuple[Concern, ...], ...]) -> tuple[tuple[Concern, ...], ...]:
    return tuple(tuple(c for c in level if getattr(c, "name", None) not in LEFT_OUT) for level in levels)
