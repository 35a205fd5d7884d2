"""A run's life in its journal (``runtime/_run.py``), the services it is driven with
(``runtime/_services.py``) and the one error-JSON format of entries and runs."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from interpreters import (
    JournalError,
    MemoryJournal,
    RunRecord,
    ScriptedModel,
    SqliteJournal,
    run,
)
from interpreters.journal import Entry
from interpreters.journal._base import error_line
from interpreters.journal._status import closing
from interpreters.runtime import Services, VirtualClock, execute
from interpreters.runtime._frame import Call, Handlers
from interpreters.runtime._replay import ReplayedError, decode_error, error_json
from op import ModelError, Op, emit, infer
from op.effects import LeafEffect
from state import StateError

RUNTIME = Path(__file__).resolve().parents[3] / "interpreters" / "runtime"


class _Nothing(Handlers):
    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        return None


def _fails() -> Op[None]:
    yield from emit("start")
    raise StateError("the state broke")


def test_no_function_in_the_runtime_is_over_60_lines() -> None:
    long = []
    for path in sorted(RUNTIME.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > 60:
                    long.append(f"{path.name}:{node.name} ({size} lines)")
    assert long == []


def test_the_services_are_one_frozen_value() -> None:
    services = Services(handlers=_Nothing(), clock=VirtualClock())
    with pytest.raises(dataclasses.FrozenInstanceError):
        services.journal = MemoryJournal()  # type: ignore[misc]
    assert services.journal is None and not services.bus.active and services.interruptible


def test_a_run_and_its_entries_record_errors_in_one_format() -> None:
    def program() -> Op[None]:
        with contextlib.suppress(ModelError):  # the handler raises: a failed entry
            yield from infer("hi", tools=["no_such_tool"])
        yield from emit("start")
        raise ModelError("the program broke")

    journal = MemoryJournal()
    result = run(program, model=ScriptedModel([]), db=journal)
    entry = journal.entries(result.run_id)[0]
    record = journal.run(result.run_id)
    entry_err, run_err = json.loads(entry.error_json or ""), json.loads(record.error_json or "")
    kind = f"{ModelError.__module__}:{ModelError.__qualname__}"
    assert set(entry_err) == {"type", "message"} and entry_err["type"] == kind
    assert run_err == {"type": kind, "message": "the program broke", "address": "2"}
    # both are read back by the one decoder, as the class they were
    assert isinstance(decode_error(record.error_json), ModelError)
    assert isinstance(decode_error(entry.error_json), ModelError)


def test_a_builtin_error_is_recorded_by_its_name() -> None:
    assert json.loads(error_json(KeyError("k"), "3")) == {
        "type": "KeyError",
        "message": "'k'",
        "address": "3",
    }
    assert error_line(error_json(ValueError("bad"))) == "ValueError: bad"


def test_the_formats_written_before_are_still_read() -> None:
    # an entry's (0.3.0): the class as module:qualname
    old_entry = '{"message":"bad","type":"builtins:ValueError"}'
    err = decode_error(old_entry)
    assert type(err) is ValueError and str(err) == "bad"
    # a run's (0.3.0): the bare class name for every class, and its address
    old_run = '{"address":"2","message":"bad","type":"ValueError"}'
    assert type(decode_error(old_run)) is ValueError
    old_run_custom = '{"address":"2","message":"the state broke","type":"StateError"}'
    replayed = decode_error(old_run_custom)
    assert isinstance(replayed, ReplayedError) and replayed.type_name == "StateError"
    assert error_line(old_run_custom) == "StateError: the state broke"


def test_a_fork_prefix_is_written_right_after_the_run_is_created(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "runs.db")
    prefix = [Entry("new", 1, "1", "emit", '{"data":null,"kind":"emit","name":"start"}')]
    prefix[0] = prefix[0].replace(status="completed", result_json="null", finished_at=1.0)

    def program() -> Op[None]:
        yield from emit("start")
        yield from emit("then")

    from interpreters.runtime._replay import ReplayLog

    result = asyncio.run(
        execute(
            program,
            (),
            {},
            run_id="new",
            services=Services(handlers=_Nothing(), clock=VirtualClock(), journal=journal),
            log=ReplayLog({e.address: e for e in prefix}),
            entries=prefix,
        )
    )
    assert result.status == "completed"
    assert [(e.address, e.status) for e in journal.entries("new")] == [
        ("1", "completed"),
        ("2", "completed"),
    ]


def test_a_completed_run_is_not_reopened_in_place() -> None:
    journal = MemoryJournal()
    first = run(lambda: emit("x"), db=journal, run_id="done")
    assert first.status == "completed"
    record = journal.run("done")
    with pytest.raises(JournalError, match="run done is completed: it cannot be resumed"):
        asyncio.run(
            execute(
                lambda: emit("x"),
                (),
                {},
                run_id="done",
                services=Services(handlers=_Nothing(), clock=VirtualClock(), journal=journal),
                record=record,
            )
        )
    assert journal.run("done").status == "completed"


def test_a_defect_looking_the_run_up_is_not_taken_for_a_new_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal = MemoryJournal()

    def defect(run_id: str) -> RunRecord:  # a defect of the journal's own, not a refusal
        raise RuntimeError("a defect in the journal")

    monkeypatch.setattr(journal, "run", defect)
    with pytest.raises(RuntimeError, match="a defect in the journal"):
        asyncio.run(
            execute(
                lambda: emit("x"),
                (),
                {},
                run_id="r",
                services=Services(handlers=_Nothing(), clock=VirtualClock(), journal=journal),
                record=RunRecord(run_id="r", program="m:f"),
            )
        )
    assert journal.runs() == []  # nothing was created over it


@pytest.mark.parametrize(
    ("journal_failed", "resumed", "diverged", "how"),
    [
        (True, True, True, "leave"),
        (True, False, False, "leave"),
        (False, True, True, "put_back"),
        (False, False, True, "finish"),
        (False, True, False, "finish"),
        (False, False, False, "finish"),
    ],
)
def test_how_a_run_is_closed_is_one_rule(
    journal_failed: bool, resumed: bool, diverged: bool, how: str
) -> None:
    assert closing(journal_failed=journal_failed, resumed=resumed, diverged=diverged) == how


def test_a_failed_run_records_its_address() -> None:
    journal = MemoryJournal()
    result = run(_fails, db=journal)
    assert result.status == "failed" and result.address == "1"
    assert json.loads(journal.run(result.run_id).error_json or "")["address"] == "1"
