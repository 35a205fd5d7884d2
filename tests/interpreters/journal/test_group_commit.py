"""Group commit: concurrent runs sharing one SQLite journal commit their entries' writes
together, and each effect's begin is still committed (seen by another connection, as another
process would) before its handler runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import apsw
import pytest

from interpreters import (
    CallInfo,
    JournalError,
    LiveInterpreter,
    RunResult,
    SqliteJournal,
    check_integrity,
)
from interpreters.journal._content import refs_of
from op import Op, tool


def _outside(
    db: Path,
) -> tuple[apsw.Connection, Callable[[int, CallInfo], Awaitable[str]]]:
    """Another reader of the journal file (a connection of its own: it sees what is committed,
    as another process would), and a tool that says whether its own effect's begin is
    committed there while it runs (it yields to the loop first, as a tool that does I/O would,
    so that concurrent runs interleave; no timer, so the runs keep in step however loaded the
    machine is)."""
    outside = apsw.Connection(str(db))

    async def seen_from_outside(i: int, call: CallInfo) -> str:
        await anyio.sleep(0)
        row = outside.execute(
            "SELECT status FROM entries WHERE run_id=? AND address=?",
            (call.run_id, call.address),
        ).fetchone()
        return "committed" if row == ("started",) else f"not committed: {row}"

    return outside, seen_from_outside


def _trace(journal: SqliteJournal, statements: list[str], only: str | None = None) -> None:
    """Record the SQL the journal's connection runs (``only``: that statement alone)."""

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        if only is None or sql == only:
            statements.append(sql)
        return True

    journal._db.exec_trace = tracer


def _together(
    interp: LiveInterpreter, runs: int, program: Any, *args: Any, tagged: bool = False
) -> list[RunResult[Any]]:
    """``runs`` runs of ``program(*args)`` at once on ``interp`` (each given its index after
    ``args`` when ``tagged``), in the order they ended."""
    results: list[RunResult[Any]] = []

    async def one(tag: int) -> None:
        results.append(await interp.arun(program, *args, *((tag,) if tagged else ())))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for tag in range(runs):
                tg.start_soon(one, tag)

    anyio.run(main)
    return results


def _program(n: int) -> Op[list[str]]:
    out = []
    for i in range(n):
        out.append((yield from tool("seen_from_outside", {"i": i})).output)
    return out


@pytest.mark.parametrize("grouped", [False, True, None])
def test_concurrent_runs_share_commits_and_begins_stay_write_ahead(
    tmp_path: Path, grouped: bool | None
) -> None:
    db = tmp_path / "runs.db"
    outside, seen_from_outside = _outside(db)

    journal = SqliteJournal(db, group_commit=grouped)
    commits: list[str] = []
    _trace(journal, commits, only="COMMIT")
    interp = LiveInterpreter(tools=[seen_from_outside], journal=journal)
    runs, steps = 20, 5
    results = _together(interp, runs, _program, steps)
    assert [r.status for r in results] == ["completed"] * runs
    assert all(r.value == ["committed"] * steps for r in results)
    for r in results:
        assert check_integrity(journal, r.run_id) == []
        assert [e.status for e in journal.entries(r.run_id)] == ["completed"] * steps
    effects = runs * steps
    if grouped is not False:  # True, or None (the default) with many runs at once
        # one commit per turn of the loop, shared by the runs that wrote in it
        assert 0 < len(commits) < effects / 2, len(commits)
    else:
        assert commits == []  # every write committed on its own (autocommit)
    journal.close()
    outside.close()


def test_a_commit_that_fails_fails_every_run_that_waits_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = SqliteJournal(tmp_path / "runs.db", group_commit=True)
    real_commit = journal._commit
    failures: list[int] = []

    def failing_commit() -> None:
        if journal._in_tx and not failures:
            failures.append(1)
            with journal._mutex:
                journal._db.execute("ROLLBACK")
                journal._in_tx = False
            raise JournalError(f"journal {journal.path}: cannot commit: disk I/O error")
        real_commit()

    monkeypatch.setattr(journal, "_commit", failing_commit)

    def noop() -> str:
        return "ok"

    interp = LiveInterpreter(tools=[noop], journal=journal)

    def program() -> Op[str]:
        return (yield from tool("noop")).output

    results = _together(interp, 3, program)
    # the three begins were in the commit that failed: no handler ran, every run says why
    # and stays resumable (running)
    assert [r.status for r in results] == ["failed"] * 3
    assert all("cannot commit: disk I/O error" in str(r.error) for r in results)
    assert {journal.run(r.run_id).status for r in results} == {"running"}
    monkeypatch.undo()
    journal.close()


