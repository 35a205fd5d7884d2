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
   Fatal errors (``op.Fatal``: a program, test-script or record defect) and ``BaseException``s
   (cancellation, a budget closing its scope, a run suspending) close the generator, so its
   ``finally`` blocks run, and propagate.
4. **Write-ahead.** A recorded effect is ``begin``-ed in the journal before its handler runs
   and finished (``completed``/``failed``/``cancelled``) before the program sees the result.
   Each ``EffectStarted`` event is closed by exactly one ``EffectFinished``.
5. **Budgets.** Before every effect, every enclosing ``limit`` is checked, outermost first; a
   spent one stops its body (``BudgetStop`` unwinds to it). After the effect, its usage is
   charged to every enclosing ``limit``.
6. **State.** Each branch has a replica: an id (root ``r``, a branch of the ``par`` at ``a``
   ``r/a.i``), a state and a Lamport counter. Branches start from the parent's state and
   counter; at the join their states are merged in branch order and the parent's counter
   becomes the children's maximum plus one. Ids come from addresses only.

Nothing here does I/O beyond calling the journal, the sinks and the handlers it is given.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, assert_never, cast, final

from returns.result import Failure, Result, Success

from interpreters.journal._base import Entry, Journal, JournalError, RunRecord
from interpreters.journal._content import (
    ContentError,
    Packer,
    unpack_effect,
    unpack_result,
)
from interpreters.journal._status import FINISHED, EndStatus
from interpreters.runtime._clock import Clock
from interpreters.runtime._events import EventBus
from interpreters.runtime._frame import (
    BudgetStop,
    Frame,
    Handlers,
    ReplayStop,
    Replica,
    Scope,
    WaitingForAnswer,
    is_failure,
)
from interpreters.runtime._layers import Announced, Charge, Handled, Journaled, Perform, Replay
from interpreters.runtime._redact import Redactor
from interpreters.runtime._replay import (
    Divergence,
    ReplayLog,
    divergence,
    source_line,
)
from interpreters.runtime._schedule import AnyioScheduler, Scheduler
from op import (
    EFFECT_TYPES,
    Agent,
    AnyEffect,
    Ask,
    Budget,
    BudgetExhausted,
    Checkpoint,
    ConflictDetected,
    Emit,
    Fatal,
    Get,
    Infer,
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
    TimedOut,
    Timeout,
    Tool,
    ToolResult,
    Update,
    Uuid,
    default_state,
)
from op._marker import Marker
from state import CRDTModel, StateError, canonical_json, dump_jsonable, to_jsonable

__all__ = [
    "Driver",
    "RunResult",
    "execute",
    "nearest_checkpoint",
    "new_run_id",
    "program_name",
]

T = TypeVar("T")

_EFFECT_SET = frozenset(EFFECT_TYPES)

_OK_HEAD = '{"error":null,"ok":true,"output":'
_STRING = json.encoder.encode_basestring
"""A str as canonical JSON writes it (``canonical_json``'s encoder, for one string)."""

_ADDRESS = Marker("address", str)
"""The address where an exception first left a program (what a failed run reports)."""


def new_run_id() -> str:
    """A fresh run id (the interpreter's randomness, never a program's)."""
    return uuid.uuid4().hex[:12]


def program_name(program: object) -> str:
    """``module:qualname`` of a program function (its name in the journal). A program in a
    module run with ``python -m pkg.mod`` is named by that module, not ``__main__``, so that
    ``opdsl resume`` can import it again."""
    module = getattr(program, "__module__", None) or "?"
    if module == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        module = getattr(spec, "name", None) or module
    qual = getattr(program, "__qualname__", None) or type(program).__name__
    return f"{module}:{qual}"


def _infer_event(effect: Infer) -> dict[str, Any]:
    """An ``infer`` as the events give it, less its messages."""
    data = {
        "kind": "infer",
        **to_jsonable({"model": effect.model, "params": effect.params, "tools": effect.tools}),
    }
    if effect.output is not None:  # left out while None, as in the canonical form
        data["output"] = to_jsonable(effect.output)
    return data


