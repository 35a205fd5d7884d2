"""Effects: frozen, keyword-only values that say what a program wants done.

An effect's type parameter is the type of its result, and every constructor is a one-step
generator (``return (yield Infer(...))``), so ``x = yield from infer(...)`` gives ``x`` its
precise type under mypy and pyright with no plugin. Programs compose with ``yield from``.

``AnyEffect`` is the closed union of every effect. Interpreters dispatch on it with ``match``
ending in ``assert_never``, so an interpreter that forgets an effect fails to type-check.
"""

from __future__ import annotations

import inspect
import re
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

from pydantic import BaseModel, ValidationError
from returns.result import Result

from op._errors import ModelError
from op._values import (
    Budget,
    BudgetExhausted,
    Message,
    Output,
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
    "InvalidOutput",
    "Limit",
    "Merge",
    "Now",
    "Op",
    "Par",
    "Patched",
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
M = TypeVar("M", bound=BaseModel)
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
    """Ask a model. ``tools`` names bound tools the model may call (``"all"``: every one);
    ``output``, the shape its answer must have (None: any text). The result is the model's
    answer as it gave it, whatever ``output`` asked: validating it is the program's."""

    kind: ClassVar[str] = "infer"
    messages: tuple[Message, ...]
    model: str | None = None
    tools: tuple[str, ...] | Literal["all"] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    # left out of the canonical form while None: an infer without it is the bytes it always was
    output: Output | None = field(default=None, metadata={"omit_if_none": True})


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Patched(Effect[bool]):
    """Which side of a change the run takes: True (the new code) unless the run already
    passed this point without the marker (``op.patched``). ``deprecated``: the old side is
    gone (``op.deprecate_patched``)."""

    kind: ClassVar[str] = "patched"
    name: str
    # left out of the canonical form while None: the marker of patched() and of
    # deprecate_patched() at the same point are the same bytes but for it
    deprecated: Literal[True] | None = field(default=None, metadata={"omit_if_none": True})


# The one list of effects. Adding one: define its class above, put it in the union it belongs
# to below, then follow the type checker: every ``match`` over these unions ends in
# ``assert_never`` (the driver, every ``perform``, the replay decoder), so a new effect that
# one of them does not handle fails ``make test`` (docs/architecture.md has the checklist).

LeafEffect: TypeAlias = (
    Infer | Tool | Agent | Emit | Checkpoint | Now | Random | Uuid | Sleep | Ask | Patched
)
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

LEAF_KINDS: frozenset[str] = frozenset(t.kind for t in LEAF_TYPES)
"""The ``kind`` of every leaf effect (as a journal entry names it), from the union."""

SCOPE_KINDS: frozenset[str] = frozenset(t.kind for t in _classes(ScopeEffect))
"""The ``kind`` of every scope effect (``limit``, ``timeout``, ``par``), from the union."""

STATE_KINDS: frozenset[str] = frozenset(t.kind for t in _classes(StateEffect))
"""The ``kind`` of every state effect, from the union."""


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


class InvalidOutput(ModelError):
    """The model's answers to ``infer(..., output=Model)`` never validated as ``Model``.

    ``output`` names the model class, ``attempts`` counts the answers, ``error`` says what was
    wrong with the last one and ``text`` is what it said. A program reads it like any error:
    ``try: plan = yield from infer(..., output=Plan) except InvalidOutput as e: ...``.
    """

    def __init__(self, output: str, attempts: int, error: str, text: str) -> None:
        shown = " ".join(text.split())
        shown = shown if len(shown) <= 120 else shown[:119] + "…"
        super().__init__(
            f"the model's answer is not a valid {output} after {attempts} attempt(s): {error} "
            f"(it said: {shown!r})"
        )
        self.output = output
        self.attempts = attempts
        self.error = error
        self.text = text


OUTPUT_RETRY = (
    "Your answer is not a valid {name}: {error}. Answer again with the JSON object alone, "
    "nothing before or after it."
)
"""What the model is told when its answer to ``infer(..., output=Model)`` did not validate."""


@overload
def infer(
    messages: str | Message | Sequence[Message],
    *,
    model: str | None = None,
    tools: Sequence[str] | Literal["all"] = (),
    output: None = None,
    **params: Any,
) -> Op[Response]: ...
@overload
def infer(
    messages: str | Message | Sequence[Message],
    *,
    model: str | None = None,
    output: type[M],
    retries: int = 2,
    **params: Any,
) -> Op[M]: ...
def infer(
    messages: str | Message | Sequence[Message],
    *,
    model: str | None = None,
    tools: Sequence[str] | Literal["all"] = (),
    output: type[BaseModel] | None = None,
    retries: int | None = None,
    **params: Any,
) -> Op[Any]:
    """Ask a model and get its :class:`Response`; with ``output=Model`` (a pydantic model
    class), a validated ``Model``.

    With ``output``, the provider is asked to keep to the model's JSON Schema in its own way
    (OpenAI's strict ``response_format``, Anthropic's forced tool, Ollama's ``format``,
    llama.cpp's grammar-constrained ``json_schema``), and the answer is validated here. An
    answer that does not validate is given back to the model with what was wrong, at most
    ``retries`` times (each try is an ``infer`` of its own in the journal, holding what the
    model said and its ``output.attempt``); one that never does raises
    :class:`InvalidOutput`, which the program may catch. Validating is the program's, so a
    replay gives back the same ``Model``.

    Example:
        >>> def hello() -> Op[str]:
        ...     reply = yield from infer("Say hi")
        ...     return reply.text
        >>> class Plan(BaseModel):
        ...     steps: list[str]
        >>> def plan() -> Op[list[str]]:
        ...     p = yield from infer("Plan the fix", output=Plan)
        ...     return p.steps
    """
    msgs = _messages(messages)
    if output is None:
        if retries is not None:
            raise TypeError(
                "infer(): retries= goes with output= (the answers that do not validate)"
            )
        names: tuple[str, ...] | Literal["all"] = "all" if tools == "all" else tuple(tools)
        return _infer(Infer(messages=msgs, model=model, tools=names, params=params))
    if not (isinstance(output, type) and issubclass(output, BaseModel)):
        raise TypeError(f"infer(): output= takes a pydantic model class, not {output!r}")
    if tools == "all" or tools:
        raise TypeError(
            "infer(): output= and tools= do not go together: the answer is the output; "
            "for tool calls that keep to their schemas use tool_loop(..., constrained=True)"
        )
    n = 2 if retries is None else retries
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"infer(): retries= needs a whole number >= 0, got {retries!r}")
    return _infer_output(msgs, model, output, n, params)


