"""Go `time.Duration` strings (metav1.Duration), e.g. queue `preemptMinRuntime: "10m"`.

Validated on load because Go refuses to decode an object with a malformed duration, so
KAI would never see such a Queue; kai-cp drops it with a warning instead of crashing
later. `duration_seconds` is exact (Fraction) so min-runtime comparisons do not round.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Annotated, Any


__all__ = ["Duration", "duration_seconds", "validate_duration"]

_UNITS = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "\u00b5s": Fraction(1, 10**6),  # micro sign
    "\u03bcs": Fraction(1, 10**6),  # Greek mu
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}
_PART_RE = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_MAX_NS = 2**63 - 1


def duration_seconds(text: str) -> Fraction:
    """Parse like Go's time.ParseDuration and return exact seconds. Raises ValueError."""
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string, got {type(text).__name__}")
    s = text
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return Fraction(0)
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total = Fraction(0)
    pos = 0
    while pos < len(s):
        m = _PART_RE.match(s, pos)
        if m is None or m.group(1) in ("", "."):
            raise ValueError(f"invalid duration {text!r}")
        total += Fraction(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if total * 10**9 > _MAX_NS:
        raise ValueError(f"invalid duration {text!r}: out of range")
    return sign * total


def validate_duration(v: Any) -> str:
    """Pydantic validator: keep the string, reject what Go would reject."""
    if not isinstance(v, str):
        raise ValueError(f"duration must be a string like '10m', got {type(v).__name__}")
    duration_seconds(v)
    return v


def __getattr__(name: str) -> Any:
    """`Duration`, the pydantic field type (a Go duration string, "90s", "1h30m"; use
    `duration_seconds` for its value), built on first use: the parser serves the lean load path
    too, which must not import pydantic (issue 9)."""
    if name == "Duration":
        from pydantic import PlainValidator, WithJsonSchema

        globals()[name] = value = Annotated[str, PlainValidator(validate_duration), WithJsonSchema({"type": "string"})]
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
