"""What a program says about itself: its default state, where its workspace is, and when its
result means that it failed.

A program that keeps state declares the state's type once, on the function, so every way of
running it (the API, the CLI, resume, fork, replay, dry-run, the scripted interpreter) starts
from the same state without being told::

    @program(state=CodeState, workspace=lambda args, kwargs: kwargs.get("repo"))
    def coder(task: str, repo: str) -> Op[str]: ...

A state passed explicitly (``run(..., state=...)``, ``--state``) still wins.

A program that returns its failures as values (the Coder's ``CoderResult(ok=False, ...)``)
says so, so that ``opdsl run`` exits 1 for them: a result with a boolean ``ok`` field that is
False is a failure by itself; any other result needs ``@program(failed=...)``, a function of
the result that gives the reason (a text, or True) when it failed, and None or False when not.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from op._marker import Marker
from state import CRDTModel

__all__ = ["WorkspaceOf", "default_state", "failure_of", "program", "workspace_of"]

F = TypeVar("F", bound=Callable[..., Any])

WorkspaceOf = Callable[[tuple[Any, ...], dict[str, Any]], "str | None"]
"""Finds a program's workspace folder among its arguments (``args``, ``kwargs``)."""

FailedIf = Callable[[Any], object]
"""Tells whether a program's result is a failure: a reason (text, or True) if so, else None."""


@dataclass(frozen=True, slots=True)
class _Declared:
    state: type[CRDTModel] | None
    workspace: WorkspaceOf | None
    failed: FailedIf | None = None


_DECLARED = Marker("program", _Declared)


def program(
    *,
    state: type[CRDTModel] | None = None,
    workspace: WorkspaceOf | None = None,
    failed: FailedIf | None = None,
) -> Callable[[F], F]:
    """Declare a program's default state type, how its workspace is found, and which of its
    results are failures (``failed``: see :func:`failure_of`).

    Example:
        >>> from state import CRDTModel, GCounter
        >>> from op import Op, Inc, update, get
        >>> class Count(CRDTModel):
        ...     n: GCounter = GCounter()
        >>> @program(state=Count)
        ... def bump() -> Op[int]:
        ...     yield from update(n=Inc(1))
        ...     return (yield from get(Count)).n.value
        >>> default_state(bump)
        Count(n=GCounter(counts={}))
    """
    if state is not None and not (isinstance(state, type) and issubclass(state, CRDTModel)):
        raise TypeError(f"program(state=...) takes a CRDTModel class, not {state!r}")
    if workspace is not None and not callable(workspace):
        raise TypeError(
            f"program(workspace=...) takes a function of (args, kwargs), not {workspace!r}"
        )
    if failed is not None and not callable(failed):
        raise TypeError(f"program(failed=...) takes a function of the result, not {failed!r}")

    def declare(fn: F) -> F:
        if not _DECLARED.put(fn, _Declared(state, workspace, failed)):
            raise TypeError(f"@program cannot mark {fn!r}: it takes no attributes")
        return fn

    return declare


def default_state(fn: object) -> CRDTModel | None:
    """A fresh instance of the state type ``fn`` declared, or None."""
    declared = _DECLARED.get(fn)
    return None if declared is None or declared.state is None else declared.state()


def workspace_of(fn: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The workspace folder ``fn`` finds in its arguments, if it declared how."""
    declared = _DECLARED.get(fn)
    found = (
        None if declared is None or declared.workspace is None else declared.workspace(args, kwargs)
    )
    return str(found) if isinstance(found, str) and found else None


def failure_of(fn: object, value: object) -> str | None:
    """Why ``value``, the result ``fn`` returned, is a failure; None when it is not.

    ``fn``'s ``@program(failed=...)`` decides when it has one; otherwise a result whose ``ok``
    is False (an attribute, or a key of a mapping) is a failure, its reason taken from its
    ``phase`` and its ``reason``, ``error`` or ``message``.

    Example:
        >>> from op import Op
        >>> @program(failed=lambda n: n < 0 and f"{n} is negative")
        ... def count() -> Op[int]: ...
        >>> failure_of(count, -2), failure_of(count, 3)
        ('-2 is negative', None)
        >>> failure_of(None, {"ok": False, "phase": "verify", "reason": "2 tests fail"})
        'verify: 2 tests fail'
    """
    declared = _DECLARED.get(fn)
    if declared is not None and declared.failed is not None:
        verdict = declared.failed(value)
        if verdict is None or verdict is False:
            return None
        return verdict if isinstance(verdict, str) and verdict else "its result says it failed"
    fields = value if isinstance(value, Mapping) else getattr(value, "__dict__", {})
    if not isinstance(fields, Mapping) or fields.get("ok") is not False:
        return None
    why = next(
        (str(fields[k]) for k in ("reason", "error", "message") if fields.get(k)),
        "its result says ok: false",
    )
    return f"{fields['phase']}: {why}" if fields.get("phase") else why
