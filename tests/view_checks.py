"""What the lean views (kai_cp/podview.py, kai_cp/objectviews.py) must give: the same objects
with the same typed values as the pydantic models, the same warnings and left-out objects, the
same cluster state. Shared by tests/test_podview.py and tests/test_objectviews.py."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import msgspec

from pydantic import BaseModel

from kai_cp.loader import load_snapshot
from kai_cp.state import build_cluster_state
from models import RAW_OBJECT_KINDS

# Values a generated object may carry at one of its spots: right and wrong types, bad
# quantities, times and numbers.
BAD = ["", "x", 2, 1.5, -3, True, None, [], {}, ["a"], {"a": "b"}, {"a": 1}, "12Gx", "1e999", "100m",
       "2025-01-01T00:00:00Z", "2025-13-01T00:00:00Z", "yesterday", 2**70]

# Extras of the models the scheduler reads by their JSON name, declared on the views.
EXTRAS = {"PodGroupSpec": ("stalenessGracePeriod",), "PodGroupStatus": ("schedulingConditions",)}


def load_both(path: Path):
    return load_snapshot(path), load_snapshot(path, views=True)


def assert_same_typed(model, view, path: str = "pod") -> None:
    """Every typed field of the pydantic model reads the same (value and type) on the view."""
    if isinstance(model, BaseModel):
        for name in type(model).model_fields:
            assert_same_typed(getattr(model, name), getattr(view, name), f"{path}.{name}")
        for name in EXTRAS.get(type(model).__name__, ()):
            assert getattr(model, name, None) == getattr(view, name, None), (path, name)
    elif isinstance(model, list):
        assert isinstance(view, list) and len(view) == len(model), path
        for i, (m, v) in enumerate(zip(model, view)):
            assert_same_typed(m, v, f"{path}[{i}]")
    elif isinstance(model, dict):
        assert isinstance(view, dict) and list(view) == list(model), path
        for k in model:
            assert_same_typed(model[k], view[k], f"{path}[{k}]")
    else:
        assert type(view) is type(model) and view == model, (path, model, view)


def state_summary(loaded) -> tuple:
    """What a cycle decides from, in comparable form."""
    s = build_cluster_state(loaded)
    tasks = [(t.uid, t.name, t.namespace, t.job, t.podset, t.status, t.node, repr(t.request), t.order_key,
              t.predicate_key, t.gpu_groups, t.nominated_node, t.scheduler_name, t.utility) for t in s.tasks]
    jobs = {k: (j.problems, j.notes, j.priority, j.queue, repr(j.scope)) for k, j in s.jobs.items()}
    queues = {k: (dict(q.allocated), dict(q.request), dict(q.fair_share)) for k, q in s.queues.items()}
    return (tasks, jobs, queues, s.warnings, dict(s.total), s.orphan_groups, sorted(s.legacy_mig_nodes),
            sorted((repr(k), v) for k, v in s.workload.items()), [repr(n) for n in s.nodes])


def assert_same_load(path: Path) -> None:
    models, views = load_both(path)
    assert views.warnings == models.warnings
    assert views.raw_invalid == models.raw_invalid
    for info in RAW_OBJECT_KINDS:
        attr = _ATTRS[info.key]
        m_objs, v_objs = getattr(models.snapshot.raw_objects, attr), getattr(views.snapshot.raw_objects, attr)
        assert len(v_objs) == len(m_objs), info.key
        for m, v in zip(m_objs, v_objs):
            assert_same_typed(m, v, info.key)
    assert state_summary(views) == state_summary(models)


_ATTRS = {info.key: "".join("_" + c.lower() if c.isupper() else c for c in info.key) for info in RAW_OBJECT_KINDS}


def inner_class(tp, base: type):
    """The first subclass of `base` inside a type annotation (Optional, list, Annotated, ...)."""
    if isinstance(tp, type) and issubclass(tp, base):
        return tp
    for arg in typing.get_args(tp):
        found = inner_class(arg, base)
        if found is not None:
            return found
    return None


def put(obj, spot: tuple, value) -> None:
    for part in spot[:-1]:
        if isinstance(part, int):
            if not isinstance(obj, list) or len(obj) <= part:
                return
            obj = obj[part]
        else:
            if not isinstance(obj, dict):
                return
            obj = obj.setdefault(part, {})
    if isinstance(obj, dict) and not isinstance(spot[-1], int):
        obj[spot[-1]] = value


def assert_view_types_the_model(model: type, view: type) -> None:
    """A field the model types but the view does not would let a view accept what the model
    refuses; a different JSON name would read another key; a view field that is optional where
    the model's is required, or typed Any where the model's is not, accepts more. Nested models
    are checked against the nested views."""
    pending = [(model, view)]
    while pending:
        model, view = pending.pop()
        fields = {f.name: f for f in msgspec.structs.fields(view)}
        for name, info in model.model_fields.items():
            assert name in fields, f"{view.__name__} lacks {name}"
            assert fields[name].encode_name == (info.alias or name), (view.__name__, name)
            assert fields[name].required == info.is_required(), (view.__name__, name)
            if is_any(fields[name].type):
                assert is_any(info.annotation), (view.__name__, name)
            sub = inner_class(info.annotation, BaseModel)
            if sub is not None:
                sub_view = inner_class(fields[name].type, msgspec.Struct)
                assert sub_view is not None, (view.__name__, name)
                pending.append((sub, sub_view))


def is_any(tp) -> bool:
    """Any, or Optional[Any] (Annotated metadata aside)."""
    if tp is Any:
        return True
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return typing.get_origin(tp) in (typing.Union, typing.Annotated) and bool(args) and is_any(args[0])
