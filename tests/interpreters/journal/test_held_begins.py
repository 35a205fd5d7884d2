"""Held begins: under group commit, the begin of an effect that changes nothing outside its
run (a model call, a read of the clock) is held back, and the entry written once, whole, at its
finish; one still under way after the journal's ``hold`` is written as begun, where another
process sees it (and where a crash leaves it). Every reader of this process sees held begins
as begun, and nothing held is lost when its run ends or the journal closes."""

from __future__ import annotations

import asyncio
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
    SqliteJournal,
    check_integrity,
)
from interpreters.journal._sqlite import HOLD
from op import Op, Response, ToolResult, infer, par, tool
from op.events import EffectStarted, Event
from tests.helpers import grouped_journal

WHOLE = "INSERT INTO entries (run_id, seq, address, kind, effect_json, status, result_json, "
BEGUN = "INSERT INTO entries (run_id, seq, address, kind, effect_json, status, started_at) "
FINISHED = "UPDATE entries SET status=?"


def _statements(journal: SqliteJournal) -> list[str]:
    """The entry writes the journal's connection makes from now on, by kind."""
    seen: list[str] = []

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        for name, head in (("whole", WHOLE), ("begun", BEGUN), ("finished", FINISHED)):
            if sql.startswith(head):
                seen.append(name)
        return True

    journal._db.exec_trace = tracer
    return seen


def _outside_status(outside: apsw.Connection, run_id: str, address: str) -> str:
    row = outside.execute(
        "SELECT status FROM entries WHERE run_id=? AND address=?", (run_id, address)
    ).fetchone()
    return "none" if row is None else str(row[0])


class _Slow:
    """A model whose calls take ``seconds[address]`` (else ``default``), and that looks from
    another connection (as another process would) at its own entry just before it answers."""

    def __init__(self, db: Path, seconds: dict[str, float], default: float = 0.0) -> None:
        self.outside = apsw.Connection(str(db))
        self.seconds = seconds
        self.default = default
        self.seen: dict[tuple[str, str], str] = {}

    async def complete(self, request: Any, call: CallInfo) -> Any:
        await anyio.sleep(self.seconds.get(call.address, self.default))
        self.seen[call.run_id, call.address] = _outside_status(
            self.outside, call.run_id, call.address
        )
        return Response(text=f"answer {call.address}", model="slow")


def _together(
    journal: SqliteJournal, runs: int, program: Any, *args: Any, **kw: Any
) -> tuple[list[RunResult[Any]], dict[str, list[str]]]:
    """``runs`` runs of ``program`` at once on a live interpreter over ``journal`` (``kw``:
    its model and tools), and the addresses of each run's effects in the order they started
    (as the event bus told them)."""
    started: dict[str, list[str]] = {}

    def sink(event: Event) -> None:
        if isinstance(event, EffectStarted):
            started.setdefault(event.run_id, []).append(event.address)

    interp = LiveInterpreter(journal=journal, sinks=[sink], **kw)
    results: list[RunResult[Any]] = []

    async def one() -> None:
        results.append(await interp.arun(program, *args))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(runs):
                tg.start_soon(one)

    anyio.run(main)
    return results, started


def _asks(n: int) -> Op[list[str]]:
    out = []
    for i in range(n):
        out.append((yield from infer(f"q{i}")).text)
    return out


