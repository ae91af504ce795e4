"""Kubernetes resource quantities, parsed exactly.

A `Quantity` stays the string the API server sent (so a snapshot written back is the
same JSON), but it is checked on load against Kubernetes' quantity grammar: an object
carrying `"12Gx"` is rejected by pydantic with the field path, the way the API server
would never have accepted it. The helpers turn a quantity into exact integers/fractions:
capacity arithmetic in kai-cp never goes through floats, because KAI compares
millicores, bytes and GPU portions exactly and float rounding would flip fit decisions.

`kubernetes.utils.parse_quantity` is used as a second opinion only: it accepts inputs
Kubernetes rejects ("NaN", "Infinity", "1_000", non-ASCII digits) and multiplies under
a 28-digit Decimal context, so the exact value is computed here from the grammar.
"""

from __future__ import annotations

import re
from decimal import Context, Decimal, Inexact, Rounded
from fractions import Fraction
from functools import lru_cache
from typing import Any, Union

from .cache import remember

__all__ = [
    "Quantity",
    "QuantityLike",
    "validate_quantity",
    "to_decimal",
    "to_fraction",
    "cpu_millis",
    "to_int_ceil",
]

# Kubernetes grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go):
#   <quantity> ::= <signedNumber><suffix>
#   <number>   ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
#   <suffix>   ::= Ki|Mi|Gi|Ti|Pi|Ei | n|u|m|""|k|M|G|T|P|E | (e|E)<signedNumber>
_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<bin>[KMGTPE]i)|(?P<dec>[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?",
    re.ASCII,
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Bounds that keep exact arithmetic cheap: Kubernetes stores values in int64 (bytes,
# millicores), so anything of magnitude >= 2**63 is out of range anyway; exponents are
# bounded so "1e-999999999" cannot make Fraction() build a billion-digit denominator.
_MAX_ABS = Fraction(2**63)
_MAX_EXP = 64
_MAX_LEN = 256

QuantityLike = Union[str, int, Decimal]


def _parse_exact(text: str) -> tuple[Fraction, Decimal]:
    """Parse `text` per the Kubernetes grammar into (exact Fraction, exact Decimal).

    Raises ValueError with a human-readable reason when the text is not a quantity.
    """
    if len(text) > _MAX_LEN:
        raise ValueError(f"invalid quantity: longer than {_MAX_LEN} characters")
    m = _QUANTITY_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid quantity {text!r}")
    if m["exp"] is not None:
        exp10, exp2 = int(m["exp"]), 0
    elif m["dec"] is not None:
        exp10, exp2 = _DECIMAL[m["dec"]], 0
    elif m["bin"] is not None:
        exp10, exp2 = 0, _BINARY[m["bin"]]
    else:
        exp10, exp2 = 0, 0
    if abs(exp10) > _MAX_EXP:
        raise ValueError(f"invalid quantity {text!r}: exponent out of range")
    try:
        mantissa = Decimal(m["sign"] + m["num"])  # exact: Decimal(str) never rounds
        digits = len(mantissa.as_tuple().digits)
        ctx = Context(prec=digits + 40, traps=[Inexact, Rounded])
        value = ctx.multiply(mantissa.scaleb(exp10, ctx), Decimal(2**exp2))
    except ArithmeticError as exc:  # cannot happen with the bounds above; stay a ValueError
        raise ValueError(f"invalid quantity {text!r}: {exc}") from None
    frac = Fraction(value)
    if abs(frac) >= _MAX_ABS:
        raise ValueError(f"invalid quantity {text!r}: value out of range")
    return frac, value


@lru_cache(maxsize=1 << 16)
def _exact(text: str) -> tuple[Fraction, Decimal]:
    return _parse_exact(text)


# Quantity texts already accepted. Loading calls the validator once per quantity (a
# 10,000-node snapshot has ~350,000), nearly always with a text seen before: a dict hit
# skips the type checks and the LRU wrapper. Only exact `str` keys are stored, so a number
# (2 == 2.0, True == 1) never matches a key. Emptied when full.
_KNOWN: dict[str, str] = {}
_KNOWN_MAX = 1 << 16


def validate_quantity(value: Any) -> str:
    """Pydantic validator: accept a JSON string or number, return the canonical string.

    Numbers are accepted because hand-written snapshots use them (the API server always
    writes strings); they are stored as their decimal text. Booleans are refused.
    """
    try:
        known = _KNOWN.get(value)
    except TypeError:  # unhashable (a list, a dict): rejected below
        known = None
    if known is not None:
        return known
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise ValueError(f"quantity must be a string or a number, got {type(value).__name__}")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"invalid quantity {value!r}")
        text = repr(value)
    else:
        text = str(value)
    text = _check_text(text)
    if type(value) is str:
        remember(_KNOWN, _KNOWN_MAX, value, text)
    return text


def _load_parse_quantity() -> Any:
    """The Kubernetes client's `parse_quantity`, without importing the client.

    `import kubernetes.utils` runs the package's `__init__`, which imports the whole API
    client and its config loaders (~0.3 s of start-up, more than a small snapshot's whole
    cycle). The quantity module itself needs only `decimal`, so it is loaded from the
    installed package's file as a module of its own; where that fails (another layout),
    the normal import is used."""
    try:
        import importlib.util
        import os

        spec = importlib.util.find_spec("kubernetes")   # locates the package, runs nothing
        folder = list(spec.submodule_search_locations or [])[0] if spec else None
        path = os.path.join(folder, "utils", "quantity.py") if folder else None
        mod_spec = importlib.util.spec_from_file_location("_kai_cp_kubernetes_quantity", path) if path else None
        if mod_spec is None or mod_spec.loader is None:
            raise ImportError("kubernetes/utils/quantity.py not found")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
        return module.parse_quantity
    except Exception:  # noqa: BLE001 - any failure: the ordinary import
        from kubernetes.utils import parse_quantity

        return parse_quantity


_PARSE_QUANTITY: Any = None


@lru_cache(maxsize=1 << 16)
def _check_text(text: str) -> str:
    global _PARSE_QUANTITY
    _exact(text)
    if _PARSE_QUANTITY is None:
        _PARSE_QUANTITY = _load_parse_quantity()
    parse_quantity = _PARSE_QUANTITY
    try:
        parse_quantity(text)  # second opinion: the Kubernetes client agrees it parses
    except (ValueError, ArithmeticError) as exc:
        raise ValueError(f"invalid quantity {text!r}: {exc}") from None
    return text


def __getattr__(name: str) -> Any:
    """`Quantity`, the pydantic field type ("500m", "1Gi", "2": a str after validation), built
    on first use: the parsing functions here serve the lean load path too, which must not import
    pydantic (issue 9)."""
    if name == "Quantity":
        from typing import Annotated

        from pydantic import PlainValidator, WithJsonSchema

        globals()[name] = value = Annotated[
            str,
            PlainValidator(validate_quantity),
            WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}]}),
        ]
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fraction(q: QuantityLike) -> Fraction:
    if isinstance(q, bool):
        raise TypeError("a bool is not a quantity")
    if isinstance(q, int):
        return Fraction(q)
    if isinstance(q, Decimal):
        if not q.is_finite():
            raise ValueError(f"invalid quantity {q!r}")
        return Fraction(q)
    if isinstance(q, str):
        return _exact(q)[0]
    raise TypeError(f"quantity must be str, int or Decimal, not {type(q).__name__}")


