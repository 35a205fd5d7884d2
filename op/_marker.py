"""Typed markers: a value of a known type attached to a function or an exception.

opdsl marks a few objects it does not own: a program function with the state it declared, a
tool function as read-only, an exception with the address where it left a program. Each mark
is a :class:`Marker`: one attribute name, one type, read back only if it has that type, so a
stray attribute of the same name cannot be mistaken for a mark. Function marks survive
``functools.wraps`` (which copies ``__dict__``).
"""

from __future__ import annotations

import contextlib
from typing import Generic, TypeVar, final

__all__ = ["Marker"]

T = TypeVar("T")


@final
class Marker(Generic[T]):
    """One kind of mark: ``Marker("read_only", bool)`` reads and writes ``__opdsl_read_only__``."""

    __slots__ = ("attr", "kind")

    def __init__(self, name: str, kind: type[T]) -> None:
        self.attr = f"__opdsl_{name}__"
        self.kind = kind

    def put(self, target: object, value: T) -> bool:
        """Mark ``target``; False if it takes no attributes (a builtin, a slotted object)."""
        with contextlib.suppress(AttributeError, TypeError):
            setattr(target, self.attr, value)
            return True
        return False

    def get(self, target: object) -> T | None:
        """The mark on ``target``, or None if it has none of this type."""
        value = getattr(target, self.attr, None)
        return value if isinstance(value, self.kind) else None