def test_a_model_call_that_ends_within_the_hold_is_written_once_whole(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    journal = SqliteJournal(db, group_commit=True)
    assert journal.hold == HOLD == 1.0
    writes = _statements(journal)
    model = _Slow(db, {})
    runs, steps = 5, 4
    results, started = _together(journal, runs, _asks, steps, model=model)
    assert [r.value for r in results] == [[f"answer {i}" for i in range(1, steps + 1)]] * runs
    # nothing of a call under way is in the file: its begin was held, and a crash then would
    # leave no entry (the call is made again on resume, as it always was before its commit)
    assert set(model.seen.values()) == {"none"}
    # one statement an entry, where a begin and its finish were two
    assert writes == ["whole"] * (runs * steps)
    for r in results:
        entries = journal.entries(r.run_id)
        assert [e.address for e in entries] == started[r.run_id]  # in the order begun
        assert [e.seq for e in entries] == list(range(steps))
        assert all(e.status == "completed" and e.finished_at is not None for e in entries)
        assert all(e.started_at <= e.finished_at for e in entries if e.finished_at)
        assert check_integrity(journal, r.run_id) == []
    assert journal._held == {}
    journal.close()
    model.outside.close()


def test_a_call_still_under_way_after_the_hold_is_written_as_begun(tmp_path: Path) -> None:
    """Another process sees a long call under way (and a crash leaves it begun, made again on
    resume as an attempt); calls that end sooner are still written once."""
    db = tmp_path / "runs.db"
    journal = SqliteJournal(db, group_commit=True)
    journal.hold = 0.05
    writes = _statements(journal)
    model = _Slow(db, {"2": 0.4})  # the second call of each run is slow
    results, _ = _together(journal, 2, _asks, 3, model=model)
    assert all(r.status == "completed" for r in results)
    for r in results:
        assert model.seen[r.run_id, "1"] == "none"
        assert model.seen[r.run_id, "2"] == "started"  # written by the hold's timer, committed
        assert model.seen[r.run_id, "3"] == "none"
        assert [e.status for e in journal.entries(r.run_id)] == ["completed"] * 3
        assert check_integrity(journal, r.run_id) == []
    assert sorted(writes) == sorted(["whole"] * 4 + ["begun", "finished"] * 2)
    journal.close()
    model.outside.close()


def test_a_held_begin_keeps_its_place_among_the_effects_of_parallel_branches(
    tmp_path: Path,
) -> None:
    """A branch's model call begun before another branch's tool is written after it (at its
    finish) but keeps the place it was begun in."""

    def branch_ask() -> Op[str]:
        return (yield from infer("slow question")).text

    def branch_tool() -> Op[str]:
        return (yield from tool("noop")).output

    def program() -> Op[tuple[str, str]]:
        return (yield from par(branch_ask(), branch_tool()))

    async def noop() -> str:
        await anyio.sleep(0)
        return "done"

    db = tmp_path / "runs.db"
    journal = SqliteJournal(db, group_commit=True)
    model = _Slow(db, {}, default=0.1)
    results, started = _together(journal, 2, program, model=model, tools=[noop])
    for r in results:
        assert r.value[0].startswith("answer ") and r.value[1] == "done"
        entries = journal.entries(r.run_id)
        assert [e.address for e in entries] == started[r.run_id]
        assert len({e.seq for e in entries}) == len(entries)
        assert check_integrity(journal, r.run_id) == []
    journal.close()
    model.outside.close()


async def _begun(journal: SqliteJournal, run_id: str, address: str) -> None:
    journal.begin_unwaited(run_id, address, "infer", '{"kind":"infer"}', 1.0)


def _in_file(db: Path, run_id: str) -> list[tuple[str, str]]:
    outside = apsw.Connection(str(db))
    try:
        rows = outside.execute(
            "SELECT address, status FROM entries WHERE run_id=? ORDER BY seq", (run_id,)
        ).fetchall()
        return [(str(a), str(s)) for a, s in rows]
    finally:
        outside.close()


def test_a_held_begin_is_read_here_as_begun_and_never_lost(tmp_path: Path) -> None:
    """Read in this process, a held begin is begun; a run that ends with one held (a call
    that never finished), and a journal closed with one, write it as begun."""
    journal = grouped_journal(tmp_path / "runs.db", "a", "b", "c")

    async def main() -> None:
        await _begun(journal, "a", "1")
        await _begun(journal, "b", "1")
        await _begun(journal, "c", "1")
        assert [(e.address, e.status) for e in journal.entries("a")] == [("1", "started")]
        journal.finish("a", "1", "completed", at=2.0, result_json='"x"')  # an update now
        journal.finish_run("b", "cancelled", at=2.0)

    asyncio.run(main())
    assert _in_file(journal.path, "a") == [("1", "completed")]
    assert _in_file(journal.path, "b") == [("1", "started")]
    assert _in_file(journal.path, "c") == []  # held still: the file is as a crash leaves it
    journal.close()
    assert _in_file(journal.path, "c") == [("1", "started")]


def test_a_held_begin_begun_again_is_an_attempt_of_its_address(tmp_path: Path) -> None:
    journal = grouped_journal(tmp_path / "runs.db", "a", "b")

    async def main() -> None:
        await _begun(journal, "a", "1")
        await _begun(journal, "a", "1")  # begun again, never finished: one entry, an attempt
        journal.finish("a", "1", "completed", at=3.0, result_json='"x"')
        await _begun(journal, "a", "2")

    asyncio.run(main())
    assert [(e.address, e.status) for e in journal.entries("a")] == [
        ("1", "completed"),
        ("2", "started"),
    ]
    assert [(t.address, t.status) for t in journal.attempts("a")] == [("1", "started")]
    with pytest.raises(JournalError, match="address 1 is already finished"):
        journal.begin("a", "1", "infer", "{}", 4.0)
    journal.close()


def test_a_held_begin_is_written_at_once_where_nothing_is_grouped_or_no_loop_runs(
    tmp_path: Path,
) -> None:
    """A run writing alone commits each write at once, a held begin included; outside an
    event loop (and with a hold of 0) nothing is held."""
    alone = SqliteJournal(tmp_path / "alone.db")
    alone.create_run(RunRecord(run_id="a", program="x"))
    alone.acquire("a")

    async def main() -> None:
        await _begun(alone, "a", "1")

    asyncio.run(main())
    assert not alone.grouped and _in_file(alone.path, "a") == [("1", "started")]
    alone.close()

    journal = grouped_journal(tmp_path / "runs.db", "b", "c")
    journal.begin_unwaited("b", "1", "infer", "{}", 1.0)  # no loop
    assert journal._held == {}
    journal.hold = 0

    async def unheld() -> None:
        await _begun(journal, "c", "1")

    asyncio.run(unheld())
    assert journal._held == {}
    journal.close()
    assert _in_file(journal.path, "b") == [("1", "started")]
    assert _in_file(journal.path, "c") == [("1", "started")]


def test_a_finish_of_a_held_begin_whose_address_the_file_took_meanwhile_is_refused(
    tmp_path: Path,
) -> None:
    """Another writer put a row at the held begin's address (the file changed outside
    opdsl): the finish is refused by name, and the row found there stays."""
    journal = grouped_journal(tmp_path / "runs.db", "a", "b")

    async def main() -> None:
        await _begun(journal, "a", "1")
        other = apsw.Connection(str(journal.path))
        other.execute(
            "INSERT INTO entries (run_id, seq, address, kind, effect_json, status, started_at) "
            "VALUES ('a', 7, '1', 'tool', '{}', 'started', 0)"
        )
        other.close()
        with pytest.raises(JournalError, match="run a: cannot finish address 1: .*UNIQUE"):
            journal.finish("a", "1", "completed", at=2.0, result_json='"x"')

    asyncio.run(main())
    assert _in_file(journal.path, "a") == [("1", "started")]
    journal.close()


def test_a_held_begin_the_timer_cannot_write_stops_its_run_at_its_next_write(
    tmp_path: Path,
) -> None:
    """The hold's timer finds the begin's address taken (the file changed outside opdsl): the
    run is told at its next write, which is refused; the other runs go on."""
    journal = grouped_journal(tmp_path / "runs.db", "a", "b")
    journal.hold = 0.01

    async def main() -> None:
        await _begun(journal, "a", "1")
        await _begun(journal, "b", "1")
        other = apsw.Connection(str(journal.path))
        other.execute(
            "INSERT INTO entries (run_id, seq, address, kind, effect_json, status, started_at) "
            "VALUES ('a', 7, '1', 'tool', '{}', 'started', 0)"
        )
        other.close()
        await asyncio.sleep(0.1)  # the timer has run
        with pytest.raises(JournalError, match="run a: .*its begin of 1 could not be written"):
            journal.finish("a", "1", "completed", at=2.0, result_json='"x"')
        journal.finish("b", "1", "completed", at=2.0, result_json='"y"')

    asyncio.run(main())
    assert journal._held == {}
    assert _in_file(journal.path, "a") == [("1", "started")]  # the row found there, as it was
    assert _in_file(journal.path, "b") == [("1", "completed")]
    journal.close()


LONG = "summarise this: " + "lorem ipsum " * 40  # over the size kept as a piece of content


async def _noop() -> str:
    await anyio.sleep(0)
    return "ok"


def _two_runs(journal: SqliteJournal, model: Any) -> dict[str, RunResult[Any]]:
    """Run ``a`` asks the model ``LONG`` (its text refers to pieces of content), run ``b``
    uses a tool, at once."""

    def asker() -> Op[str]:
        return (yield from infer(LONG)).text

    def tooler() -> Op[str]:
        return (yield from tool("_noop")).output

    interp = LiveInterpreter(journal=journal, model=model, tools=[_noop])
    out: dict[str, RunResult[Any]] = {}

    async def main() -> None:
        async def one(run_id: str, program: Any) -> None:
            out[run_id] = await interp.arun(program, run_id=run_id)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "a", asker)
            tg.start_soon(one, "b", tooler)

    anyio.run(main)
    return out


