"""The path of a scope effect (``limit``, ``timeout``, ``par``): one layer that does for
scopes what ``Replay``, ``Announced`` and ``Journaled`` do for leaves (``_layers``).

A scope is looked up in the record and, when it runs live, begun in the journal and on the
bus before its body runs and finished after. Its recorded outcome is decoded in ``_replay``
(:func:`finished_scope`), once, when it opens; the frames of its body carry it, so the
effects inside a scope the record cut off stop where the recorded run stopped.

- :func:`bounded` runs a ``limit`` or a ``timeout``: the body under the budget and the
  deadline, the outcome settled against the record.
- :func:`par` runs the branches of a ``par``, each on its own replica, and joins them
  (:func:`merge_replicas`, a pure function).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

from returns.result import Failure, Result, Success

from interpreters.journal._base import Entry
from interpreters.runtime._frame import (
    BudgetStop,
    Frame,
    ReplayStop,
    Replica,
    Scope,
    close_quietly,
)
from interpreters.runtime._replay import FinishedScope, decode_cut_off, finished_scope
from op import BudgetExhausted, Limit, MergeConflict, Par, TimedOut, Timeout
from op._effects import ScopeEffect
from op.events import ConflictDetected
from state import CRDTModel, StateError, to_jsonable

if TYPE_CHECKING:
    from interpreters.runtime._driver import Driver

__all__ = ["Opened", "Scoped", "bounded", "merge_replicas", "par"]


@final
@dataclass(slots=True)
class Opened:
    """A scope being run: its record (if any), whether it runs live, and what its body's
    frames inherit."""

    effect: ScopeEffect
    address: str
    #: the scope's entry in the record, looked up and checked
    entry: Entry | None
    #: its body runs live (no record, or one a crash or a stop left unfinished)
    live: bool
    t0: float
    #: the scope's own recorded outcome, when its record is finished
    record: FinishedScope | None
    #: the innermost finished scope its body runs in (itself, else the enclosing one)
    inherited: FinishedScope | None


@final
class Scoped:
    """Opens and closes scopes in the record, the journal and on the bus."""

    __slots__ = ("driver",)

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def open(self, effect: ScopeEffect, address: str, frame: Frame) -> Opened:
        """Look the scope up in the record; begin it if it runs live."""
        d = self.driver
        replay = d.replay
        entry = None if replay is None else replay.lookup(effect, address, frame)
        # unfinished in the record (a crash left it started; a stop, cancelled): run it live,
        # as the effects inside it are
        live = entry is None or (replay is not None and replay.reopens(entry, frame))
        t0 = self._begin(effect, address) if live else 0.0
        record = finished_scope(entry)
        return Opened(effect, address, entry, live, t0, record, record or frame.finished_scope)

    def _begin(self, effect: ScopeEffect, address: str) -> float:
        d = self.driver
        if d.journaled is not None or d.announced is not None:
            data = d.payload(effect, address)
            if d.announced is not None:
                d.announced.started(effect, address, data)
            if d.journaled is not None:
                text = d.recorded(effect, address)  # from the data just computed
                d.journaled.begin(effect, address, text, d.clock.now())
        return d.clock.monotonic()

    def done(self, scope: Opened, value: Any, what: str) -> None:
        """Finish a live scope as completed, its result ``value`` journaled."""
        if not scope.live:
            return
        d = self.driver
        if d.journaled is not None:
            result_json = d.json(value, what, scope.address)
            d.journaled.finish(scope.address, "completed", result_json=result_json)
        if d.announced is not None:
            d.announced.finished(scope.effect, scope.address, scope.t0, "completed")

    def failed(self, scope: Opened, exc: BaseException) -> None:
        """Finish a live scope with ``exc``: failed, or cancelled."""
        if not scope.live:
            return
        d = self.driver
        if d.journaled is not None:
            d.journaled.failed(scope.address, exc)
        if d.announced is not None:
            d.announced.failed(scope.effect, scope.address, scope.t0, exc)

    def settle(self, scope: Opened, frame: Frame, outcome: Result[Any, Any]) -> Result[Any, Any]:
        """A ``limit``'s or ``timeout``'s outcome: the recorded cut-off when replaying one,
        else ``outcome``; a record that disagrees with what ran now is a divergence."""
        record = scope.record
        if record is None:
            return outcome
        assert isinstance(scope.effect, Limit | Timeout) and scope.entry is not None
        if record.failed == isinstance(outcome, Failure):
            return Failure(decode_cut_off(scope.effect, record)) if record.failed else outcome
        d = self.driver
        reason = (
            "the record says this scope was cut off, but its body finished now"
            if record.failed
            else "the record says this scope finished, but it was cut off now"
        )
        raise d.diverged(
            frame,
            scope.address,
            reason,
            scope.entry.result_json,
            d.json(outcome, "the outcome", scope.address),
        )


async def bounded(
    d: Driver, effect: Limit[Any] | Timeout[Any], address: str, frame: Frame
) -> Result[Any, Any]:
    """A ``limit`` or a ``timeout``: open the scope (live, or fed from the record), run the
    body under the budget and the deadline, settle the outcome against the record, close the
    scope."""
    opened = d.scoped.open(effect, address, frame)
    entry = opened.entry
    # resumed inside the scope: its time kept running while the run was down
    elapsed = (
        max(0.0, d.clock.now() - entry.started_at) if entry is not None and opened.live else 0.0
    )
    budget = effect.budget if isinstance(effect, Limit) else None
    seconds = effect.budget.seconds if isinstance(effect, Limit) else effect.seconds
    scope = (
        None if budget is None else Scope(budget, d.clock.monotonic() - elapsed, timed=opened.live)
    )
    child = Frame(
        prefix=address,
        replica=frame.replica,
        scopes=frame.scopes if scope is None else (*frame.scopes, scope),
        finished_scope=opened.inherited,
        deadline=frame.deadline or isinstance(effect, Timeout),
    )
    outcome: Result[Any, Any]
    try:
        if seconds is None or not opened.live:
            outcome = Success(await d.drive(effect.body, child))
        else:
            with d.clock.deadline(max(0.0, seconds - elapsed)) as cancel:
                value = await d.drive(effect.body, child)
            outcome = (
                Failure(_cut(d, scope, seconds, address))
                if cancel.cancelled_caught
                else Success(value)
            )
    except BudgetStop as stop:
        if scope is None or stop.scope is not scope:
            d.scoped.failed(opened, stop)
            raise
        outcome = Failure(stop.exhausted)
    except ReplayStop:
        if opened.record is None or not opened.record.failed:
            raise
        outcome = Failure(_cut(d, scope, seconds))
    except BaseException as exc:
        d.scoped.failed(opened, exc)
        raise
    finally:
        close_quietly(effect.body)
    outcome = d.scoped.settle(opened, frame, outcome)
    d.scoped.done(opened, outcome, "the outcome of the scope")
    return outcome


def _cut(
    d: Driver, scope: Scope | None, seconds: float | None, address: str | None = None
) -> BudgetExhausted | TimedOut:
    """What a scope whose time ran out gives its program: a ``timeout``'s says what its
    handlers said of the work they were cut off in (``Call.cut``), in address order."""
    cut: tuple[str, ...] = ()
    if address is not None and d.cuts:
        inside = [a for a in d.cuts if a.startswith(f"{address}.")]
        inside.sort(key=lambda a: [int(p) for p in a.split(".")])
        cut = tuple(d.cuts.pop(a) for a in inside)
    if scope is not None:
        return scope.exhausted("seconds", d.clock.monotonic())
    return TimedOut(seconds=seconds or 0.0, cut=cut)


def merge_replicas(
    base: CRDTModel | None, states: list[CRDTModel]
) -> tuple[CRDTModel | None, dict[str, list[Any]]]:
    """The state after a ``par``: the branches' states merged into ``base`` in branch order,
    and the fields on which two or more branches wrote different values since ``base``.
    Raises ``TypeError`` when the states cannot be merged."""
    if not states:
        return base, {}
    origin = base if base is not None else type(states[0])()
    merged = origin
    for s in states:
        merged = merged.merge(s)
    conflicts = states[0].conflicts_since(origin, states[1:]) if len(states) > 1 else {}
    return merged, conflicts


async def par(d: Driver, effect: Par, address: str, frame: Frame) -> tuple[Any, ...]:
    """A ``par``: its branches run on replicas of the parent's state, then are joined."""
    opened = d.scoped.open(effect, address, frame)
    parent = frame.replica
    replicas = [
        Replica(f"r/{address}.{i}", parent.state, parent.lamport)
        for i in range(1, len(effect.bodies) + 1)
    ]
    values = tuple(await _branches(d, opened, frame, replicas))
    try:
        merged, conflicts = merge_replicas(
            parent.state, [r.state for r in replicas if r.state is not None]
        )
    except TypeError as exc:
        err = StateError(f"par at address {address}: cannot merge branch states: {exc}")
        d.scoped.failed(opened, err)
        raise err from exc
    parent.state = merged
    parent.lamport = max([parent.lamport, *(r.lamport for r in replicas)]) + 1
    if conflicts and opened.live and d.bus.active:
        d.bus.emit(
            ConflictDetected(
                run_id=d.run_id, at=d.clock.now(), address=address, conflicts=to_jsonable(conflicts)
            )
        )
    if conflicts and effect.on_conflict == "raise":
        err2 = MergeConflict(conflicts, values)
        d.scoped.failed(opened, err2)
        raise err2
    d.scoped.done(opened, list(values), "the par results")
    return values


