"""What the driver and its layers share about one effect in flight: the frame (a generator
being driven, with its address prefix, replica and enclosing budgets), the budget scopes, the
handler interface and the ``Call`` a handler receives. Plain data, no I/O."""

from __future__ import annotations

import contextlib
import random
import uuid
from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeAlias, assert_never, final

from interpreters.runtime._clock import Clock
from interpreters.runtime._events import EventBus
from interpreters.runtime._replay import FinishedScope
from op import (
    Agent,
    Budget,
    BudgetExhausted,
    Emit,
    Infer,
    Now,
    Patched,
    Random,
    Sleep,
    Spent,
    Tool,
    Usage,
    Uuid,
)
from op.effects import AnyEffect, LeafEffect
from op.events import TokenDelta
from state import CRDTModel, Stamp

__all__ = [
    "BudgetStop",
    "Call",
    "Frame",
    "Handlers",
    "LocalEffect",
    "RunHandlers",
    "RecordedEffect",
    "Replica",
    "ReplayStop",
    "Scope",
    "TokenLimit",
    "WaitingForAnswer",
    "charge_scopes",
    "close_quietly",
    "cut_off",
    "drawn",
]

RecordedEffect = LeafEffect
"""The name ``op.LeafEffect`` had here before 0.3.0 (the effects handlers perform; the
driver owns scopes and state)."""


class WaitingForAnswer(BaseException):
    """Raised by an ``ask`` handler that has no answer yet: the run stops as ``waiting``."""

    def __init__(self, question: str) -> None:
        super().__init__(question)
        self.question = question


class BudgetStop(BaseException):
    """Unwinds from the effect that found a budget spent to the ``limit`` that owns it."""

    def __init__(self, scope: Scope, exhausted: BudgetExhausted) -> None:
        super().__init__(exhausted.exceeded)
        self.scope = scope
        self.exhausted = exhausted


@final
@dataclass(slots=True)
class Call:
    """What a handler knows about the effect it performs (``CallInfo`` is its public name)."""

    run_id: str
    address: str
    clock: Clock
    bus: EventBus
    #: inside a ``timeout``: a blocking (sync) tool runs in a worker thread so the deadline
    #: can fire while it works
    off_loop: bool = False
    #: tokens streamed so far (one per :meth:`token`), and how many the enclosing ``tokens``
    #: budgets leave: reaching it stops the call (``TokenLimit``)
    streamed: int = 0
    token_limit: int | None = None
    #: for an ``infer``: how many the run asked for before this one, those its record fed
    #: back included (a scripted model's place in its answers is the run's, in any process)
    model_calls: int | None = None
    #: set by a handler cut off mid-work (a tool under a ``timeout``): what kind of work it
    #: was and whether it can still land, which the scope's ``TimedOut`` then says
    cut: str | None = None

    @property
    def idempotency_key(self) -> str:
        """Stable across a crash and a resume: the same effect gets the same key."""
        return f"{self.run_id}:{self.address}"

    def token(self, text: str, *, thinking: bool = False) -> None:
        """A streamed piece of the answer, or of the model's thinking before it (about one
        token): told to the sinks, counted against the budget."""
        self.streamed += 1
        if self.bus.active:
            self.bus.emit(
                TokenDelta(
                    run_id=self.run_id,
                    at=self.clock.now(),
                    address=self.address,
                    text=text,
                    thinking=thinking,
                )
            )
        if self.token_limit is not None and self.streamed >= self.token_limit:
            raise TokenLimit()


def drawn(effect: Random | Uuid, call: Call, seed: int | str | None) -> float | str:
    """A ``random`` or ``uuid`` value: one stream per address (seeded by ``seed``, else the run
    id), so a resumed run draws what an uninterrupted one would have, on any interpreter."""
    rng = random.Random(f"{call.run_id if seed is None else seed}:{call.address}")
    if isinstance(effect, Random):
        return rng.random()
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


