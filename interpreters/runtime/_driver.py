"""The driver: the one loop that runs every program, under every interpreter.

Invariants (everything else in ``interpreters/`` relies on them):

1. **One loop.** :meth:`Driver.drive` is the only code that calls ``send``/``throw`` on a
   program. It sends the last result (or throws the last error) in, takes the next effect,
   dispatches it by kind with a ``match`` that ends in ``assert_never``, and repeats.
2. **Addresses.** The n-th effect (1-based) a generator yields gets ``prefix.n`` (``n`` at the
   root). A ``limit``/``timeout`` at address ``a`` runs its body with prefix ``a``; branch i
   (1-based) of a ``par`` at ``a`` runs with prefix ``a.i``. Addresses never depend on timing,
   so a parallel run replays to the same addresses whatever order its branches finished in.
3. **Errors.** An ``Exception`` from a handler is thrown into the program at its ``yield``.
   Fatal errors (``opdsl_fatal``: a program or test-script defect) and ``BaseException``s
   (cancellation, a budget closing its scope, a run suspending) close the generator, so its
   ``finally`` blocks run, and propagate.
4. **Write-ahead.** A recorded effect is ``begin``-ed in the journal before its handler runs
   and finished (``completed``/``failed``/``cancelled``) before the program sees the result.
   Each ``EffectStarted`` event is closed by exactly one ``EffectFinished``.
5. **Budgets.** Before every effect, every enclosing ``limit`` is checked, outermost first; a
   spent one stops its body (``_BudgetStop`` unwinds to it). After the effect, its usage is
   charged to every enclosing ``limit``.
6. **State.** Each branch has a replica: an id (root ``r``, a branch of the ``par`` at ``a``
   ``r/a.i``), a state and a Lamport counter. Branches start from the parent's state and
   counter; at the join their states are merged in branch order and the parent's counter
   becomes the children's maximum plus one. Ids come from addresses only.

Nothing here does I/O beyond calling the journal, the sinks and the handlers it is given.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import signal
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, assert_never, cast, final

import anyio
from returns.result import Failure, Result, Success

from interpreters.journal._base import Entry, Journal, JournalError, RunRecord
from interpreters.journal._status import FINISHED, EndStatus
from interpreters.runtime._clock import Clock
from interpreters.runtime._events import EventBus
from interpreters.runtime._redact import Redactor
from interpreters.runtime._replay import (
    Divergence,
    ReplayLog,
    decode_error,
    decode_result,
    divergence,
    error_json,
    source_line,
)
from op import (
    EFFECT_TYPES,
    Agent,
    AnyEffect,
    Ask,
    Budget,
    BudgetExhausted,
    Checkpoint,
    CheckpointSaved,
    ConflictDetected,
    EffectFinished,
    EffectStarted,
    Emit,
    Emitted,
    Get,
    Infer,
    LeafEffect,
    Limit,
    Merge,
    MergeConflict,
    NotAnEffect,
    NotAProgram,
    NotSerializable,
    Now,
    Par,
    Put,
    Random,
    RunFailed,
    RunFinished,
    RunNotFinished,
    RunStarted,
    Sleep,
    Spent,
    TimedOut,
    Timeout,
    TokenDelta,
    Tool,
    ToolResult,
    Update,
    Usage,
    Uuid,
    default_state,
    usage_of,
)
from state import CRDTModel, Stamp, StateError, canonical_json, dump_jsonable, to_jsonable

__all__ = [
    "Call",
    "Driver",
    "Frame",
    "Handlers",
    "RecordedEffect",
    "Replica",
    "RunResult",
    "WaitingForAnswer",
    "execute",
    "nearest_checkpoint",
    "new_run_id",
    "program_name",
]

RecordedEffect = LeafEffect
"""The effects handlers perform (``op.LeafEffect``); the driver owns scopes and state."""

T = TypeVar("T")

_EFFECT_SET = frozenset(EFFECT_TYPES)


class WaitingForAnswer(BaseException):
    """Raised by an ``ask`` handler that has no answer yet: the run stops as ``waiting``."""

    def __init__(self, question: str) -> None:
        super().__init__(question)
        self.question = question


class _BudgetStop(BaseException):
    """Unwinds from the effect that found a budget spent to the ``limit`` that owns it."""

    def __init__(self, scope: _Scope, exhausted: BudgetExhausted) -> None:
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

    @property
    def idempotency_key(self) -> str:
        """Stable across a crash and a resume: the same effect gets the same key."""
        return f"{self.run_id}:{self.address}"

    def token(self, text: str) -> None:
        if self.bus.active:
            self.bus.emit(
                TokenDelta(run_id=self.run_id, at=self.clock.now(), address=self.address, text=text)
            )


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

    def unpriced(self, effect: Infer | Agent) -> str | None:
        """Why the cost of ``effect`` cannot be known before it runs, if it cannot (a model
        without a price): a ``usd`` budget then stops it instead of counting it as free."""
        return None


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
class _Scope:
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

    def spent(self, now: float) -> Spent:
        return Spent(
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
    scopes: tuple[_Scope, ...] = ()
    #: the innermost enclosing scope whose record is finished (replaying), if any
    finished_scope: Entry | None = None
    gen: Generator[Any, Any, Any] | None = None
    #: inside a ``timeout`` scope
    deadline: bool = False
    count: int = 0
    last: str = field(default="")

    def next_address(self) -> str:
        self.count += 1
        self.last = f"{self.prefix}.{self.count}" if self.prefix else str(self.count)
        return self.last


def new_run_id() -> str:
    """A fresh run id (the interpreter's randomness, never a program's)."""
    return uuid.uuid4().hex[:12]


def program_name(program: object) -> str:
    """``module:qualname`` of a program function (its name in the journal)."""
    module = getattr(program, "__module__", None) or "?"
    qual = getattr(program, "__qualname__", None) or type(program).__name__
    return f"{module}:{qual}"


def _charge(frame: Frame, effect: AnyEffect, usage: Usage | None) -> None:
    """The one place budgets are charged: every enclosing ``limit`` of the frame, whether the
    effect ran now or its outcome came from the record."""
    for scope in frame.scopes:
        scope.charge(effect, usage)


def _mark(exc: BaseException, address: str) -> None:
    """Remember the address where an exception first left a program."""
    if getattr(exc, "opdsl_address", None) is None:
        with contextlib.suppress(AttributeError, TypeError):
            exc.opdsl_address = address  # type: ignore[attr-defined]


def _close(gen: Generator[Any, Any, Any]) -> None:
    # A program whose ``finally`` yields an effect while being closed cannot run that
    # effect (the scope is gone); Python reports it as a RuntimeError, which is dropped so
    # that the reason the scope closed (a timeout, a spent budget) is what propagates.
    with contextlib.suppress(RuntimeError):
        gen.close()


def _not_an_effect(program: str, address: str, value: object) -> str:
    hint = ""
    if inspect.isgenerator(value):
        hint = " (it is a generator: write `yield from infer(...)`, not `yield infer(...)`)"
    return (
        f"{program} yielded {value!r:.80} ({type(value).__name__}) at address {address}, "
        f"which is not an effect{hint}"
    )


def _is_failure(entry: Entry | None) -> bool:
    """Whether a finished scope entry recorded a ``Failure`` outcome."""
    return (
        entry is not None
        and entry.status == "completed"
        and (entry.result_json or "").startswith('{"error"')
    )


class _ReplayStop(BaseException):
    """Replaying reached the point where the recorded run's scope was cut off (a timeout, a
    spent budget): unwinds to the innermost scope whose record is a ``Failure``."""


@final
class Driver:
    """Runs one run's generators; see the module docstring for its invariants."""

    def __init__(
        self,
        *,
        run_id: str,
        program: str,
        handlers: Handlers,
        journal: Journal | None,
        bus: EventBus,
        clock: Clock,
        log: ReplayLog | None = None,
    ) -> None:
        self.run_id = run_id
        self.program = program
        self.handlers = handlers
        self.journal = journal
        self.bus = bus
        self.clock = clock
        self.log = log
        self.last_checkpoint: tuple[str, str] | None = None
        self._record = journal is not None or bus.active
        #: secrets are replaced before anything is journaled (events: the bus does the same)
        self.redact = Redactor.from_env()
        self._secrets = bool(self.redact.secrets)
        #: Ctrl-C was pressed: the run stops before its next effect (see :meth:`interrupt`)
        self.interrupted = False

    # -- the loop ---------------------------------------------------------------------------

    async def drive(self, gen: Generator[AnyEffect, Any, Any], frame: Frame) -> Any:
        """Step ``gen`` to its end and return its value."""
        frame.gen = gen
        send: Any = None
        error: BaseException | None = None
        while True:
            try:
                effect = gen.send(send) if error is None else gen.throw(error)
            except StopIteration as stop:
                return stop.value
            except BaseException as exc:
                _mark(exc, frame.last or frame.prefix or "0")
                raise
            address = frame.next_address()
            if type(effect) not in _EFFECT_SET and not isinstance(effect, EFFECT_TYPES):
                _close(gen)
                raise NotAnEffect(_not_an_effect(self.program, address, effect))
            try:
                send = await self.perform(effect, address, frame)
                error = None
            except Exception as exc:
                if getattr(exc, "opdsl_fatal", False):
                    _mark(exc, address)
                    _close(gen)
                    raise
                send, error = None, exc
            except BaseException:
                _close(gen)
                raise

    def interrupt(self) -> None:
        """Stop the run before its next effect. The check costs the normal path nothing: the
        instance's ``perform`` is replaced by one that raises."""
        self.interrupted = True

        async def stopped(effect: AnyEffect, address: str, frame: Frame) -> Any:
            raise KeyboardInterrupt

        self.perform = stopped  # type: ignore[method-assign]

    def _clean(self, text: str) -> str:
        # the redactor's own checks, skipped when there is nothing it could replace
        return self.redact(text) if self._secrets or "@" in text else text

    async def perform(self, effect: AnyEffect, address: str, frame: Frame) -> Any:
        """Check budgets, then perform one effect."""
        if frame.scopes and not self._in_record(address):
            # budgets judge what runs now; an effect the record finished is fed back as it
            # was, so a resume after a deadline agrees with a replay (and is charged below)
            now = self.clock.monotonic()
            for scope in frame.scopes:
                measure = scope.exceeded(effect, now)
                if measure is not None:
                    raise _BudgetStop(scope, scope.exhausted(measure, now))
                if scope.budget.usd is not None and isinstance(effect, Infer | Agent):
                    # fail closed: a call whose price cannot be known would be counted as free
                    why = self.handlers.unpriced(effect)
                    if why is not None:
                        raise _BudgetStop(scope, scope.exhausted("usd", now, why))
        match effect:
            case (
                Tool()
                | Infer()
                | Agent()
                | Emit()
                | Checkpoint()
                | Now()
                | Random()
                | Uuid()
                | Sleep()
                | Ask()
            ):
                return await self._recorded(effect, address, frame)
            case Limit():
                return await self._limit(effect, address, frame)
            case Timeout():
                return await self._timeout(effect, address, frame)
            case Par():
                return await self._par(effect, address, frame)
            case Get():
                return self._get(effect, frame)
            case Put():
                return self._put(effect, frame)
            case Update():
                return self._update(effect, frame)
            case Merge():
                return self._merge(effect, frame)
            case _:
                assert_never(effect)

    def _in_record(self, address: str) -> bool:
        if self.log is None:
            return False
        entry = self.log.entries.get(address)
        return entry is not None and entry.status in FINISHED

    # -- recording --------------------------------------------------------------------------

    def _payload(self, effect: AnyEffect, address: str) -> Any:
        try:
            return to_jsonable(effect)
        except NotSerializable as exc:
            raise NotSerializable(
                f"{self.program}: the {effect.kind} effect at address {address} cannot be "
                f"recorded: {exc}",
                path=exc.path,
            ) from None

    def _json(self, value: Any, what: str, address: str) -> str:
        try:
            return canonical_json(value)
        except NotSerializable as exc:
            raise NotSerializable(
                f"{self.program}: {what} at address {address} cannot be recorded: {exc}",
                path=exc.path,
            ) from None

    def _begin(self, effect: AnyEffect, address: str) -> float:
        """Journal (or begin again, after a crash) and announce an effect starting."""
        if self._record:
            data = self._payload(effect, address)
            now = self.clock.now()
            if self.journal is not None:
                self.journal.begin(
                    self.run_id, address, effect.kind, self._clean(dump_jsonable(data)), now
                )
            if self.bus.active:
                self.bus.emit(
                    EffectStarted(
                        run_id=self.run_id, at=now, address=address, kind=effect.kind, effect=data
                    )
                )
        return self.clock.monotonic()

    def _end(
        self,
        effect: AnyEffect,
        address: str,
        t0: float,
        *,
        result_json: str | None = None,
        usage: Usage | None = None,
        exc: BaseException | None = None,
        tool_error: str | None = None,
    ) -> None:
        if not self._record:
            return
        status: Literal["completed", "failed", "cancelled"] = "completed"
        # a tool that failed completed as an effect; its error still reaches the sinks
        error = None if tool_error is None else f"tool failed: {tool_error}"
        if exc is not None:
            status = "failed" if isinstance(exc, Exception) else "cancelled"
            error = f"{type(exc).__name__}: {exc}"
        now = self.clock.now()
        if self.journal is not None:
            self.journal.finish(
                self.run_id,
                address,
                status,
                at=now,
                result_json=None if result_json is None else self._clean(result_json),
                error_json=None if exc is None else self._clean(error_json(exc)),
                usage_json=None if usage is None else canonical_json(usage),
            )
        if self.bus.active:
            self.bus.emit(
                EffectFinished(
                    run_id=self.run_id,
                    at=now,
                    address=address,
                    kind=effect.kind,
                    status=status,
                    duration_s=self.clock.monotonic() - t0,
                    usage=usage,
                    error=error,
                )
            )

    # -- replay -----------------------------------------------------------------------------

    def _diverged(
        self, frame: Frame, address: str, reason: str, recorded: str | None, now: str | None
    ) -> Divergence:
        return divergence(
            program=self.program,
            address=address,
            where=source_line(frame.gen),
            checkpoint=self.last_checkpoint,
            recorded=recorded,
            now=now,
            reason=reason,
        )

    def _lookup(self, effect: AnyEffect, address: str, frame: Frame) -> Entry | None:
        """The recorded entry for this effect, checked against it; None to go live."""
        log = self.log
        if log is None:
            return None
        entry = log.entries.get(address)
        if entry is None:
            if _is_failure(frame.finished_scope):
                raise _ReplayStop()
            if frame.finished_scope is not None:
                raise self._diverged(
                    frame,
                    address,
                    f"the record finished the scope at {frame.finished_scope.address} without this effect",
                    None,
                    dump_jsonable(self._payload(effect, address)),
                )
            if log.strict:
                raise self._diverged(
                    frame,
                    address,
                    "the record ends before this effect",
                    None,
                    dump_jsonable(self._payload(effect, address)),
                )
            return None
        now = self._clean(dump_jsonable(self._payload(effect, address)))
        if now != entry.effect_json:
            raise self._diverged(
                frame,
                address,
                "the program asks for a different effect here",
                entry.effect_json,
                now,
            )
        log.used.add(address)
        return entry

    async def _replayed(
        self, effect: RecordedEffect, address: str, frame: Frame, entry: Entry
    ) -> Any:
        """The recorded outcome of a finished entry, as the program saw it the first time."""
        if entry.status == "completed":
            if isinstance(effect, Checkpoint):
                self.last_checkpoint = (effect.name, address)
                if self.log is not None and self.log.restore_at == address:
                    self._restore(frame, address, entry)
                    world = json.loads(entry.result_json or "{}").get("world")
                    if world is not None:
                        await self.handlers.restore(world)
            if frame.scopes:
                usage = Usage.model_validate_json(entry.usage_json) if entry.usage_json else None
                _charge(frame, effect, usage)
            return decode_result(effect, entry.result_json)
        if entry.status == "failed":
            raise decode_error(entry.error_json)
        # cancelled: a timeout or budget cut it off, or a par sibling's failure did
        if _is_failure(frame.finished_scope):
            raise _ReplayStop()
        await anyio.sleep_forever()

    def _restore(self, frame: Frame, address: str, entry: Entry) -> None:
        """At a fork's checkpoint: the replayed state must be the recorded snapshot."""
        snapshot = json.loads(entry.result_json or "{}")
        recorded = snapshot.get("state")
        state = frame.replica.state
        same = state.matches(recorded) if state is not None else recorded is None
        if not same:
            now = None if state is None else json.loads(state.canonical())
            raise self._diverged(
                frame,
                address,
                "the state at this checkpoint differs from the recorded snapshot",
                canonical_json(recorded),
                canonical_json(now),
            )
        frame.replica.lamport = max(frame.replica.lamport, int(snapshot.get("lamport", 0)))

    async def _recorded(self, effect: RecordedEffect, address: str, frame: Frame) -> Any:
        if self.log is not None:
            entry = self._lookup(effect, address, frame)
            if entry is not None:
                reopen = (
                    entry.status == "cancelled"
                    and not self.log.strict
                    and not _is_failure(frame.finished_scope)
                )
                if entry.status != "started" and not reopen:
                    return await self._replayed(effect, address, frame, entry)
                if self.log.strict:
                    if isinstance(effect, Ask):
                        raise WaitingForAnswer(effect.question)
                    raise self._diverged(
                        frame,
                        address,
                        "the record ends inside this effect (it started and never finished)",
                        entry.effect_json,
                        entry.effect_json,
                    )
                # a crash or a stop left it unfinished: perform it again (at least once), with
                # the same idempotency key
        elif not self._record:
            # the fast path: nothing listens, nothing is journaled; budgets still count
            result = await self.handlers.perform(
                effect, Call(self.run_id, address, self.clock, self.bus, frame.deadline)
            )
            if frame.scopes:
                _charge(frame, effect, usage_of(result))
            return result
        t0 = self._begin(effect, address)
        try:
            result = await self.handlers.perform(
                effect, Call(self.run_id, address, self.clock, self.bus, frame.deadline)
            )
        except WaitingForAnswer:
            # the entry stays ``started``: the question is open until it is answered
            if self.bus.active:
                self.bus.emit(
                    EffectFinished(
                        run_id=self.run_id,
                        at=self.clock.now(),
                        address=address,
                        kind=effect.kind,
                        status="unresolved",
                        error="waiting for an answer",
                    )
                )
            raise
        except BaseException as exc:
            self._end(effect, address, t0, exc=exc)
            raise
        usage = usage_of(result)
        if frame.scopes:
            _charge(frame, effect, usage)
        result_json = None
        recorded = result
        if isinstance(effect, Checkpoint):
            recorded = {**self._snapshot(frame), "world": result}
            result = None
        if self.journal is not None:
            result_json = self._json(recorded, f"the result of {effect.kind}", address)
        failed = result.error if isinstance(result, ToolResult) and not result.ok else None
        self._end(effect, address, t0, result_json=result_json, usage=usage, tool_error=failed)
        if isinstance(effect, Checkpoint):
            self.last_checkpoint = (effect.name, address)
        if self.bus.active:
            if isinstance(effect, Emit):
                self.bus.emit(
                    Emitted(
                        run_id=self.run_id,
                        at=self.clock.now(),
                        address=address,
                        name=effect.name,
                        data=to_jsonable(effect.data),
                    )
                )
            elif isinstance(effect, Checkpoint):
                self.bus.emit(
                    CheckpointSaved(
                        run_id=self.run_id, at=self.clock.now(), address=address, name=effect.name
                    )
                )
        return result

    def _snapshot(self, frame: Frame) -> dict[str, Any]:
        state = frame.replica.state
        return {
            "state": None if state is None else to_jsonable(state),
            "state_type": None if state is None else to_jsonable(type(state)),
            "replica": frame.replica.id,
            "lamport": frame.replica.lamport,
        }

    # -- scopes -----------------------------------------------------------------------------

    def _open_scope(
        self, effect: AnyEffect, address: str, frame: Frame
    ) -> tuple[Entry | None, bool, float]:
        """Look the scope up in the record; begin it if it runs live. Returns (entry, live, t0)."""
        entry = self._lookup(effect, address, frame)
        # unfinished in the record (a crash left it started; a stop, cancelled): run it live,
        # as the effects inside it are
        live = (
            entry is None
            or entry.status == "started"
            or (
                entry.status == "cancelled"
                and self.log is not None
                and not self.log.strict
                and not _is_failure(frame.finished_scope)
            )
        )
        t0 = self._begin(effect, address) if live else 0.0
        return entry, live, t0

    def _settle(
        self,
        effect: AnyEffect,
        address: str,
        frame: Frame,
        entry: Entry | None,
        outcome: Result[Any, Any],
        error_type: type[BudgetExhausted] | type[TimedOut],
    ) -> Result[Any, Any]:
        """The scope's outcome: the recorded failure when replaying one, else ``outcome``."""
        if entry is not None and entry.status == "completed":
            data = json.loads(entry.result_json or "{}")
            if "error" in data:
                if isinstance(outcome, Success):
                    raise self._diverged(
                        frame,
                        address,
                        "the record says this scope was cut off, but its body finished now",
                        entry.result_json,
                        self._json(outcome, "the outcome", address),
                    )
                return Failure(error_type.model_validate(data["error"]))
            if isinstance(outcome, Failure):
                raise self._diverged(
                    frame,
                    address,
                    "the record says this scope finished, but it was cut off now",
                    entry.result_json,
                    self._json(outcome, "the outcome", address),
                )
        return outcome

    async def _limit(
        self, effect: Limit[Any], address: str, frame: Frame
    ) -> Result[Any, BudgetExhausted]:
        return await self._bounded(
            effect, address, frame, budget=effect.budget, seconds=effect.budget.seconds
        )

    async def _timeout(
        self, effect: Timeout[Any], address: str, frame: Frame
    ) -> Result[Any, TimedOut]:
        return await self._bounded(effect, address, frame, budget=None, seconds=effect.seconds)

    async def _bounded(
        self,
        effect: Limit[Any] | Timeout[Any],
        address: str,
        frame: Frame,
        *,
        budget: Budget | None,
        seconds: float | None,
    ) -> Result[Any, Any]:
        """One scope helper for ``limit`` and ``timeout``: open the scope (live, or fed from the
        record), run the body under the budget and the deadline, settle the outcome against the
        record, close the scope."""
        entry, live, t0 = self._open_scope(effect, address, frame)
        # resumed inside the scope: its time kept running while the run was down
        elapsed = (
            max(0.0, self.clock.now() - entry.started_at) if entry is not None and live else 0.0
        )
        scope = None
        if budget is not None:
            scope = _Scope(budget, self.clock.monotonic() - elapsed, timed=live)

        def cut() -> BudgetExhausted | TimedOut:
            if scope is not None:
                return scope.exhausted("seconds", self.clock.monotonic())
            return TimedOut(seconds=seconds or 0.0)

        done = entry if entry is not None and entry.status == "completed" else frame.finished_scope
        child = Frame(
            prefix=address,
            replica=frame.replica,
            scopes=frame.scopes if scope is None else (*frame.scopes, scope),
            finished_scope=done,
            deadline=frame.deadline or isinstance(effect, Timeout),
        )
        outcome: Result[Any, Any]
        try:
            if seconds is None or not live:
                outcome = Success(await self.drive(effect.body, child))
            else:
                with self.clock.deadline(max(0.0, seconds - elapsed)) as cancel:
                    value = await self.drive(effect.body, child)
                outcome = Failure(cut()) if cancel.cancelled_caught else Success(value)
        except _BudgetStop as stop:
            if scope is None or stop.scope is not scope:
                if live:
                    self._end(effect, address, t0, exc=stop)
                raise
            outcome = Failure(stop.exhausted)
        except _ReplayStop:
            if not _is_failure(entry):
                raise
            outcome = Failure(cut())
        except BaseException as exc:
            if live:
                self._end(effect, address, t0, exc=exc)
            raise
        finally:
            _close(effect.body)
        outcome = self._settle(
            effect, address, frame, entry, outcome, BudgetExhausted if scope else TimedOut
        )
        if live:
            self._end(effect, address, t0, result_json=self._outcome_json(outcome, address))
        return outcome

    def _outcome_json(self, outcome: Result[Any, Any], address: str) -> str | None:
        if self.journal is None:
            return None
        return self._json(outcome, "the outcome of the scope", address)

    async def _par(self, effect: Par, address: str, frame: Frame) -> tuple[Any, ...]:
        entry, live, t0 = self._open_scope(effect, address, frame)
        done = entry if entry is not None and entry.status == "completed" else frame.finished_scope
        parent = frame.replica
        base = parent.state
        replicas = [
            Replica(f"r/{address}.{i}", base, parent.lamport)
            for i in range(1, len(effect.bodies) + 1)
        ]
        results: list[Any] = [None] * len(effect.bodies)
        errors: list[tuple[int, BaseException]] = []
        cancelled = anyio.get_cancelled_exc_class()

        async def branch(i: int) -> None:
            try:
                child = Frame(
                    prefix=f"{address}.{i + 1}",
                    replica=replicas[i],
                    scopes=frame.scopes,
                    finished_scope=done,
                    deadline=frame.deadline,
                )
                results[i] = await self.drive(effect.bodies[i], child)
            except BaseException as exc:
                errors.append((i, exc))
                raise
            finally:
                self.clock.task_done()

        # each branch counts as working from the moment it is scheduled, and the parent
        # stops counting while it waits at the join (see VirtualClock)
        for _ in effect.bodies:
            self.clock.task_started()
        self.clock.task_done()
        try:
            async with anyio.create_task_group() as tg:
                for i in range(len(effect.bodies)):
                    tg.start_soon(branch, i)
        except BaseExceptionGroup as group:
            # the error that reaches the parent: a real one before a replay cut-off, and
            # among those the first branch's
            ranked = sorted(
                (
                    (isinstance(e, _ReplayStop), i, e)
                    for i, e in errors
                    if not isinstance(e, cancelled)
                ),
                key=lambda t: (t[0], t[1]),
            )
            chosen = ranked[0][2] if ranked else group
            if live:
                self._end(effect, address, t0, exc=chosen)
            if not ranked:
                raise
            raise chosen from None
        except BaseException as exc:
            if live:
                self._end(effect, address, t0, exc=exc)
            raise
        finally:
            self.clock.task_started()
            for body in effect.bodies:
                _close(body)

        states = [r.state for r in replicas if r.state is not None]
        conflicts: dict[str, list[Any]] = {}
        if states:
            try:
                origin = base if base is not None else type(states[0])()
                merged = origin
                for s in states:
                    merged = merged.merge(s)
                if len(states) > 1:
                    conflicts = states[0].conflicts_since(origin, states[1:])
            except TypeError as exc:
                err = StateError(f"par at address {address}: cannot merge branch states: {exc}")
                if live:
                    self._end(effect, address, t0, exc=err)
                raise err from exc
            parent.state = merged
        parent.lamport = max([parent.lamport, *(r.lamport for r in replicas)]) + 1
        values = tuple(results)
        if conflicts and live and self.bus.active:
            self.bus.emit(
                ConflictDetected(
                    run_id=self.run_id,
                    at=self.clock.now(),
                    address=address,
                    conflicts=to_jsonable(conflicts),
                )
            )
        if conflicts and effect.on_conflict == "raise":
            err2 = MergeConflict(conflicts, values)
            if live:
                self._end(effect, address, t0, exc=err2)
            raise err2
        if live:
            result_json = (
                None
                if self.journal is None
                else self._json(list(values), "the par results", address)
            )
            self._end(effect, address, t0, result_json=result_json)
        return values

    # -- state ------------------------------------------------------------------------------

    def _get(self, effect: Get[Any], frame: Frame) -> CRDTModel:
        replica = frame.replica
        wanted = effect.state_type
        if replica.state is None:
            if not (isinstance(wanted, type) and issubclass(wanted, CRDTModel)):
                raise StateError(f"get() takes a CRDTModel class, not {wanted!r}")
            replica.state = wanted()
        if not isinstance(replica.state, wanted):
            raise StateError(
                f"get({getattr(wanted, '__name__', wanted)}): the state is a {type(replica.state).__name__}"
            )
        state: CRDTModel = replica.state
        return state

    def _put(self, effect: Put, frame: Frame) -> None:
        if not isinstance(effect.state, CRDTModel):
            raise StateError(f"put() takes a CRDTModel, not a {type(effect.state).__name__}")
        frame.replica.state = effect.state
        frame.replica.lamport = max(frame.replica.lamport, effect.state.max_lamport())

    def _update(self, effect: Update, frame: Frame) -> None:
        replica = frame.replica
        if replica.state is None:
            raise StateError("update() needs a state: pass state= to the run, or put() one first")
        replica.state = replica.state.apply(dict(effect.ops), replica.stamp())

    def _merge(self, effect: Merge, frame: Frame) -> None:
        replica = frame.replica
        if replica.state is None:
            replica.state = effect.delta
        else:
            try:
                replica.state = replica.state.merge(effect.delta)
            except TypeError as exc:
                raise StateError(f"merge(): {exc}") from exc
        replica.lamport = max(replica.lamport, effect.delta.max_lamport())


