"""Array helpers numpy has, without what they pull in.

`np.unique(a)` (numpy 2.x, no return_* options) asks `np.ma.is_masked(a)`, which imports the
whole `numpy.ma` package on first use: ~8 ms of every `kai-cp solve` process, for arrays that
are never masked here (issue 9's start-up budget)."""

from __future__ import annotations

import numpy as np


def distinct(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of `a` (flattened): `np.unique(a)` for unmasked arrays."""
    s = np.sort(np.asarray(a).ravel())
    if s.size == 0:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]
