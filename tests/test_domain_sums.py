"""Per-domain sums of the topology plugin (kai_cp/topology_fit.py) over every node with the
view's outside nodes zeroed, against sums over the view's nodes alone.

Why: the greedy engine's topology search sums free capacity per domain at every level for
each scope (822 sums over 10,000 nodes in one allocation); the sums skip the per-call index of
the view's nodes. They must be the same floats, rounding included: memory in bytes summed over
a zone or the whole cluster passes 2**53, where a sum in another order could differ."""

from __future__ import annotations

import numpy as np
import pytest

from kai_cp.topology import ROOT, build_tree
from kai_cp.topology_fit import _domain_sums


def over_view(tree, level: int, valid: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The sums over the view's nodes alone, in node order (the plain definition)."""
    n = tree.count(level)
    d = tree.domain_of(level)[valid]
    v = values[valid].astype(np.float64)
    if values.ndim == 1:
        return np.rint(np.bincount(d, weights=v, minlength=n)).astype(np.int64)
    out = np.zeros((n, values.shape[1]), dtype=np.float64)
    for c in range(values.shape[1]):
        out[:, c] = np.bincount(d, weights=v[:, c], minlength=n)
    return np.rint(out).astype(np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_domain_sums_equal_sums_over_the_view(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    labels = []
    for i in range(n):
        if rng.random() < 0.05:
            labels.append({})                       # outside the tree
        else:
            zone = int(rng.integers(2))
            labels.append({"zone": f"z{zone}", "rack": f"z{zone}r{int(rng.integers(40))}", "host": f"h{i}"})
    tree = build_tree("t", ["zone", "rack", "host"], labels)
    valid = tree.member & (rng.random(n) < 0.8)
    # memory in bytes with odd values: a zone's sum passes 2**53 and float rounding shows
    values = np.stack([rng.integers(-1000, 128_000, n), rng.integers(0, 2**43, n) * 2 + 1,
                       rng.integers(-1, 9, n), rng.integers(0, 111, n)], axis=1).astype(np.int64)
    values = np.where(valid[:, None], values, 0)
    assert values[:, 1].sum() > 2**53
    for level in (ROOT, 0, 1, 2):
        assert np.array_equal(_domain_sums(tree, level, values), over_view(tree, level, valid, values))
        assert np.array_equal(_domain_sums(tree, level, values[:, 3]), over_view(tree, level, valid, values[:, 3]))
