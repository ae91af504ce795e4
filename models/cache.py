"""Bounded memo tables for validation: snapshots repeat the same few quantity and time
strings thousands of times, so remembering accepted ones skips their checks."""

from __future__ import annotations

from typing import TypeVar

V = TypeVar("V")


def remember(cache: dict[str, V], maxsize: int, key: str, value: V) -> None:
    """Store `value`, starting afresh when full (bounded memory, no eviction bookkeeping)."""
    if len(cache) >= maxsize:
        cache.clear()
    cache[key] = value
