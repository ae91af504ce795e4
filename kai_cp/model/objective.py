"""Objective levels, compared lexicographically by giving each level a weight larger than
everything below it can add up to.

Levels, most important first: KAI's order (order.py), utilisation (utilisation.py),
not waiting on releasing resources (pipeline.py), placement preference (placement.py).
Concerns contribute bottom-up: each reads `scale` (one more than the maximum the lower levels
can reach) and reports the maximum it can add itself.
"""

from __future__ import annotations

from dataclasses import dataclass

SAFE_OBJECTIVE = 2 ** 52      # keep every objective value exact in a double


@dataclass
class Levels:
    max_so_far: int = 0

    @property
    def scale(self) -> int:
        return self.max_so_far + 1

    def added(self, maximum: int) -> None:
        self.max_so_far += maximum
