"""Group commit: concurrent runs sharing one SQLite journal commit their entries' writes
together; the begin of an effect that acts on the world is still committed (seen by another
connection, as another process would) before its handler runs, and a model call's is committed
a turn of the loop later without the call waiting for it."""

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
    RunRecord,
    RunResult,
    ScriptedModel,
    SqliteJournal,
    check_integrity,
)
from interpreters.journal._content import refs_of
from op import Op, infer, tool
from tests.helpers import grouped_journal


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
    interp: LiveInterpreter,
    runs: int,
    program: Any,
    *args: Any,
    tagged: bool = False,
    backend: str = "asyncio",
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

    anyio.run(main, backend=backend)
    return results


def _asks(n: int) -> Op[list[str]]:
    """``n`` model calls, their answers' texts."""
    out = []
    for i in range(n):
        out.append((yield from infer(f"q{i}")).text)
    return out


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


def test_entries_are_kept_in_the_order_they_were_written_not_by_run(tmp_path: Path) -> None:
    """A commit of many runs' writes adds to the end of the file, instead of rewriting a page
    of entries for each run (schema 2 kept them in the order of their runs); a run's entries
    are still read in its order, each address once."""
    journal = SqliteJournal(tmp_path / "runs.db", group_commit=True)

    async def seen_from_outside(i: int) -> str:
        await anyio.sleep(0)  # each run's call yields to the loop: the runs keep in step
        return str(i)

    results = _together(LiveInterpreter(tools=[seen_from_outside], journal=journal), 3, _program, 4)
    assert [r.status for r in results] == ["completed"] * 3
    written = journal._db.execute("SELECT run_id, seq FROM entries ORDER BY rowid").fetchall()
    # the runs took turns: each wrote its first call before any wrote its second
    assert [seq for _, seq in written] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert len({run for run, _ in written[:3]}) == 3
    for r in results:
        assert [e.seq for e in journal.entries(r.run_id)] == [0, 1, 2, 3]
    with pytest.raises(apsw.ConstraintError, match="entries.run_id, entries.address"):
        journal._db.execute(
            "INSERT INTO entries (run_id, seq, address, kind, effect_json, status, started_at) "
            "VALUES (?, 9, '1', 'infer', '{}', 'started', 0)",
            (results[0].run_id,),
        )
    journal.close()


def test_a_journal_keeps_nothing_of_the_runs_it_has_released(tmp_path: Path) -> None:
    """A long-lived journal object (a server's) writing run after run holds no more for a
    thousand runs than for one: what it knew of each run (its next seq, its addresses) goes
    with the run's lock."""
    journal = SqliteJournal(tmp_path / "runs.db", group_commit=True)
    interp = LiveInterpreter(model=ScriptedModel(lambda _request: "ok"), journal=journal)
    for _ in range(3):
        results = _together(interp, 20, _asks, 3)
        assert [r.status for r in results] == ["completed"] * 20
        assert journal._runs_known == {} and journal._writing == set()
        assert journal._lost == {} and journal._tx_runs == set()
    journal.close()


def test_a_commit_that_fails_fails_every_run_that_waits_on_it(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "runs.db", group_commit=True)
    failed: list[set[str]] = []

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        # the first commit that holds entries is not run (SQLite is told to abort it)
        if sql == "COMMIT" and journal._tx_runs and not failed:
            failed.append(set(journal._tx_runs))
            return False
        return True

    journal._db.exec_trace = tracer
    ran: list[str] = []

    def noop(call: CallInfo) -> str:
        ran.append(call.run_id)
        return "ok"

    interp = LiveInterpreter(tools=[noop], journal=journal)

    def program() -> Op[str]:
        return (yield from tool("noop")).output

    results = _together(interp, 3, program)
    assert failed and failed[0]
    # the begins in the commit that failed: their handlers never ran, their runs say why and
    # stay resumable (running); a run whose writes it did not hold is not touched
    for r in results:
        if r.run_id in failed[0]:
            assert r.status == "failed" and r.run_id not in ran
            assert "the commit failed: Aborted" in str(r.error), r.error
            assert journal.run(r.run_id).status == "running"
        else:
            assert r.status == "completed" and r.run_id in ran
    journal._db.exec_trace = None
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


