"""The scripted interpreter: tests as an ordered list of (expected effect, answer).

In the style of python-effect's ``perform_sequence``: every world-facing effect the program
performs (infer, tool, agent, ask, now, random, uuid) must match the next entry of the
script, and gets that entry's answer. ``emit``, ``checkpoint``, ``sleep`` and ``patched`` are
matched when the next entry expects one, and otherwise pass (a ``patched`` marker then takes the
new code: True; a script answers one either way, ``(expect("patched", name=...), False)``); ``sleep`` always waits on the interpreter's
clock (a ``VirtualClock`` unless one is given), so ``timeout`` around it fires as it would live. Scopes (limit, timeout, par) and state work as in the
live interpreter. The first mismatch ends the run with :class:`ScriptMismatch`, whose message
is the whole log so far, the effect that was not found, and the next expected one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar, final

from interpreters.journal._base import Journal
from interpreters.runtime._clock import Clock, VirtualClock
from interpreters.runtime._driver import RunResult, execute, new_run_id
from interpreters.runtime._events import EventBus, Sink
from interpreters.runtime._frame import Call, Handlers
from interpreters.runtime._services import Services
from interpreters.runtime._sync import blocking
from op import Checkpoint, Emit, Fatal, Infer, Patched, Response, Sleep, Tool, ToolResult
from op.effects import LeafEffect
from state import CRDTModel, canonical_json

T = TypeVar("T")

__all__ = ["ANY", "Expect", "ScriptMismatch", "ScriptedInterpreter", "expect"]


class _Any:
    def __repr__(self) -> str:
        return "ANY"

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


ANY: Any = _Any()
"""Matches any value in an :class:`Expect` field."""


class ScriptMismatch(AssertionError, Fatal):
    """The program did something the script did not expect (or left entries unused)."""


@final
@dataclass(frozen=True)
class Expect:
    """Matches an effect by kind and some of its fields (values, ``ANY`` or predicates)."""

    kind: str
    fields: dict[str, Any]

    def matches(self, effect: LeafEffect) -> bool:
        if effect.kind != self.kind:
            return False
        for name, want in self.fields.items():
            if not hasattr(effect, name):
                return False
            got = getattr(effect, name)
            if want is ANY:
                continue
            if callable(want) and not isinstance(want, type):
                if not want(got):
                    return False
            elif got != want and not _same_json(got, want):
                return False
        return True

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.fields.items())
        return f"{self.kind}({shown})"


def _same_json(a: Any, b: Any) -> bool:
    try:
        return canonical_json(a) == canonical_json(b)
    except TypeError:
        return False


def expect(kind: str, **fields: Any) -> Expect:
    """``expect("tool", name="read_file")``: an effect of ``kind`` whose fields match."""
    return Expect(kind, fields)


Matcher = Expect | LeafEffect | Callable[[LeafEffect], bool]
Answer = Any


def _matches(matcher: Matcher, effect: LeafEffect) -> bool:
    if isinstance(matcher, Expect):
        return matcher.matches(effect)
    if callable(matcher) and not hasattr(matcher, "kind"):
        return bool(matcher(effect))
    return matcher == effect or _same_json(matcher, effect)


def _kind_of(matcher: Matcher) -> str | None:
    return getattr(matcher, "kind", None)


def _show(effect: LeafEffect) -> str:
    parts = []
    for f in fields(effect):
        if f.metadata.get("serialize", True):
            parts.append(f"{f.name}={getattr(effect, f.name)!r:.120}")
    return f"{effect.kind}({', '.join(parts)})"


def _taken(effect: Patched, answer: Any, address: str) -> bool:
    """A script's answer to a ``patched`` marker: True (the new code) or False (the old)."""
    if not isinstance(answer, bool):
        raise ScriptMismatch(
            f"the script answers patched({effect.name!r}) at address {address} with {answer!r}; "
            "it takes True (the new code) or False (the old code)"
        )
    if effect.deprecated and not answer:
        raise ScriptMismatch(
            f"the script answers deprecate_patched({effect.name!r}) at address {address} with "
            "False, but the program has no old code left to take"
        )
    return answer


