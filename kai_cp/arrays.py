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


def groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse) of a 1-D array: the position of each distinct value's first occurrence
    (values ascending) and each element's group, so that `key == key[first][inverse]`."""
    key = np.asarray(key)
    order = np.argsort(key, kind="stable")
    s = key[order]
    new = np.empty(len(s), dtype=bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    inverse = np.empty(len(s), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return order[new], inverse


def row_groups(a: np.ndarray) -> np.ndarray:
    """Per row of a 2-D array, the number of its distinct row (rows ascending lexicographically):
    equal rows, equal numbers."""
    a = np.asarray(a)
    if len(a) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(a.T[::-1])
    s = a[order]
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    (s[1:] != s[:-1]).any(axis=1, out=new[1:])
    out = np.empty(len(s), dtype=np.int64)
    out[order] = np.cumsum(new) - 1
    return out