class TokenLimit(BaseException):
    """A streamed call reached what its ``tokens`` budget left: the driver stops it there
    (a ``BaseException``, so no provider code swallows it on the way out)."""


class Handlers(ABC):
    """Performs the world-facing effects. Interpreters differ in their handlers.

    For ``checkpoint``, ``perform`` may return a snapshot of the world (a workspace tree):
    it is journaled with the checkpoint and handed to :meth:`restore` when a run is forked
    from there; the program itself sees ``None``.
    """

    @abstractmethod
    async def perform(self, effect: RecordedEffect, call: Call) -> Any:
        """Do what ``effect`` asks and return its result (or raise, to throw into the program)."""

    async def restore(self, snapshot: Any) -> None:  # noqa: B027 - nothing to restore by default
        """Put the world back as a checkpoint's snapshot recorded it (forks)."""

    def replayed(self, effect: LeafEffect, result: Any) -> None:  # noqa: B027 - nothing to learn
        """A finished effect the record answered with ``result`` instead of this performing
        it (a resume, a fork): handlers that keep account of what was done learn of it here,
        as though they had done it (a workspace, of the files the run has read)."""

    def unpriced(self, effect: Infer | Agent) -> str | None:
        """Why the cost of ``effect`` cannot be known before it runs, if it cannot (a model
        without a price): a ``usd`` budget then stops it instead of counting it as free."""
        return None


LocalEffect: TypeAlias = Emit | Now | Random | Uuid | Sleep | Patched
"""The leaf effects every interpreter performs alike, within the run: the clock's time and
sleeps, the draws of ``random`` and ``uuid``, ``emit`` (whose work is the events) and a
``patched`` marker reached live (the new code: a run recorded without it is answered from
the record, ``_layers.Replay``)."""


class RunHandlers(Handlers):
    """The base of an interpreter's handlers: :meth:`local` performs :data:`LocalEffect`
    (``now``, ``random``, ``uuid``, ``sleep``, ``emit``, ``patched``) the one way every interpreter
    does; the subclass performs the world-facing effects in ``perform`` and hands these on.

    ``seed`` seeds ``random`` and ``uuid`` (None: the run id), so a resumed run, a local run
    and one on another engine draw the same values at the same address."""

    def __init__(self, *, seed: int | str | None = None) -> None:
        self.seed = seed

    async def local(self, effect: LocalEffect, call: Call) -> Any:
        """Perform an effect of the run's own."""
        match effect:
            case Emit():
                return None
            case Now():
                return call.clock.now()
            case Random() | Uuid():
                return drawn(effect, call, self.seed)
            case Sleep():
                await call.clock.sleep(effect.seconds)
                return None
            case Patched():
                return True
            case _:
                assert_never(effect)


@dataclass(slots=True)
class Replica:
    """A branch's replica of the state."""

    id: str
    state: CRDTModel | None
    lamport: int = 0

    def stamp(self) -> Stamp:
        self.lamport += 1
        return Stamp(self.id, self.lamport)


