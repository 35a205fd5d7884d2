"""Canonical JSON: the same value gives the same bytes in every process.

Rules (the journal, replay and CRDT law tests all lean on them):

- object keys are sorted, separators are ``,`` and ``:``, no whitespace, UTF-8 kept as is;
- sets and frozensets become lists sorted by their elements' canonical encoding, so the
  order never depends on ``PYTHONHASHSEED``;
- tuples become lists; ``Success(v)`` and ``Failure(e)`` become ``{"ok": v}`` and
  ``{"error": e}``; pydantic models and dataclasses become objects of their fields
  (dataclass fields marked ``metadata={"serialize": False}`` are left out, and those marked
  ``metadata={"omit_if_none": True}`` while they are None: a field added to an effect after
  journals held it, so that the effect without it is still the same bytes);
- NaN and the infinities are refused, and so are values JSON cannot hold (bytes, objects,
  non-string keys) and texts holding a lone surrogate (``"\\ud800"``: no character, and no
  UTF-8 holds it; Python makes one of a byte that is not UTF-8 read with
  ``surrogateescape``): the error names the path to the offending value.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel
from returns.result import Failure, Success

__all__ = [
    "NotSerializable",
    "canonical_json",
    "dump_jsonable",
    "LONE_HINT",
    "lone_escaped",
    "lone_path",
    "lone_surrogate",
    "to_jsonable",
]


class NotSerializable(TypeError):
    """A value cannot be written as canonical JSON; ``path`` says where in it. (``op``
    registers it as ``Fatal``: a run that produces one ends with it.)"""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


_LONE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate (a code point of U+D800 to U+DFFF, which is no
    character: a str holds a pair joined, as one code point), or None when it holds none.

    Example:
        >>> lone_surrogate("caf\u00e9"), lone_surrogate("ab\\udcff")
        (None, 2)
    """
    if text.isascii():  # asked of the string's header: no scan
        return None
    found = _LONE.search(text)
    return None if found is None else found.start()


