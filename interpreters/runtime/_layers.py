"""The path of one leaf effect (``infer``, ``tool``, ``agent``, ``emit``, ``checkpoint``,
``now``, ``random``, ``uuid``, ``sleep``, ``ask``): a chain of layers, each with one job.

::

    Driver.perform ─► Charge ─► Replay ─► Announced ─► Journaled ─► Handled
                      budgets   the record  events      write-ahead   the handlers

- ``Charge`` charges the effect's usage to every enclosing ``limit`` (the one place budgets
  are charged: live or from the record alike). Budgets are *checked* before every effect,
  leaf or not, by ``Driver.perform``.
- ``Replay`` looks the address up in the record: a finished entry is fed back as the program
  saw it the first time (and the handlers told of it, ``Handlers.replayed``); a changed effect
  is a divergence; an unfinished one runs again. A ``patched`` marker the record passed
  without is answered False.
- A ``patched`` marker answered False (by the record, or live: Temporal's replay of an older
  history, a script) is neither told, journaled nor numbered: the driver gives its address
  back, so a run down the old code is numbered as it was before the change.
- ``Announced`` sends ``EffectStarted``/``EffectFinished`` (and ``Emitted``,
  ``CheckpointSaved``) to the event bus; every start is closed by exactly one finish.
- ``Journaled`` writes the entry ``started`` before the handler runs and finishes it before
  the program sees the result (write-ahead). Under group commit, an effect that acts on the
  world waits for its begin to be committed; a model call does not (:data:`UNWAITED`).
- ``Handled`` calls the interpreter's handlers.

A layer is in the chain only when its job exists (a budget, a record, a listener, a
journal), so the fast path, a live run with none of them, is ``Handled`` alone. The chains
are built once per driver; see ``Driver.__init__``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, final

from interpreters.journal._base import Entry, JournalError
from interpreters.journal._checkpoint import CheckpointSnapshot, SnapshotError
from interpreters.journal._status import EntryEnd
from interpreters.runtime._frame import (
    BudgetStop,
    Call,
    Frame,
    ReplayStop,
    Scope,
    TokenLimit,
    WaitingForAnswer,
    charge_scopes,
    cut_off,
)
from interpreters.runtime._replay import decode_error, decode_result, error_json, marker_name
from op import Ask, Checkpoint, Emit, Patched, ToolResult, Usage, usage_of
from op.effects import AnyEffect, LeafEffect
from op.events import CheckpointSaved, EffectFinished, EffectStarted, Emitted
from state import canonical_json, to_jsonable

if TYPE_CHECKING:
    from interpreters.runtime._driver import Driver

__all__ = ["Announced", "Charge", "Handled", "Journaled", "Layer", "Perform", "Replay"]

Perform = Callable[[LeafEffect, str, Frame], Awaitable[Any]]
"""``perform(effect, address, frame)``: the rest of the chain, as a layer sees it."""


def _unrecorded(run_id: str, address: str, step: str, exc: Exception) -> JournalError:
    """A journal that failed in a way of its own (a disk, a custom store): an error of the
    environment, never of the effect, so it ends the run (``JournalError`` is fatal) instead
    of being thrown into the program, which could catch it and go on unrecorded."""
    return JournalError(
        f"run {run_id}: the journal could not {step} the entry at {address}: "
        f"{type(exc).__name__}: {exc}"
    )


def _status(exc: BaseException) -> EntryEnd:
    return "failed" if isinstance(exc, Exception) else "cancelled"


class Layer(ABC):
    """One job on the path of a leaf effect. ``inner`` performs the rest of the chain."""

    __slots__ = ("driver", "inner")

    def __init__(self, driver: Driver, inner: Perform) -> None:
        self.driver = driver
        self.inner = inner

    @abstractmethod
    async def perform(self, effect: LeafEffect, address: str, frame: Frame) -> Any:
        """Do this layer's job around ``self.inner``."""


