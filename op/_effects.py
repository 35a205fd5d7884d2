"""Effects: frozen, keyword-only values that say what a program wants done.

An effect's type parameter is the type of its result, and every constructor is a one-step
generator (``return (yield Infer(...))``), so ``x = yield from infer(...)`` gives ``x`` its
precise type under mypy and pyright with no plugin. Programs compose with ``yield from``.

``AnyEffect`` is the closed union of every effect. Interpreters dispatch on it with ``match``
ending in ``assert_never``, so an interpreter that forgets an effect fails to type-check.
"""

from __future__ import annotations

import inspect
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import (
    Any,
    ClassVar,
    Generic,
    Literal,
    TypeAlias,
    TypeVar,
    get_args,
    get_origin,
    overload,
)

from pydantic import BaseModel
from returns.result import Result

from op._values import (
    Budget,
    BudgetExhausted,
    Message,
    Response,
    TimedOut,
    ToolResult,
    TurnRecord,
)
from state import CRDTModel, FieldOp

__all__ = [
    "Agent",
    "AnyEffect",
    "Ask",
    "Checkpoint",
    "Effect",
    "Emit",
    "Get",
    "Infer",
    "Limit",
    "Merge",
    "Now",
    "Op",
    "Par",
    "Put",
    "Random",
    "Sleep",
    "Timeout",
    "Tool",
    "Update",
    "Uuid",
    "agent",
    "ask",
    "checkpoint",
    "emit",
    "get",
    "infer",
    "limit",
    "merge",
    "now",
    "par",
    "put",
    "random",
    "sleep",
    "timeout",
    "tool",
    "update",
    "uuid",
]

R = TypeVar("R")
T = TypeVar("T")
S = TypeVar("S", bound=CRDTModel)
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
D = TypeVar("D")
E = TypeVar("E")

_BODY: Any = {"serialize": False}