def lone_path(data: Any, path: str) -> str | None:
    """The path of the first text in ``data`` (plain JSON data) holding a lone surrogate."""
    if isinstance(data, str):
        return path if lone_surrogate(data) is not None else None
    if isinstance(data, dict):
        for key, item in data.items():
            if lone_surrogate(key) is not None:
                return f"{path} (a key)"
            found = lone_path(item, f"{path}.{key}")
            if found is not None:
                return found
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found = lone_path(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


LONE_HINT = (
    "which is no character and cannot be written as UTF-8 (a byte that is not UTF-8, read "
    "with surrogateescape, becomes one: decode bytes with errors='replace', or keep them as "
    "base64)"
)
"""Why a text holding a lone surrogate is refused, and what to do instead."""


def lone_escaped(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``\\udcff``): for a text
    that is shown or kept as a diagnostic (an error's message, a page), not data.

    Example:
        >>> lone_escaped("ab\\udcff"), lone_escaped("caf\u00e9")
        ('ab\\\\udcff', 'café')
    """
    if lone_surrogate(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _refused(text: str, data: Any) -> NotSerializable:
    """The refusal of ``text`` (canonical JSON of ``data``), which holds a lone surrogate: JSON
    would keep it, but no UTF-8 does (a journal, a seal, a digest), and a text kept with it
    breaks every reader after."""
    path = lone_path(data, "$") or "$"
    at = lone_surrogate(text) or 0
    return NotSerializable(
        f"{path}: the text holds a lone surrogate ({text[at]!r}), {LONE_HINT}", path=path
    )


_EXACT_SCALARS = frozenset({str, int, bool, type(None)})
_FIELDS: dict[type, tuple[str, ...]] = {}


_OMIT: dict[type, tuple[str, ...]] = {}


def _omitted(cls: type[BaseModel]) -> tuple[str, ...]:
    """Fields left out of the canonical form while they are None: fields added to a value
    type after journals held it (``json_schema_extra={"omit_if_none": True}``), so that the
    same value is still the same bytes as in those journals."""
    names = _OMIT.get(cls)
    if names is None:
        names = tuple(
            n
            for n, f in cls.model_fields.items()
            if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("omit_if_none")
        )
        _OMIT[cls] = names
    return names


_MODEL_FIELDS: dict[type, tuple[str, ...]] = {}


def _model_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    """A value type's field names, asked of pydantic once (its ``model_fields`` costs a
    microsecond a time, and every result journaled asks for them)."""
    names = _MODEL_FIELDS.get(cls)
    if names is None:
        names = _MODEL_FIELDS[cls] = tuple(cls.model_fields)
    return names


_IMPLIED: dict[type, Callable[[Any], dict[str, Any]] | None] = {}


def _implied(cls: type[BaseModel]) -> Callable[[Any], dict[str, Any]] | None:
    """A value type's ``__canonical_implied__``: the fields it leaves out of its canonical form
    while they hold what a value without them reads as (a field added after journals held
    the type, whose value older values imply), so the same value is still the same bytes."""
    if cls not in _IMPLIED:
        _IMPLIED[cls] = getattr(cls, "__canonical_implied__", None)
    return _IMPLIED[cls]


def _dataclass_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        fields = [f for f in dataclasses.fields(cls) if f.metadata.get("serialize", True)]
        _DC_OMIT[cls] = tuple(f.name for f in fields if f.metadata.get("omit_if_none"))
        names = tuple(f.name for f in fields)
        _FIELDS[cls] = names
    return names


_DC_OMIT: dict[type, tuple[str, ...]] = {}
"""A dataclass's fields left out while they are None (``metadata={"omit_if_none": True}``)."""


def _without_none(value: Any, out: dict[str, Any]) -> dict[str, Any]:
    for name in _DC_OMIT.get(type(value), ()):
        if out.get(name, 0) is None:
            del out[name]
    return out


def to_jsonable(value: Any, path: str = "$") -> Any:
    """Turn ``value`` into plain JSON data (dict, list, str, int, float, bool, None)."""
    cls = type(value)
    if cls in _EXACT_SCALARS:
        return value
    if cls is dict:
        return _mapping(value, path)
    if cls is float:
        if math.isnan(value) or math.isinf(value):
            raise NotSerializable(f"{path}: {value!r} is not allowed in canonical JSON", path=path)
        return value
    if cls is list or cls is tuple:
        return [
            item if type(item) in _EXACT_SCALARS else to_jsonable(item, f"{path}[{i}]")
            for i, item in enumerate(value)
        ]
    names = _FIELDS.get(cls)
    if names is not None:  # a dataclass seen before (every effect is one)
        kind = getattr(value, "kind", None)
        out = _fields(value, names, path, {"kind": kind} if isinstance(kind, str) else {})
        return _without_none(value, out) if _DC_OMIT.get(cls) else out
    if isinstance(value, BaseModel):
        out = _fields(value, _model_fields(cls), path, {})
        for name in _omitted(cls):
            if getattr(value, name) is None:
                del out[name]
        implied = _implied(cls)
        if implied is not None:
            for name, shown in implied(value).items():
                if out.get(name) == shown:
                    del out[name]
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kind = getattr(value, "kind", None)
        out = _fields(
            value, _dataclass_fields(cls), path, {"kind": kind} if isinstance(kind, str) else {}
        )
        return _without_none(value, out)
    if isinstance(value, str | int):  # subclasses (IntEnum, StrEnum, ...)
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, float):
        return to_jsonable(float(value), path)
    if isinstance(value, Mapping):
        return _mapping(value, path)
    if isinstance(value, list | tuple):
        return [to_jsonable(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, set | frozenset):
        items = [to_jsonable(item, f"{path}{{}}") for item in value]
        return sorted(items, key=_dump)
    if isinstance(value, Success):
        return {"ok": to_jsonable(value.unwrap(), f"{path}.ok")}
    if isinstance(value, Failure):
        return {"error": to_jsonable(value.failure(), f"{path}.error")}
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value, path)
    if isinstance(value, type):
        return f"{value.__module__}:{value.__qualname__}"
    raise NotSerializable(
        f"{path}: a {cls.__name__} cannot be written as JSON "
        "(use str, int, float, bool, None, lists, dicts with string keys, or pydantic models)",
        path=path,
    )


