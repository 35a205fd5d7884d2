"""The path of a scope effect (``runtime/_scopes.py``): the recorded outcome decoded once in
``_replay``, replicas merged by a pure function, and Ctrl-C in a module of its own."""

from __future__ import annotations

import signal

import pytest

from interpreters import MemoryJournal, replay, run
from interpreters.journal import Entry
from interpreters.runtime import Services, VirtualClock
from interpreters.runtime._driver import Driver
from interpreters.runtime._frame import Call, Handlers
from interpreters.runtime._interrupt import _RUNNING, interrupt, stop_on_interrupt
from interpreters.runtime._replay import decode_cut_off, finished_scope
from interpreters.runtime._scopes import merge_replicas
from op import (
    Budget,
    BudgetExhausted,
    Failure,
    Inc,
    Op,
    Success,
    TimedOut,
    emit,
    limit,
    par,
    sleep,
    timeout,
    update,
)
from op.effects import LeafEffect
from state import Add, Assign, CRDTModel, GCounter, GSet, LWWRegister, Stamp


class Tally(CRDTModel):
    n: GCounter = GCounter()


class Named(CRDTModel):
    name: LWWRegister[str] = LWWRegister()
    tags: GSet[str] = GSet()


def _entry(kind: str, result_json: str | None, status: str = "completed") -> Entry:
    return Entry("r", 1, "3", kind, "{}", status=status, result_json=result_json)  # type: ignore[arg-type]


def test_a_finished_scope_is_decoded_once_from_its_record() -> None:
    cut = finished_scope(_entry("timeout", '{"error":{"seconds":1.0}}'))
    assert cut is not None and cut.failed and cut.address == "3"
    body_done = finished_scope(_entry("limit", '{"ok":{"error":"a value, not a cut-off"}}'))
    assert body_done is not None and not body_done.failed
    par_done = finished_scope(_entry("par", '["a","b"]'))
    assert par_done is not None and not par_done.failed
    assert finished_scope(_entry("limit", None, status="started")) is None
    assert finished_scope(None) is None


def test_a_recorded_cut_off_decodes_as_the_scope_kind_gave_it() -> None:
    timed = finished_scope(_entry("timeout", '{"error":{"seconds":1.5}}'))
    assert timed is not None
    assert decode_cut_off(timeout(1.5, emit("x")).__next__(), timed) == TimedOut(seconds=1.5)  # type: ignore[arg-type]


def test_merging_replicas_is_a_pure_function() -> None:
    base = Tally()
    one = base.apply({"n": Inc(1)}, _stamp("r/1.1", 1))
    two = base.apply({"n": Inc(2)}, _stamp("r/1.2", 1))
    merged, conflicts = merge_replicas(base, [one, two])
    assert isinstance(merged, Tally) and merged.n.value == 3 and conflicts == {}
    assert base.n.value == 0 and one.n.value == 1  # nothing it was given changed
    assert merge_replicas(base, []) == (base, {})
    assert merge_replicas(None, [])[0] is None
    a = Named().apply({"name": Assign("a"), "tags": Add("x")}, _stamp("r/1.1", 1))
    b = Named().apply({"name": Assign("b"), "tags": Add("x")}, _stamp("r/1.2", 1))
    both, clash = merge_replicas(None, [a, b])
    assert clash == {"tags": ["x"]}  # both branches added it
    assert isinstance(both, Named) and both.name.value == "b"  # the later branch's write
    with pytest.raises(TypeError):
        merge_replicas(None, [a, Tally()])


def _stamp(replica: str, n: int) -> Stamp:
    return Stamp(replica, n)


def scoped() -> Op[tuple[bool, bool, int]]:
    cut = yield from timeout(0.01, sleep(10))
    spent = yield from limit(Budget(tool_calls=0), emit("inside"))
    values = yield from par(update(n=Inc(1)), update(n=Inc(2)))
    return isinstance(cut, Failure), isinstance(spent, Success), len(values)


def cut_by_its_budget() -> Op[str]:
    spent = yield from limit(Budget(seconds=0.0), emit("never"))
    assert isinstance(spent, Failure)
    return type(spent.failure()).__name__


def test_a_replayed_scope_gives_the_recorded_outcome() -> None:
    journal = MemoryJournal()
    live = run(scoped, db=journal, state=Tally())
    assert live.value == (True, True, 2)
    again = replay(live.run_id, db=journal)
    assert again.value == (True, True, 2)
    assert isinstance(live.state, Tally) and live.state.n.value == 3


def test_a_budget_cut_off_replays_as_budget_exhausted() -> None:
    journal = MemoryJournal()
    live = run(cut_by_its_budget, db=journal)
    assert live.value == "BudgetExhausted"
    assert replay(live.run_id, db=journal).value == BudgetExhausted.__name__


class _Nothing(Handlers):
    async def perform(self, effect: LeafEffect, call: Call) -> None:
        return None


def test_ctrl_c_stops_every_run_that_is_in_its_block_and_puts_the_handler_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    drivers = [
        Driver(
            run_id=f"r{i}",
            program="p",
            services=Services(handlers=_Nothing(), clock=VirtualClock()),
        )
        for i in range(2)
    ]
    with stop_on_interrupt(drivers[0]), stop_on_interrupt(drivers[1]):
        assert drivers == _RUNNING
        assert signal.getsignal(signal.SIGINT) is not before
    assert _RUNNING == [] and signal.getsignal(signal.SIGINT) is before
    interrupt(drivers[0])
    assert drivers[0].interrupted and not drivers[1].interrupted