class _Watcher:
    """A model that looks at the journal from another connection (as another process would)
    while it answers: whether this call's begin is committed yet, and, after a few turns of
    the loop, whether it is then, and whether the call before it is committed finished."""

    def __init__(self, db: Path) -> None:
        self.outside = apsw.Connection(str(db))
        self.seen: list[tuple[str, str, str]] = []

    def _status(self, call: CallInfo, address: str) -> str:
        row = self.outside.execute(
            "SELECT status FROM entries WHERE run_id=? AND address=?", (call.run_id, address)
        ).fetchone()
        return "none" if row is None else str(row[0])

    async def complete(self, request: Any, call: CallInfo) -> Any:
        from op import Response

        at_once = self._status(call, call.address)
        for _ in range(3):  # an answer is never back within a turn of the loop
            await anyio.sleep(0)
        later = self._status(call, call.address)
        n = int(call.address)  # a run of model calls alone: addresses 1, 2, ...
        before = self._status(call, str(n - 1)) if n > 1 else "-"
        self.seen.append((at_once, later, before))
        return Response(text=f"answer {n}", model="watcher")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_model_call_does_not_wait_for_its_begin_and_every_write_is_committed_a_turn_later(
    tmp_path: Path, backend: str
) -> None:
    """A model call changes nothing outside the run: its handler starts at once, and its begin
    is committed by the commit scheduled when the transaction opened, with no run waiting for
    it. Runs that only ask models are still committed as they go, not at their ends. (Here
    no begin is held back: see the test after this one.)"""

    db = tmp_path / "runs.db"
    watcher = _Watcher(db)
    journal = SqliteJournal(db, group_commit=True)
    journal.hold = 0
    commits: list[str] = []
    _trace(journal, commits, only="COMMIT")
    interp = LiveInterpreter(model=watcher, journal=journal)

    runs, steps = 5, 4
    results = _together(interp, runs, _asks, steps, backend=backend)
    assert [r.value for r in results] == [[f"answer {i}" for i in range(1, steps + 1)]] * runs
    addresses = {e.address for r in results for e in journal.entries(r.run_id)}
    assert addresses == {str(i) for i in range(1, steps + 1)}  # as the watcher counts them
    # not waited for: the first call of every run began before any commit
    assert [s[0] for s in watcher.seen[:runs]] == ["none"] * runs
    # committed within a turn or so, and the call before finished and committed by then
    assert {s[1] for s in watcher.seen} == {"started"}
    assert {s[2] for s in watcher.seen} == {"-", "completed"}
    assert 0 < len(commits) < runs * steps
    for r in results:
        assert check_integrity(journal, r.run_id) == []
    journal.close()
    watcher.outside.close()


def test_a_scheduled_commit_that_fails_stops_each_run_it_held_and_they_resume_whole(
    tmp_path: Path,
) -> None:
    """No run waits for a model call's commit. When that commit fails, the runs whose entries
    it held are told at their next write, so none goes on past a gap; each resumes from what
    was kept, and the resumed run is the whole run."""
    from interpreters import resume

    db = tmp_path / "runs.db"
    journal = SqliteJournal(db, group_commit=True)
    failed: list[set[str]] = []
    holding: list[int] = []

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        # the third commit that holds entries fails (SQLite is told not to run it): by then
        # every run has entries committed before it
        if sql == "COMMIT" and journal._tx_runs and not failed:
            holding.append(1)
            if len(holding) == 3:
                failed.append(set(journal._tx_runs))
                return False
        return True

    journal._db.exec_trace = tracer
    model = ScriptedModel(lambda request: f"to {request.messages[-1].content}", delay=0.001)
    interp = LiveInterpreter(model=model, journal=journal)

    results = _together(interp, 3, _asks, 6)
    assert failed and failed[0], "no commit failed"
    stopped = [r for r in results if r.run_id in failed[0]]
    assert stopped and all(r.status == "failed" for r in stopped)
    for r in stopped:
        assert "a commit of its last entries failed" in str(r.error), r.error
        assert "the commit failed: Aborted" in str(r.error)  # what SQLite said
        assert journal.run(r.run_id).status == "running"  # resumable, not ended
    assert all(r.status == "completed" for r in results if r.run_id not in failed[0])
    journal._db.exec_trace = None
    for r in stopped:
        again = resume(r.run_id, db=journal, program=_asks, model=model, tools=[])
        assert again.status == "completed", again.error
        assert again.value == [f"to q{i}" for i in range(6)]
        assert check_integrity(journal, r.run_id) == []
        assert [e.status for e in journal.entries(r.run_id)] == ["completed"] * 6
    journal.close()