def test_a_run_s_entries_are_committed_without_a_gap_while_a_begin_is_held(
    tmp_path: Path,
) -> None:
    """A branch's tool begun after another branch's model call is committed with the call's
    begin before it: what another process (or a crash inside the tool) finds is a whole
    prefix of the run, numbered without a gap."""
    db = tmp_path / "runs.db"
    found: list[list[str]] = []

    async def look(call: CallInfo) -> str:
        outside = SqliteJournal(db, read_only=True)
        try:
            found.append(check_integrity(outside, call.run_id))
            return " ".join(f"{e.seq}:{e.status}" for e in outside.entries(call.run_id))
        finally:
            outside.close()

    def program() -> Op[tuple[Response, ToolResult]]:
        return (yield from par(infer("slow"), tool("look")))

    journal = SqliteJournal(db, group_commit=True)
    model = _Slow(db, {}, default=0.3)
    results, _ = _together(journal, 2, program, model=model, tools=[look])
    for r in results:
        assert r.status == "completed", r.error
        assert r.value[1].output == "0:started 1:started 2:started"  # the par, the call, the tool
    assert found == [[], []]
    journal.close()
    model.outside.close()


def test_a_held_begin_s_pieces_are_written_with_it_never_before(tmp_path: Path) -> None:
    """The pieces of content a held model call refers to wait with it: a failed commit of
    another run's writes does not lose them, and a gc of the file made meanwhile (another
    process) finds none to take for unreferenced."""
    from interpreters.journal._portable import drop_unreferenced, export_run

    db = tmp_path / "runs.db"
    journal = SqliteJournal(db, group_commit=True)
    aborted: list[set[str]] = []
    dropped: list[int] = []

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        if sql == "COMMIT" and "b" in journal._tx_runs and not aborted:
            aborted.append(set(journal._tx_runs))
            return False  # the commit holding b's begin fails
        return True

    class GcMeanwhile:
        async def complete(self, request: Any, call: CallInfo) -> Any:
            await anyio.sleep(0.2)
            other = SqliteJournal(db)
            try:
                dropped.append(drop_unreferenced(other))
            finally:
                other.close()
            return Response(text="fine", model="m")

    journal._db.exec_trace = tracer
    results = _two_runs(journal, GcMeanwhile())
    journal._db.exec_trace = None
    assert aborted == [{"b"}] and dropped == [0]
    assert results["a"].status == "completed" and results["b"].status == "failed"
    assert check_integrity(journal, "a") == []
    assert '"$chain"' in journal.entries("a")[0].effect_json  # it does refer to pieces
    assert export_run(journal, "a")  # every piece it refers to is in the file
    journal.close()


