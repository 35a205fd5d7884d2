"""Errors a program or its caller can see.

Errors marked ``opdsl_fatal`` are defects of the program or of a test script: the driver does
not throw them into the program (where an ``except Exception`` could swallow them) but ends
the run with them.
"""

from __future__ import annotations

from typing import Any

from state import NotSerializable

__all__ = [
    "DuplicateTool",
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


class NotAnEffect(OpdslError, TypeError):
    """A program yielded something that is not an effect."""

    opdsl_fatal = True


class NotAProgram(OpdslError, TypeError):
    """What was run is not a function returning a generator of effects."""

    opdsl_fatal = True


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
