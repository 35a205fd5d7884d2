"""The chain a leaf effect goes through (runtime/_layers.py): which layers are in it, in what
order they act, and the typed marks the driver reads."""

from __future__ import annotations

import functools
import json
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from interpreters import (
    JournalError,
    LiveInterpreter,
    MemoryJournal,
    ScriptedModel,
    SqliteJournal,
    run,
)
from interpreters.runtime import Driver, EventBus, Services, SystemClock
from interpreters.runtime._frame import Call, Handlers
from interpreters.runtime._layers import Announced, Charge, Handled, Journaled, Replay
from interpreters.runtime._replay import ReplayLog
from op import Budget, Failure, Fatal, Op, RunFailed, checkpoint, emit, infer, limit, program, tool
from op.effects import LeafEffect
from op.events import EffectFinished, EffectStarted, Event
from state import CRDTModel, GCounter


class _Nothing(Handlers):
    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        return None


def _chain(
    *, journal: bool = False, sinks: bool = False, log: bool = False
) -> tuple[list[type], list[type]]:
    """The layer classes of a driver's two chains (without and with a budget), outer first."""
    driver = Driver(
        run_id="r",
        program="p",
        services=Services(
            handlers=_Nothing(),
            journal=MemoryJournal() if journal else None,
            bus=EventBus([lambda e: None] if sinks else []),
            clock=SystemClock(),
        ),
        log=ReplayLog(entries={}, strict=False) if log else None,
    )

    def walk(perform: Any) -> list[type]:
        kinds = []
        while True:
            layer = perform.__self__
            kinds.append(type(layer))
            if isinstance(layer, Handled):
                return kinds
            perform = layer.inner

    return walk(driver._leaf), walk(driver._charged)


def test_the_fast_path_is_the_handlers_alone() -> None:
    plain, budgeted = _chain()
    assert plain == [Handled]
    assert budgeted == [Charge, Handled]


@pytest.mark.parametrize(
    ("journal", "sinks", "log", "expected"),
    [
        (True, False, False, [Journaled, Handled]),
        (False, True, False, [Announced, Handled]),
        (True, True, False, [Announced, Journaled, Handled]),
        (True, True, True, [Replay, Announced, Journaled, Handled]),
        (False, False, True, [Replay, Handled]),
    ],
)
def test_each_layer_is_there_only_when_its_job_exists(
    journal: bool, sinks: bool, log: bool, expected: list[type]
) -> None:
    plain, budgeted = _chain(journal=journal, sinks=sinks, log=log)
    assert plain == expected
    assert budgeted == [Charge, *expected]


def _two_effects() -> Op[str]:
    yield from emit("hello", {"n": 1})
    answer = yield from infer("hi")
    return answer.text


def test_an_effect_is_journaled_finished_before_a_sink_hears_it_finished() -> None:
    journal = MemoryJournal()
    seen: list[tuple[str, str, str | None]] = []

    def sink(event: Event) -> None:
        if isinstance(event, EffectStarted | EffectFinished):
            entries = {e.address: e.status for e in journal.entries(event.run_id)}
            seen.append((type(event).__name__, event.address, entries.get(event.address)))

    run(_two_effects, model=ScriptedModel(["fine"]), db=journal, on_event=sink)
    assert seen == [
        # the event that an effect starts comes first; it is journaled before its handler runs
        ("EffectStarted", "1", None),
        ("EffectFinished", "1", "completed"),
        ("EffectStarted", "2", None),
        ("EffectFinished", "2", "completed"),
    ]


class _BrokenJournal(SqliteJournal):
    """A real SQLite journal whose disk fills up when the second effect begins."""

    def begin(self, run_id: str, address: str, kind: str, effect_json: str, at: float) -> None:
        if address == "2":
            raise OSError("disk full")
        super().begin(run_id, address, kind, effect_json, at)


def test_a_journal_that_fails_to_begin_still_closes_the_event_it_opened(tmp_path: Path) -> None:
    events: list[Event] = []
    with pytest.raises(RunFailed, match="disk full"):
        _ = run(
            _two_effects,
            model=ScriptedModel(["fine"]),
            db=_BrokenJournal(str(tmp_path / "runs.db")),
            on_event=events.append,
        ).value
    started = [e.address for e in events if isinstance(e, EffectStarted)]
    finished = [(e.address, e.status) for e in events if isinstance(e, EffectFinished)]
    assert started == ["1", "2"]
    assert finished == [("1", "completed"), ("2", "failed")]