def _mark(exc: BaseException, address: str) -> None:
    """Remember the address where an exception first left a program."""
    if _ADDRESS.get(exc) is None:
        _ADDRESS.put(exc, address)


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
        scheduler: Scheduler | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.run_id = run_id
        self.program = program
        self.handlers = handlers
        self.journal = journal
        self.bus = bus
        self.clock = clock
        self.log = log
        #: how branches run and tasks wait: anyio's unless another engine's loop runs the run
        self.scheduler = scheduler if scheduler is not None else AnyioScheduler()
        self.last_checkpoint: tuple[str, str] | None = None
        #: secrets are replaced before anything is journaled (events: the bus does the same)
        self.redact = redactor if redactor is not None else Redactor.from_env()
        self._secrets = bool(self.redact.secrets)
        #: Ctrl-C was pressed: the run stops before its next effect (see :meth:`interrupt`)
        self.interrupted = False
        self._payload_of: object = None
        self._payload: Any = None
        self._text_of: object = None
        self._text = ""
        #: each piece of content journaled once (``journal._content``): this run's chains
        self.packer = Packer(self.clean, keep=journal is not None)
        self._packed_of: object = None
        self._packed = ""
        # the chain of layers a leaf effect goes through (see ``_layers``): each is there
        # only when its job exists, so a live run with nothing to record is the handlers alone
        perform: Perform = Handled(self).perform
        self._journaled = None if journal is None else Journaled(self, perform)
        perform = perform if self._journaled is None else self._journaled.perform
        self._announced = Announced(self, perform) if bus.active else None
        perform = perform if self._announced is None else self._announced.perform
        self._replay = None if log is None else Replay(self, perform)
        self._leaf: Perform = perform if self._replay is None else self._replay.perform
        #: the same chain inside a ``limit``: usage is charged to the enclosing budgets
        self._charged: Perform = Charge(self, self._leaf).perform

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
                if isinstance(exc, Fatal):
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

    def clean(self, text: str) -> str:
        """``text`` with secrets replaced (what is journaled)."""
        # the redactor's own checks, skipped when there is nothing it could replace
        return self.redact(text) if self._secrets or "@" in text else text

    async def perform(self, effect: AnyEffect, address: str, frame: Frame) -> Any:
        """Check budgets, then perform one effect: a leaf through the chain of layers
        (``_layers``), a scope or state effect here."""
        if frame.scopes:
            if not self._in_record(address):
                # budgets judge what runs now; an effect the record finished is fed back as it
                # was, so a resume after a deadline agrees with a replay (and is charged)
                self._check_budgets(effect, frame)
            chain = self._charged
        else:
            chain = self._leaf
        match effect:
            case Tool() | Infer() | Agent() | Emit() | Now() | Random() | Uuid() | Sleep() | Ask():
                return await chain(effect, address, frame)
            case Checkpoint():
                # the handler's snapshot of the world is journaled; the program sees None
                await chain(effect, address, frame)
                self.last_checkpoint = (effect.name, address)
                return None
            case Limit():
                return await self._bounded(
                    effect, address, frame, budget=effect.budget, seconds=effect.budget.seconds
                )
            case Timeout():
                return await self._bounded(
                    effect, address, frame, budget=None, seconds=effect.seconds
                )
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

    def _check_budgets(self, effect: AnyEffect, frame: Frame) -> None:
        now = self.clock.monotonic()
        for scope in frame.scopes:
            measure = scope.exceeded(effect, now)
            if measure is not None:
                raise BudgetStop(scope, scope.exhausted(measure, now))
            if scope.budget.usd is not None and isinstance(effect, Infer | Agent):
                # fail closed: a call whose price cannot be known would be counted as free
                why = self.handlers.unpriced(effect)
                if why is not None:
                    raise BudgetStop(scope, scope.exhausted("usd", now, why))

    def _in_record(self, address: str) -> bool:
        if self.log is None:
            return False
        entry = self.log.entries.get(address)
        return entry is not None and entry.status in FINISHED

    # -- what the layers share --------------------------------------------------------------

    def payload(self, effect: AnyEffect, address: str) -> Any:
        """The effect as JSON data for the events (computed once per effect for all the
        layers). An ``infer``'s ``messages`` are those its conversation did not have before
        (``earlier`` counts the others), so an event costs what the call adds."""
        if effect is self._payload_of:
            return self._payload
        if type(effect) is Infer:
            self.recorded(effect, address)
            earlier = self.packer.earlier
            data = self._recordable(_infer_event, effect, address)
            data["messages"] = to_jsonable(effect.messages[earlier:])
            if earlier:
                data["earlier"] = earlier
        else:
            data = self._recordable(to_jsonable, effect, address)
        self._payload_of, self._payload = effect, data
        return data

    def effect_json(self, effect: AnyEffect, address: str) -> str:
        """The effect's whole canonical JSON text (before secrets are replaced): from its
        data when a layer already asked for it, else written straight from the effect. An
        ``infer``'s costs its whole conversation: what is journaled is :meth:`recorded`."""
        if effect is self._text_of:
            return self._text
        if effect is self._payload_of and type(effect) is not Infer:
            text = dump_jsonable(self._payload)
        else:
            text = self._recordable(canonical_json, effect, address)
        self._text_of, self._text = effect, text
        return text

    def recorded(self, effect: AnyEffect, address: str) -> str:
        """The effect's text as journaled: packed (each piece of content once, secrets
        replaced); the pieces it needs wait in the packer for :meth:`store_pieces`."""
        if effect is self._packed_of:
            return self._packed
        if type(effect) is Infer:
            text = self._recordable(self.packer.effect, effect, address).text
        else:
            text = self.effect_json(effect, address)
            # most effects are too short to hold a piece: only their secrets are replaced
            text = (
                self.clean(text)
                if len(text) < Packer.SHORT
                else self.packer.effect(effect, text).text
            )
        self._packed_of, self._packed = effect, text
        return text

    def recorded_result(self, value: Any, what: str, address: str) -> str:
        """A result's text as journaled: packed like an effect."""
        text = self.json(value, what, address)
        if len(text) < Packer.SHORT:
            return self.clean(text)
        return self.packer.result(value, text).text

    def store_pieces(self) -> None:
        """Hand the pieces made so far to the journal (before the entry that needs them)."""
        if self.packer.made and self.journal is not None:
            self.journal.put_content(self.packer.take())

    def whole(self, text: str | None, kind: str | None = None) -> str | None:
        """A journaled text, unpacked (``kind``: a result's effect kind; None: an effect)."""
        if text is None:
            return None
        get = self.content
        if kind is None:
            return unpack_effect(text, get)
        return unpack_result(kind, text, get)

    def shown(self, text: str | None, kind: str | None = None) -> str | None:
        """A journaled text as a divergence shows it: whole, or as it is when a piece it needs
        is missing."""
        try:
            return self.whole(text, kind)
        except (ContentError, ValueError):
            return text

    def content(self, h: str) -> str:
        """A piece of content by its hash: made by this run, or in the record's journal."""
        found = self.packer.pending(h)
        if found is None:
            source = self.log.content if self.log is not None else None
            if source is None and self.journal is not None:
                source = self.journal.content
            found = None if source is None else source((h,)).get(h)
        if found is None:
            raise ContentError(f"piece {h} is missing from the journal")
        return found

    def _recordable(self, write: Callable[[Any], T], effect: AnyEffect, address: str) -> T:
        """``write(effect)``; an effect that cannot be written is named with its address."""
        try:
            return write(effect)
        except NotSerializable as exc:
            raise NotSerializable(
                f"{self.program}: the {effect.kind} effect at address {address} cannot be "
                f"recorded: {exc}",
                path=exc.path,
            ) from None

    def json(self, value: Any, what: str, address: str) -> str:
        if type(value) is ToolResult and value.ok and value.error is None:
            # the commonest result, written without the generic walk (the same bytes)
            return _OK_HEAD + _STRING(value.output) + "}"
        try:
            return canonical_json(value)
        except NotSerializable as exc:
            raise NotSerializable(
                f"{self.program}: {what} at address {address} cannot be recorded: {exc}",
                path=exc.path,
            ) from None

    def diverged(
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

    def snapshot(self, frame: Frame) -> dict[str, Any]:
        """What a checkpoint journals besides the world: the frame's state and replica."""
        state = frame.replica.state
        return {
            "state": None if state is None else to_jsonable(state),
            "state_type": None if state is None else to_jsonable(type(state)),
            "replica": frame.replica.id,
            "lamport": frame.replica.lamport,
        }

    # -- scopes: opened and closed in the journal and on the bus like a leaf ----------------

    def _begin(self, effect: AnyEffect, address: str) -> float:
        if self._journaled is not None or self._announced is not None:
            data = self.payload(effect, address)
            if self._announced is not None:
                self._announced.started(effect, address, data)
            if self._journaled is not None:
                text = self.recorded(effect, address)  # from the data just computed
                self._journaled.begin(effect, address, text, self.clock.now())
        return self.clock.monotonic()

    def _end(
        self,
        effect: AnyEffect,
        address: str,
        t0: float,
        *,
        result_json: str | None = None,
        exc: BaseException | None = None,
    ) -> None:
        journaled, announced = self._journaled, self._announced
        if exc is None:
            if journaled is not None:
                journaled.finish(address, "completed", result_json=result_json)
            if announced is not None:
                announced.finished(effect, address, t0, "completed")
        else:
            if journaled is not None:
                journaled.failed(address, exc)
            if announced is not None:
                announced.failed(effect, address, t0, exc)

    # -- scopes -----------------------------------------------------------------------------

    def _open_scope(
        self, effect: AnyEffect, address: str, frame: Frame
    ) -> tuple[Entry | None, bool, float]:
        """Look the scope up in the record; begin it if it runs live. Returns (entry, live, t0)."""
        entry = None if self._replay is None else self._replay.lookup(effect, address, frame)
        # unfinished in the record (a crash left it started; a stop, cancelled): run it live,
        # as the effects inside it are
        live = entry is None or (self._replay is not None and self._replay.reopens(entry, frame))
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
                    raise self.diverged(
                        frame,
                        address,
                        "the record says this scope was cut off, but its body finished now",
                        entry.result_json,
                        self.json(outcome, "the outcome", address),
                    )
                return Failure(error_type.model_validate(data["error"]))
            if isinstance(outcome, Failure):
                raise self.diverged(
                    frame,
                    address,
                    "the record says this scope finished, but it was cut off now",
                    entry.result_json,
                    self.json(outcome, "the outcome", address),
                )
        return outcome

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
            scope = Scope(budget, self.clock.monotonic() - elapsed, timed=live)

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
        except BudgetStop as stop:
            if scope is None or stop.scope is not scope:
                if live:
                    self._end(effect, address, t0, exc=stop)
                raise
            outcome = Failure(stop.exhausted)
        except ReplayStop:
            if not is_failure(entry):
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
        return self.json(outcome, "the outcome of the scope", address)

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
        cancelled = self.scheduler.cancelled()

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
            await self.scheduler.run_all(
                [functools.partial(branch, i) for i in range(len(effect.bodies))]
            )
        except BaseExceptionGroup as group:
            # the error that reaches the parent: a real one before a replay cut-off, and
            # among those the first branch's
            ranked = sorted(
                (
                    (isinstance(e, ReplayStop), i, e)
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
                else self.json(list(values), "the par results", address)
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
    scheduler: Scheduler | None = None,
    interruptible: bool = True,
    redactor: Redactor | None = None,
) -> RunResult[T]:
    """Run a program from its start, with a run record, events and a result on every path.

    ``record``: the run as it will be journaled (its config, parent and fork point); when it
    already exists in ``journal``, the run is resumed in place. ``log``: recorded entries the
    program is fed from before it goes live (resume, fork) or instead of going live (replay).
    ``scheduler``: how ``par`` branches run (default: anyio's task groups).
    ``interruptible``: Ctrl-C stops the run at its next effect (off inside another engine,
    whose loop owns the process's signals). ``redactor``: what replaces secrets in the journal
    (default: the secrets in this process's environment).
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
        scheduler=scheduler,
        redactor=redactor,
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
        with _stop_on_interrupt(driver) if interruptible else contextlib.nullcontext():
            value = await driver.drive(gen, root)
        if journal is not None:
            result_json = driver.json(value, "the program's return value", root.last or "0")
        if log is not None and log.strict:
            unused = sorted(set(log.entries) - log.used, key=lambda a: log.entries[a].seq)
            if unused:
                first = log.entries[unused[0]]
                raise divergence(
                    program=name,
                    address=first.address,
                    where=f"the program returned after its effect at address {root.last or '(none)'}",
                    checkpoint=nearest_checkpoint(log.entries.values(), first.seq),
                    recorded=driver.shown(first.effect_json),
                    now=None,
                    reason=f"the program finished, but the record goes on: the {first.kind} effect "
                    f"recorded here is no longer asked for",
                )
        status = "completed"
    except WaitingForAnswer as wait:
        status, question, address = "waiting", wait.question, root.last or None
    except Exception as exc:
        status, error = "failed", exc
        address = _ADDRESS.get(exc) or root.last or None
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
