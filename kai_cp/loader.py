"""Read (and write back) KAI snapshots: a ZIP holding `snapshot.json`, or that JSON itself.

Two failure levels (interfaces.md section 4):
* the file as a whole is unusable -> `SnapshotError` (the CLI prints it, exit code 2);
* one object is unusable -> it is left out of the typed lists, an `ObjectWarning` names
  it, and its raw dict is kept in `raw_invalid` so the engine can still report its job
  as unschedulable. One bad object never prevents loading the others, as in a cluster.

The format is chosen by content (ZIP magic bytes), never by file name.

Speed: a 10,000-node snapshot is ~250 MB of JSON and ~5 million Python objects. The cyclic
garbage collector is paused while loading (it would otherwise rescan the growing heap
hundreds of times: ~35 s instead of ~6 s for that snapshot), and after a big load the
loaded objects are moved to the collector's permanent generation (`gc.freeze()`), so
later collections do not rescan them either. They are still freed by reference counting
when dropped; the loaded objects hold no reference cycles. Objects are validated a chunk
per pydantic call (see `_load_list`). Figures: bench/bench_load.py.

`kai-cp solve` loads objects as views instead (`load_snapshot(views=True)`,
kai_cp/podview.py for pods, kai_cp/objectviews.py for the other kinds): decoded from the JSON
straight into typed structs, without the dicts and the pydantic models; at 10,000 nodes load +
state 6.6 -> 3.8 CPU s, peak 2,037 -> 1,030 MiB (pods), and pydantic is not imported at all
where the views accept every object (the 48-node example's process 0.51 -> 0.42 s).
"""

from __future__ import annotations

import copy
import errno
import io
import json
import os
import re
import stat
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Union

from models.kinds import RAW_OBJECT_KINDS, RawKindInfo

from .errors import ObjectWarning, SnapshotError

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError

    from models import KubeObject, Snapshot

# pydantic and the models are imported where an object needs them, not here: `kai-cp solve`
# reads every object as a view (kai_cp/podview.py, kai_cp/objectviews.py) and, on a snapshot
# the views accept whole, never imports pydantic (issue 9).

try:
    from msgspec.json import decode as _msgspec_decode
except ImportError:  # pragma: no cover - msgspec is a dependency; the standard library still works
    _msgspec_decode = None
from .gcpause import gc_paused

__all__ = [
    "LoadedSnapshot",
    "load_snapshot",
    "load_snapshot_bytes",
    "load_snapshot_dict",
    "dump_snapshot",
    "write_snapshot",
    "write_json_atomic",
    "MAX_UNCOMPRESSED_BYTES",
]

PathLike = Union[str, "os.PathLike[str]"]

SNAPSHOT_MEMBER = "snapshot.json"
MAX_UNCOMPRESSED_BYTES = 2 * 1024**3  # refuse ZIP members that inflate beyond 2 GiB
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # local file header; empty archive
_MAX_WARNINGS_PER_OBJECT = 5
_TOP_LEVEL_KEYS = {"config", "schedulerParams", "rawObjects", "discovery"}
_KINDS_BY_KEY = {info.key: info for info in RAW_OBJECT_KINDS}
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Freeze what a load created when it allocated more than this many (net) objects; below
# it, the collector's next young-generation pass over them is cheap.
_FREEZE_MIN_OBJECTS = 100_000


def _gc_paused():
    """Pause the collector while loading; freeze a big load's objects afterwards."""
    return gc_paused(freeze_min_objects=_FREEZE_MIN_OBJECTS)


@dataclass
class LoadedSnapshot:
    """A parsed snapshot plus what had to be left out of it.

    raw_invalid: rawObjects key -> raw dicts of objects that failed validation (every
    key of RAW_OBJECT_KINDS is present, possibly with an empty list).
    """

    snapshot: Snapshot
    warnings: list[ObjectWarning] = field(default_factory=list)
    raw_invalid: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


# --------------------------------------------------------------------------- file level