def test_a_commit_scheduled_on_a_loop_that_stopped_does_not_hold_back_the_next_loops_writes(
    tmp_path: Path,
) -> None:
    """A loop stopped before its scheduled commit ran (an interrupted program) leaves its
    transaction open. A journal used again from another loop neither waits for that commit for
    ever nor leaves the new writes uncommitted: it schedules a commit of its own."""
    import asyncio

    db = tmp_path / "runs.db"
    journal = SqliteJournal(db, group_commit=True)
    journal.create_run(RunRecord(run_id="cut", program="x"))
    loop = asyncio.new_event_loop()

    async def write_and_stop() -> None:
        journal.begin("cut", "1", "tool", '{"kind":"tool"}', 0.0)
        loop.stop()  # the loop ends this turn: the commit it scheduled never runs

    loop.run_until_complete(write_and_stop())
    loop.close()
    assert journal._in_tx and journal._group is not None  # the commit never ran

    watcher = _Watcher(db)
    journal.hold = 0  # the model call's begin is written at once, as the tool's was

    def asks() -> Op[str]:
        first = (yield from infer("question")).text
        out = yield from tool("noop")
        return f"{first} {out.output}"

    def noop() -> str:
        return "done"

    interp = LiveInterpreter(model=watcher, tools=[noop], journal=journal)
    result = anyio.run(interp.arun, asks)
    assert result.value == "answer 1 done"
    assert watcher.seen == [("none", "started", "-")]  # committed without a wait, as ever
    outside = apsw.Connection(str(db))
    assert outside.execute("SELECT status FROM entries WHERE run_id='cut'").fetchall() == [
        ("started",)
    ]
    journal.close()
    watcher.outside.close()
    outside.close()


def _entries_outside(db: Path, run_id: str) -> list[tuple[Any, ...]]:
    outside = apsw.Connection(str(db))
    try:
        return outside.execute(
            "SELECT address, status FROM entries WHERE run_id=? ORDER BY seq", (run_id,)
        ).fetchall()
    finally:
        outside.close()


def test_a_failed_commit_made_for_another_statement_stops_the_runs_it_held_not_the_statement(
    tmp_path: Path,
) -> None:
    """A statement committed at once (a run's start, end or lock) commits the open group of
    entries first. When that commit fails, the runs whose entries it held are stopped, their
    ends refused, and the statement itself is still made."""
    journal = grouped_journal(tmp_path / "runs.db", "a")
    journal.begin("a", "1", "infer", '{"kind":"infer"}', 1.0)  # grouped: not committed yet
    journal.finish("a", "1", "completed", at=2.0, result_json='"ok"')
    aborted: list[str] = []

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        if sql == "COMMIT" and not aborted:
            aborted.append(sql)
            return False
        return True

    journal._db.exec_trace = tracer
    journal.create_run(RunRecord(run_id="late", program="p"))  # commits the group first
    journal._db.exec_trace = None
    assert aborted and journal.run("late").program == "p"
    assert not journal._in_tx
    assert _entries_outside(journal.path, "a") == []  # rolled back with the commit
    with pytest.raises(JournalError, match=r"run a: a commit of its last entries failed"):
        journal.begin("a", "2", "infer", '{"kind":"infer"}', 3.0)
    with pytest.raises(JournalError, match=r"run a: a commit of its last entries failed"):
        journal.finish_run("a", "completed", at=4.0)  # no end written over the gap
    assert journal.run("a").status == "running"
    journal.release("a")
    journal.acquire("a")  # resumed: it goes on from what was kept
    journal.begin("a", "1", "infer", '{"kind":"infer"}', 5.0)
    journal.close()
    assert _entries_outside(tmp_path / "runs.db", "a") == [("1", "started")]