@final
class Handled:
    """The end of every chain: the interpreter's handlers perform the effect."""

    __slots__ = ("driver",)

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def perform(self, effect: LeafEffect, address: str, frame: Frame) -> Awaitable[Any]:
        d = self.driver
        call = Call(d.run_id, address, d.clock, d.bus, frame.deadline, model_calls=frame.model_call)
        frame.model_call = None
        if not frame.scopes and not frame.deadline:
            # nothing to charge or cut: the handler's own awaitable, with no frame of this
            # layer's around it (each frame a call is awaited through is one more object the
            # collector walks again and again while the call is under way)
            return d.handlers.perform(effect, call)
        return self._bounded(effect, address, frame, call)

    async def _bounded(self, effect: LeafEffect, address: str, frame: Frame, call: Call) -> Any:
        """The handler's work inside a ``limit`` or a ``timeout``: what it streamed before a
        token limit or a cut is charged, and the work a cut left is noted."""
        d = self.driver
        tightest = _tokens_left(frame)
        if tightest is not None:
            call.token_limit = tightest[1]
        try:
            return await d.handlers.perform(effect, call)
        except TokenLimit:
            assert tightest is not None
            charge_scopes(frame, effect, Usage(output_tokens=call.streamed))
            scope = tightest[0]
            raise BudgetStop(scope, scope.exhausted("tokens", d.clock.monotonic())) from None
        except BaseException:
            # cut off (a timeout, a failing sibling): what it streamed was still spent
            if call.streamed:
                charge_scopes(frame, effect, Usage(output_tokens=call.streamed))
            if call.cut is not None:
                d.cuts[address] = call.cut  # what the handler says of the work it left
            raise


def _tokens_left(frame: Frame) -> tuple[Scope, int] | None:
    """The enclosing scope with the fewest tokens left, and how many (at least one)."""
    best: tuple[Scope, int] | None = None
    for scope in frame.scopes:
        if scope.budget.tokens is not None:
            left = max(1, scope.budget.tokens - scope.tokens)
            if best is None or left < best[1]:
                best = (scope, left)
    return best


@final
class Charge(Layer):
    """Charges the effect to every enclosing ``limit`` of its frame once it has an outcome."""

    __slots__ = ()

    async def perform(self, effect: LeafEffect, address: str, frame: Frame) -> Any:
        result = await self.inner(effect, address, frame)
        charge_scopes(frame, effect, usage_of(result))
        return result


