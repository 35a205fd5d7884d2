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
import inspect
import json
import math
import os
import sys
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, assert_never, cast, final

from interpreters.journal._base import Entry, Journal, RunRecord
from interpreters.journal._checkpoint import CheckpointSnapshot
from interpreters.journal._content import (
    ContentError,
    Packer,
    unpack_effect,
    unpack_result,
)
from interpreters.journal._status import FINISHED, EndStatus
from interpreters.runtime._frame import (
    BudgetStop,
    Frame,
    Replica,
    WaitingForAnswer,
    close_quietly,
)
from interpreters.runtime._interrupt import stop_on_interrupt
from interpreters.runtime._layers import Announced, Charge, Handled, Journaled, Perform, Replay
from interpreters.runtime._redact import Redactor
from interpreters.runtime._replay import (
    Divergence,
    ReplayLog,
    divergence,
    nearest_checkpoint,
    source_line,
    unused_entry,
)
from interpreters.runtime._run import RunEnd, RunLife
from interpreters.runtime._schedule import AnyioScheduler
from interpreters.runtime._scopes import Scoped, bounded, par
from interpreters.runtime._services import Services
from interpreters.runtime._totals import Tally, Totals
from op import (
    Agent,
    Ask,
    Checkpoint,
    Emit,
    Fatal,
    Get,
    Infer,
    Limit,
    Merge,
    Now,
    Par,
    Patched,
    Put,
    Random,
    Response,
    RunFailed,
    RunNotFinished,
    Sleep,
    Timeout,
    Tool,
    ToolResult,
    Update,
    Usage,
    Uuid,
    default_state,
    usage_of,
)
from op._marker import Marker
from op.effects import EFFECT_TYPES, AnyEffect, NotAnEffect, NotAProgram, NotSerializable
from op.events import RunFinished, RunStarted
from state import CRDTModel, StateError, canonical_json, dump_jsonable, to_jsonable
from state._canonical import LONE_HINT, lone_path, lone_surrogate

__all__ = [
    "Driver",
    "RunResult",
    "Services",
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

_KNOWN_FIELDS = tuple(Response.model_fields) == (
    "text",
    "tool_calls",
    "stop_reason",
    "usage",
    "model",
) and tuple(Usage.model_fields) == (
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cost_usd",
    "cache_write_tokens",
    "price_source",
)
"""Whether a response and its usage have the fields :func:`usage_json` and
:func:`response_json` write (a field added to either sends them to the generic walk)."""


def usage_json(usage: Usage) -> str | None:
    """``canonical_json(usage)``, written field by field (every model call's usage is
    journaled, twice: in its response and on its own); None where the generic walk must
    write it (an unusual value: it says what is wrong with it)."""
    if not _KNOWN_FIELDS or type(usage) is not Usage:
        return None
    w, c, i, o = (
        usage.cache_write_tokens,
        usage.cached_tokens,
        usage.input_tokens,
        usage.output_tokens,
    )
    cost, source = usage.cost_usd, usage.price_source
    if type(w) is not int or type(c) is not int or type(i) is not int or type(o) is not int:
        return None
    if cost is None:
        cost_text = "null"
    elif type(cost) is float and math.isfinite(cost):
        cost_text = float.__repr__(cost)
    else:
        return None
    # cache_write_tokens is left out while 0 (Usage.__canonical_implied__), price_source
    # while None (omit_if_none)
    text = (
        ('{"cache_write_tokens":' + str(w) + ',"cached_tokens":' if w else '{"cached_tokens":')
        + str(c)
        + ',"cost_usd":'
        + cost_text
        + ',"input_tokens":'
        + str(i)
        + ',"output_tokens":'
        + str(o)
    )
    if source is None:
        return text + "}"
    if type(source) is not str:
        return None
    return text + ',"price_source":' + _STRING(source) + "}"


def response_json(response: Response, usage: str | None) -> str | None:
    """``canonical_json(response)`` of a response without tool calls (the commonest answer),
    written field by field, ``usage`` its usage's text (:func:`usage_json`); None where the
    generic walk must write it."""
    text, model, stop = response.text, response.model, response.stop_reason
    if usage is None or response.tool_calls or type(response) is not Response:
        return None
    if type(text) is not str or type(model) is not str or type(stop) is not str:
        return None
    return (
        '{"model":'
        + _STRING(model)
        + ',"stop_reason":'
        + _STRING(stop)
        + ',"text":'
        + _STRING(text)
        + ',"tool_calls":[],"usage":'
        + usage
        + "}"
    )


_ADDRESS = Marker("address", str)
"""The address where an exception first left a program (what a failed run reports)."""


_ENV_REDACTOR: list[tuple[dict[Any, Any], Redactor]] = []
"""The redactor the environment made last, and a copy of the environment it was made from."""


def env_redactor() -> Redactor:
    """``Redactor.from_env()``, made again only when the environment changed since it was last
    made (reading every variable costs about half a millisecond, and every run's driver needs
    one): a variable set, changed or removed between two runs is seen by the second."""
    data = getattr(os.environ, "_data", None)  # the process's environment, as os keeps it
    if not isinstance(data, dict):
        return Redactor.from_env()
    if _ENV_REDACTOR and _ENV_REDACTOR[0][0] == data:
        return _ENV_REDACTOR[0][1]
    made = Redactor.from_env()
    _ENV_REDACTOR[:] = [(dict(data), made)]
    return made


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
        "kind": Infer.kind,
        **to_jsonable({"model": effect.model, "params": effect.params, "tools": effect.tools}),
    }
    if effect.output is not None:  # left out while None, as in the canonical form
        data["output"] = to_jsonable(effect.output)
    return data