def _fields(value: Any, names: Iterable[str], path: str, out: dict[str, Any]) -> dict[str, Any]:
    for name in names:
        item = getattr(value, name)
        out[name] = item if type(item) in _EXACT_SCALARS else to_jsonable(item, f"{path}.{name}")
    return out


def _mapping(value: Mapping[Any, Any], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if type(key) is not str:
            if not isinstance(key, str):
                raise NotSerializable(
                    f"{path}: mapping key {key!r} is a {type(key).__name__}; JSON keys are strings",
                    path=path,
                )
            key = str(key)
        # scalars are most values: skip the call (and building the path) for them
        out[key] = item if type(item) in _EXACT_SCALARS else to_jsonable(item, f"{path}.{key}")
    return out


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def _refuse(value: Any) -> Any:
    raise TypeError(f"a {type(value).__name__} is not plain JSON data")


def _encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode``, less the C encoder it builds on every call: built once here.

    The data is the output of ``to_jsonable``, a tree (a cycle never gets that far), so the
    encoder keeps no table of the containers it is inside. The bytes are ``_ENCODER``'s: the
    same C encoder, with the same settings."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return _ENCODER.encode
    # markers, default, string encoder, indent, key and item separators, sort_keys,
    # skipkeys, allow_nan
    chunks = make(None, _refuse, json.encoder.encode_basestring, None, ":", ",", True, False, False)

    def encode(data: Any) -> str:
        return "".join(chunks(data, 0))

    return encode


_dump = _encoder()


def dump_jsonable(data: Any) -> str:
    """Canonical JSON text of data that is already plain JSON (the output of ``to_jsonable``)."""
    text = _dump(data)
    if lone_surrogate(text) is not None:
        raise _refused(text, data)
    return text


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value``.

    Example:
        >>> canonical_json({"b": {3, 1, 2}, "a": (1.5, None)})
        '{"a":[1.5,null],"b":[1,2,3]}'
    """
    plan = _PLANS.get(type(value))
    if plan is None:
        # a pydantic model is no dataclass, and asking its class costs an AttributeError
        if isinstance(value, BaseModel | type) or not dataclasses.is_dataclass(value):
            return dump_jsonable(to_jsonable(value))
        plan = _plan(type(value))
    text = _by_plan(value, plan)
    if lone_surrogate(text) is not None:
        raise _refused(text, to_jsonable(value))
    return text


# A dataclass's text written field by field, without the dict ``to_jsonable`` would build (an
# effect is one, and every effect is journaled): its keys in canonical order, each with its
# key's text, whether it is the ``kind`` that ``to_jsonable`` adds when it is a string, and
# whether it is left out while None.
_Plan = tuple[tuple[str, str, bool, bool], ...]
_PLANS: dict[type, _Plan] = {}
_STR = json.encoder.encode_basestring
_LITERALS: dict[Any, str] = {None: "null", True: "true", False: "false"}


def _plan(cls: type) -> _Plan:
    names = _dataclass_fields(cls)
    omitted = _DC_OMIT[cls]
    keys = sorted({*names, "kind"})
    plan = tuple((k, _STR(k) + ":", k == "kind" and k not in names, k in omitted) for k in keys)
    _PLANS[cls] = plan
    return plan


def _by_plan(value: Any, plan: _Plan) -> str:
    parts = []
    item: Any
    for key, head, added_kind, omit_if_none in plan:
        if added_kind:
            item = getattr(value, "kind", None)
            if not isinstance(item, str):
                continue
        else:
            item = getattr(value, key)
            if omit_if_none and item is None:
                continue
        cls = type(item)
        if cls is str:
            parts.append(head + _STR(item))
        elif cls is bool or item is None:
            parts.append(head + _LITERALS[item])
        elif cls is int:
            parts.append(head + repr(item))
        elif cls is dict and not item:
            parts.append(head + "{}")
        else:
            parts.append(head + _dump(to_jsonable(item, f"$.{key}")))
    return "{" + ",".join(parts) + "}"
