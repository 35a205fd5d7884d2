"""Group commit: concurrent runs sharing one SQLite journal commit their entries' writes
together, and each effect's begin is still committed (seen by another connection, as another
process would) before its handler runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import apsw
import pytest

from interpreters import CallInfo, JournalError, LiveInterpreter, SqliteJournal, check_integrity
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
    results = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(runs):

                async def one() -> None:
                    results.append(await interp.arun(_program, steps))

                tg.start_soon(one)

    anyio.run(main)
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

    results = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(3):

                async def one() -> None:
                    results.append(await interp.arun(program))

                tg.start_soon(one)

    anyio.run(main)
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

    async def together() -> list[list[str]]:
        out: list[list[str]] = []

        async def one() -> None:
            out.append((await interp.arun(_program, 4)).value)

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(one)
        return out

    assert anyio.run(together) == [["committed"] * 4] * 5
    assert "BEGIN" in statements  # grouped while they ran together
    assert not journal.grouped and not journal._writing  # and alone again after
    journal.close()
    outside.close()
