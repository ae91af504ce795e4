"""RFC 3339 times as Kubernetes writes them (metav1.Time), without pydantic.

Why a module of its own: the lean views of `kai-cp solve` (kai_cp/podview.py,
kai_cp/objectviews.py) parse times exactly as the models do, and must not import pydantic to
do so (~0.1 s of every start, issue 9). models/base.py builds the pydantic `Time` type on these.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from .cache import remember

__all__ = ["KubeTime", "parse_time", "serialize_time"]


class KubeTime(datetime):
    """A timezone-aware datetime that remembers the RFC 3339 text it was parsed from.

    Arithmetic and `replace()` return instances without the text, which then serialise
    in Kubernetes' canonical form (`2006-01-02T15:04:05Z`).
    """

    __slots__ = ("_raw", "epoch")

    # `epoch`: the seconds since the epoch, set where the text is parsed: one parse serves every
    # object of the same time (the cache below), and the scheduler orders ~100,000 pods by it
    # (`timestamp()` per pod was ~0.1 s of a 10,000-node state build).


_TIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})?",
    re.ASCII,
)


# Parsed times by their text. Snapshots repeat the same timestamps many times, and one
# call per field is on the hot path of loading (a dict hit costs ~0.1 us, a parse ~1 us).
# KubeTime is immutable, so sharing one instance between objects is safe. Bounded: the
# cache is emptied when full, so a long-running process cannot grow it without limit.
_TIME_CACHE: dict[str, "KubeTime"] = {}
_TIME_CACHE_MAX = 1 << 18


def parse_time(v: Any) -> datetime:
    """Parse RFC 3339 (as metav1.Time/MicroTime); naive values are taken as UTC."""
    try:
        t = _TIME_CACHE.get(v)
    except TypeError:  # unhashable (a list, a dict): rejected below
        t = None
    if t is None:
        if isinstance(v, datetime):
            return v if v.tzinfo is not None else v.replace(tzinfo=timezone.utc)
        if not isinstance(v, str):
            raise ValueError(f"must be an RFC 3339 time string, got {type(v).__name__}")
        t = _parse_time(v)
        if type(v) is str:
            remember(_TIME_CACHE, _TIME_CACHE_MAX, v, t)
    return t


def _parse_time(v: str) -> KubeTime:
    if (
        len(v) == 20 and v[19] == "Z" and v[10] == "T" and v[4] == "-" and v[7] == "-"
        and v[13] == ":" and v[16] == ":"
    ):
        # The API server's form "2006-01-02T15:04:05Z": the C parser accepts it exactly
        # when the regex below does (ASCII digits in the other places) and gives the
        # same value. Anything it refuses goes the general way, for the same message.
        try:
            t = KubeTime.fromisoformat(v)
        except ValueError:
            pass
        else:
            t._raw, t.epoch = v, t.timestamp()
            return t
    m = _TIME_RE.fullmatch(v)
    if m is None:
        raise ValueError(f"invalid RFC 3339 time {v!r}")
    year, month, day, hour, minute, second, frac, tz = m.groups()
    micros = int((frac[1:] + "000000")[:6]) if frac else 0
    if not tz or tz in "Zz":
        tzinfo = timezone.utc
    else:
        sign = 1 if tz[0] == "+" else -1
        hours, mins = int(tz[1:3]), int(tz[4:6])
        if hours > 23 or mins > 59:
            raise ValueError(f"invalid RFC 3339 time {v!r}: bad offset")
        tzinfo = timezone(sign * timedelta(hours=hours, minutes=mins))
    try:
        t = KubeTime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micros,
            tzinfo=tzinfo,
        )
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"invalid RFC 3339 time {v!r}: {exc}") from None
    t._raw, t.epoch = v, t.timestamp()
    return t


def serialize_time(t: datetime) -> str:
    raw = getattr(t, "_raw", None) if isinstance(t, KubeTime) else None
    if raw is not None:
        return raw
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    t = t.astimezone(timezone.utc)
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.microsecond:
        text += f".{t.microsecond:06d}".rstrip("0")
    return text + "Z"
