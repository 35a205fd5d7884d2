"""Many processes on one journal: twenty processes started at once on one new file lose
nothing; opening a journal never drops the locks this process holds on the file; a new
journal is made in one transaction that any number of processes can race, and a set-up cut
off by a kill is finished (or named), never taken for someone else's file."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from interpreters import JournalError, SqliteJournal, run
from interpreters.cli._main import main
from interpreters.journal import _sqlite
from tests.fixtures.durable_programs import TOOLS, Counted, appender
from tests.helpers import RawJournal

ROOT = Path(__file__).resolve().parents[3]


def _stress() -> ModuleType:
    path = ROOT / "bench" / "journal_stress.py"
    spec = importlib.util.spec_from_file_location("bench_journal_stress", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_twenty_processes_at_once_on_one_new_journal_lose_nothing(tmp_path: Path) -> None:
    """20 processes (separate interpreters, not forks) released together on a file that does
    not exist yet, 5 runs each of 54 effects: every run completed, its 54 entries numbered
    0 to 53 with no gap, every entry completed, no process dead. On 0.3.0 most rounds lost
    processes to disk I/O errors and runs to missing entries (bench/journal_stress.py)."""
    stress = _stress()
    db = tmp_path / "runs.db"
    result = stress.one_round(db, procs=20, runs=5, effects=54, timeout=150)
    assert result.died == [] and result.bad_runs == [], [*result.died, *result.bad_runs][:10]
    assert result.runs == 100


HOLDER = textwrap.dedent(
    """
    import fcntl, os, struct, sys
    # SQLite's shared-lock bytes (unix VFS): PENDING_BYTE + 2, 510 bytes
    fd = os.open(sys.argv[1], os.O_RDWR)
    want = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0x40000000 + 2, 510, 0)
    kind, _, _, _, pid = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, want))
    print(0 if kind == fcntl.F_UNLCK else pid)
    """
)


def _shared_lock_holder(db: Path) -> int:
    """The process holding a SQLite shared lock on ``db`` (asked from another process: a
    process never conflicts with its own POSIX locks), 0 for none."""
    out = subprocess.run(
        [sys.executable, "-c", HOLDER, str(db)], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def test_opening_a_journal_keeps_the_locks_this_process_holds_on_the_file(
    tmp_path: Path,
) -> None:
    """An ``open()`` and ``close()`` of the file from Python drops every POSIX lock this
    process holds on it; 0.3.0 read the file's header that way on each open, so a journal
    open in this process lost its shared lock, and another process closing its connection
    took itself for the last one and deleted the WAL (the cause of the corruption above)."""
    db = tmp_path / "runs.db"
    first = SqliteJournal(db)
    assert first.runs() == []
    assert _shared_lock_holder(db) == os.getpid()
    SqliteJournal(db).runs()
    assert _shared_lock_holder(db) == os.getpid()
    SqliteJournal(db, read_only=True).runs()
    assert _shared_lock_holder(db) == os.getpid()
    first.close()


# a process making new journals: "count" says how many SQL statements making one takes; "kill"
# makes one for each N of them in a forked copy of itself that kills itself (SIGKILL) before
# its N-th statement (one import for all); "pause" waits before the statement writing the
# schema version. Given an older journal, each file is a fresh copy of it, opened (and so
# moved to this version's schema) instead of made
CUT = textwrap.dedent(
    """
    import os, shutil, signal, sys, time
    import apsw
    from interpreters.journal._sqlite import SqliteJournal

    folder, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    older = sys.argv[4] if len(sys.argv) > 4 else None
    seen = []
    at = 0

    def fresh(name):
        db = os.path.join(folder, name)
        if older:
            shutil.copy(older, db)
        return db

    def trace(cursor, sql, bindings):
        seen.append(sql)
        if len(seen) == at:
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "pause" and sql.startswith("INSERT INTO meta"):
            print("paused", flush=True)
            time.sleep(1.0)
        return True

    apsw.connection_hooks.append(lambda c: setattr(c, "exec_trace", trace))
    if mode != "kill":
        SqliteJournal(fresh("runs.db"))
        print(len(seen), flush=True)
        sys.exit()
    for n in range(1, count + 1):
        db = fresh(f"cut{n}.db")
        pid = os.fork()
        if pid == 0:
            at = n
            SqliteJournal(db)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (n, status)
    print("killed", count, flush=True)
    """
)


def _cut(
    folder: Path, mode: str, count: int = 0, older: Path | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            CUT,
            str(folder),
            mode,
            str(count),
            *([str(older)] if older else []),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


CUT_OFF = ("holds no journal yet", "whose set-up was cut off")


def _finishes(db: Path, tmp_path: Path) -> None:
    """A writer finishes the file, a run is written, and a reader then reads it."""
    done = run(appender, str(tmp_path / "out.txt"), 1, tools=TOOLS, state=Counted(), db=str(db))
    assert done.status == "completed"
    assert [r.run_id for r in SqliteJournal(db, read_only=True).runs()] == [done.run_id]


def test_a_new_journal_killed_at_any_statement_of_its_set_up_is_finished_later(
    tmp_path: Path,
) -> None:
    (tmp_path / "whole").mkdir()
    statements = int(_cut(tmp_path / "whole", "count").communicate(timeout=60)[0])
    assert statements >= 6  # the pragmas, the look, BEGIN, the tables, the version, COMMIT
    killer = _cut(tmp_path, "kill", statements)
    assert killer.communicate(timeout=120)[0].split() == ["killed", str(statements)]
    for at in range(1, statements + 1):
        db = tmp_path / f"cut{at}.db"
        if db.exists():
            try:
                SqliteJournal(db, read_only=True).runs()
            except JournalError as exc:
                assert any(words in str(exc) for words in CUT_OFF), (at, str(exc))
        _finishes(db, tmp_path)


SCHEMA_2 = ROOT / "tests" / "fixtures" / "journals" / "schema-2.db"


def _version(db: Path) -> str:
    raw = RawJournal(db, read_only=True)
    try:
        return str(raw.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
    finally:
        raw.close()


def test_an_older_journal_killed_at_any_statement_of_its_move_keeps_every_entry(
    tmp_path: Path,
) -> None:
    """Schema 2 kept entries in the order of their runs; opened for writing, the file is
    moved to this version's table in one transaction. A kill before any of its statements
    leaves the file as it was (read as it is) or moved whole, and the next writer finishes it."""
    statements = int(_cut(tmp_path, "count", older=SCHEMA_2).communicate(timeout=60)[0])
    assert statements >= 8  # the pragmas, the looks, BEGIN, the rename, the tables, the copy...
    whole = SqliteJournal(tmp_path / "runs.db", read_only=True)
    every = {r.run_id: whole.entries(r.run_id) for r in whole.runs()}
    assert sum(map(len, every.values())) == 29
    killer = _cut(tmp_path, "kill", statements, older=SCHEMA_2)
    assert killer.communicate(timeout=120)[0].split() == ["killed", str(statements)]
    versions = set()
    for at in range(1, statements + 1):
        db = tmp_path / f"cut{at}.db"
        versions.add(_version(db))
        kept = SqliteJournal(db, read_only=True)
        assert {r.run_id: kept.entries(r.run_id) for r in kept.runs()} == every, at
        kept.close()
        moved = SqliteJournal(db)
        assert {r.run_id: moved.entries(r.run_id) for r in moved.runs()} == every, at
        assert moved._db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        moved.close()
        assert _version(db) == "3"
    assert versions == {"2"}  # killed before its COMMIT, each copy was left as it was


def test_a_process_opening_a_journal_while_another_makes_it_waits_for_the_whole(
    tmp_path: Path,
) -> None:
    """0.3.0 made the tables and then the version row, each committed on its own: a process
    opening the file in between died with "has no schema version"."""
    db = tmp_path / "runs.db"
    maker = _cut(tmp_path, "pause")
    assert maker.stdout is not None and maker.stdout.readline().strip() == "paused"
    journal = SqliteJournal(db)  # waits for the maker's transaction, then finds it whole
    assert journal.runs() == []
    maker.communicate(timeout=60)
    assert maker.returncode == 0
    _finishes(db, tmp_path)


OLD_SET_UP = [  # what 0.3.0 ran, each statement committed on its own, the version row last
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE runs (run_id TEXT PRIMARY KEY, program TEXT NOT NULL, args_json TEXT NOT NULL,"
    " config_json TEXT NOT NULL, state_json TEXT, status TEXT NOT NULL, parent_run TEXT,"
    " fork_checkpoint TEXT, created_at REAL NOT NULL, finished_at REAL, result_json TEXT,"
    " error_json TEXT, final_state_json TEXT)",
    "CREATE TABLE entries (run_id TEXT NOT NULL, seq INTEGER NOT NULL, address TEXT NOT NULL,"
    " kind TEXT NOT NULL, effect_json TEXT NOT NULL, status TEXT NOT NULL, result_json TEXT,"
    " error_json TEXT, usage_json TEXT, started_at REAL NOT NULL, finished_at REAL,"
    " PRIMARY KEY (run_id, address)) WITHOUT ROWID",
    "CREATE TABLE locks (run_id TEXT PRIMARY KEY, holder TEXT NOT NULL, pid INTEGER NOT NULL,"
    " host TEXT NOT NULL)",
]


def _half_made(db: Path, statements: int) -> None:
    con = sqlite3.connect(db, isolation_level=None)  # sqlite3 on purpose: as 0.3.0 wrote
    con.execute("PRAGMA journal_mode=WAL")
    for sql in OLD_SET_UP[:statements]:
        con.execute(sql)
    con.close()


@pytest.mark.parametrize("statements", range(len(OLD_SET_UP) + 1))
def test_a_journal_half_made_by_a_killed_0_3_0_is_named_when_read_and_finished_when_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], statements: int
) -> None:
    db = tmp_path / "runs.db"
    _half_made(db, statements)
    assert main(["runs", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an opdsl journal" not in err, err
    assert ("holds no journal yet" if statements == 0 else "whose set-up was cut off") in err
    _finishes(db, tmp_path)


def test_opdsl_tables_holding_rows_without_a_schema_version_are_refused_untouched(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    _half_made(db, len(OLD_SET_UP))
    con = sqlite3.connect(db)  # sqlite3 on purpose: as 0.3.0 wrote, closed before opdsl opens it
    con.execute("INSERT INTO locks VALUES ('r', 'someone', 1, 'host')")
    con.commit()
    con.close()
    before = db.read_bytes()
    for read_only in (True, False):
        with pytest.raises(JournalError, match="rows in locks but no schema version"):
            SqliteJournal(db, read_only=read_only)
    assert db.read_bytes() == before


@pytest.mark.parametrize(
    ("version", "fixed"),
    [("3.40.1", False), ("3.51.2", False), ("3.51.3", True), ("3.54.1", True), ("4.0.0", True)],
)
def test_which_sqlite_has_the_wal_reset_fix(version: str, fixed: bool) -> None:
    assert _sqlite._has_wal_reset_fix(version) is fixed


def test_on_an_old_sqlite_a_journal_shared_by_writers_says_so_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite, "_WAL_RESET_FIXED", False)
    db = tmp_path / "runs.db"
    journal = SqliteJournal(db)
    journal.acquire("alone")  # no other writer: nothing said
    assert capsys.readouterr().err == ""
    other = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from interpreters import SqliteJournal\n"
            f"j = SqliteJournal({str(db)!r}); j.acquire('theirs'); print('held', flush=True)\n"
            "sys.stdin.readline()",
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        journal.acquire("mine")
        journal.acquire("mine too")
    finally:
        other.communicate("\n", timeout=60)
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "other processes write the journal" in err and "WAL-reset bug" in err
