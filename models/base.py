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

from datetime import datetime
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

from .times import KubeTime, parse_time, serialize_time

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


Time = Annotated[
    datetime,
    PlainValidator(parse_time),
    PlainSerializer(serialize_time, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A metav1.Time: an aware datetime in Python, its original text in JSON."""