def _mark(exc: BaseException, address: str) -> None:
    """Remember the address where an exception first left a program."""
    if _ADDRESS.get(exc) is None:
        _ADDRESS.put(exc, address)


_close = close_quietly


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
        self, *, run_id: str, program: str, services: Services, log: ReplayLog | None = None
    ) -> None:
        self.run_id = run_id
        self.program = program
        self.services = services
        self.handlers = services.handlers
        self.journal: Journal | None = services.journal
        self.bus = services.bus
        self.clock = services.clock
        self.log = log
        #: the ``infer`` effects asked for so far, fed from the record or performed
        self.model_calls = 0
        #: what the run's effects spent, those its record fed back included (``RunResult.totals``)
        self.tally = Tally()
        #: what handlers cut off mid-work said of it, by address, until a scope's
        #: ``TimedOut`` takes it (``_scopes``)
        self.cuts: dict[str, str] = {}
        #: how branches run and tasks wait: anyio's unless another engine's loop runs the run
        self.scheduler = services.scheduler or AnyioScheduler()
        self.last_checkpoint: tuple[str, str] | None = None
        #: secrets are replaced before anything is journaled (events: the bus does the same)
        self.redact = services.redactor if services.redactor is not None else env_redactor()
        self._secrets = bool(self.redact.secrets)
        #: Ctrl-C was pressed: the run stops before its next effect (``_interrupt``)
        self.interrupted = False
        self._payload_of: object = None
        self._payload: Any = None
        self._text_of: object = None
        self._text = ""
        #: each piece of content journaled once (``journal._content``): this run's chains
        self.packer = Packer(self.clean, keep=self.journal is not None)
        self._packed_of: object = None
        self._packed = ""
        self._usage_of: object = None
        self._usage = ""
        self._build_chains()
        #: the path of a scope effect (``_scopes``), beside the chain of a leaf
        self.scoped = Scoped(self)

    def _build_chains(self) -> None:
        """The chain of layers a leaf effect goes through (see ``_layers``): each is there
        only when its job exists, so a live run with nothing to record is the handlers alone."""
        perform: Perform = Handled(self).perform
        self.journaled = None if self.journal is None else Journaled(self, perform)
        perform = perform if self.journaled is None else self.journaled.perform
        self.announced = Announced(self, perform) if self.bus.active else None
        perform = perform if self.announced is None else self.announced.perform
        self.replay = None if self.log is None else Replay(self, perform)
        self._leaf: Perform = perform if self.replay is None else self.replay.perform
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
        if type(effect) is Infer:
            # its place among the run's model calls, the same in every process that runs it
            frame.model_call = self.model_calls
            self.model_calls += 1
        match effect:
            case Tool() | Infer() | Agent():
                result = await chain(effect, address, frame)
                self.tally.add(effect.kind, usage_of(result))
                return result
            case Emit() | Now() | Random() | Uuid() | Sleep() | Ask():
                return await chain(effect, address, frame)
            case Patched():
                taken = await chain(effect, address, frame)
                if not taken:
                    # the old code: a run without the marker, numbered as before the change
                    frame.take_back()
                return taken
            case Checkpoint():
                # the handler's snapshot of the world is journaled; the program sees None
                await chain(effect, address, frame)
                self.last_checkpoint = (effect.name, address)
                return None
            case Limit() | Timeout():
                return await bounded(self, effect, address, frame)
            case Par():
                return await par(self, effect, address, frame)
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
            payload = self._payload
            text = self._recordable(lambda _: dump_jsonable(payload), effect, address)
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

    def checked(self, text: str, what: str, address: str, value: Any = None) -> str:
        """``text``, to be journaled for ``what``, refused when it or a new piece of content
        it needs holds a lone surrogate (written straight, not by ``canonical_json``, which
        refuses one itself): no UTF-8 holds it, and a journal that kept it would break every
        reader after. A piece the record holds already (a journal written before opdsl
        refused them) is not new: its run goes on. ``value``: what ``text`` was written from,
        to name the path to the text that holds one."""
        if lone_surrogate(text) is None and not any(
            lone_surrogate(body) is not None and not self._piece_recorded(h)
            for h, body in self.packer.made.items()
        ):
            return text
        path = None if value is None else lone_path(to_jsonable(value), "$")
        raise NotSerializable(
            f"{self.program}: {what} at address {address} cannot be recorded: "
            f"{'a text in it' if path is None else path} holds a lone surrogate, {LONE_HINT}",
            path=path or "",
        )

    def _piece_recorded(self, h: str) -> bool:
        """Whether the record or the journal holds piece ``h`` already."""
        source = self.log.content if self.log is not None else None
        if source is None and self.journal is not None:
            source = self.journal.content
        return source is not None and h in source((h,))

    def usage_text(self, usage: Usage) -> str:
        """A usage's canonical JSON text, written once for the response that holds it and
        the entry's own usage."""
        if usage is self._usage_of:
            return self._usage
        text = usage_json(usage)
        if text is None:
            text = canonical_json(usage)
        self._usage_of, self._usage = usage, text
        return text

    def json(self, value: Any, what: str, address: str) -> str:
        if type(value) is ToolResult and value.ok and value.error is None:
            # the commonest result, written without the generic walk (the same bytes)
            return self.checked(_OK_HEAD + _STRING(value.output) + "}", what, address, value)
        if type(value) is Response:
            usage = usage_json(value.usage)
            text = response_json(value, usage)
            if text is not None and usage is not None:
                self._usage_of, self._usage = value.usage, usage  # the entry's usage too
                return self.checked(text, what, address, value)
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

    def snapshot(self, frame: Frame, world: Any) -> CheckpointSnapshot:
        """What a checkpoint journals: the frame's state and replica, and the ``world`` its
        handler kept."""
        state = frame.replica.state
        return CheckpointSnapshot(
            state=None if state is None else to_jsonable(state),
            state_type=None if state is None else to_jsonable(type(state)),
            replica=frame.replica.id,
            lamport=frame.replica.lamport,
            world=world,
        )

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
    ``waiting`` (an ``ask`` has no answer yet) or ``cancelled``. ``totals``: what the whole
    run spent (tokens in, out and cached, model and tool calls, cost or unknown), what a
    resumed run recorded before it included.
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
    totals: Totals = Totals()

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
    services: Services,
    state: CRDTModel | None = None,
    log: ReplayLog | None = None,
    record: RunRecord | None = None,
    entries: Iterable[Entry] = (),
    in_place: bool = False,
) -> RunResult[T]:
    """Run a program from its start, with a run record, events and a result on every path.

    ``services``: the handlers, clock, bus, journal, scheduler and redactor it runs with.
    ``record``: the run as it will be journaled (its config, parent and fork point); when it
    already exists in the journal, the run is resumed in place. ``in_place``: it must exist
    (a resume read it; one removed since is refused, never made again without its start).
    ``entries``: written right after the run is created (a fork's prefix). ``log``: recorded
    entries the program is fed from before it goes live (resume, fork) or instead of going
    live (replay).
    """
    name = program_name(program)
    state = _starting_state(program, state)
    recorded = services.journal is not None or services.bus.active
    args_json = _args_json(name, args, kwargs) if recorded else '{"args":[],"kwargs":{}}'
    gen = start_program(program, args, kwargs)
    driver = Driver(run_id=run_id, program=name, services=services, log=log)
    life = _open_run(driver, record, args_json, state, entries, in_place)
    root = Frame(prefix="", replica=Replica("r", state, state.max_lamport() if state else 0))
    end = RunEnd()
    try:
        await _drive_to_end(driver, gen, root, end)
    finally:
        _close(gen)
        end.state = root.replica.state
        _close_run(driver, life, end)
    return RunResult(
        run_id=run_id,
        program=name,
        status=end.status,
        state=end.state,
        journal=services.journal,
        error=end.error,
        address=end.address,
        question=end.question,
        _value=end.value,
        totals=driver.tally.totals(),
    )


