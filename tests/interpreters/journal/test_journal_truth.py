"""The journal tells the truth: one writer even when two processes take over a dead one's
lock at once; a damaged journal is a clear error; a read-only journal can still be read."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from interpreters import BoundTool, JournalError, SqliteJournal, open_journal, resume, run
from interpreters.cli._main import main
from op import Op, tool
from tests.fixtures.durable_programs import TOOLS, Counted, appender
from tests.helpers import RawJournal

ROOT = Path(__file__).resolve().parents[3]

TAKE_OVER = """
import sys, time
sys.path.insert(0, {root!r})
import interpreters.journal._sqlite as j
j._before_takeover = lambda run_id: time.sleep(1.0)  # both read the dead holder, then pause
journal = j.SqliteJournal({db!r})
try:
    journal.acquire("r1")
    print("WRITER", flush=True)
    time.sleep(2.0)
except j.RunLocked as exc:
    print("REFUSED", exc, flush=True)
"""


def test_two_processes_taking_over_a_dead_lock_never_both_win(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    journal = SqliteJournal(db)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    journal._db.execute(
        "INSERT INTO locks (run_id, holder, pid, host) VALUES ('r1', 'gone', ?, ?)",
        (int(dead.stdout), __import__("socket").gethostname()),
    )
    script = TAKE_OVER.format(root=str(ROOT), db=db)
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert sorted(o.split()[0] for o in outs) == ["REFUSED", "WRITER"], outs


def test_a_missing_table_or_a_malformed_row_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    done = run(appender, str(tmp_path / "o.txt"), 2, tools=TOOLS, state=Counted(), db=str(db))
    raw = RawJournal(db)
    raw.execute("UPDATE entries SET status='bogus' WHERE address='2'")
    assert main(["show", done.run_id, "--db", str(db)]) == 2
    assert f"entry 2 of run {done.run_id} is malformed" in capsys.readouterr().err
    raw.execute("DROP TABLE entries")
    raw.close()
    for argv in (["runs"], ["show", done.run_id], ["replay", done.run_id]):
        assert main([*argv, "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert "is corrupt: the table(s) entries are missing" in err, err
    with pytest.raises(JournalError, match="is corrupt"):
        run(appender, str(tmp_path / "o.txt"), 1, tools=TOOLS, db=str(db))
    assert "entries" not in {r[0] for r in RawJournal(db).execute("SELECT name FROM sqlite_master")}


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root writes through file permissions; the folder test below still runs",
)
def test_a_read_only_file_can_be_read(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run(appender, str(tmp_path / "o.txt"), 1, tools=TOOLS, state=Counted(), db=str(db))
    db.chmod(stat.S_IRUSR)
    assert open_journal(db, read_only=True).runs()


def test_a_read_only_journal_is_read_and_only_writing_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    done = run(appender, str(tmp_path / "o.txt"), 2, tools=TOOLS, state=Counted(), db=str(db))
    before = db.read_bytes()
    for argv in (
        ["runs"],
        ["show", done.run_id],
        ["checkpoints", done.run_id],
        ["replay", done.run_id],
        ["export", done.run_id],
        ["runs", "--json"],
    ):
        assert main([*argv, "--db", str(db)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    journal = open_journal(db, read_only=True)
    with pytest.raises(JournalError, match="opened read-only; it cannot be written"):
        journal.acquire(done.run_id)
    assert db.read_bytes() == before


def grab_the_journal(db: str) -> str:
    """Locks the journal file from another connection for a moment (as another program would).
    Through the journal's own SQLite library: two libraries in one process do not see each
    other's locks on a file (POSIX locks belong to the process)."""
    import threading

    import apsw

    holder = apsw.Connection(db)
    holder.execute("BEGIN EXCLUSIVE")
    ready = threading.Event()

    def release() -> None:
        ready.wait(1.5)
        holder.execute("COMMIT")
        holder.close()

    threading.Thread(target=release, daemon=True).start()
    return "grabbed"


