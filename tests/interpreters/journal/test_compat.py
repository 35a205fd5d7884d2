"""Journals written by earlier versions still resume and replay. Each fixture under
``tests/fixtures/journals/`` was written by the version it is named after, before a change to
what a journal holds (0.1.0: before ``BudgetExhausted.reason``, imported-run provenance and
declared program state; 0.3.0: before runs were sealed as their user's own, so that an old
journal's runs are foreign until named again or vouched for with ``opdsl trust``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from interpreters import ScriptedModel, SqliteJournal, replay, resume
from interpreters.journal._seal import foreign, vouch_for
from op import OpdslError
from tests.fixtures.durable_programs import TOOLS, appender, budgeted

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "journals"


@pytest.fixture(params=["v0.1.0", "v0.3.0"])
def unsealed_db(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    db = tmp_path / "runs.db"
    shutil.copy(FIXTURES / f"{request.param}.db", db)
    return str(db)


@pytest.fixture
def old_db(tmp_path: Path) -> str:
    """The 0.1.0 journal, its runs vouched for (``opdsl trust``)."""
    db = tmp_path / "runs.db"
    shutil.copy(FIXTURES / "v0.1.0.db", db)
    journal = SqliteJournal(db)
    vouch_for(journal, [r.run_id for r in journal.runs()])
    journal.close()
    return str(db)


def test_an_old_journals_runs_are_foreign_until_named_again_or_vouched_for(
    unsealed_db: str,
) -> None:
    journal = SqliteJournal(unsealed_db)
    run = journal.runs()[0]
    assert "not sealed as yours" in str(foreign(run))
    with pytest.raises(OpdslError, match=f"run {run.run_id} is not sealed as yours.*--program"):
        replay(run.run_id, db=unsealed_db)
    if run.run_id == "appender":  # 0.1.0's: replayed with the program named
        # its state type, Counted, lies in the module of the program named: nothing new runs
        assert replay("appender", db=unsealed_db, program=appender).value["n"] == 4
        assert replay("budgeted", db=unsealed_db, program=budgeted).value == "ran out after 2"
    assert vouch_for(journal, [run.run_id]) == [run]
    assert foreign(journal.run(run.run_id)) is None
    assert vouch_for(journal, [run.run_id]) == []  # sealed already
    assert journal.run(run.run_id).model_copy(update={"config_json": run.config_json}) == run


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
