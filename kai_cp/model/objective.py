"""Objective levels, compared lexicographically by giving each level a weight larger than
everything below it can add up to.

Levels, most important first: KAI's order (order.py); utilisation (utilisation.py); and one
level of soft preferences that only decide between otherwise equal outcomes: keeping greedy's
node (stability.py), the placement preference (placement.py) and not waiting on releasing
resources (pipeline.py). Within that last level the concerns use small fixed weights, so the
objective stays exact in a double even on large clusters.

The builder opens each level bottom-up; a concern reads `scale` (one more than the maximum
the lower levels can reach) and reports the range it adds.
"""

from __future__ import annotations

from dataclasses import dataclass

SAFE_OBJECTIVE = 2 ** 52      # keep every objective value exact in a double


@dataclass
class Levels:
    max_so_far: int = 0
    scale: int = 1

    def open_level(self) -> None:
        self.scale = self.max_so_far + 1

    def added(self, maximum: int) -> None:
        self.max_so_far += maximum
