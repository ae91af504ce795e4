"""rows_fit (kai_cp/fit.py) against its plain definition, on the session's column-major arrays
and on row-major ones.

Why: the session keeps idle/releasing/free column-major and rows_fit gathers a column before its
rows (twice as fast at 10,000 nodes); the answer must not depend on the layout or the gather."""

from __future__ import annotations

import numpy as np
import pytest

from kai_cp.fit import rows_fit


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

