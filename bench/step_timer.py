"""Seconds per named step, for the measurement tools that time a function where the code calls
it (bench/bench_build.py, bench/bench_decode.py)."""

from __future__ import annotations

import functools
import time
from typing import Callable


def timed(totals: dict[str, float], label: str, inner: Callable) -> Callable:
    """`inner`, adding each call's seconds to `totals[label]`."""
    @functools.wraps(inner)
    def run(*args, **kwargs):
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            totals[label] = totals.get(label, 0.0) + time.perf_counter() - t
    return run