def load_snapshot(path: PathLike, *, views: bool = False) -> LoadedSnapshot:
    """Load a snapshot file (ZIP or JSON, by content). Raises SnapshotError.

    The file's bytes and the parsed document are owned here, so each is dropped as soon as
    the next form exists (bytes after parsing, each chunk of raw dicts once validated): the
    peak holds the models plus one form of the input, not all three.

    `views`: objects become lean views decoded straight from the JSON (kai_cp/podview.py,
    kai_cp/objectviews.py: the fields the scheduler reads; same objects, same warnings) instead
    of pydantic models: ~2.5x faster and far smaller for big snapshots, and pydantic is not
    imported at all unless a view refuses an object, but such a snapshot cannot be written back
    (`dump_snapshot` refuses it). For a one-cycle run (`kai-cp solve`)."""
    name = os.fspath(path)
    data = _read_file(name)
    if name == STDIN:
        name = STDIN_NAME
    with _gc_paused():
        payload, where = _payload(data, name)
        del data
        if views:
            try:
                doc = _decode_with_views_json(payload)
                if doc is not None:
                    return _load_dict(doc, name, True)
            except _NotPlain:
                pass
        return _load_dict(_parse_json(payload, where), name, True)


#: The path that names standard input (`curl .../get-snapshot | kai-cp solve -`), and how
#: messages name it.
STDIN = "-"
STDIN_NAME = "standard input"


