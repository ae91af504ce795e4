"""Progress bars for runs of many cycles (`kai-cp simulate`, notebook simulations).

tqdm's notebook widget needs ipywidgets; without it tqdm warns and prints nothing useful, so
the text bar (on stderr, which notebooks render too) is used instead.
"""

from __future__ import annotations

import importlib.util
from typing import Iterable, TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], *, total: int | None = None, desc: str = "", enabled: bool = True,
             delay: float = 0.0) -> Iterable[T]:
    """`items`, with a bar when `enabled`; `delay`: seconds before the bar appears (short runs
    stay quiet)."""
    if not enabled:
        return items
    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(items, total=total, desc=desc, unit="cycle", delay=delay)