def test_a_held_entry_whose_finish_cannot_be_written_is_left_begun(tmp_path: Path) -> None:
    """The finish's statement fails (a full disk, an I/O error; here SQLite is told to abort
    it): the error is raised, and the entry is written as begun when its run ends, as it was
    before its begin was held."""
    journal = grouped_journal(tmp_path / "runs.db", "a", "b")

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: object) -> bool:
        return not sql.startswith(WHOLE)

    async def main() -> None:
        await _begun(journal, "a", "1")
        journal._db.exec_trace = tracer
        with pytest.raises(JournalError, match="Aborted"):
            journal.finish("a", "1", "completed", at=2.0, result_json='"x"')
        journal._db.exec_trace = None
        journal.finish_run("a", "failed", at=3.0)

    asyncio.run(main())
    assert _in_file(journal.path, "a") == [("1", "started")]
    journal.close()


def test_loops_in_threads_sharing_a_journal_set_one_hold_timer_each(tmp_path: Path) -> None:
    import threading

    journal = grouped_journal(tmp_path / "runs.db", *(f"r{i}" for i in range(8)))
    journal.hold = 0.02
    fired: list[int] = []
    held_due = journal._held_due

    def counted() -> None:
        fired.append(1)
        held_due()

    journal._held_due = counted  # type: ignore[method-assign]

    def loop_of(first: int) -> None:
        async def main() -> None:
            for k in range(200):
                for run_id in (f"r{first}", f"r{first + 1}"):
                    await _begun(journal, run_id, str(k))
                await asyncio.sleep(0.001)
                for run_id in (f"r{first}", f"r{first + 1}"):
                    journal.finish(run_id, str(k), "completed", at=2.0, result_json='"x"')

        asyncio.run(main())

    threads = [threading.Thread(target=loop_of, args=(i,)) for i in (0, 2, 4, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # each loop's timer fires about once a hold, not once for every begin on another loop
    assert len(fired) < 400, len(fired)
    for i in range(8):
        assert [e.status for e in journal.entries(f"r{i}")] == ["completed"] * 200
    journal.close()


def test_a_held_entry_held_again_keeps_its_place_before_the_later_ones(tmp_path: Path) -> None:
    """Three calls held; the first one's finish fails and it is held again: when the second
    is written whole, the first is written as begun before it, in the same transaction, not
    left behind a later one (its run's entries are never committed with a gap)."""
    journal = grouped_journal(tmp_path / "runs.db", "a", "b")

    async def main() -> None:
        for address in ("1", "2", "3"):
            await _begun(journal, "a", address)
        journal._db.exec_trace = lambda _c, sql, _b: not sql.startswith(WHOLE)
        with pytest.raises(JournalError, match="Aborted"):
            journal.finish("a", "1", "completed", at=2.0, result_json='"x"')
        journal._db.exec_trace = None
        assert list(journal._held["a"]) == ["1", "2", "3"]  # in the order of their seqs
        journal.finish("a", "2", "completed", at=3.0, result_json='"y"')
        await journal.durable()
        assert _in_file(journal.path, "a") == [("1", "started"), ("2", "completed")]

    asyncio.run(main())
    journal.close()


def test_a_run_being_written_is_not_deleted_and_keeps_its_held_begins(tmp_path: Path) -> None:
    from interpreters import RunLocked

    journal = grouped_journal(tmp_path / "runs.db", "a", "b")

    async def main() -> None:
        await _begun(journal, "a", "1")
        with pytest.raises(RunLocked, match="already being written by this process"):
            journal.delete_run("a")
        journal.finish("a", "1", "completed", at=2.0, result_json='"x"')
        await _begun(journal, "a", "2")

    asyncio.run(main())
    assert [(e.seq, e.address, e.status) for e in journal.entries("a")] == [
        (0, "1", "completed"),
        (1, "2", "started"),
    ]
    journal.close()


def test_a_hostile_file_s_last_seq_fails_the_resume_and_frees_the_run(tmp_path: Path) -> None:
    """A file changed by hand holds an entry numbered 2**63 - 1 (SQLite's largest integer):
    the resumed run's next entry cannot be numbered. The run fails, saying so, its lock is
    let go, and a second resume in the same process fails the same way (not as locked)."""
    from interpreters import aresume

    def program() -> Op[str]:
        yield from infer("q0")
        return (yield from infer("q1")).text

    db = tmp_path / "runs.db"
    model = _Slow(db, {})
    first = SqliteJournal(db, group_commit=True)
    _together(first, 1, program, model=model)
    (run_id,) = [r.run_id for r in first.runs()]
    first.close()
    hand = apsw.Connection(str(db))
    hand.execute("UPDATE runs SET status='failed' WHERE run_id=?", (run_id,))
    hand.execute("DELETE FROM entries WHERE run_id=? AND address='2'", (run_id,))
    hand.execute(f"UPDATE entries SET seq={2**63 - 1} WHERE run_id=? AND address='1'", (run_id,))
    hand.close()
    journal = SqliteJournal(db, group_commit=True)
    for _ in range(2):
        again = anyio.run(
            lambda: aresume(run_id, db=journal, program=program, model=model, tools=[])
        )
        assert again.status == "failed"
        assert isinstance(again.error, JournalError) and "OverflowError" in str(again.error)
        assert journal._exec("SELECT count(*) FROM locks").fetchone() == (0,)
        assert journal._held == {}
    journal.close()
    model.outside.close()
