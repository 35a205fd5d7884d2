"""Errors a program or its caller can see.

Errors that are :class:`Fatal` are defects of the program, of a test script or of the
record: the driver does not throw them into the program (where an ``except Exception`` could
swallow them) but ends the run with them.
"""

from __future__ import annotations

from abc import ABC
from typing import Any

from state import NotSerializable

__all__ = [
    "DuplicateTool",
    "Fatal",
    "MergeConflict",
    "ModelError",
    "NotAProgram",
    "NotAnEffect",
    "NotSerializable",
    "OpdslError",
    "RunFailed",
    "RunNotFinished",
]


class OpdslError(Exception):
    """Base of opdsl's own errors."""


class Fatal(ABC):  # noqa: B024 - a marker: nothing to implement
    """Marks an error class as fatal: it ends the run instead of being thrown into the
    program. Subclass it next to the error's base (``class Mine(OpdslError, Fatal)``), or
    ``Fatal.register(cls)`` a class you do not own."""


# a value the journal cannot hold is a defect of the program that produced it
Fatal.register(NotSerializable)


class NotAnEffect(OpdslError, TypeError, Fatal):
    """A program yielded something that is not an effect."""


class NotAProgram(OpdslError, TypeError, Fatal):
    """What was run is not a function returning a generator of effects."""


class DuplicateTool(OpdslError, ValueError):
    """Two tools were bound under one name."""


class ModelError(OpdslError):
    """A model call failed (the provider, model, status and message are in the text)."""


class MergeConflict(OpdslError):
    """Branches of a ``par`` added the same set elements (``par(..., on_conflict="raise")``).

    The states are already merged; ``results`` holds the branch results.
    """

    def __init__(self, conflicts: dict[str, list[Any]], results: tuple[Any, ...]) -> None:
        shown = "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in conflicts.items())
        super().__init__(f"parallel branches changed the same items: {shown}")
        self.conflicts = conflicts
        self.results = results


class RunFailed(OpdslError):
    """A run ended with an error; the message names the program and the address."""


class RunNotFinished(OpdslError):
    """A run has no value yet (it is waiting, or was cancelled)."""
