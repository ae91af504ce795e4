"""Shared pydantic configuration and field types for all Kubernetes/KAI models.

Why these choices:
* camelCase aliases + `extra="allow"`: objects are plain API-server JSON, and a snapshot
  read then written back must be the same JSON, unknown fields included.
* Strict scalars: the API server never sends `"3"` for an int32 or `1` for a string;
  coercing would silently change the JSON on write-back and hide broken objects.
* `null` for a list/map/struct field means "empty" (Go's encoding/json decodes it to the
  zero value), so `Null*` validators turn it into the default instead of rejecting the
  whole object.
* Times keep the exact text they were read from, for byte-exact round trips.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    model_serializer,
)
from pydantic.alias_generators import to_camel

from .cache import remember

__all__ = [
    "KubeModel",
    "Str",
    "Int",
    "Int32",
    "crd_schema",
    "Bool",
    "Number",
    "Time",
    "KubeTime",
    "NullList",
    "NullDict",
    "NullModel",
    "StrMap",
    "AnyDict",
]


class KubeModel(BaseModel):
    """Base of every model: camelCase JSON, snake_case attributes, unknown fields kept."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        validate_assignment=False,
    )

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """With exclude_unset, also write defaulted collections/structs that were changed
        in place (`pod.status.phase = "Running"` on a pod read without `status`,
        `pod.metadata.labels[k] = v` on one read without labels): pydantic only tracks
        assignments on the object itself, so such changes would otherwise be lost."""
        if info.exclude_unset:
            _mark_changed_defaults(self)
            if self.__pydantic_extra__:
                _unmark_shadowed_extras(self)
        return handler(self)


_MUTABLE_DEFAULTS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _mutable_defaults(cls: type[KubeModel]) -> tuple[tuple[str, Any], ...]:
    found = _MUTABLE_DEFAULTS.get(cls)
    if found is None:
        found = tuple(
            (name, f.default_factory)
            for name, f in cls.model_fields.items()
            if f.default_factory is not None
        )
        _MUTABLE_DEFAULTS[cls] = found
    return found


def _is_changed(value: Any, factory: Any) -> bool:
    if isinstance(value, KubeModel):
        if value.__pydantic_fields_set__ or value.__pydantic_extra__:
            return True
        return any(
            name in value.__dict__ and _is_changed(value.__dict__[name], fac)
            for name, fac in _mutable_defaults(type(value))
        )
    return bool(value != factory())


def _unmark_shadowed_extras(model: KubeModel) -> None:
    """Keep write-back exact when the JSON has an unknown snake_case key equal to a
    field's Python name (e.g. "node_name"): the loader validates by alias only, so that
    key is an extra, but pydantic also marks the field as set, which would make the dump
    emit a spurious `"nodeName": null`. Done at dump time to keep loading fast."""
    fields = type(model).model_fields
    fields_set = model.__pydantic_fields_set__
    for key in model.__pydantic_extra__.keys() & fields.keys():
        if key in fields_set:
            default = fields[key].get_default(call_default_factory=True)
            if model.__dict__.get(key) == default:
                fields_set.discard(key)


def _mark_changed_defaults(model: KubeModel) -> None:
    fields_set = model.__pydantic_fields_set__
    for name, factory in _mutable_defaults(type(model)):
        if name not in fields_set and _is_changed(model.__dict__.get(name), factory):
            fields_set.add(name)


def new_list() -> list:
    """`default_factory` for list fields. A Python function, not the `list` builtin: pydantic
    reads each factory's signature when it builds a model class, and a builtin's signature is
    parsed from its text (~0.25 ms each, ~15 ms of every import of the models, issue 9)."""
    return []


def new_dict() -> dict:
    """`default_factory` for map fields (see new_list)."""
    return {}


Str = StrictStr
Int = StrictInt
Bool = StrictBool
Int32 = Annotated[StrictInt, WithJsonSchema({"type": "integer", "format": "int32"})]
"""An int32 of KAI's API: a plain int when loading; `format: int32` in the generated CRD."""


def crd_schema(**facets: Any) -> dict[str, Any]:
    """`json_schema_extra` for the generated CRDs only (integration/crdgen.py): the validation
    KAI's own CRDs apply (enum, minimum, pattern, x-kubernetes-validations, ...), so kai-cp's CRDs
    reject what KAI's reject. Loading does not enforce them: a snapshot is read as it is."""
    return {k.replace("_", "-") if k.startswith("x_") else k: v for k, v in facets.items()}


def _none_to_list(v: Any) -> Any:
    return [] if v is None else v


def _none_to_dict(v: Any) -> Any:
    return {} if v is None else v


NullList = BeforeValidator(_none_to_list)
"""Annotated marker: JSON null for a list field means []."""
NullDict = BeforeValidator(_none_to_dict)
"""Annotated marker: JSON null for a map field means {}."""
NullModel = BeforeValidator(_none_to_dict)
"""Annotated marker: JSON null for a struct field means the empty struct."""

StrMap = Annotated[dict[str, StrictStr], NullDict]
AnyDict = dict[str, Any]


def _validate_number(v: Any) -> int | float:
    """A JSON number kept as given: ints stay ints (so write-back is identical)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"must be a number, got {type(v).__name__}")
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        raise ValueError("must be a finite number")
    return v


Number = Annotated[
    int | float,
    PlainValidator(_validate_number),
    WithJsonSchema({"type": "number"}),
]


class KubeTime(datetime):
    """A timezone-aware datetime that remembers the RFC 3339 text it was parsed from.

    Arithmetic and `replace()` return instances without the text, which then serialise
    in Kubernetes' canonical form (`2006-01-02T15:04:05Z`).
    """

    __slots__ = ("_raw",)


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


def _validate_time(v: Any) -> datetime:
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
            t._raw = v
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
    t._raw = v
    return t


def _serialize_time(t: datetime) -> str:
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


Time = Annotated[
    datetime,
    PlainValidator(_validate_time),
    PlainSerializer(_serialize_time, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A metav1.Time: an aware datetime in Python, its original text in JSON."""