@final
class _ScriptedHandlers(Handlers):
    def __init__(self, script: Sequence[tuple[Matcher, Answer]]) -> None:
        self.script = list(script)
        self.position = 0
        self.log: list[str] = []

    def _mismatch(self, effect: LeafEffect, address: str) -> ScriptMismatch:
        lines = [f"effect at address {address} does not match the script", *self.log]
        lines.append(f"NOT FOUND: {address} {_show(effect)}")
        if self.position < len(self.script):
            lines.append(f"NEXT EXPECTED: {self.script[self.position][0]!r}")
        else:
            lines.append("NEXT EXPECTED: nothing (the script is used up)")
        return ScriptMismatch("\n".join(lines))

    @staticmethod
    async def _clock(effect: LeafEffect, call: Call) -> None:
        if isinstance(effect, Sleep):
            await call.clock.sleep(effect.seconds)

    def leftovers(self) -> ScriptMismatch | None:
        if self.position >= len(self.script):
            return None
        rest = "\n".join(f"  {m!r}" for m, _ in self.script[self.position :])
        return ScriptMismatch(
            "\n".join([*self.log, f"the program finished but the script expects more:\n{rest}"])
        )

    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        nxt = self.script[self.position] if self.position < len(self.script) else None
        optional = isinstance(effect, Emit | Checkpoint | Sleep | Patched)
        if nxt is None or not _matches(nxt[0], effect):
            if optional and (nxt is None or _kind_of(nxt[0]) != effect.kind):
                self.log.append(f"passed: {call.address} {_show(effect)}")
                if isinstance(effect, Patched):
                    return True  # a marker the script does not ask about: the new code
                return await self._clock(effect, call)
            raise self._mismatch(effect, call.address)
        self.position += 1
        self.log.append(f"scripted: {call.address} {_show(effect)}")
        if isinstance(effect, Sleep):
            # time runs on the interpreter's (virtual) clock, so timeouts around it fire
            return await self._clock(effect, call)
        answer = nxt[1]
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer) and not isinstance(answer, type):
            answer = answer(effect)
        if isinstance(effect, Patched):
            return _taken(effect, answer, call.address)
        if isinstance(effect, Infer) and isinstance(answer, str):
            return Response(text=answer, model="scripted")
        if isinstance(effect, Tool) and isinstance(answer, str):
            return ToolResult(output=answer)
        return answer


@final
class ScriptedInterpreter:
    """Runs a program against a script; raises :class:`ScriptMismatch` on the first surprise.

    Example:
        >>> from op import Op, tool, ToolResult
        >>> def program() -> Op[str]:
        ...     r = yield from tool("read_file", {"path": "a.py"})
        ...     return r.output
        >>> ScriptedInterpreter([(expect("tool", name="read_file"), "print(1)")]).run(program).value
        'print(1)'
    """

    def __init__(
        self,
        script: Sequence[tuple[Matcher, Answer]],
        *,
        journal: Journal | None = None,
        sinks: Iterable[Sink] = (),
        clock: Clock | None = None,
    ) -> None:
        self.script = list(script)
        self.journal = journal
        self.sinks = list(sinks)
        self.clock = clock

    async def arun(
        self,
        program: Callable[..., Generator[Any, Any, T]],
        *args: Any,
        state: CRDTModel | None = None,
        **kwargs: Any,
    ) -> RunResult[T]:
        handlers = _ScriptedHandlers(self.script)
        result = await execute(
            program,
            args,
            kwargs,
            run_id=new_run_id(),
            services=Services(
                handlers=handlers,
                clock=self.clock or VirtualClock(),
                bus=EventBus(self.sinks),
                journal=self.journal,
            ),
            state=state,
        )
        if isinstance(result.error, ScriptMismatch):
            raise result.error
        if result.status == "completed":
            left = handlers.leftovers()
            if left is not None:
                raise left
        return result

    def run(
        self,
        program: Callable[..., Generator[Any, Any, T]],
        *args: Any,
        state: CRDTModel | None = None,
        **kwargs: Any,
    ) -> RunResult[T]:
        return blocking(functools.partial(self.arun, program, *args, state=state, **kwargs))