@dataclass(slots=True)
class Scope:
    """A ``limit`` scope being run: its budget and what has been spent in it."""

    budget: Budget
    started: float
    #: False while replaying a finished scope: time is not measured again
    timed: bool = True
    tokens: int = 0
    usd: float = 0.0
    model_calls: int = 0
    tool_calls: int = 0
    usd_unknown: int = 0
    cached_tokens: int = 0

    def spent(self, now: float) -> Spent:
        return Spent(
            cached_tokens=self.cached_tokens,
            tokens=self.tokens,
            usd=self.usd,
            model_calls=self.model_calls,
            tool_calls=self.tool_calls,
            seconds=max(0.0, now - self.started),
            usd_unknown=self.usd_unknown,
        )

    def exceeded(self, effect: AnyEffect, now: float) -> str | None:
        """The measure that stops ``effect`` from running in this scope, if any."""
        b = self.budget
        calls_model = isinstance(effect, Infer | Agent)
        if b.seconds is not None and self.timed and now - self.started >= b.seconds:
            return "seconds"
        if b.tokens is not None and (
            self.tokens > b.tokens or (calls_model and self.tokens >= b.tokens)
        ):
            return "tokens"
        if b.usd is not None and (
            self.usd > b.usd or (calls_model and (self.usd >= b.usd or self.usd_unknown))
        ):
            return "usd"
        if b.model_calls is not None and calls_model and self.model_calls >= b.model_calls:
            return "model_calls"
        if (
            b.tool_calls is not None
            and isinstance(effect, Tool)
            and self.tool_calls >= b.tool_calls
        ):
            return "tool_calls"
        return None

    def charge(self, effect: AnyEffect, usage: Usage | None) -> None:
        if isinstance(effect, Infer | Agent):
            self.model_calls += 1
        elif isinstance(effect, Tool):
            self.tool_calls += 1
        if usage is not None:
            self.tokens += usage.total_tokens
            self.cached_tokens += usage.cached_tokens
            if usage.cost_usd is None:
                self.usd_unknown += 1 if isinstance(effect, Infer | Agent) else 0
            else:
                self.usd += usage.cost_usd

    def exhausted(self, measure: str, now: float, reason: str | None = None) -> BudgetExhausted:
        if (
            reason is None
            and measure == "usd"
            and self.usd_unknown
            and self.usd <= (self.budget.usd or 0.0)
        ):
            reason = (
                f"{self.usd_unknown} model call(s) in this scope had no known price, so a usd budget "
                "cannot be kept; give the model's price in a file named by OPDSL_PRICES"
            )
        data = {"budget": self.budget, "spent": self.spent(now), "exceeded": measure}
        if reason is not None:
            data["reason"] = reason
        return BudgetExhausted.model_validate(data)


@dataclass(slots=True)
class Frame:
    """One generator being driven: its address prefix, replica and enclosing budgets."""

    prefix: str
    replica: Replica
    scopes: tuple[Scope, ...] = ()
    #: the innermost enclosing scope whose record is finished (replaying), if any
    finished_scope: FinishedScope | None = None
    gen: Generator[Any, Any, Any] | None = None
    #: inside a ``timeout`` scope
    deadline: bool = False
    #: the ``model_calls`` of the ``infer`` this frame performs now (``Driver.perform``)
    model_call: int | None = None
    count: int = 0
    last: str = field(default="")

    def next_address(self) -> str:
        self.count += 1
        self.last = f"{self.prefix}.{self.count}" if self.prefix else str(self.count)
        return self.last

    def take_back(self) -> None:
        """Give back the address :meth:`next_address` just gave: a ``patched`` marker that a
        run passed before it existed takes no address in it (``_layers.Replay``)."""
        self.count -= 1
        if self.count == 0:
            self.last = ""
        else:
            self.last = f"{self.prefix}.{self.count}" if self.prefix else str(self.count)


def charge_scopes(frame: Frame, effect: AnyEffect, usage: Usage | None) -> None:
    """The one place budgets are charged: every enclosing ``limit`` of the frame, whether the
    effect ran now or its outcome came from the record."""
    for scope in frame.scopes:
        scope.charge(effect, usage)


def cut_off(frame: Frame) -> bool:
    """Whether the frame runs inside a scope whose record says it was cut off (a ``Failure``
    outcome): replaying stops where the recorded run stopped."""
    scope = frame.finished_scope
    return scope is not None and scope.failed


def close_quietly(gen: Generator[Any, Any, Any]) -> None:
    """Close a program's generator, so its ``finally`` blocks run."""
    # A program whose ``finally`` yields an effect while being closed cannot run that
    # effect (the scope is gone); Python reports it as a RuntimeError, which is dropped so
    # that the reason the scope closed (a timeout, a spent budget) is what propagates.
    with contextlib.suppress(RuntimeError):
        gen.close()


class ReplayStop(BaseException):
    """Replaying reached the point where the recorded run's scope was cut off (a timeout, a
    spent budget): unwinds to the innermost scope whose record is a ``Failure``."""
