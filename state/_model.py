"""State models whose fields are CRDTs, and the operations programs use to change them.

A program names the field and the intent (``update(files=Add("a.py"), tokens=Inc(120))``);
the interpreter applies it with the current branch's :class:`~state.Stamp`. ``merge`` is
field by field, which is a lawful join because every field is itself a CRDT (a product of
semilattices is a semilattice). A field that is not a CRDT is refused when the class is
defined, not at the first parallel join.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from state._canonical import canonical_json
from state._crdt import (
    CRDT,
    GCounter,
    GSet,
    Log,
    LWWRegister,
    MVRegister,
    ORMap,
    ORSet,
    PNCounter,
    Stamp,
)

__all__ = [
    "Add",
    "Append",
    "Assign",
    "At",
    "CRDTModel",
    "Dec",
    "FieldOp",
    "Inc",
    "Remove",
    "StateError",
    "apply_op",
]


class StateError(ValueError):
    """A state operation does not fit the state model (unknown field, wrong operation)."""


@dataclass(frozen=True, slots=True)
class Inc:
    """Add ``n`` to a counter."""

    n: int = 1
    kind: ClassVar[str] = "inc"


@dataclass(frozen=True, slots=True)
class Dec:
    """Subtract ``n`` from a PNCounter."""

    n: int = 1
    kind: ClassVar[str] = "dec"


@dataclass(frozen=True, slots=True)
class Add:
    """Add an element to a GSet or ORSet."""

    item: Any
    kind: ClassVar[str] = "add"


@dataclass(frozen=True, slots=True)
class Remove:
    """Remove an element from an ORSet, or a key from an ORMap."""

    item: Any
    kind: ClassVar[str] = "remove"


@dataclass(frozen=True, slots=True)
class Append:
    """Append an entry to a Log."""

    item: Any
    kind: ClassVar[str] = "append"


@dataclass(frozen=True, slots=True)
class Assign:
    """Set a register (LWW or MV)."""

    value: Any
    kind: ClassVar[str] = "assign"


@dataclass(frozen=True, slots=True)
class At:
    """Apply ``op`` to the value under ``key`` of an ORMap."""

    key: str
    op: FieldOp
    kind: ClassVar[str] = "at"


FieldOp = Inc | Dec | Add | Remove | Append | Assign | At

_TAKES: dict[str, str] = {
    "GCounter": "Inc",
    "PNCounter": "Inc or Dec",
    "GSet": "Add",
    "ORSet": "Add or Remove",
    "LWWRegister": "Assign",
    "MVRegister": "Assign",
    "ORMap": "At(key, op) or Remove(key)",
    "Log": "Append",
}


def apply_op(value: CRDT, op: FieldOp, stamp: Stamp, *, where: str = "value") -> CRDT:
    """Apply one field operation to a CRDT value, or raise :class:`StateError` saying why not."""
    match value, op:
        case GCounter(), Inc(n):
            return _checked(lambda: value.inc(stamp, n), where)
        case PNCounter(), Inc(n):
            return value.inc(stamp, n)
        case PNCounter(), Dec(n):
            return value.dec(stamp, n)
        case GSet(), Add(item):
            return value.add(item)
        case ORSet(), Add(item):
            return value.add(item, stamp)
        case ORSet(), Remove(item):
            return value.remove(item)
        case LWWRegister() | MVRegister(), Assign(new):
            return value.assign(new, stamp)
        case Log(), Append(item):
            return value.append(item, stamp)
        case ORMap(), At(key, inner):
            return value.update(
                key, lambda v: apply_op(v, inner, stamp, where=f"{where}[{key!r}]"), stamp
            )
        case ORMap(), Remove(key):
            return value.remove(key)
        case CRDTModel(), At(key, inner):
            return value.apply({key: inner}, stamp)
        case _:
            takes = _TAKES.get(value.crdt_name, "no operation")
            raise StateError(
                f"{where} is a {value.crdt_name}; it takes {takes}, not {type(op).__name__}"
            )


def _checked(make: Any, where: str) -> CRDT:
    try:
        result: CRDT = make()
    except ValueError as exc:
        raise StateError(f"{where}: {exc}") from exc
    return result


class CRDTModel(CRDT):
    """Base for state models: every field is a CRDT and ``merge`` is field by field.

    Give each field an empty default (``files: GSet[str] = GSet()``) so type checkers know
    the model can be built empty; a field left without one is given it at class creation.

    Example:
        >>> from state import GSet, GCounter
        >>> class CodeState(CRDTModel):
        ...     files: GSet[str] = GSet()
        ...     tokens: GCounter = GCounter()
        >>> s = CodeState().apply({"files": Add("a.py"), "tokens": Inc(5)}, Stamp("r", 1))
        >>> s.files.sorted(), s.tokens.value
        (['a.py'], 5)
    """

    crdt_name: ClassVar[str] = "CRDTModel"

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        rebuild = False
        for name, info in cls.model_fields.items():
            ann = info.annotation
            if not (isinstance(ann, type) and issubclass(ann, CRDT)):
                shown = getattr(ann, "__name__", repr(ann))
                raise TypeError(
                    f"{cls.__name__}.{name}: {shown} is not a CRDT, so parallel branches could "
                    f"not merge it; use a CRDT type such as LWWRegister[{shown}]"
                )
            if info.is_required():
                info.default_factory = ann
                rebuild = True
        if rebuild:
            cls.model_rebuild(force=True)

    def merge(self, other: Self) -> Self:
        if type(other) is not type(self):
            raise TypeError(f"cannot merge a {type(other).__name__} into a {type(self).__name__}")
        fields = {
            name: getattr(self, name).merge(getattr(other, name))
            for name in type(self).model_fields
        }
        return type(self).model_construct(**fields)

    def apply(self, ops: dict[str, FieldOp], stamp: Stamp) -> Self:
        """Apply field operations (``{"files": Add("a.py")}``) with one stamp."""
        fields = type(self).model_fields
        changed: dict[str, Any] = {}
        for name, op in ops.items():
            if name not in fields:
                known = ", ".join(fields) or "none"
                raise StateError(f"{type(self).__name__} has no field {name!r} (fields: {known})")
            changed[name] = apply_op(
                getattr(self, name), op, stamp, where=f"{type(self).__name__}.{name}"
            )
        return self.model_copy(update=changed)

    def max_lamport(self) -> int:
        return max((getattr(self, n).max_lamport() for n in type(self).model_fields), default=0)

    def matches(self, recorded: Any) -> bool:
        """Whether this state is the one ``recorded`` (its canonical JSON, parsed).

        A field the model gained after the record was written matches while it still holds
        its empty default, so a journal written before a field was added still replays.

        Example:
            >>> from state import GCounter
            >>> class Old(CRDTModel):
            ...     a: GCounter = GCounter()
            >>> class New(CRDTModel):
            ...     a: GCounter = GCounter()
            ...     b: GCounter = GCounter()
            >>> New().matches(json.loads(Old().canonical()))
            True
        """
        if not isinstance(recorded, dict):
            return False
        now = json.loads(self.canonical())
        for name, info in type(self).model_fields.items():
            if name not in recorded and getattr(self, name) == info.get_default(
                call_default_factory=True
            ):
                now.pop(name, None)
        return bool(now == recorded)

    def conflicts_since(self, base: Self, others: list[Self]) -> dict[str, list[Any]]:
        """Elements of set fields that more than one of ``[self, *others]`` added since ``base``."""
        out: dict[str, list[Any]] = {}
        branches = [self, *others]
        for name in type(self).model_fields:
            seen: dict[str, int] = {}
            values: dict[str, Any] = {}
            for b in branches:
                added = getattr(b, name).added_since(getattr(base, name))
                if not added:
                    continue
                for item in added:
                    key = canonical_json(item)
                    seen[key] = seen.get(key, 0) + 1
                    values[key] = item
            both = sorted(k for k, n in seen.items() if n > 1)
            if both:
                out[name] = [values[k] for k in both]
        return out
