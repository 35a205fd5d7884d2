"""Journals written by earlier versions still resume and replay. Each fixture under
``tests/fixtures/journals/`` was written by the version it is named after, before a change to
what a journal holds (0.1.0: before ``BudgetExhausted.reason``, imported-run provenance and
declared program state; 0.3.0: before runs were sealed as their user's own, so that an old
journal's runs are foreign until named again or vouched for with ``opdsl trust``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from interpreters import ScriptedModel, SqliteJournal, replay, resume, run
from interpreters.cli._main import main
from interpreters.journal import Entry, JournalError, RunRecord
from interpreters.journal._portable import check_integrity
from interpreters.journal._seal import foreign, vouch_for
from op import OpdslError
from tests.fixtures.durable_programs import (
    TOOLS,
    Counted,
    appender,
    budgeted,
    chat,
    conversed,
    lines_of,
    long_output,
    measured,
)
from tests.helpers import RawJournal

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


# -- schema 2: entries kept in the order of their runs ----------------------------------------


@pytest.fixture
def schema_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``schema-2.db``, written by the version before entries were kept in the order they
    were written: ``appender``, ``budgeted``, ``conversed``, ``long`` and ``measured``
    completed, ``chat`` waiting for its answer, and ``cut``, whose process died inside its
    third tool call (that entry left ``started``). Its runs append to ``lines.txt``, here in
    the test's folder."""
    db = tmp_path / "runs.db"
    shutil.copy(FIXTURES / "schema-2.db", db)
    monkeypatch.chdir(tmp_path)
    return db


def _layout(db: Path) -> tuple[str, str, set[str]]:
    """The file's schema version, its ``entries`` table as SQLite keeps it, and its tables."""
    raw = RawJournal(db, read_only=True)
    try:
        version = raw.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        sql = raw.execute("SELECT sql FROM sqlite_master WHERE name='entries'").fetchone()[0]
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        raw.close()
    return version, sql, tables


def _everything(journal: SqliteJournal) -> dict[str, tuple[RunRecord, list[Entry]]]:
    return {r.run_id: (r, journal.entries(r.run_id)) for r in journal.runs()}


def test_a_schema_2_journal_is_read_as_it_is_and_moved_whole_when_opened_for_writing(
    schema_2: Path,
) -> None:
    version, sql, _ = _layout(schema_2)
    assert version == "2" and "WITHOUT ROWID" in sql
    reader = SqliteJournal(schema_2, read_only=True)
    before = _everything(reader)
    reader.close()
    assert _layout(schema_2)[0] == "2"  # reading changes nothing
    assert sorted(before) == [
        "appender",
        "budgeted",
        "chat",
        "conversed",
        "cut",
        "long",
        "measured",
    ]
    assert sum(len(entries) for _, entries in before.values()) == 29

    journal = SqliteJournal(schema_2)
    version, sql, tables = _layout(schema_2)
    assert version == "3" and "WITHOUT ROWID" not in sql and "entries_by_run" not in tables
    assert _everything(journal) == before  # every run and entry as it was, byte for byte
    assert journal._db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    for run_id in before:
        assert check_integrity(journal, run_id) == []
    # an address is still one entry of its run
    with pytest.raises(
        JournalError, match="UNIQUE constraint failed: entries.run_id, entries.address"
    ):
        journal.add_entries([before["appender"][1][2]])
    journal.close()
    SqliteJournal(schema_2).close()  # opened again: nothing more to move
    assert _layout(schema_2)[0] == "3"