@final
class Journaled(Layer):
    """Write-ahead: the entry is ``started`` before the handler runs, finished after."""

    __slots__ = ()

    def begin(
        self, effect: AnyEffect, address: str, text: str, now: float, *, unwaited: bool = False
    ) -> None:
        """Journal the effect (``text``: as journaled, :meth:`Driver.recorded`) as started,
        after the pieces of content it needs; ``unwaited``: one of :data:`UNWAITED`, whose
        begin the journal may hold back (:meth:`Journal.begin_unwaited`)."""
        d = self.driver
        assert d.journal is not None
        d.checked(text, f"the {effect.kind} effect", address)
        try:
            if unwaited:  # its pieces go with it, held or not
                pieces = d.packer.take() if d.packer.made else None
                d.journal.begin_unwaited(d.run_id, address, effect.kind, text, now, pieces)
            else:
                if d.packer.made:
                    d.store_pieces()
                d.journal.begin(d.run_id, address, effect.kind, text, now)
        except JournalError:
            raise
        except Exception as exc:
            raise _unrecorded(d.run_id, address, "begin", exc) from exc

    def finish(
        self,
        address: str,
        status: EntryEnd,
        *,
        result_json: str | None = None,
        recorded: str | None = None,
        usage: Usage | None = None,
        exc: BaseException | None = None,
    ) -> None:
        """Finish the entry; ``result_json``: a text to clean, or ``recorded``: one as
        journaled (:meth:`Driver.recorded_result`, its pieces stored first)."""
        d = self.driver
        assert d.journal is not None
        if recorded is not None:
            if d.packer.made:
                d.store_pieces()
            result_text: str | None = recorded
        else:
            result_text = None if result_json is None else d.clean(result_json)
        try:
            d.journal.finish(
                d.run_id,
                address,
                status,
                at=d.clock.now(),
                result_json=result_text,
                error_json=None if exc is None else d.clean(error_json(exc)),
                usage_json=None if usage is None else d.usage_text(usage),
            )
        except JournalError:
            raise
        except Exception as failure:
            raise _unrecorded(d.run_id, address, "finish", failure) from failure

    def failed(self, address: str, exc: BaseException) -> None:
        """Finish the entry with ``exc``: failed (an error), or cancelled (a cancellation)."""
        self.finish(address, _status(exc), exc=exc)

    async def marker(self, effect: Patched, address: str, frame: Frame) -> Any:
        """A ``patched`` marker is journaled once decided, and only where it takes the new
        code: the old code is a run without the marker (it performs nothing either way)."""
        taken = await self.inner(effect, address, frame)
        if taken:
            d = self.driver
            self.begin(effect, address, d.recorded(effect, address), d.clock.now())
            self.finish(address, "completed", recorded=d.recorded_result(True, "patched", address))
        return taken

    async def perform(self, effect: LeafEffect, address: str, frame: Frame) -> Any:
        if type(effect) is Patched:
            return await self.marker(effect, address, frame)
        d = self.driver
        unwaited = effect.kind in UNWAITED
        self.begin(effect, address, d.recorded(effect, address), d.clock.now(), unwaited=unwaited)
        journal = d.journal
        assert journal is not None
        if not unwaited and journal.grouped:
            # write-ahead: the begin is committed before the handler runs (with whatever else
            # the runs sharing the journal wrote meanwhile)
            await journal.durable()
        try:
            result = await self.inner(effect, address, frame)
        except WaitingForAnswer:
            # the entry stays ``started``: the question is open until it is answered
            raise
        except BaseException as exc:
            self.failed(address, exc)
            raise
        # a checkpoint's handler returns the world's snapshot: journaled with the state's
        recorded = d.snapshot(frame, result).to_json() if isinstance(effect, Checkpoint) else result
        text = d.recorded_result(recorded, f"the result of {effect.kind}", address)
        self.finish(address, "completed", recorded=text, usage=usage_of(result))
        # grouped: the finish is committed with the next commit, at the latest before this
        # run's next effect runs (its begin waits for it) or as the run ends; nothing the
        # program does in between reaches the world
        return result


UNWAITED = frozenset({"infer", "now", "random", "uuid", "sleep"})
"""The kinds whose handlers change nothing outside the run: a model's answer, a value of the
clock or of chance, a wait. Under group commit, the handler of one of these runs without
waiting for its begin to be committed: that commit comes on the event loop's next turn, while
the handler works, or the journal holds the begin back and writes the entry whole at its
finish (:meth:`Journal.begin_unwaited`). A crash before the begin is committed leaves no
entry, and the effect is performed again on resume, as one left ``started`` is. Every other
kind (a tool, an agent, an emit, a checkpoint, a question) waits, and its wait commits
whatever the run wrote before, so nothing a program does after a result reaches the world
before that result is committed."""