def _read_file(name: str) -> bytes:
    if name == STDIN:
        try:
            return sys.stdin.buffer.read()
        except (OSError, ValueError, AttributeError) as exc:   # closed, or no byte stream
            raise SnapshotError(STDIN_NAME, f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        with open(name, "rb") as f:
            return f.read()
    except OSError as exc:
        raise SnapshotError(name, f"cannot read file: {exc.strerror or exc}") from None


def load_snapshot_bytes(data: bytes, name: str) -> LoadedSnapshot:
    """Load a snapshot from bytes; `name` is used in messages. Raises SnapshotError."""
    with _gc_paused():
        return _load_bytes(data, name)


def _load_bytes(data: bytes, name: str) -> LoadedSnapshot:
    return _load_dict(_decode(data, name), name, True)


def _decode(data: bytes, name: str) -> Any:
    """The parsed JSON document of a snapshot file's bytes (ZIP or JSON)."""
    payload, where = _payload(data, name)
    del data
    return _parse_json(payload, where)


def _payload(data: bytes, name: str) -> tuple[bytes, str]:
    """The JSON bytes of a snapshot file's bytes (ZIP or JSON), and how to name them in messages."""
    if not data or data.isspace():
        raise SnapshotError(name, "file is empty")
    if data[:4] in _ZIP_MAGICS:
        return _read_zip_member(data, name), f"{name} ({SNAPSHOT_MEMBER} in ZIP)"
    if data[:2] == b"\x1f\x8b":
        raise SnapshotError(name, "is gzip-compressed; expected JSON or a ZIP archive")
    return data, name


def _read_zip_member(data: bytes, name: str) -> bytes:
    """Return the uncompressed bytes of snapshot.json, refusing zip bombs."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            info = _find_member(zf.infolist())
            if info is None:
                members = ", ".join(i.filename for i in zf.infolist()[:10]) or "none"
                raise SnapshotError(
                    name, f"ZIP archive has no {SNAPSHOT_MEMBER} (members: {members})"
                )
            if info.file_size > MAX_UNCOMPRESSED_BYTES:
                raise SnapshotError(name, _too_big(info.file_size))
            chunks, total = [], 0
            with zf.open(info) as member:
                while chunk := member.read(1 << 20):
                    total += len(chunk)
                    if total > MAX_UNCOMPRESSED_BYTES:
                        raise SnapshotError(name, _too_big(total))
                    chunks.append(chunk)
            return b"".join(chunks)
    except SnapshotError:
        raise
    except Exception as exc:  # zipfile raises many types (BadZipFile, zlib.error, EOFError, ...)
        raise SnapshotError(name, f"corrupt ZIP archive: {exc or type(exc).__name__}") from None


def _find_member(infos: list[zipfile.ZipInfo]) -> Optional[zipfile.ZipInfo]:
    """`snapshot.json` at the root, else a single `*/snapshot.json` (re-zipped folders)."""
    for info in infos:
        if info.filename == SNAPSHOT_MEMBER:
            return info
    nested = [i for i in infos if i.filename.endswith("/" + SNAPSHOT_MEMBER) and not i.is_dir()]
    return nested[0] if len(nested) == 1 else None


def _too_big(size: int) -> str:
    return (
        f"{SNAPSHOT_MEMBER} inflates to more than {size} bytes, over the "
        f"{MAX_UNCOMPRESSED_BYTES // 1024**3} GiB limit (refusing a possible zip bomb)"
    )


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a valid JSON value")


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _parse_json(payload: bytes, where: str) -> Any:
    """Strict UTF-8 JSON (no NaN/Infinity); errors say line and column.

    msgspec parses first: ~1.5x faster than the standard library on a 250 MB snapshot and
    ~15% less memory for the document (it shares repeated keys); bench/bench_load.py. It
    accepts the same documents except a BOM and lone surrogates in strings, and says
    neither line nor column, so whatever it refuses goes through the standard library,
    which gives the message (or accepts it)."""
    if _msgspec_decode is not None:
        try:
            return _msgspec_decode(payload)
        except MemoryError:
            raise
        except Exception:   # DecodeError, ValidationError (number out of range), UnicodeDecodeError
            pass
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = payload[exc.start : exc.start + 1].hex()
        raise SnapshotError(
            where, f"not valid UTF-8 JSON (byte 0x{bad} at offset {exc.start})"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_parse_float)
    except json.JSONDecodeError as exc:
        raise SnapshotError(
            where, f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    except RecursionError:
        raise SnapshotError(where, "not usable JSON: nested too deeply") from None
    except ValueError as exc:
        raise SnapshotError(where, f"not valid JSON: {exc}") from None


class _ViewsJSON(list):  # type: ignore[type-arg]
    """A rawObjects list still as JSON (a list, for the document's shape checks; empty itself):
    `_load_list` decodes it into views."""

    def __init__(self, raw: Any) -> None:
        super().__init__()
        self.raw = raw


class _DecodedViews(_ViewsJSON):
    """A rawObjects list already decoded into views that stand as they are (`_views_stand`); a
    `_ViewsJSON` still, so the load is one of views either way."""

    def __init__(self, views: list[Any]) -> None:
        super().__init__(None)
        self.views = views


class _NotPlain(Exception):
    """Raised by the pod-view path for JSON only the ordinary parse can judge (a number out of
    range, invalid UTF-8, a lone surrogate): the load starts again the ordinary way."""


def _plain_json(data: Any) -> Any:
    """msgspec's parse of (part of) a document, as `_parse_json` would give it, else _NotPlain."""
    import msgspec

    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        raise _NotPlain from None


def _decode_with_views_json(payload: bytes) -> Optional[dict[str, Any]]:
    """The document as `_parse_json` gives it, except that the rawObjects lists of the kinds
    with views (kai_cp/objectviews.VIEW_TYPES) are views already (`_DecodedViews`, where one pass
    over the payload vouches for every object) or stay JSON (`_ViewsJSON`). None where the document
    is not of the usual form (not JSON msgspec reads, unknown top-level keys, rawObjects not an
    object): the caller then parses it the ordinary way, which gives the same document or the
    same error.

    Known difference: msgspec checks the syntax of the JSON it skips (pod fields no model
    reads), not the range of its numbers: a number beyond float range there is an error the
    ordinary way and ignored here. Invalid UTF-8 is caught (checked below)."""
    import msgspec

    from .objectviews import VIEW_TYPES
    from .podview import SnapshotEnvelope

    if not payload.isascii() and not _valid_utf8(payload):
        return None
    doc = _decode_views_at_once(payload)
    if doc is not None:
        return doc
    try:
        envelope = msgspec.json.decode(payload, type=SnapshotEnvelope)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        # (nested past msgspec's depth, inside a pod as at the top: the ordinary parse says so)
        return None

    def lists(value: dict[str, Any]) -> dict[str, Any]:
        raw: dict[str, Any] = {}
        for kind, item in value.items():
            # A list of a kind with views stays JSON; anything else is parsed (and checked).
            is_list = bytes(memoryview(item)[:1]) == b"["
            raw[kind] = _ViewsJSON(item) if kind in VIEW_TYPES and is_list else _plain_json(item)
        return raw

    return _top_level(envelope, lists)


def _top_level(decoded: Any, lists: Callable[[Any], Optional[dict[str, Any]]]) -> Optional[dict[str, Any]]:
    """The document from a decoded top level (podview.SnapshotEnvelope or objectviews'
    whole-snapshot struct): the keys present, rawObjects read by `lists` (None: not this way)."""
    import msgspec

    doc: dict[str, Any] = {}
    for key in ("config", "schedulerParams", "rawObjects", "discovery"):
        value = getattr(decoded, key)
        if value is msgspec.UNSET:
            continue
        if key == "rawObjects" and value is not None:
            value = lists(value)
            if value is None:
                return None
        doc[key] = value
    return doc


def _decode_views_at_once(payload: bytes) -> Optional[dict[str, Any]]:
    """`_decode_with_views_json`'s document with the view lists already decoded (`_DecodedViews`),
    in one pass over the payload (objectviews.whole_snapshot_decoder); None where that pass
    cannot vouch for every object (a view refuses one, two share a name, a kind is wrong, a
    key is unknown): the list-by-list path then sorts them out, as if this one had not run."""
    import msgspec

    from .objectviews import VIEW_TYPES, whole_snapshot_decoder

    try:
        whole = whole_snapshot_decoder().decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        return None

    def lists(value: Any) -> Optional[dict[str, Any]]:
        raw: dict[str, Any] = {}
        for info in RAW_OBJECT_KINDS:
            item = getattr(value, info.key)
            if item is msgspec.UNSET:
                continue
            if info.key in VIEW_TYPES and item is not None:
                if not _views_stand(info, item):
                    return None
                item = _DecodedViews(item)
            elif item is not None and not (isinstance(item, list) and all(isinstance(o, dict) for o in item)):
                return None     # a list the loader reports on: in the document's order, by the other path
            raw[info.key] = item
        return raw

    return _top_level(whole, lists)


def _views_stand(info: RawKindInfo, views: list[Any]) -> bool:
    """Whether a decoded list of views is what the loader keeps as it is: no two objects of one
    name, no object of another kind."""
    keys = {(v.metadata.namespace or "", v.metadata.name) for v in views}
    return len(keys) == len(views) and {v.kind for v in views} <= {None, "", info.kind}


def _valid_utf8(payload: bytes) -> bool:
    """Whether the bytes are UTF-8, checked a piece at a time (no copy of the whole text)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    step = 1 << 24
    try:
        for start in range(0, len(payload), step):
            decoder.decode(payload[start : start + step], final=start + step >= len(payload))
    except UnicodeDecodeError:
        return False
    return True


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# ------------------------------------------------------------------------- document level


def load_snapshot_dict(doc: Any, name: str = "<dict>") -> LoadedSnapshot:
    """Validate an already-parsed snapshot document. Raises SnapshotError for a wrong
    shape; object-level problems become warnings."""
    with _gc_paused():
        return _load_dict(doc, name)


def _load_dict(doc: Any, name: str, consume: bool = False) -> LoadedSnapshot:
    """`consume`: the document is ours, its raw dicts may be dropped once validated."""
    if not isinstance(doc, dict):
        raise SnapshotError(
            name,
            f"the JSON document is {_json_type(doc)}, expected an object with "
            "config, schedulerParams and rawObjects",
        )
    for key in ("config", "schedulerParams"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            raise SnapshotError(name, f"{key} must be an object or null, got {_json_type(doc[key])}")
    raw = doc.get("rawObjects")
    if raw is None:
        raw = {}
    elif not isinstance(raw, dict):
        raise SnapshotError(name, f"rawObjects must be an object, got {_json_type(raw)}")
    for key, value in raw.items():
        if key in _KINDS_BY_KEY and value is not None and not isinstance(value, list):
            raise SnapshotError(
                name, f"rawObjects.{key} must be a list, got {_json_type(value)}"
            )

    warnings: list[ObjectWarning] = []
    raw_invalid: dict[str, list[dict[str, Any]]] = {info.key: [] for info in RAW_OBJECT_KINDS}
    raw_objects: dict[str, Any] = {}
    for key, value in raw.items():
        info = _KINDS_BY_KEY.get(key)
        if info is None:
            warnings.append(
                ObjectWarning("Snapshot", f"rawObjects.{_path_key(key)}", "unknown object list, ignored")
            )
            raw_objects[key] = value
            continue
        raw_objects[key] = _load_list(info, [] if value is None else value, warnings, raw_invalid[key], consume)
    viewed = any(isinstance(v, _ViewsJSON) for v in raw.values())

    top: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "rawObjects":
            continue
        if key == "discovery" and value is not None and not isinstance(value, dict):
            warnings.append(
                ObjectWarning("Snapshot", "discovery", f"must be an object, got {_json_type(value)}; ignored")
            )
            continue
        if key not in _TOP_LEVEL_KEYS:
            warnings.append(ObjectWarning("Snapshot", _path_key(key), "unknown top-level key, ignored"))
        top[key] = value
    if viewed:
        # Views (and the few models of objects the views refused) are not validated again:
        # the document's shape was checked above, which is all the models would check here.
        from .objectviews import RawObjectsView, SnapshotView

        snapshot: Any = SnapshotView(config=top.get("config"), scheduler_params=top.get("schedulerParams"),
                                     raw_objects=RawObjectsView.of(raw_objects), discovery=top.get("discovery"))
        return LoadedSnapshot(snapshot=snapshot, warnings=warnings, raw_invalid=raw_invalid)
    from pydantic import ValidationError

    from models import RawObjects, Snapshot

    try:
        if "rawObjects" in doc:
            top["rawObjects"] = RawObjects.model_validate(raw_objects, by_alias=True, by_name=False)
        snapshot = Snapshot.model_validate(top, by_alias=True, by_name=False)
    except ValidationError as exc:  # not expected after the checks above; keep the contract
        raise SnapshotError(name, f"invalid snapshot: {exc.errors()[0]['msg']}") from None
    return LoadedSnapshot(snapshot=snapshot, warnings=warnings, raw_invalid=raw_invalid)


def _load_list(
    info: RawKindInfo,
    items: list[Any],
    warnings: list[ObjectWarning],
    invalid: list[dict[str, Any]],
    consume: bool = False,
) -> list[Any]:
    """Validate each object on its own; drop (and report) the ones that fail.

    The hot path of loading. Objects are validated a chunk at a time with one pydantic
    call (`list[Model]`); a chunk that fails is redone object by object, which gives each
    bad object its own warnings exactly as if every object had been validated alone.
    After many failed chunks the rest of the list goes object by object directly. Kind
    and duplicate checks run per chunk, so warnings come in the objects' order."""
    if isinstance(items, _DecodedViews):
        return items.views
    if isinstance(items, _ViewsJSON):
        return _load_views(info, items.raw, warnings, invalid)
    if not info.modelled:
        out = [obj for obj in items if isinstance(obj, dict)]
        if len(out) != len(items):
            for index, obj in enumerate(items):
                if not isinstance(obj, dict):
                    warnings.append(_not_an_object(info, index, obj))
        return out
    from pydantic import ValidationError

    validate_chunk = _list_adapter(info.model).validate_python
    out: list[Any] = []
    seen: set[tuple[str, str]] = set()
    failed_chunks = 0
    for start in range(0, len(items), _CHUNK):
        chunk = items[start : start + _CHUNK]
        # Only plain JSON objects go through the list call: it would also accept model
        # instances, which a loaded document must not contain.
        if failed_chunks < _MAX_FAILED_CHUNKS and all(isinstance(o, dict) for o in chunk):
            try:
                models = validate_chunk(chunk, by_alias=True, by_name=False)
            except ValidationError:
                failed_chunks += 1
            else:
                _accept_chunk(info, start, chunk, models, out, seen, warnings, invalid)
                if consume:
                    del chunk, models
                    items[start : start + _CHUNK] = _NONES[: min(_CHUNK, len(items) - start)]
                continue
        _load_one_by_one(info, start, chunk, out, seen, warnings, invalid)
        if consume:     # the models exist now; free the chunk's raw dicts (not kept in `invalid`)
            del chunk
            items[start : start + _CHUNK] = _NONES[: min(_CHUNK, len(items) - start)]
    return out


# Objects validated per pydantic call, and failed chunks after which a list is validated
# object by object (a list with errors everywhere would otherwise be validated twice).
_CHUNK = 1000
_MAX_FAILED_CHUNKS = 8
_LIST_ADAPTERS: dict[type, "TypeAdapter[Any]"] = {}
_NONES: list[None] = [None] * _CHUNK


def _list_adapter(model: type["KubeObject"]) -> "TypeAdapter[Any]":
    adapter = _LIST_ADAPTERS.get(model)
    if adapter is None:
        from pydantic import TypeAdapter

        adapter = _LIST_ADAPTERS[model] = TypeAdapter(list[model])  # type: ignore[valid-type]
    return adapter


def _accept_chunk(
    info: RawKindInfo,
    start: int,
    chunk: list[Any],
    models: list[Any],
    out: list[Any],
    seen: set[tuple[str, str]],
    warnings: list[ObjectWarning],
    invalid: list[dict[str, Any]],
) -> None:
    """Keep a validated chunk, minus objects of another kind and duplicates."""
    keys = [(m.metadata.namespace or "", m.metadata.name) for m in models]
    key_set = set(keys)
    if (
        len(key_set) == len(keys)
        and seen.isdisjoint(key_set)
        and {m.kind for m in models} <= {None, "", info.kind}
    ):
        seen |= key_set
        out.extend(models)
        return
    for offset, (obj, model, key) in enumerate(zip(chunk, models, keys)):
        if model.kind and model.kind != info.kind:
            warnings.append(_wrong_kind(info, obj, start + offset, model.kind))
            invalid.append(obj)
        elif key in seen:
            warnings.append(_duplicate(info, obj, start + offset))
        else:
            seen.add(key)
            out.append(model)


def _load_one_by_one(
    info: RawKindInfo,
    start: int,
    chunk: list[Any],
    out: list[Any],
    seen: set[tuple[str, str]],
    warnings: list[ObjectWarning],
    invalid: list[dict[str, Any]],
) -> None:
    """Validate each object alone: its own warnings (with field paths), or its model."""
    from pydantic import ValidationError

    assert info.model is not None
    validate = info.model.__pydantic_validator__.validate_python
    for index, obj in enumerate(chunk, start):
        if not isinstance(obj, dict):
            warnings.append(_not_an_object(info, index, obj))
            continue
        kind = obj.get("kind")
        if isinstance(kind, str) and kind and kind != info.kind:
            warnings.append(_wrong_kind(info, obj, index, kind))
            invalid.append(obj)
            continue
        try:
            model: KubeObject = validate(obj, by_alias=True, by_name=False)
        except ValidationError as exc:
            warnings.extend(_validation_warnings(_identify(info, obj, index), obj, exc))
            invalid.append(obj)
            continue
        key = (model.metadata.namespace or "", model.metadata.name)
        if key in seen:
            warnings.append(_duplicate(info, obj, index))
            continue
        seen.add(key)
        out.append(model)


def _load_views(
    info: RawKindInfo, raw: Any, warnings: list[ObjectWarning], invalid: list[dict[str, Any]]
) -> list[Any]:
    """A JSON list of objects -> views, with `_load_list`'s outcome: the same objects kept, the
    same warnings in the same order. The whole list is decoded in one call; where that fails
    (an object the views cannot vouch for) or kinds/duplicates need sorting out, each object
    goes alone: a view, or else the pydantic path for that object (its warnings or model)."""
    import msgspec

    from .objectviews import decoders

    decode_one, decode_list = decoders(info.key)
    try:
        views: Optional[list[Any]] = decode_list.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
        views = None
    if views is not None and _views_stand(info, views):
        return views
    items = msgspec.json.decode(raw, type=list[msgspec.Raw])
    out: list[Any] = []
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(items):
        if views is not None:
            view = views[index]
        else:
            try:
                view = decode_one.decode(item)
            except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
                view = None
        if view is None:
            _load_one_by_one(info, index, [_plain_json(item)], out, seen, warnings, invalid)
            continue
        key = (view.metadata.namespace or "", view.metadata.name)
        if view.kind and view.kind != info.kind:
            obj = _plain_json(item)
            warnings.append(_wrong_kind(info, obj, index, view.kind))
            invalid.append(obj)
        elif key in seen:
            warnings.append(_duplicate(info, _plain_json(item), index))
        else:
            seen.add(key)
            out.append(view)
    return out


def _wrong_kind(info: RawKindInfo, obj: dict[str, Any], index: int, kind: str) -> ObjectWarning:
    return ObjectWarning(
        _identify(info, obj, index), "kind", f"kind {kind!r} in rawObjects.{info.key}, expected {info.kind}"
    )


def _duplicate(info: RawKindInfo, obj: dict[str, Any], index: int) -> ObjectWarning:
    return ObjectWarning(_identify(info, obj, index), "metadata.name", "duplicate object; the first one is used")


def _not_an_object(info: RawKindInfo, index: int, obj: Any) -> ObjectWarning:
    return ObjectWarning(
        f"{info.kind}/rawObjects.{info.key}[{index}]", "", f"expected an object, got {_json_type(obj)}"
    )


def _identify(info: RawKindInfo, obj: dict[str, Any], index: int) -> str:
    """`Kind/namespace/name` (or `Kind/name`) from a raw dict, even an invalid one."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        return f"{info.kind}/rawObjects.{info.key}[{index}]"
    if isinstance(ns, str) and ns:
        return f"{info.kind}/{ns}/{name}"
    return f"{info.kind}/{name}"


def _validation_warnings(ident: str, obj: dict[str, Any], exc: "ValidationError") -> list[ObjectWarning]:
    errors = exc.errors(include_url=False)
    out = []
    for err in errors[:_MAX_WARNINGS_PER_OBJECT]:
        out.append(ObjectWarning(ident, render_field_path(obj, err["loc"]), _reason(err)))
    extra = len(errors) - _MAX_WARNINGS_PER_OBJECT
    if extra > 0:
        last = out[-1]
        out[-1] = ObjectWarning(last.object, last.field, f"{last.reason} (and {extra} more problems)")
    return out


def _reason(err: dict[str, Any]) -> str:
    """Pydantic's message, with the offending value for type errors."""
    msg = str(err.get("msg", "invalid"))
    if msg.startswith("Value error, "):
        return msg[len("Value error, ") :]
    if err.get("type") == "missing":
        return msg
    value = err.get("input")
    if value is None or isinstance(value, (str, int, float, bool)):
        shown = json.dumps(value)
        return f"{msg}, got {shown[:60] + '...' if len(shown) > 60 else shown}"
    return f"{msg}, got {_json_type(value)}"


def _path_key(key: str) -> str:
    return key if _IDENT_RE.fullmatch(key) else f"[{key}]"


def render_field_path(obj: Any, loc: Iterable[Union[str, int]]) -> str:
    """Render a pydantic error location against the raw object, Kubernetes style:
    ('spec','containers',0,'resources','requests','cpu') -> spec.containers[0].resources.requests.cpu.
    Map keys that are not identifiers are bracketed: requests[nvidia.com/gpu]. Location
    parts that do not exist in the raw JSON (validator tags) are skipped."""
    out = ""
    cur: Any = obj
    for part in loc:
        if isinstance(part, int):
            if isinstance(cur, list):
                out += f"[{part}]"
                cur = cur[part] if 0 <= part < len(cur) else None
            continue
        if isinstance(cur, dict):
            piece = _path_key(part)
            out += piece if (not out or piece.startswith("[")) else "." + piece
            cur = cur.get(part)
    return out


# ----------------------------------------------------------------------------- writing


def dump_snapshot(
    snapshot: "Snapshot", raw_invalid: Optional[dict[str, list[dict[str, Any]]]] = None
) -> dict[str, Any]:
    """The snapshot as JSON-ready dict in the input format (exact round trip).

    With `raw_invalid`, the objects left out at load time are appended back so a written
    snapshot loses nothing (they will be reported again when it is loaded).
    """
    from models import KubeObject, Snapshot

    if not isinstance(snapshot, Snapshot) or any(not isinstance(p, KubeObject) for p in snapshot.raw_objects.pods):
        raise ValueError("a snapshot loaded with views cannot be written back; load it without them")
    doc = snapshot.to_json()
    if raw_invalid and any(raw_invalid.values()):
        raw = doc.setdefault("rawObjects", {})
        for key, objs in raw_invalid.items():
            if objs:
                raw.setdefault(key, []).extend(copy.deepcopy(objs))
    return doc


def write_json_atomic(path: PathLike, doc: Any, *, indent: Optional[int] = 2) -> None:
    """Write JSON to `path` via a temp file in the same folder + rename: readers never
    see a partial file, and a failure (bad value, full disk) leaves no output at all.

    The rename replaces what the path finally names (a symlink's target, not the link), and
    only a regular file: a device, FIFO or socket (`-o /dev/null`, `-o /dev/stdout`, a process
    substitution) is written in place, after the whole document has been serialised, since
    renaming over it would put a regular file where the device was (as root, for /dev/null, for
    every program on the machine)."""
    target = os.path.realpath(os.fspath(path))
    try:
        st: Optional[os.stat_result] = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(path))
    if st is not None and not stat.S_ISREG(st.st_mode):
        text = json.dumps(doc, indent=indent, allow_nan=False, ensure_ascii=False) + "\n"
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
        return
    folder = os.path.dirname(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    except OSError as exc:     # named by the user's path, not the temp file's
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=indent, allow_nan=False, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_snapshot(path: PathLike, doc: Union[dict[str, Any], "Snapshot"]) -> None:
    """Write a snapshot document (or model) as JSON, atomically."""
    if not isinstance(doc, dict):
        doc = dump_snapshot(doc)
    write_json_atomic(path, doc)
