"""Pause Python's cyclic garbage collector around allocation-heavy phases.

Building a cluster state or running a cycle allocates hundreds of thousands of small objects
and no reference cycles worth collecting; the collector's repeated full scans otherwise cost
more than the work itself (measured 3x on a 10,000-node snapshot).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