async def _branches(d: Driver, opened: Opened, frame: Frame, replicas: list[Replica]) -> list[Any]:
    """Run a ``par``'s branches to their ends (branch i at ``address.i``, on replica i)."""
    assert isinstance(opened.effect, Par)
    bodies = opened.effect.bodies
    results: list[Any] = [None] * len(bodies)
    errors: list[tuple[int, BaseException]] = []

    async def branch(i: int) -> None:
        try:
            child = Frame(
                prefix=f"{opened.address}.{i + 1}",
                replica=replicas[i],
                scopes=frame.scopes,
                finished_scope=opened.inherited,
                deadline=frame.deadline,
            )
            results[i] = await d.drive(bodies[i], child)
        except BaseException as exc:
            errors.append((i, exc))
            raise
        finally:
            d.clock.task_done()

    # each branch counts as working from the moment it is scheduled, and the parent
    # stops counting while it waits at the join (see VirtualClock)
    for _ in bodies:
        d.clock.task_started()
    d.clock.task_done()
    try:
        await d.scheduler.run_all([functools.partial(branch, i) for i in range(len(bodies))])
    except BaseExceptionGroup as group:
        chosen = _reported(errors, d.scheduler.cancelled())
        d.scoped.failed(opened, group if chosen is None else chosen)
        if chosen is None:
            raise
        raise chosen from None
    except BaseException as exc:
        d.scoped.failed(opened, exc)
        raise
    finally:
        d.clock.task_started()
        for body in bodies:
            close_quietly(body)
    return results


def _reported(
    errors: list[tuple[int, BaseException]],
    cancelled: type[BaseException] | tuple[type[BaseException], ...],
) -> BaseException | None:
    """The error of failed branches that reaches the parent: a real one before a replay
    cut-off, and among those the first branch's (None: every branch was cancelled)."""
    ranked = sorted(
        ((isinstance(e, ReplayStop), i, e) for i, e in errors if not isinstance(e, cancelled)),
        key=lambda t: (t[0], t[1]),
    )
    return ranked[0][2] if ranked else None