def _swallows() -> Op[str]:
    yield from emit("first")
    try:
        yield from emit("second")
    except Exception:
        return "went on, unrecorded"
    return "recorded"


def test_a_journal_failing_its_own_way_ends_the_run_and_the_program_cannot_swallow_it(
    tmp_path: Path,
) -> None:
    result = run(_swallows, db=_BrokenJournal(str(tmp_path / "runs.db")))
    assert result.status == "failed"
    assert isinstance(result.error, JournalError)
    assert "could not begin the entry at 2: OSError: disk full" in str(result.error)


def test_a_checkpoint_gives_the_program_none_on_the_fast_path_too(tmp_path: Path) -> None:
    # with a git workspace the handler returns the files' snapshot; that is for the journal,
    # never for the program, journal or no journal
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "a.txt"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(tmp_path),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "a",
        ],
        check=True,
    )

    def prog() -> Op[object]:
        seen: object = yield from cast("Op[object]", checkpoint("here"))
        return seen

    assert LiveInterpreter(workspace=tmp_path).run_sync(prog).value is None
    journal = MemoryJournal()
    journaled = LiveInterpreter(workspace=tmp_path, journal=journal).run_sync(prog)
    assert journaled.value is None
    # the handler did return something: the files' snapshot, which only the journal holds
    [entry] = journal.entries(journaled.run_id)
    assert json.loads(entry.result_json or "{}")["world"]["tree"]


def _counted() -> Op[int]:
    def body() -> Op[int]:
        for _ in range(3):
            yield from tool("noop")
        return 3

    outcome = yield from limit(Budget(tool_calls=2), body())
    return 0 if isinstance(outcome, Failure) else 3


def test_budgets_are_charged_with_or_without_a_journal() -> None:
    def noop() -> str:
        return ""

    for journal in (None, MemoryJournal()):
        assert LiveInterpreter(tools=[noop], journal=journal).run_sync(_counted).value == 0


# -- typed marks ----------------------------------------------------------------------------


class _Broken(Exception):
    """An error class the user does not own, registered as fatal."""


Fatal.register(_Broken)


def test_an_error_registered_as_fatal_ends_the_run_instead_of_reaching_the_program() -> None:
    def explode() -> str:
        raise _Broken("the tool's backend is misconfigured")

    def swallow() -> Op[str]:
        try:
            yield from tool("explode")
        except Exception:
            return "swallowed"
        return "no error"

    result = run(swallow, tools=[explode], db=MemoryJournal())
    assert result.status == "failed"
    with pytest.raises(
        RunFailed, match=r"at address 1: _Broken: the tool's backend is misconfigured"
    ):
        _ = result.value


def test_an_ordinary_error_is_the_tool_result_the_model_reads() -> None:
    def explode() -> str:
        raise ValueError("bad input")

    def read() -> Op[str]:
        result = yield from tool("explode")
        return result.error or ""

    assert run(read, tools=[explode], db=MemoryJournal()).value == (
        "tool 'explode' raised ValueError: bad input"
    )


class Count(CRDTModel):
    n: GCounter = GCounter()


def test_a_program_declaration_survives_functools_wraps() -> None:
    from op import default_state

    @program(state=Count)
    def counted() -> Op[int]:
        yield from emit("ran")
        return 1

    def logged(fn: Callable[[], Op[int]]) -> Callable[[], Op[int]]:
        @functools.wraps(fn)
        def wrapper() -> Op[int]:
            return (yield from fn())

        return wrapper

    assert isinstance(default_state(logged(counted)), Count)


def test_a_stray_attribute_of_the_same_name_is_not_a_mark() -> None:
    from interpreters import ToolRegistry
    from op import default_state

    def prog() -> Op[int]:
        yield from emit("ran")
        return 1

    prog.__opdsl_program__ = "not a declaration"  # type: ignore[attr-defined]
    assert default_state(prog) is None

    def lister() -> list[str]:
        return []

    lister.__opdsl_read_only__ = "yes"  # type: ignore[attr-defined]
    bound = ToolRegistry([lister]).get("lister")
    assert bound is not None and bound.read_only is False


def test_the_old_name_of_the_bound_tool_still_works_and_says_it_moved() -> None:
    import interpreters

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = interpreters.__getattr__("Tool")
    assert old is interpreters.BoundTool
    assert any("BoundTool" in str(w.message) for w in caught)