def swallows_errors(db: str) -> Op[str]:
    try:
        result = yield from tool("grab_the_journal", {"db": db})
    except Exception as exc:  # a program must never be handed the journal's failure
        return f"swallowed {type(exc).__name__}"
    return result.output


def test_a_failing_journal_write_ends_the_run_and_it_resumes_later(tmp_path: Path) -> None:
    import time

    db = str(tmp_path / "runs.db")
    journal = SqliteJournal(db, busy_timeout=0.2)
    first = run(swallows_errors, db, tools=[grab_the_journal], db=journal)
    assert first.status == "failed" and isinstance(first.error, JournalError), first.describe()
    assert str(first.error) == (
        f"journal {db} is busy: another writer held its write lock for more than 0.2 s, so this "
        "write was not made (what was committed before stays; a run it stopped resumes once "
        "the file is free)"
    )
    time.sleep(2)  # the other program lets go
    record = SqliteJournal(db).run(first.run_id)
    assert record.status == "running"  # not recorded as finished: resumable
    entry = SqliteJournal(db).entries(first.run_id)[0]
    assert entry.status == "started"
    again = resume(first.run_id, db=db, tools=[lambda_free_tool])
    assert again.value == "grabbed again"
    assert SqliteJournal(db).run(first.run_id).status == "completed"


def grab_again(db: str) -> str:
    return "grabbed again"


lambda_free_tool = BoundTool.from_function(grab_again, name="grab_the_journal")


def _plan(db: Path, table: str) -> str:
    with RawJournal(db) as raw:
        rows = raw.execute(f"EXPLAIN QUERY PLAN SELECT * FROM {table} WHERE run_id='x'")
        plan = " ".join(str(r[-1]) for r in rows)
    raw.close()
    return plan


def test_a_run_s_attempts_and_resumes_are_found_by_index_in_new_and_older_files(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    done = run(appender, str(tmp_path / "o.txt"), 1, tools=TOOLS, state=Counted(), db=str(db))
    assert "USING INDEX attempts_of_run" in _plan(db, "attempts")
    assert "USING INDEX resumes_of_run" in _plan(db, "resumes")
    with RawJournal(db) as raw:  # a file made before the indexes were
        raw.execute("DROP INDEX attempts_of_run")
        raw.execute("DROP INDEX resumes_of_run")
    raw.close()
    reading = open_journal(db, read_only=True)  # read as it is, and left as it is
    assert reading.attempts(done.run_id) == [] and reading.resumes(done.run_id) == []
    reading.close()
    assert "USING INDEX" not in _plan(db, "attempts")
    SqliteJournal(str(db)).close()  # opened for writing: it gains them
    assert "USING INDEX attempts_of_run" in _plan(db, "attempts")
    assert "USING INDEX resumes_of_run" in _plan(db, "resumes")


def test_pythons_sqlite3_closing_a_journal_this_process_has_open_loses_what_follows(
    tmp_path: Path,
) -> None:
    """What the README's limitations warn of, and why the tests read journals through
    ``RawJournal``: Python's ``sqlite3`` is a second SQLite library in the process; closing,
    it takes itself for the file's last user and deletes the WAL under the journal."""
    import sqlite3

    db = tmp_path / "runs.db"
    journal = SqliteJournal(db)
    first = run(appender, str(tmp_path / "o.txt"), 1, tools=TOOLS, db=journal)
    assert Path(f"{db}-wal").exists()
    other = sqlite3.connect(db)  # sqlite3 on purpose: the hazard itself
    assert other.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    other.close()
    assert not Path(f"{db}-wal").exists()  # deleted under the open journal
    second = run(appender, str(tmp_path / "o.txt"), 1, tools=TOOLS, db=journal)
    try:  # another reader in this process, as the next command of a test would be
        seen = [r.run_id for r in SqliteJournal(db, read_only=True).runs()]
    except JournalError as exc:
        seen = [str(exc)]
    journal.close()
    kept = [r.run_id for r in SqliteJournal(db).runs()]
    # the next reader in this process fails ("disk I/O error"), or commits are lost
    assert seen != [first.run_id, second.run_id] or kept != seen, (seen, kept)