def test_a_fork_on_a_grouped_journal_keeps_its_begins_write_ahead(tmp_path: Path) -> None:
    from interpreters import resume

    db = tmp_path / "runs.db"
    outside, seen_from_outside = _outside(db)

    def program() -> Op[list[str]]:
        from op import checkpoint

        first = yield from tool("seen_from_outside", {"i": 0})
        yield from checkpoint("middle")
        second = yield from tool("seen_from_outside", {"i": 1})
        return [first.output, second.output]

    journal = SqliteJournal(db, group_commit=True)
    parent = LiveInterpreter(tools=[seen_from_outside], journal=journal).run_sync(program)
    assert parent.value == ["committed", "committed"]
    fork = resume(
        parent.run_id,
        db=journal,
        from_checkpoint="middle",
        program=program,
        tools=[seen_from_outside],
    )
    assert fork.value == ["committed", "committed"]
    journal.close()
    outside.close()


def test_by_default_a_run_alone_commits_each_write_and_runs_together_group(
    tmp_path: Path,
) -> None:
    """The default journal groups only while more than one run is written through it: a run
    alone gains nothing from waiting a turn of the loop."""
    db = tmp_path / "runs.db"
    outside, seen_from_outside = _outside(db)
    journal = SqliteJournal(db)
    statements: list[str] = []
    _trace(journal, statements)
    interp = LiveInterpreter(tools=[seen_from_outside], journal=journal)

    alone = interp.run_sync(_program, 4)
    assert alone.value == ["committed"] * 4
    assert "BEGIN" not in statements and not journal.grouped
    statements.clear()

    assert [r.value for r in _together(interp, 5, _program, 4)] == [["committed"] * 4] * 5
    assert "BEGIN" in statements  # grouped while they ran together
    assert not journal.grouped and not journal._writing  # and alone again after
    journal.close()
    outside.close()


def test_grouped_pieces_are_committed_with_their_begins_in_one_statement_a_commit(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    outside = apsw.Connection(str(db))

    async def pieces_seen(i: int, pad: str, call: CallInfo) -> str:
        # the begin, and the piece of content its long arguments were packed into, are both
        # committed (seen from another connection) before the tool runs
        await anyio.sleep(0)
        row = outside.execute(
            "SELECT status, effect_json FROM entries WHERE run_id=? AND address=?",
            (call.run_id, call.address),
        ).fetchone()
        if row is None or row[0] != "started":
            return f"not committed: {row}"
        refs = refs_of("tool", str(row[1]), None)
        keys = outside.execute("SELECT hash FROM content").fetchall()
        held = {key.hex() for (key,) in keys if isinstance(key, bytes)}
        return "committed" if refs and refs <= held else f"pieces missing: {refs - held}"

    def padded(n: int, tag: int) -> Op[list[str]]:
        out = []
        for i in range(n):
            pad = f"run {tag} effect {i} " * 30  # long enough to be a piece of its own
            out.append((yield from tool("pieces_seen", {"i": i, "pad": pad})).output)
        return out

    journal = SqliteJournal(db, group_commit=True)
    inserts: list[str] = []
    _trace(journal, inserts, only="INSERT OR IGNORE INTO content (hash, body) VALUES (?, ?)")
    writes: list[int] = []  # the pieces each statement that stores them writes
    write_pieces = journal._write_pieces

    def counted() -> None:
        if journal._pieces:
            writes.append(len(journal._pieces))
        write_pieces()

    journal._write_pieces = counted  # type: ignore[method-assign]
    interp = LiveInterpreter(tools=[pieces_seen], journal=journal)
    runs, steps = 10, 4
    results = _together(interp, runs, padded, steps, tagged=True)
    assert [r.value for r in results] == [["committed"] * steps] * runs
    for r in results:
        assert check_integrity(journal, r.run_id) == []
    # apsw traces an executemany once per row: the rows are the pieces, each written once,
    # by one statement for each commit that holds some, not one for each entry
    assert len(inserts) == sum(writes) == runs * steps
    assert len(writes) < runs * steps / 2, writes
    journal.close()
    outside.close()