@final
class Announced(Layer):
    """Tells the event bus an effect started and how it finished."""

    __slots__ = ()

    def started(self, effect: AnyEffect, address: str, data: Any) -> float:
        d = self.driver
        d.bus.emit(
            EffectStarted(
                run_id=d.run_id, at=d.clock.now(), address=address, kind=effect.kind, effect=data
            )
        )
        return d.clock.monotonic()

    def finished(
        self,
        effect: AnyEffect,
        address: str,
        t0: float | None,
        status: Literal["completed", "failed", "cancelled", "unresolved"],
        *,
        usage: Usage | None = None,
        error: str | None = None,
    ) -> None:
        d = self.driver
        d.bus.emit(
            EffectFinished(
                run_id=d.run_id,
                at=d.clock.now(),
                address=address,
                kind=effect.kind,
                status=status,
                duration_s=0.0 if t0 is None else d.clock.monotonic() - t0,
                usage=usage,
                error=error,
            )
        )

    def failed(self, effect: AnyEffect, address: str, t0: float, exc: BaseException) -> None:
        self.finished(effect, address, t0, _status(exc), error=f"{type(exc).__name__}: {exc}")

    async def perform(self, effect: LeafEffect, address: str, frame: Frame) -> Any:
        d = self.driver
        if type(effect) is Patched:
            # told once decided, and only where it takes the new code (as it is journaled)
            taken = await self.inner(effect, address, frame)
            if taken:
                self.finished(
                    effect,
                    address,
                    self.started(effect, address, d.payload(effect, address)),
                    "completed",
                )
            return taken
        t0 = self.started(effect, address, d.payload(effect, address))
        try:
            result = await self.inner(effect, address, frame)
        except WaitingForAnswer:
            self.finished(effect, address, None, "unresolved", error="waiting for an answer")
            raise
        except BaseException as exc:
            self.failed(effect, address, t0, exc)
            raise
        # a tool that failed completed as an effect; its error still reaches the sinks
        failed = result.error if isinstance(result, ToolResult) and not result.ok else None
        self.finished(
            effect,
            address,
            t0,
            "completed",
            usage=usage_of(result),
            error=None if failed is None else f"tool failed: {failed}",
        )
        if isinstance(effect, Emit):
            d.bus.emit(
                Emitted(
                    run_id=d.run_id,
                    at=d.clock.now(),
                    address=address,
                    name=effect.name,
                    data=to_jsonable(effect.data),
                )
            )
        elif isinstance(effect, Checkpoint):
            d.bus.emit(
                CheckpointSaved(
                    run_id=d.run_id, at=d.clock.now(), address=address, name=effect.name
                )
            )
        return result