def _round_away_from_zero(f: Fraction) -> int:
    """Round to an integer away from zero, as Quantity.Value()/MilliValue() do in Go."""
    n, d = f.numerator, f.denominator
    q = -((-abs(n)) // d)  # ceil(|f|)
    return q if n >= 0 else -q


def to_fraction(q: QuantityLike) -> Fraction:
    """Exact value of a quantity, e.g. "1.5" -> Fraction(3, 2) (GPUs, portions)."""
    return _fraction(q)


def to_decimal(q: QuantityLike) -> Decimal:
    """Exact value of a quantity as a Decimal, e.g. "1Ki" -> Decimal(1024)."""
    if isinstance(q, str):
        return _exact(q)[1]
    if isinstance(q, bool):
        raise TypeError("a bool is not a quantity")
    if isinstance(q, (int, Decimal)):
        _fraction(q)
        return Decimal(q)
    raise TypeError(f"quantity must be str, int or Decimal, not {type(q).__name__}")


def cpu_millis(q: QuantityLike) -> int:
    """Millicores as Kubernetes MilliValue(): value*1000 rounded up (away from zero)."""
    return _round_away_from_zero(_fraction(q) * 1000)


def to_int_ceil(q: QuantityLike) -> int:
    """Integer value as Kubernetes Value(): rounded up (away from zero). Bytes, counts."""
    return _round_away_from_zero(_fraction(q))
