"""The shape every interpreter has: built once with what it runs programs with, then
``arun(program, *args, **kwargs)`` for each run.

=====================  ==================================  ==============================
interpreter            built with                          ``arun`` gives
=====================  ==================================  ==============================
``LiveInterpreter``    model, tools, journal, sinks, ...   ``RunResult`` (performed)
``ScriptedInterpreter`` the script (expected effect, answer) ``RunResult`` (from the script)
``ReplayInterpreter``  the run id and its journal          ``RunResult`` (from the record)
``DryRunInterpreter``  model, tools, workspace             ``Plan`` (nothing performed)
=====================  ==================================  ==============================

Each also has ``run``, the same from synchronous code (the live interpreter's ``run_sync``
too, which can pick trio). Before 0.4.0 the live interpreter's ``run`` was ``arun``'s name:
awaited where an event loop runs, it still works, with a ``DeprecationWarning``, until 0.5.0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = ["Interpreter"]

R_co = TypeVar("R_co", covariant=True)


@runtime_checkable
class Interpreter(Protocol[R_co]):
    """Runs a program: ``interpreter.run(program, *args, **kwargs)``, or ``await
    interpreter.arun(...)`` from async code."""

    def run(self, program: Callable[..., Any], /, *args: Any, **kwargs: Any) -> R_co:
        """Run ``program(*args, **kwargs)`` and say how it went (from synchronous code)."""
        ...

    async def arun(self, program: Callable[..., Any], /, *args: Any, **kwargs: Any) -> R_co:
        """Run ``program(*args, **kwargs)`` and say how it went."""
        ...