# -- a whole run ------------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class RunResult(Generic[T]):
    """How a run ended. ``value`` (the program's result, typed as the program declares it)
    raises unless the run completed.

    ``status`` is ``completed``, ``failed`` (``error`` and ``address`` say what and where),
    ``waiting`` (an ``ask`` has no answer yet) or ``cancelled``.
    """

    run_id: str
    program: str
    status: EndStatus
    state: CRDTModel | None
    journal: Journal | None
    error: BaseException | None = None
    address: str | None = None
    question: str | None = None
    _value: Any = None

    @property
    def value(self) -> T:
        if self.status == "completed":
            return cast("T", self._value)
        if self.status == "failed":
            raise RunFailed(self.describe()) from self.error
        raise RunNotFinished(self.describe())

    def describe(self) -> str:
        """One line on how the run ended."""
        if self.status == "failed":
            where = f" at address {self.address}" if self.address else ""
            return f"run {self.run_id} of {self.program} failed{where}: {type(self.error).__name__}: {self.error}"
        if self.status == "waiting":
            return (
                f"run {self.run_id} of {self.program} is waiting for an answer to: {self.question}"
            )
        return f"run {self.run_id} of {self.program} {self.status}"


def start_program(
    program: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Generator[AnyEffect, Any, Any]:
    """Call a program function and check that it gave a generator of effects."""
    name = program_name(program)
    if inspect.isgenerator(program):
        raise NotAProgram(
            f"{name} is an already-started generator; pass the function and its arguments instead"
        )
    if not callable(program):
        raise NotAProgram(f"{program!r} is not a program: pass a generator function")
    gen = program(*args, **kwargs)
    if inspect.isgenerator(gen):
        return cast("Generator[AnyEffect, Any, Any]", gen)
    if inspect.iscoroutine(gen):
        gen.close()
        raise NotAProgram(
            f"{name} is an async function; a program is a generator function (def + yield from)"
        )
    raise NotAProgram(
        f"{name} returned a {type(gen).__name__}, not a generator: a program yields effects "
        "(`x = yield from infer(...)`)"
    )


async def execute(
    program: Callable[..., Generator[Any, Any, T]],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    run_id: str,
    handlers: Handlers,
    journal: Journal | None,
    bus: EventBus,
    clock: Clock,
    state: CRDTModel | None = None,
    log: ReplayLog | None = None,
    record: RunRecord | None = None,
) -> RunResult[T]:
    """Run a program from its start, with a run record, events and a result on every path.

    ``record``: the run as it will be journaled (its config, parent and fork point); when it
    already exists in ``journal``, the run is resumed in place. ``log``: recorded entries the
    program is fed from before it goes live (resume, fork) or instead of going live (replay).
    """
    name = program_name(program)
    if state is not None and not isinstance(state, CRDTModel):
        raise StateError(f"state= takes a CRDTModel, not a {type(state).__name__}")
    if state is None:
        state = default_state(program)  # the state type the program declared, if any
    args_json = '{"args":[],"kwargs":{}}'
    if journal is not None or bus.active:
        for i, arg in enumerate(args):
            _check_arg(name, f"argument {i + 1}", arg)
        for key, arg in kwargs.items():
            _check_arg(name, f"argument {key!r}", arg)
        args_json = canonical_json({"args": list(args), "kwargs": dict(kwargs)})
    gen = start_program(program, args, kwargs)
    driver = Driver(
        run_id=run_id,
        program=name,
        handlers=handlers,
        journal=journal,
        bus=bus,
        clock=clock,
        log=log,
    )
    locked = False
    prior: RunRecord | None = None  # the run as it was, when it is resumed in place
    if journal is not None:
        prior = (
            _try_run(journal, run_id) if record is not None and record.run_id == run_id else None
        )
        existing = prior is not None
        journal.acquire(run_id)
        locked = True
        try:
            if existing:
                journal.reopen_run(run_id)
            else:
                base = record or RunRecord(run_id=run_id, program=name)
                journal.create_run(
                    base.model_copy(
                        update={
                            "run_id": run_id,
                            "program": name,
                            "args_json": args_json,
                            "state_json": None if state is None else state.canonical(),
                            "created_at": clock.now(),
                            "config_json": _with_state_type(base.config_json, state),
                        }
                    )
                )
        except BaseException:
            journal.release(run_id)
            raise
    if bus.active:
        bus.emit(
            RunStarted(
                run_id=run_id,
                at=clock.now(),
                program=name,
                args=json.loads(args_json),
                parent_run=None if record is None else record.parent_run,
            )
        )
    root = Frame(prefix="", replica=Replica("r", state, state.max_lamport() if state else 0))
    status: EndStatus = "failed"
    value: Any = None
    error: BaseException | None = None
    address: str | None = None
    question: str | None = None
    result_json: str | None = None
    try:
        with _stop_on_interrupt(driver):
            value = await driver.drive(gen, root)
        if journal is not None:
            result_json = driver._json(value, "the program's return value", root.last or "0")
        if log is not None and log.strict:
            unused = sorted(set(log.entries) - log.used, key=lambda a: log.entries[a].seq)
            if unused:
                first = log.entries[unused[0]]
                raise divergence(
                    program=name,
                    address=first.address,
                    where=f"the program returned after its effect at address {root.last or '(none)'}",
                    checkpoint=nearest_checkpoint(log.entries.values(), first.seq),
                    recorded=first.effect_json,
                    now=None,
                    reason=f"the program finished, but the record goes on: the {first.kind} effect "
                    f"recorded here is no longer asked for",
                )
        status = "completed"
    except WaitingForAnswer as wait:
        status, question, address = "waiting", wait.question, root.last or None
    except Exception as exc:
        status, error = "failed", exc
        address = getattr(exc, "opdsl_address", None) or root.last or None
    except BaseException:
        status = "cancelled"
        raise
    finally:
        _close(gen)
        message = None if error is None else f"{type(error).__name__}: {error}"
        final_state = root.replica.state
        if journal is not None:
            try:
                err = None
                if error is not None:
                    err = canonical_json(
                        {"type": type(error).__name__, "message": str(error), "address": address}
                    )
                if isinstance(error, JournalError):
                    pass  # the journal cannot be written: the run stays as it stands (running),
                    # to be resumed once the cause is gone
                elif prior is not None and isinstance(error, Divergence):
                    # a resume that finds the program changed leaves the run as it was, so it
                    # can be resumed again once the program is put right
                    journal.finish_run(
                        run_id,
                        prior.status,
                        at=prior.finished_at or clock.now(),
                        result_json=prior.result_json,
                        error_json=prior.error_json,
                        final_state_json=prior.final_state_json,
                    )
                else:
                    journal.finish_run(
                        run_id,
                        status,
                        at=clock.now(),
                        result_json=driver.redact.optional(result_json),
                        error_json=driver.redact.optional(err),
                        final_state_json=None if final_state is None else final_state.canonical(),
                    )
            finally:
                if locked:
                    try:
                        journal.release(run_id)
                    except JournalError:
                        if not isinstance(error, JournalError):
                            raise
                        # the journal is failing: the lock is left, and taken over on resume
        if bus.active:
            bus.emit(
                RunFinished(
                    run_id=run_id, at=clock.now(), status=status, error=message, address=address
                )
            )
    return RunResult(
        run_id=run_id,
        program=name,
        status=status,
        state=root.replica.state,
        journal=journal,
        error=error,
        address=address,
        question=question,
        _value=value,
    )


def nearest_checkpoint(entries: Iterable[Entry], before_seq: int) -> tuple[str, str] | None:
    """(name, address) of the last checkpoint recorded before the entry numbered ``before_seq``."""
    best: Entry | None = None
    for e in entries:
        if e.kind == "checkpoint" and e.seq < before_seq and (best is None or e.seq > best.seq):
            best = e
    return None if best is None else (str(json.loads(best.effect_json).get("name")), best.address)


_RUNNING: list[Driver] = []
"""The runs of this process that Ctrl-C stops; one handler serves them all."""
_PREVIOUS: list[Any] = []  # the SIGINT handler to put back when the last run ends


def _on_interrupt(signum: int, frame: Any) -> None:
    if any(d.interrupted for d in _RUNNING):
        raise KeyboardInterrupt  # a second Ctrl-C: at once
    for driver in _RUNNING:
        driver.interrupt()
    previous = _PREVIOUS[0] if _PREVIOUS else None
    if previous is not signal.default_int_handler and callable(previous):
        previous(signum, frame)  # asyncio's: cancels what awaits, so a model call stops too


@contextlib.contextmanager
def _stop_on_interrupt(driver: Driver) -> Iterator[None]:
    """Ctrl-C stops the run at its next effect, even while a synchronous tool blocks (which
    no cancellation can reach); a second Ctrl-C interrupts at once. Runs that overlap in one
    process share one handler, installed by the first and removed by the last, so the
    handler that was there before is always the one put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not _RUNNING:
        try:
            _PREVIOUS[:] = [signal.signal(signal.SIGINT, _on_interrupt)]
        except ValueError:  # not the main interpreter
            yield
            return
    _RUNNING.append(driver)
    try:
        yield
    finally:
        _RUNNING.remove(driver)
        if not _RUNNING:
            signal.signal(signal.SIGINT, _PREVIOUS.pop())


def _try_run(journal: Journal, run_id: str) -> RunRecord | None:
    try:
        return journal.run(run_id)
    except Exception:
        return None


def _with_state_type(config_json: str, state: CRDTModel | None) -> str:
    config = json.loads(config_json or "{}")
    if state is not None:
        config["state_type"] = to_jsonable(type(state))
    return canonical_json(config)


def _check_arg(program: str, which: str, value: Any) -> None:
    try:
        to_jsonable(value)
    except NotSerializable as exc:
        raise NotSerializable(
            f"{program}: {which} cannot be recorded: {exc}", path=exc.path
        ) from None