def _open_run(
    driver: Driver,
    record: RunRecord | None,
    args_json: str,
    state: CRDTModel | None,
    entries: Iterable[Entry],
    in_place: bool,
) -> RunLife | None:
    """Open the run in its journal (if it has one), then tell the bus it started."""
    clock, journal = driver.clock, driver.journal
    life = None
    if journal is not None:
        life = RunLife.open(
            journal,
            run_id=driver.run_id,
            program=driver.program,
            record=record,
            args_json=args_json,
            state=state,
            at=clock.now(),
            entries=entries,
            in_place=in_place,
        )
    if driver.bus.active:
        driver.bus.emit(
            RunStarted(
                run_id=driver.run_id,
                at=clock.now(),
                program=driver.program,
                args=json.loads(args_json),
                parent_run=None if record is None else record.parent_run,
            )
        )
    return life


def _close_run(driver: Driver, life: RunLife | None, end: RunEnd) -> None:
    """Write how the run ended to its journal, then tell the bus (whatever the journal did)."""
    clock, bus = driver.clock, driver.bus
    try:
        if life is not None:
            life.close(end, at=clock.now(), clean=driver.redact.optional)
    finally:
        if bus.active:
            bus.emit(
                RunFinished(
                    run_id=driver.run_id,
                    at=clock.now(),
                    status=end.status,
                    error=end.message,
                    address=end.address,
                )
            )