@final
class Replay(Layer):
    """Feeds the record back: a finished entry's outcome instead of performing the effect."""

    __slots__ = ()

    def lookup(self, effect: AnyEffect, address: str, frame: Frame) -> Entry | None:
        """The recorded entry for this effect (leaf or scope), checked against it; None to go
        live."""
        d = self.driver
        log = d.log
        assert log is not None
        entry = log.entries.get(address)
        if entry is None:
            if cut_off(frame):
                raise ReplayStop()
            if frame.finished_scope is not None:
                raise d.diverged(
                    frame,
                    address,
                    f"the record finished the scope at {frame.finished_scope.address} without this effect",
                    None,
                    d.clean(d.effect_json(effect, address)),
                )
            if log.strict:
                raise d.diverged(
                    frame,
                    address,
                    "the record ends before this effect",
                    None,
                    d.clean(d.effect_json(effect, address)),
                )
            return None
        if d.recorded(effect, address) != entry.effect_json:
            # packed texts are equal when the whole ones are; an entry written whole (by an
            # earlier opdsl) is compared whole
            now = d.clean(d.effect_json(effect, address))
            recorded = d.shown(entry.effect_json)
            if now != recorded:
                reason = "the program asks for a different effect here"
                marker = marker_name(entry)
                if marker is not None:
                    reason = (
                        f"the record has the patched({marker!r}) marker here, which the program "
                        "no longer asks for: keep patched() or deprecate_patched() while stored "
                        "runs hold it"
                    )
                raise d.diverged(frame, address, reason, recorded, now)
        log.used.add(address)
        return entry

    def reopens(self, entry: Entry, frame: Frame) -> bool:
        """Whether an unfinished entry runs again: a crash left it ``started``, or a stop
        ``cancelled`` it outside a scope the record cut off."""
        log = self.driver.log
        assert log is not None
        return entry.status == "started" or (
            entry.status == "cancelled" and not log.strict and not cut_off(frame)
        )

    async def perform(self, effect: LeafEffect, address: str, frame: Frame) -> Any:
        if type(effect) is Patched:
            return await self.patched(effect, address, frame)
        entry = self.lookup(effect, address, frame)
        if entry is None:
            return await self.inner(effect, address, frame)
        if not self.reopens(entry, frame):
            return await self.replayed(effect, address, frame, entry)
        d = self.driver
        assert d.log is not None
        if d.log.strict:
            if isinstance(effect, Ask):
                raise WaitingForAnswer(effect.question)
            shown = d.shown(entry.effect_json)
            raise d.diverged(
                frame,
                address,
                "the record ends inside this effect (it started and never finished)",
                shown,
                shown,
            )
        # a crash or a stop left it unfinished: perform it again (at least once), with the
        # same idempotency key
        return await self.inner(effect, address, frame)

    async def patched(self, effect: Patched, address: str, frame: Frame) -> Any:
        """A ``patched`` marker: the recorded decision where the record has this marker here;
        where the recorded run passed this point without it (the record goes on past it),
        False (the driver then gives its address back, so the old code's effects keep theirs);
        where the record ends before it, live."""
        d = self.driver
        log = d.log
        assert log is not None
        entry = log.entries.get(address)
        if entry is not None and marker_name(entry) == effect.name:
            log.used.add(address)
            if entry.status != "completed":  # a crash between its begin and its finish
                return await self.inner(effect, address, frame)
            taken = decode_result(effect, d.whole(entry.result_json, effect.kind))
            if not taken:
                log.old_code.append(effect.name)
                if effect.deprecated:
                    raise self._old_code_gone(effect, address, frame, entry)
            return taken
        if entry is None and frame.finished_scope is None and not log.strict:
            return await self.inner(effect, address, frame)  # the record never got here
        if entry is None and cut_off(frame):
            raise ReplayStop()
        # the driver gives the address back (``Driver.perform``), as for a handler's False
        log.old_code.append(effect.name)
        if effect.deprecated:
            raise self._old_code_gone(effect, address, frame, entry)
        return False

    def _old_code_gone(
        self, effect: Patched, address: str, frame: Frame, entry: Entry | None
    ) -> Exception:
        """The divergence of a run that took the old code of a deprecated patch."""
        d = self.driver
        if entry is None:
            how = "ended past this point without the marker"
        elif marker_name(entry) == effect.name:
            how = "recorded the old code here"
        else:
            how = "passed this point without the marker"
        return d.diverged(
            frame,
            address,
            f"deprecate_patched({effect.name!r}): the recorded run {how}, so it took the old "
            f"code of {effect.name!r}, which the program no longer has",
            None if entry is None else d.shown(entry.effect_json),
            d.clean(d.effect_json(effect, address)),
        )

    async def replayed(self, effect: LeafEffect, address: str, frame: Frame, entry: Entry) -> Any:
        """The recorded outcome of a finished entry, as the program saw it the first time."""
        d = self.driver
        if entry.status == "completed":
            if isinstance(effect, Checkpoint) and d.log is not None and d.log.restore_at == address:
                d.last_checkpoint = (effect.name, address)
                snapshot = self.snapshot_of(address, entry)
                self.restore(frame, address, snapshot)
                if snapshot.world is not None:
                    await d.handlers.restore(snapshot.world)
            result = decode_result(effect, d.whole(entry.result_json, effect.kind))
            d.handlers.replayed(effect, result)
            return result
        if entry.status == "failed":
            raise decode_error(entry.error_json)
        # cancelled: a timeout or budget cut it off, or a par sibling's failure did
        if cut_off(frame):
            raise ReplayStop()
        await d.scheduler.wait_forever()

    def snapshot_of(self, address: str, entry: Entry) -> CheckpointSnapshot:
        """The snapshot a checkpoint entry recorded; a journal error naming it if it is not
        one."""
        try:
            return CheckpointSnapshot.from_json(json.loads(entry.result_json or "{}"))
        except (SnapshotError, ValueError) as exc:
            raise JournalError(
                f"run {self.driver.run_id}: checkpoint {address} cannot be restored: {exc}"
            ) from None

    def restore(self, frame: Frame, address: str, snapshot: CheckpointSnapshot) -> None:
        """At a fork's checkpoint: the replayed state must be the recorded snapshot."""
        recorded = snapshot.state
        state = frame.replica.state
        same = state.matches(recorded) if state is not None else recorded is None
        if not same:
            now = None if state is None else json.loads(state.canonical())
            raise self.driver.diverged(
                frame,
                address,
                "the state at this checkpoint differs from the recorded snapshot",
                canonical_json(recorded),
                canonical_json(now),
            )
        frame.replica.lamport = max(frame.replica.lamport, snapshot.lamport)
