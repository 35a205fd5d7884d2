"""What a program says about itself: its default state and where its workspace is.

A program that keeps state declares the state's type once, on the function, so every way of
running it (the API, the CLI, resume, fork, replay, dry-run, the scripted interpreter) starts
from the same state without being told::

    @program(state=CodeState, workspace=lambda args, kwargs: kwargs.get("repo"))
    def coder(task: str, repo: str) -> Op[str]: ...

A state passed explicitly (``run(..., state=...)``, ``--state``) still wins.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from op._marker import Marker
from state import CRDTModel

__all__ = ["WorkspaceOf", "default_state", "program", "workspace_of"]

F = TypeVar("F", bound=Callable[..., Any])

WorkspaceOf = Callable[[tuple[Any, ...], dict[str, Any]], "str | None"]
"""Finds a program's workspace folder among its arguments (``args``, ``kwargs``)."""


@dataclass(frozen=True, slots=True)
class _Declared:
    state: type[CRDTModel] | None
    workspace: WorkspaceOf | None


_DECLARED = Marker("program", _Declared)


def program(
    *, state: type[CRDTModel] | None = None, workspace: WorkspaceOf | None = None
) -> Callable[[F], F]:
    """Declare a program's default state type and how its workspace is found.

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

    def declare(fn: F) -> F:
        if not _DECLARED.put(fn, _Declared(state, workspace)):
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