def _starting_state(program: Callable[..., Any], state: CRDTModel | None) -> CRDTModel | None:
    """The state a run starts with: the one given, else the type the program declared."""
    if state is not None and not isinstance(state, CRDTModel):
        raise StateError(f"state= takes a CRDTModel, not a {type(state).__name__}")
    return default_state(program) if state is None else state


def _args_json(program: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """The arguments as recorded, each checked to be recordable first (naming the bad one)."""
    for i, arg in enumerate(args):
        _check_arg(program, f"argument {i + 1}", arg)
    for key, arg in kwargs.items():
        _check_arg(program, f"argument {key!r}", arg)
    return canonical_json({"args": list(args), "kwargs": dict(kwargs)})


async def _drive_to_end(
    driver: Driver, gen: Generator[AnyEffect, Any, Any], root: Frame, end: RunEnd
) -> None:
    """Drive the program to its end and say how it ended in ``end``: completed, waiting,
    failed (an ``Exception``) or cancelled (a ``BaseException``, which propagates)."""
    try:
        interruptible = driver.services.interruptible
        with stop_on_interrupt(driver) if interruptible else contextlib.nullcontext():
            end.value = await driver.drive(gen, root)
        if driver.journal is not None:
            last = root.last or "0"
            end.result_json = driver.json(end.value, "the program's return value", last)
        if driver.log is not None:
            _check_all_replayed(driver, driver.log, root)
        end.status = "completed"
    except WaitingForAnswer as wait:
        end.status, end.question, end.address = "waiting", wait.question, root.last or None
    except Exception as exc:
        end.status, end.error = "failed", exc
        end.address = _ADDRESS.get(exc) or root.last or None
    except BaseException:
        end.status = "cancelled"
        raise


def _check_all_replayed(driver: Driver, log: ReplayLog, root: Frame) -> None:
    """A strict record (a replay) must be used up: an entry the program no longer asks for
    is a divergence."""
    first = unused_entry(log)
    if first is None:
        return
    raise divergence(
        program=driver.program,
        address=first.address,
        where=f"the program returned after its effect at address {root.last or '(none)'}",
        checkpoint=nearest_checkpoint(log.entries.values(), first.seq),
        recorded=driver.shown(first.effect_json),
        now=None,
        reason=f"the program finished, but the record goes on: the {first.kind} effect "
        f"recorded here is no longer asked for",
    )


def _check_arg(program: str, which: str, value: Any) -> None:
    try:
        dump_jsonable(to_jsonable(value))
    except NotSerializable as exc:
        raise NotSerializable(
            f"{program}: {which} cannot be recorded: {exc}", path=exc.path
        ) from None