def test_a_wait_for_a_commit_that_another_thread_is_making_and_that_fails_raises(
    tmp_path: Path,
) -> None:
    """Two threads, each with its own event loop, share one journal. A tool's begin that went
    into the transaction another thread is committing is durable only once that commit has
    succeeded: when it fails, the wait raises and the tool does not run."""
    import asyncio
    import threading
    import time

    journal = grouped_journal(tmp_path / "runs.db", "A", "B")
    for run_id in ("A", "B"):
        journal._known(run_id)  # read now: a first write reads them, committing what is open
    b_wrote, a_wrote, b_committing = threading.Event(), threading.Event(), threading.Event()

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        if sql == "COMMIT" and threading.current_thread().name == "B":
            b_committing.set()
            time.sleep(0.3)  # a slow commit, the journal's lock held...
            return False  # ... that fails
        return True

    journal._db.exec_trace = tracer
    seen: dict[str, object] = {}

    def thread_b() -> None:
        async def main() -> None:
            journal.begin("B", "1", "infer", '{"kind":"infer"}', 1.0)  # opens the transaction
            b_wrote.set()
            a_wrote.wait(30)
            await asyncio.sleep(0.01)  # B's scheduled commit runs

        asyncio.run(main())

    def thread_a() -> None:
        async def main() -> None:
            b_wrote.wait(30)
            journal.begin("A", "1", "tool", '{"kind":"tool"}', 1.0)  # joins B's transaction
            a_wrote.set()
            b_committing.wait(30)
            try:
                await asyncio.wait_for(journal.durable(), 10)
                seen["durable"] = "returned"
            except JournalError as exc:
                seen["durable"] = str(exc)

        asyncio.run(main())

    threads = [
        threading.Thread(target=thread_a, name="A"),
        threading.Thread(target=thread_b, name="B"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    journal._db.exec_trace = None
    assert "the commit failed: Aborted" in str(seen["durable"]), seen
    assert _entries_outside(journal.path, "A") == []
    assert set(journal._lost) == {"A", "B"}
    journal.close()


def test_a_commit_that_fails_with_no_error_of_sqlites_still_wakes_its_waiters(
    tmp_path: Path,
) -> None:
    """A scheduled commit that fails in Python (a piece of content with a malformed name,
    given through the API) ends its transaction failed and wakes every run that waits for
    it, with the error, instead of leaving them waiting for ever."""
    import asyncio

    journal = grouped_journal(tmp_path / "runs.db", "a")

    async def main() -> str:
        journal.put_content({"not-a-hash": "body"})
        journal.begin("a", "1", "tool", '{"kind":"tool"}', 1.0)
        try:
            await asyncio.wait_for(journal.durable(), 10)
        except JournalError as exc:
            return str(exc)
        return "returned"

    said = asyncio.run(main())
    assert "the commit failed" in said and "fromhex" in said, said
    assert not journal._in_tx and _entries_outside(journal.path, "a") == []
    journal.close()


def test_a_journal_keeps_no_hold_on_a_loop_once_its_transaction_is_committed(
    tmp_path: Path,
) -> None:
    """A run stopped by Ctrl-C commits what it wrote as it ends, and its loop may stop before
    the commit it scheduled runs. The journal then holds nothing of that loop, which is freed
    (and closed) when its program lets go of it, not at the interpreter's exit."""
    import asyncio
    import gc
    import weakref

    journal = grouped_journal(tmp_path / "runs.db", "a")
    loop = asyncio.new_event_loop()

    async def write_end_and_stop() -> None:
        journal.begin("a", "1", "tool", '{"kind":"tool"}', 1.0)  # schedules a commit
        journal.finish_run("a", "cancelled", at=2.0)  # commits first, as a run's end does
        asyncio.get_running_loop().stop()  # the scheduled commit never runs

    loop.run_until_complete(write_end_and_stop())
    assert journal._group is None and not journal._in_tx
    held = weakref.ref(loop)
    loop.close()
    del loop
    gc.collect()
    assert held() is None
    assert _entries_outside(journal.path, "a") == [("1", "started")]
    journal.close()


def test_a_run_whose_end_cannot_be_written_ends_failed_and_resumes(tmp_path: Path) -> None:
    """The commit of a run's last entries fails as it ends (no write of the run came after
    it to be told): the run ends failed, saying so, rather than raising out of ``arun``, and
    stays running in the journal, resumed from what was kept."""
    from interpreters import resume

    db = tmp_path / "runs.db"
    journal = SqliteJournal(db, group_commit=True)
    failed: list[int] = []

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        if sql == "COMMIT" and "last" in journal._tx_runs and not failed:
            failed.append(1)
            return False
        return True

    model = ScriptedModel(lambda request: f"to {request.messages[-1].content}")
    interp = LiveInterpreter(model=model, journal=journal)

    async def main() -> RunResult[Any]:
        journal._db.exec_trace = tracer
        try:
            return await interp.arun(_asks, 2, run_id="last")
        finally:
            journal._db.exec_trace = None

    result = anyio.run(main)
    assert failed == [1]
    assert result.status == "failed"
    assert isinstance(result.error, JournalError)
    assert "a commit of its last entries failed" in str(result.error)
    assert journal.run("last").status == "running"
    again = resume("last", db=journal, program=_asks, model=model, tools=[])
    assert again.status == "completed" and again.value == ["to q0", "to q1"]
    assert check_integrity(journal, "last") == []
    journal.close()


def test_a_run_that_failed_and_whose_end_cannot_be_written_says_its_own_error(
    tmp_path: Path,
) -> None:
    """The program failed with its own error, and the commit of its last entries fails as it
    ends: the run's error is still the program's (the journal's noted on it), and so is what
    the event of its end says. A resume that diverged, whose end cannot be written either,
    ends failed as well, rather than raising out of ``aresume``."""
    from interpreters import aresume
    from op.events import RunFinished

    changed = {"since": False}

    def buggy() -> Op[str]:
        if changed["since"]:  # a tool where the record has a model call
            return (yield from tool("noop")).output
        yield from infer("q")
        raise ValueError("the program's own bug")

    def noop() -> str:
        return "done"

    journal = SqliteJournal(tmp_path / "runs.db", group_commit=True)
    model = ScriptedModel(["ok"] * 3)
    said: list[RunFinished] = []

    def sink(event: object) -> None:
        if isinstance(event, RunFinished):
            said.append(event)

    interp = LiveInterpreter(model=model, journal=journal, sinks=[sink])
    failed: list[int] = []

    def commit_fails(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        if sql == "COMMIT" and "r" in journal._tx_runs and not failed:
            failed.append(1)
            return False
        return True

    async def first() -> RunResult[Any]:
        journal._db.exec_trace = commit_fails
        try:
            return await interp.arun(buggy, run_id="r")
        finally:
            journal._db.exec_trace = None

    result = anyio.run(first)
    assert failed == [1] and result.status == "failed"
    assert isinstance(result.error, ValueError) and str(result.error) == "the program's own bug"
    assert any("its end could not be journaled" in n for n in result.error.__notes__)
    assert [(e.status, e.error) for e in said] == [("failed", "ValueError: the program's own bug")]
    assert journal.run("r").status == "running"

    assert anyio.run(lambda: interp.arun(buggy, run_id="p")).status == "failed"  # kept whole
    changed["since"] = True

    async def diverged() -> RunResult[Any]:
        journal._db.exec_trace = lambda _c, sql, _b: not sql.startswith("UPDATE runs SET status=?")
        try:
            return await aresume("p", db=journal, program=buggy, model=model, tools=[noop])
        finally:
            journal._db.exec_trace = None

    again = anyio.run(diverged)
    assert again.status == "failed" and again.error is not None
    assert "diverged" in str(again.error)
    assert any("its end could not be journaled" in n for n in again.error.__notes__)
    journal.close()


def test_a_write_made_as_another_thread_s_commit_fails_is_refused_not_left_after_a_gap(
    tmp_path: Path,
) -> None:
    """A run's write checks whether its entries were lost with the write itself: a commit of
    another thread's that fails between the run's last look and its write (losing the run's
    entry before) refuses the write, rather than writing it after a gap."""
    import threading

    journal = grouped_journal(tmp_path / "runs.db", "a", "b")
    journal.begin("a", "1", "tool", "{}", 1.0)  # in the open transaction
    known = journal._known

    def failing_meanwhile(run_id: str) -> tuple[list[int], set[str]]:
        out = known(run_id)

        def fail_commit() -> None:
            journal._db.exec_trace = lambda _c, sql, _b: sql != "COMMIT"
            with pytest.raises(JournalError):
                journal._commit()
            journal._db.exec_trace = None

        other = threading.Thread(target=fail_commit)
        other.start()
        other.join()
        return out

    journal._known = failing_meanwhile  # type: ignore[method-assign]
    with pytest.raises(JournalError, match="run a: a commit of its last entries failed"):
        journal.begin("a", "2", "tool", "{}", 2.0)
    journal._known = known  # type: ignore[method-assign]
    journal._commit()
    assert _entries_outside(journal.path, "a") == []
    journal.close()
