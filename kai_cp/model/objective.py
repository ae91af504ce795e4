"""Objective levels, compared lexicographically by giving each level a weight larger than
everything below it can add up to.

Levels, most important first: KAI's order (order.py); utilisation (utilisation.py); and one
level of soft preferences that only decide between otherwise equal outcomes: keeping greedy's
node (stability.py), the placement preference (placement.py) and not waiting on releasing
resources (pipeline.py). Within that last level the concerns use small fixed weights, so the
objective stays exact in a double even on large clusters.

The builder opens each level bottom-up; a concern reads `scale` (one more than the maximum
the lower levels can reach) and reports the range it adds. When the whole range would not be
exact in a double (large clusters), the soft level is coarsened rather than the cycle falling
back to greedy (`shrink_lowest`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SAFE_OBJECTIVE = 2 ** 52      # keep every objective value exact in a double


@dataclass
class Levels:
    max_so_far: int = 0
    scale: int = 1
    index: int = -1                                          # the level being built
    ranges: list = field(default_factory=list)               # per level, its range in scaled units

    def open_level(self) -> None:
        self.scale = self.max_so_far + 1
        self.index += 1
        self.ranges.append(0)

    def added(self, maximum: int) -> None:
        self.max_so_far += maximum
        if self.ranges:
            self.ranges[-1] += maximum


def shrink_lowest(levels: Levels, terms: list) -> int:
    """Make the objective exact in a double again by coarsening the lowest level (the soft
    preferences): its weights are divided by the smallest factor that brings the whole range under
    SAFE_OBJECTIVE, and every level above is rescaled to its new base, so the order between levels
    is kept exactly; only ties among soft preferences get coarser. Returns the factor (1: none)."""
    if levels.max_so_far <= SAFE_OBJECTIVE or len(levels.ranges) < 2:
        return 1
    scales = [1]
    for r in levels.ranges[:-1]:
        scales.append(scales[-1] + r)           # scale of level k = 1 + sum of the ranges below it
    base = [r // s for r, s in zip(levels.ranges, scales)]    # ranges in each level's own units
    factor = 1
    while True:
        factor *= 2
        low = -(-base[0] // factor)
        new_scales, total = [1], low
        for b in base[1:]:
            new_scales.append(total + 1)
            total += b * (total + 1)
        if total <= SAFE_OBJECTIVE or factor > 1 << 40:
            break
    for t in terms:
        k = t.level
        if k == 0:
            t.coefficients = [int(c / factor) for c in t.coefficients]     # toward zero: never past the range
        else:
            t.coefficients = [c // scales[k] * new_scales[k] for c in t.coefficients]
    levels.ranges = [low] + [b * sc for b, sc in zip(base[1:], new_scales[1:])]
    levels.max_so_far = total
    return factor


def class_reach(pair_class, pair_ub, classes, weights) -> int:
    """The most a per-pair weighted count can add up to: a class places at most its size (the gang
    concern bounds every class by it), at its best pairs, so per class the size (or its pairs'
    summed bounds, if smaller) times its largest absolute weight. Summing weight x bound over every
    candidate pair instead counts each pod once per candidate node and overflows exact doubles on
    1,000-node models."""
    w = np.abs(np.asarray(weights, dtype=np.int64))
    if len(w) == 0:
        return 0
    pc = np.asarray(pair_class, dtype=np.int64)
    n = len(classes)
    best = np.zeros(n, dtype=np.int64)
    np.maximum.at(best, pc, w)
    ub_sum = np.bincount(pc, weights=np.asarray(pair_ub, dtype=np.float64), minlength=n).astype(np.int64)
    sizes = np.array([c.size for c in classes], dtype=np.int64)
    return int((np.minimum(sizes, ub_sum) * best).sum())