def test_the_space_a_move_leaves_is_given_back_by_the_next_gc(
    schema_2: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the README says: the old table's pages stay free in the file until ``opdsl gc RUN``
    removes a run and vacuums it."""
    before = schema_2.stat().st_size
    SqliteJournal(schema_2).close()
    moved = schema_2.stat().st_size
    assert moved > before
    assert main(["gc", "measured", "--db", str(schema_2)]) == 0
    assert "removed run measured" in capsys.readouterr().out
    assert schema_2.stat().st_size < before
    kept = SqliteJournal(schema_2, read_only=True)
    assert [r.run_id for r in kept.runs()] == [
        "appender",
        "budgeted",
        "chat",
        "conversed",
        "long",
        "cut",
    ]
    kept.close()


def test_a_schema_2_journal_replays_resumes_forks_and_answers(schema_2: Path) -> None:
    db = str(schema_2)
    # another key sealed it: the program is named, as for any run handed over
    assert replay("appender", db=db, program=appender).value["n"] == 4
    assert replay("budgeted", db=db, program=budgeted).value == "ran out after 2"
    assert replay("conversed", db=db, program=conversed).value == len("first answer " * 40) + 9
    assert replay("long", db=db, program=long_output).value == "x" * 3000
    assert replay("measured", db=db, program=measured).value == len("hello there")

    # the run cut off inside a tool goes on from there: the tool is called again
    cut = resume("cut", db=db, program=appender, tools=TOOLS)
    assert cut.status == "completed" and cut.value["n"] == 5, cut.error
    kept = lines_of("lines.txt")
    assert [line.split(" ", 1)[1] for line in kept if line.startswith("cut:")] == [
        "line 2",
        "line 3",
        "line 4",
    ]
    assert replay("cut", db=db, program=appender).value == cut.value

    fork = resume("appender", from_checkpoint="line-3", db=db, program=appender, tools=TOOLS)
    assert fork.status == "completed" and fork.value["n"] == 4
    answered = resume(
        "chat", db=db, program=chat, answer="friends", model=ScriptedModel(["a poem"])
    )
    assert answered.value == "friends: a poem"
    journal = SqliteJournal(db)
    assert [(e.kind, e.status) for e in journal.entries("chat")][:3] == [
        ("checkpoint", "completed"),
        ("ask", "completed"),
        ("checkpoint", "completed"),
    ]
    # new entries follow the moved ones in the file, in the order they were written
    rows = journal._db.execute("SELECT run_id, address FROM entries ORDER BY rowid").fetchall()
    assert rows[-2:] == [("chat", "3"), ("chat", "4")]
    assert {r for r, _ in rows[-2 - len(journal.entries(fork.run_id)) : -2]} == {fork.run_id}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("ALTER TABLE entries DROP COLUMN usage_json", "lacks the column\\(s\\) usage_json"),
        (
            "ALTER TABLE entries ADD COLUMN note TEXT",
            "has column\\(s\\) opdsl does not keep \\(note\\), which the move would drop",
        ),
        (
            "CREATE INDEX by_kind ON entries (kind)",
            "has index by_kind, not opdsl's, which the move would drop",
        ),
        (
            "CREATE TRIGGER stamp AFTER INSERT ON entries BEGIN SELECT 1; END",
            "has trigger stamp, not opdsl's",
        ),
        (
            "CREATE TABLE entries_by_run (x)",
            "the name entries_by_run, which opdsl keeps for the move, is taken by a table on "
            "entries_by_run",
        ),
        (
            "CREATE INDEX entries_at ON runs (program)",
            "the name entries_at, which opdsl keeps for its index, is taken by an index on runs",
        ),
    ],
)
def test_an_older_journal_whose_move_would_lose_something_is_refused_as_it_was(
    schema_2: Path, change: str, said: str
) -> None:
    """What the move of an older file's entries would drop or cannot make (a column, an
    index or a trigger of the old table that is not opdsl's, the name of opdsl's index
    taken) is named, and the file is left as it was: it is still read."""
    raw = RawJournal(schema_2)
    raw.execute(change)
    raw.close()
    schema = _layout(schema_2)
    with pytest.raises(
        JournalError, match=f"could not be moved to schema 3: .*{said}.*nothing was changed"
    ):
        SqliteJournal(schema_2)
    assert _layout(schema_2) == schema
    reader = SqliteJournal(schema_2, read_only=True)
    assert reader.run("appender").status == "completed"
    if "DROP COLUMN" not in change:  # (a file without the column cannot be read either)
        assert len(reader.entries("appender")) == 8
    reader.close()


def test_views_and_triggers_that_name_the_entries_still_do_after_the_move(schema_2: Path) -> None:
    raw = RawJournal(schema_2)
    raw.execute("CREATE VIEW per_run AS SELECT run_id, count(*) AS n FROM entries GROUP BY run_id")
    raw.execute("CREATE TABLE notes (run_id TEXT, address TEXT)")
    raw.execute(
        "CREATE TRIGGER noted AFTER INSERT ON notes BEGIN UPDATE entries SET finished_at = 1 "
        "WHERE run_id = new.run_id AND address = new.address; END"
    )
    raw.close()
    journal = SqliteJournal(schema_2)
    assert _layout(schema_2)[0] == "3"
    counts: dict[str, int] = {
        str(r): int(n)  # type: ignore[arg-type]
        for r, n in journal._db.execute("SELECT run_id, n FROM per_run").fetchall()
    }
    assert counts["appender"] == 8 and sum(counts.values()) == 29
    journal._db.execute("INSERT INTO notes VALUES ('appender', '1')")
    assert journal.entries("appender")[0].finished_at == 1
    journal.close()


def test_an_index_under_opdsls_name_that_is_not_its_own_is_refused(tmp_path: Path) -> None:
    """A schema 3 file whose index of entries by run and address was replaced by another of
    that name (not unique, other columns) would let an address be written twice: refused,
    never dropped; one missing is made again."""
    db = tmp_path / "runs.db"
    SqliteJournal(db).close()
    raw = RawJournal(db)
    raw.execute("DROP INDEX entries_at")
    raw.close()
    SqliteJournal(db).close()  # made again
    raw = RawJournal(db)
    raw.execute("DROP INDEX entries_at")
    raw.execute("CREATE INDEX entries_at ON entries (kind)")
    raw.close()
    with pytest.raises(
        JournalError,
        match="entries_at, which opdsl keeps .* is taken by an index on entries \\(kind\\) that is not it.*nothing was changed",
    ):
        SqliteJournal(db)
    assert SqliteJournal(db, read_only=True).runs() == []


def test_a_run_is_not_created_over_entries_a_file_holds_without_their_run(tmp_path: Path) -> None:
    """A file changed by hand (a run's row deleted, or entries put in) holds entries of a run
    id with no run: a new run given that id would take them for its own record. Refused,
    naming the run, with the file as it was."""
    db = tmp_path / "runs.db"
    done = run(appender, str(tmp_path / "lines.txt"), 2, tools=TOOLS, state=Counted(), db=str(db))
    assert done.status == "completed"
    raw = RawJournal(db)
    raw.execute("DELETE FROM runs WHERE run_id=?", (done.run_id,))
    stray = raw.execute("SELECT count(*) FROM entries WHERE run_id=?", (done.run_id,)).fetchone()
    raw.close()
    assert stray[0] > 0
    with pytest.raises(JournalError, match=f"holds entries of a run {done.run_id} but no such"):
        run(
            appender,
            str(tmp_path / "lines.txt"),
            2,
            tools=TOOLS,
            state=Counted(),
            db=str(db),
            run_id=done.run_id,
        )
    raw = RawJournal(db, read_only=True)
    assert raw.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    assert raw.execute("SELECT count(*) FROM locks").fetchone()[0] == 0  # its lock let go
    left = raw.execute("SELECT count(*) FROM entries WHERE run_id=?", (done.run_id,)).fetchone()
    assert left[0] == stray[0]
    raw.close()
    other = run(appender, str(tmp_path / "lines.txt"), 2, tools=TOOLS, state=Counted(), db=str(db))
    assert other.status == "completed"  # any other id: as ever
