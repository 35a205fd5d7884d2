"""Journals written by earlier versions still resume and replay. Each fixture under
``tests/fixtures/journals/`` was written by the version it is named after, before a change to
what a journal holds (0.1.0: before ``BudgetExhausted.reason``, imported-run provenance and
declared program state)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from interpreters import ScriptedModel, SqliteJournal, replay, resume
from tests.fixtures.durable_programs import TOOLS

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "journals"


@pytest.fixture
def old_db(tmp_path: Path) -> str:
    db = tmp_path / "runs.db"
    shutil.copy(FIXTURES / "v0.1.0.db", db)
    return str(db)


def test_a_v0_1_journal_replays_every_run(old_db: str) -> None:
    assert replay("appender", db=old_db).value["n"] == 4
    assert replay("budgeted", db=old_db).value == "ran out after 2"


def test_a_v0_1_journal_resumes_forks_and_answers(old_db: str, tmp_path: Path) -> None:
    fork = resume("appender", from_checkpoint="line-3", db=old_db, tools=TOOLS)
    assert fork.status == "completed" and fork.value["n"] == 4
    answered = resume("chat", db=old_db, answer="friends", model=ScriptedModel(["a poem"]))
    assert answered.value == "friends: a poem"
    journal = SqliteJournal(old_db)
    assert journal.run("chat").status == "completed"
    assert [e.kind for e in journal.entries("chat")][:2] == ["checkpoint", "ask"]
    assert journal.entries("chat")[1].status == "completed"
