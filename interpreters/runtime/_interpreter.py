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

The scripted, replay and dry-run interpreters also have ``run``, the same from synchronous
code; the live interpreter's synchronous call is ``run_sync`` (its ``run`` is ``arun``'s
older name, awaited, kept as it was).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = ["Interpreter"]

R_co = TypeVar("R_co", covariant=True)


@runtime_checkable
class Interpreter(Protocol[R_co]):
    """Runs a program: ``await interpreter.arun(program, *args, **kwargs)``."""

    async def arun(self, program: Callable[..., Any], /, *args: Any, **kwargs: Any) -> R_co:
        """Run ``program(*args, **kwargs)`` and say how it went."""
        ...