class Effect(Generic[R]):
    """Base of every effect; ``R`` is the type of its result."""

    __slots__ = ()
    kind: ClassVar[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Infer(Effect[Response]):
    """Ask a model. ``tools`` names bound tools the model may call (``"all"``: every one)."""

    kind: ClassVar[str] = "infer"
    messages: tuple[Message, ...]
    model: str | None = None
    tools: tuple[str, ...] | Literal["all"] = ()
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool(Effect[ToolResult]):
    """Call a bound tool by name."""

    kind: ClassVar[str] = "tool"
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Agent(Effect[TurnRecord]):
    """Delegate a whole turn to a coding agent backend."""

    kind: ClassVar[str] = "agent"
    backend: str
    prompt: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Emit(Effect[None]):
    """Send a program event to the run's sinks."""

    kind: ClassVar[str] = "emit"
    name: str
    data: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint(Effect[None]):
    """Mark a named point a run can be resumed or forked from."""

    kind: ClassVar[str] = "checkpoint"
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Limit(Effect[Result[T, BudgetExhausted]]):
    """Run ``body`` under ``budget``; the result says whether it finished or ran out."""

    kind: ClassVar[str] = "limit"
    budget: Budget
    body: Op[T] = field(metadata=_BODY)


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeout(Effect[Result[T, TimedOut]]):
    """Run ``body`` for at most ``seconds``."""

    kind: ClassVar[str] = "timeout"
    seconds: float
    body: Op[T] = field(metadata=_BODY)


@dataclass(frozen=True, slots=True, kw_only=True)
class Par(Effect[tuple[Any, ...]]):
    """Run ``bodies`` concurrently, each on its own replica of the state; merge at the join."""

    kind: ClassVar[str] = "par"
    bodies: tuple[Op[Any], ...] = field(metadata=_BODY)
    on_conflict: Literal["merge", "raise"] = "merge"
    branches: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Get(Effect[S]):
    """Read the current branch's state."""

    kind: ClassVar[str] = "get"
    state_type: type[S]


@dataclass(frozen=True, slots=True, kw_only=True)
class Put(Effect[None]):
    """Replace the current branch's state."""

    kind: ClassVar[str] = "put"
    state: CRDTModel


@dataclass(frozen=True, slots=True, kw_only=True)
class Update(Effect[None]):
    """Change fields of the state by intent (``Add``, ``Inc``, ``Assign``, ...)."""

    kind: ClassVar[str] = "update"
    ops: Mapping[str, FieldOp]


@dataclass(frozen=True, slots=True, kw_only=True)
class Merge(Effect[None]):
    """Join a CRDT value into the current state."""

    kind: ClassVar[str] = "merge"
    delta: CRDTModel


@dataclass(frozen=True, slots=True, kw_only=True)
class Now(Effect[float]):
    """The interpreter's clock, in seconds since the epoch."""

    kind: ClassVar[str] = "now"


@dataclass(frozen=True, slots=True, kw_only=True)
class Random(Effect[float]):
    """A float in [0, 1) from the interpreter's seeded source."""

    kind: ClassVar[str] = "random"


@dataclass(frozen=True, slots=True, kw_only=True)
class Uuid(Effect[str]):
    """A random UUID (version 4 layout) from the interpreter's seeded source."""

    kind: ClassVar[str] = "uuid"


@dataclass(frozen=True, slots=True, kw_only=True)
class Sleep(Effect[None]):
    """Wait ``seconds`` on the interpreter's clock."""

    kind: ClassVar[str] = "sleep"
    seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Ask(Effect[str]):
    """Ask a person; the run waits (durably, where the journal allows) for the answer."""

    kind: ClassVar[str] = "ask"
    question: str


# The one list of effects. Adding one: define its class above, put it in the union it belongs
# to below, then follow the type checker: every ``match`` over these unions ends in
# ``assert_never`` (the driver, every ``perform``, the replay decoder), so a new effect that
# one of them does not handle fails ``make test`` (docs/architecture.md has the checklist).

LeafEffect: TypeAlias = Infer | Tool | Agent | Emit | Checkpoint | Now | Random | Uuid | Sleep | Ask
"""Effects a handler performs and the journal records (their results are fed back on replay)."""

ScopeEffect: TypeAlias = Limit[Any] | Timeout[Any] | Par
"""Effects that run sub-programs; the driver owns them (the journal records their outcome)."""

StateEffect: TypeAlias = Get[Any] | Put | Update | Merge
"""Effects on the run's state; the driver applies them and a replay recomputes them."""

AnyEffect: TypeAlias = LeafEffect | ScopeEffect | StateEffect
"""The closed union of every effect."""

Op: TypeAlias = Generator[AnyEffect, Any, T]
"""A program that returns ``T``: a generator of effects."""


def _classes(union: Any) -> tuple[type[Effect[Any]], ...]:
    return tuple(get_origin(t) or t for t in get_args(union))


EFFECT_TYPES: tuple[type[Effect[Any]], ...] = _classes(AnyEffect)
"""Every effect class, from the union (for ``isinstance``)."""

LEAF_TYPES: tuple[type[Effect[Any]], ...] = _classes(LeafEffect)
"""The classes of :data:`LeafEffect`."""


def _messages(messages: str | Message | Sequence[Message]) -> tuple[Message, ...]:
    if isinstance(messages, str):
        return (Message.user(messages),)
    if isinstance(messages, Message):
        return (messages,)
    out = tuple(messages)
    if set(map(type, out)) <= _MESSAGE_TYPES:  # one pass in C: a long history costs little
        return out
    for i, m in enumerate(out):
        if not isinstance(m, Message):
            raise TypeError(f"infer(): messages[{i}] is a {type(m).__name__}, not a Message")
    return out


_MESSAGE_TYPES = frozenset({Message})


def _body(fn: str, body: object) -> None:
    if not inspect.isgenerator(body):
        hint = " (call it: work(task), not work)" if callable(body) else ""
        raise TypeError(f"{fn}() needs a running program, got {type(body).__name__}{hint}")


def infer(
    messages: str | Message | Sequence[Message],
    *,
    model: str | None = None,
    tools: Sequence[str] | Literal["all"] = (),
    **params: Any,
) -> Op[Response]:
    """Ask a model and get its :class:`Response`.

    Example:
        >>> def hello() -> Op[str]:
        ...     reply = yield from infer("Say hi")
        ...     return reply.text
    """
    names: tuple[str, ...] | Literal["all"] = "all" if tools == "all" else tuple(tools)
    result: Response = yield Infer(
        messages=_messages(messages), model=model, tools=names, params=params
    )
    return result


def tool(name: str, args: Mapping[str, Any] | None = None) -> Op[ToolResult]:
    """Call the bound tool ``name``; a failing tool gives ``ToolResult(ok=False)``."""
    result: ToolResult = yield Tool(name=name, args=dict(args or {}))
    return result


def agent(backend: str, prompt: str, **options: Any) -> Op[TurnRecord]:
    """Delegate a turn to a coding agent (``"claude-code"``, ``"codex"``, ...)."""
    result: TurnRecord = yield Agent(backend=backend, prompt=prompt, options=options)
    return result


def emit(name: str | BaseModel, data: Any = None) -> Op[None]:
    """Send an event to the run's sinks: ``emit("found", {"n": 3})`` or ``emit(model)``."""
    if isinstance(name, BaseModel):
        name, data = type(name).__name__, name
    yield Emit(name=name, data=data)


def checkpoint(name: str) -> Op[None]:
    """Mark a point the run can later be resumed or forked from."""
    if not name or not isinstance(name, str):
        raise ValueError("checkpoint() needs a non-empty name")
    yield Checkpoint(name=name)


def limit(budget: Budget, body: Op[T]) -> Op[Result[T, BudgetExhausted]]:
    """Run ``body`` under ``budget``: ``Success(value)`` or ``Failure(BudgetExhausted)``.

    The budget is checked before every effect in the scope, nested scopes are all charged, and
    when it runs out the body is closed (its ``finally`` blocks run).
    """
    _body("limit", body)
    result: Result[T, BudgetExhausted] = yield Limit(budget=budget, body=body)
    return result


def timeout(seconds: float, body: Op[T]) -> Op[Result[T, TimedOut]]:
    """Run ``body`` for at most ``seconds``: ``Success(value)`` or ``Failure(TimedOut)``."""
    _body("timeout", body)
    if not seconds >= 0:
        raise ValueError(f"timeout() needs seconds >= 0, got {seconds!r}")
    result: Result[T, TimedOut] = yield Timeout(seconds=float(seconds), body=body)
    return result


@overload
def par(b1: Op[A], /, *, on_conflict: Literal["merge", "raise"] = "merge") -> Op[tuple[A]]: ...
@overload
def par(
    b1: Op[A], b2: Op[B], /, *, on_conflict: Literal["merge", "raise"] = "merge"
) -> Op[tuple[A, B]]: ...
@overload
def par(
    b1: Op[A], b2: Op[B], b3: Op[C], /, *, on_conflict: Literal["merge", "raise"] = "merge"
) -> Op[tuple[A, B, C]]: ...
@overload
def par(
    b1: Op[A],
    b2: Op[B],
    b3: Op[C],
    b4: Op[D],
    /,
    *,
    on_conflict: Literal["merge", "raise"] = "merge",
) -> Op[tuple[A, B, C, D]]: ...
@overload
def par(*bodies: Op[T], on_conflict: Literal["merge", "raise"] = "merge") -> Op[tuple[T, ...]]: ...
def par(*bodies: Op[Any], on_conflict: Literal["merge", "raise"] = "merge") -> Op[tuple[Any, ...]]:
    """Run programs concurrently like a task group; results come back in argument order.

    Each branch works on its own replica of the state; at the join the replicas are merged in
    branch order. A set element that two branches both added is a conflict: with
    ``on_conflict="raise"`` the join raises :class:`~op.MergeConflict` after merging.
    """
    for b in bodies:
        _body("par", b)
    result: tuple[Any, ...] = yield Par(
        bodies=bodies, on_conflict=on_conflict, branches=len(bodies)
    )
    return result


def get(state_type: type[S]) -> Op[S]:
    """The current branch's state, as ``state_type``."""
    result: S = yield Get(state_type=state_type)
    return result


def put(state: CRDTModel) -> Op[None]:
    """Replace the current branch's state."""
    yield Put(state=state)


def update(**ops: FieldOp) -> Op[None]:
    """Change the state by intent: ``update(files=Add("a.py"), tokens=Inc(120))``."""
    yield Update(ops=ops)


def merge(delta: CRDTModel) -> Op[None]:
    """Join a CRDT value into the current state."""
    yield Merge(delta=delta)


def now() -> Op[float]:
    """The interpreter's time (seconds since the epoch); recorded, so replays see the same."""
    result: float = yield Now()
    return result


def random() -> Op[float]:
    """A recorded random float in [0, 1)."""
    result: float = yield Random()
    return result


def uuid() -> Op[str]:
    """A recorded random UUID string."""
    result: str = yield Uuid()
    return result


def sleep(seconds: float) -> Op[None]:
    """Wait on the interpreter's clock (instant under a virtual clock)."""
    if not seconds >= 0:
        raise ValueError(f"sleep() needs seconds >= 0, got {seconds!r}")
    yield Sleep(seconds=float(seconds))


def ask(question: str) -> Op[str]:
    """Ask a person and wait for the answer."""
    result: str = yield Ask(question=question)
    return result