def _infer(effect: Infer) -> Op[Response]:
    result: Response = yield effect
    return result


def _infer_output(
    messages: tuple[Message, ...],
    model: str | None,
    output: type[M],
    retries: int,
    params: dict[str, Any],
) -> Op[M]:
    name = _schema_name(output)
    schema = output.model_json_schema()
    history = list(messages)
    attempt = 1
    while True:
        asked = Output(name=name, json_schema=schema, attempt=attempt)
        reply: Response = yield Infer(
            messages=tuple(history), model=model, params=params, output=asked
        )
        value, error = parse_output(output, reply)
        if value is not None:
            return value
        assert error is not None
        if attempt > retries:
            raise InvalidOutput(name, attempt, error, reply.text)
        history += [reply.as_message(), Message.user(OUTPUT_RETRY.format(name=name, error=error))]
        attempt += 1


_FENCED = re.compile(r"```[ \t]*(?:json)?[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


def parse_output(output: type[M], reply: Response) -> tuple[M | None, str | None]:
    """``reply``'s answer as a validated ``output``, or None and what was wrong with it (in
    words for the model). The answer is the reply's text: the JSON object alone, or held in
    one ```` ```json ```` fence."""
    text = reply.text.strip()
    if not text:
        if reply.tool_calls:
            return None, "it called a tool instead of answering with the JSON object"
        return None, "it is empty"
    fenced = _FENCED.findall(text)
    if not text.startswith("{") and len(fenced) == 1:
        text = fenced[0].strip()
    try:
        return output.model_validate_json(text), None
    except ValidationError as exc:
        if reply.stop_reason == "max_tokens":
            return (
                None,
                "it was cut off at the limit on its length before it ended; answer more briefly",
            )
        return None, _validation_error(exc)


def _validation_error(exc: ValidationError) -> str:
    """A validation error in one line: each problem as ``where: what``, the first few."""
    problems = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "the answer"
        problems.append(f"{where}: {err.get('msg', 'invalid')}")
    more = exc.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def _schema_name(output: type[BaseModel]) -> str:
    """The model's name as providers take a schema's name (letters, digits, ``_``, ``-``)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", output.__name__)[:64]
    return name or "output"


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
