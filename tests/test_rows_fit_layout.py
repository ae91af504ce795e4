"""rows_fit and first_short (kai_cp/fit.py) against their plain definitions, on the session's column-major arrays
and on row-major ones.

Why: the session keeps idle/releasing/free column-major and rows_fit gathers a column before its
rows (twice as fast at 10,000 nodes); the answer must not depend on the layout or the gather."""

from __future__ import annotations

import numpy as np
import pytest

from kai_cp.fit import _ROWWISE_BELOW, first_short, rows_fit


@pytest.mark.parametrize("seed", range(8))
def test_rows_fit_is_the_plain_check_in_any_layout(seed: int) -> None:
    rng = np.random.default_rng(seed)
    arr = rng.integers(-3, 20, (500, 4)).astype(np.int64)
    vec = rng.integers(0, 12, 4).astype(np.int64) * (rng.random(4) < 0.7)
    rows = np.sort(rng.choice(500, int(rng.integers(0, 500)), replace=False))
    plain_rows = np.all(arr[rows][:, vec > 0] >= vec[vec > 0], axis=1)
    plain_all = np.all(arr[:, vec > 0] >= vec[vec > 0], axis=1)
    for layout in (np.ascontiguousarray(arr), np.asfortranarray(arr)):
        assert np.array_equal(rows_fit(layout, rows, vec), plain_rows)
        assert np.array_equal(rows_fit(layout, None, vec), plain_all)



@pytest.mark.parametrize("seed", range(8))
def test_first_short_is_the_first_column_below_the_request(seed: int) -> None:
    """first_short (the per-node first failure of a fit-error summary) against its definition,
    on the row-wise path (few nodes, or more than 8 columns) and the bit-per-column path."""
    rng = np.random.default_rng(seed)
    for width in (4, 9):
        arr = rng.integers(-3, 20, (1000, width)).astype(np.int64)
        vec = rng.integers(0, 12, width).astype(np.int64) * (rng.random(width) < 0.7)
        short = arr < vec
        plain = np.where(short.any(axis=1), short.argmax(axis=1), width)
        for n in (0, 5, _ROWWISE_BELOW - 1, _ROWWISE_BELOW, 700):
            rows = np.sort(rng.choice(1000, n, replace=False))
            for layout in (np.ascontiguousarray(arr), np.asfortranarray(arr)):
                assert np.array_equal(first_short(layout, rows, vec), plain[rows])
                assert np.array_equal(first_short(layout, None, vec), plain)
