"""The embedded journal: one SQLite file in WAL mode (``.opdsl/runs.db`` by default).

The file is reached through apsw, which bundles its own SQLite: the journal runs on a current
SQLite whatever the system ships (docs/decisions.md says why). The file is only ever opened
through SQLite: an ``open()`` and ``close()`` of it from Python would drop the POSIX locks that
this process's connections hold on it, and another process could then take itself for the
last one and delete the WAL under them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import apsw
from pydantic import ValidationError

from interpreters.journal._base import (
    _ENTRY_COLS,
    _HELD,
    _STATUSES,
    DEFAULT_DB,
    Attempt,
    Entry,
    Journal,
    JournalError,
    RunLocked,
    RunRecord,
    RunStatus,
    _holder,
)
from interpreters.journal._content import (
    ContentError,
    digest,
    is_digest,
    kept_body,
    piece_key,
    stored_body,
)
from interpreters.journal._runlock import KernelLocks
from interpreters.journal._status import BEGIN_FROM, FINISH_FROM, GOES_ON, EntryEnd
from state._canonical import lone_surrogate

SCHEMA_VERSION = 3
"""1: entries hold their whole text; 2: the ``content`` table, each piece of content once, and
entries that refer to it (``journal._content``); 3: entries kept in the order they were
written, found by run through an index (they were kept in the order of their run, so a commit
of many runs' writes rewrote a page of entries for each run). An older file is read as it is,
and becomes version 3 when it is opened for writing (:meth:`SqliteJournal._setup`)."""
HOLD = 1.0
"""Seconds an unwaited effect's begin may be held back under group commit
(:meth:`SqliteJournal.begin_unwaited`): a call that ends sooner is written once, whole; one
still under way then is written as begun, for readers elsewhere to see and for a crash to
leave begun."""
_INSERT_WHOLE = (
    "INSERT INTO entries (run_id, seq, address, kind, effect_json, status, result_json, "
    "error_json, usage_json, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_BEGUN = (
    "INSERT INTO entries (run_id, seq, address, kind, effect_json, status, started_at) "
    "VALUES (?, ?, ?, ?, ?, 'started', ?)"
)


def _no_loop() -> None:
    """No loop: what the journal's hold timer is set on when none is."""
    return None


_Held = tuple[float, int, str, str, float, Mapping[str, str] | None]
"""A begin held back: when it is due to be written (the loop's clock), its seq, kind, effect
text, start, and the pieces of content its text refers to (written with it)."""
_BEGIN_FROM_SQL = ", ".join(f"'{s}'" for s in sorted(BEGIN_FROM))
_FINISH_FROM_SQL = ", ".join(f"'{s}'" for s in sorted(FINISH_FROM))
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    program TEXT NOT NULL,
    args_json TEXT NOT NULL,
    config_json TEXT NOT NULL,
    state_json TEXT,
    status TEXT NOT NULL,
    parent_run TEXT,
    fork_checkpoint TEXT,
    created_at REAL NOT NULL,
    finished_at REAL,
    result_json TEXT,
    error_json TEXT,
    final_state_json TEXT
);
CREATE TABLE IF NOT EXISTS entries (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    address TEXT NOT NULL,
    kind TEXT NOT NULL,
    effect_json TEXT NOT NULL,
    status TEXT NOT NULL,
    result_json TEXT,
    error_json TEXT,
    usage_json TEXT,
    started_at REAL NOT NULL,
    finished_at REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS entries_at ON entries (run_id, address);
CREATE TABLE IF NOT EXISTS content (
    hash BLOB PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL,
    address TEXT NOT NULL,
    kind TEXT NOT NULL,
    started_at REAL NOT NULL,
    status TEXT NOT NULL,
    finished_at REAL,
    again_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS attempts_of_run ON attempts (run_id);
CREATE TABLE IF NOT EXISTS resumes (
    run_id TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS resumes_of_run ON resumes (run_id);
CREATE TABLE IF NOT EXISTS locks (
    run_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL
) WITHOUT ROWID;
"""
_RUN_COLS = list(RunRecord.model_fields)
_TABLES = frozenset(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", _SCHEMA))
_INDEXES = frozenset(re.findall(r"CREATE (?:UNIQUE )?INDEX IF NOT EXISTS (\w+)", _SCHEMA))
"""The indexes of a whole journal: a file made before one was added gains it when it is next
opened for writing, as it gains a table."""
_TEXT_COLS = frozenset({"result_json", "error_json", "usage_json"})
"""An entry's texts kept as :func:`stored_body` keeps them (compressed when long enough); its
effect stays canonical JSON, for anyone who reads the file with SQLite's own tools."""


_COLS = tuple(_ENTRY_COLS)


def _is_time(value: Any) -> bool:
    """Whether a column read back is a time (SQLite keeps a text put in a REAL column)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _malformed(e: Entry) -> str | None:
    """What is wrong with an entry read back, column by column (SQLite keeps whatever a hand
    put in a column: a text in ``seq``, a word in ``started_at``), or None."""
    shown = {}
    for name in ("address", "kind", "effect_json", "status"):
        if not isinstance(getattr(e, name), str):
            shown[name] = "is not text"
    for name in ("result_json", "error_json", "usage_json"):
        if getattr(e, name) is not None and not isinstance(getattr(e, name), str):
            shown[name] = "is not text"
    if not isinstance(e.seq, int) or isinstance(e.seq, bool):
        shown["seq"] = f"is {e.seq!r:.40}, not a whole number"
    if not _is_time(e.started_at):
        shown["started_at"] = f"is {e.started_at!r:.40}, not a time"
    if e.finished_at is not None and not _is_time(e.finished_at):
        shown["finished_at"] = f"is {e.finished_at!r:.40}, not a time"
    if "status" not in shown and e.status not in _STATUSES:
        shown["status"] = f"is {e.status!r:.40}, not one of {', '.join(sorted(_STATUSES))}"
    return "; ".join(f"its {k} {v}" for k, v in shown.items()) or None


def _kept(text: str | None) -> str | bytes | None:
    return None if text is None else stored_body(text)


def _text_of(column: str, kept: Any) -> Any:
    """A column as read (anything but a text's bytes as it is: the row's check judges it)."""
    if isinstance(kept, bytes) and column in _TEXT_COLS:
        return kept_body(kept, f"its {column.removesuffix('_json')}")
    return kept


_FAILED_KEPT = 1024
"""How many failed transactions a journal object remembers (a wait for one raises its error)."""
_PAGE_SIZE = 8192
"""The page size of a new journal: pieces of content of a few KB waste less of each page (a
4 KB page holds two 1.3 KB rows and leaves a third of itself empty)."""


_WAL_RESET_FIX = (3, 51, 3)
"""The first SQLite without the WAL-reset bug (3.7.0 to 3.51.2: two connections writing or
checkpointing one WAL file at once can corrupt it)."""


def _has_wal_reset_fix(version: str) -> bool:
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:3])
    return parts >= _WAL_RESET_FIX


def sqlite_library() -> str:
    """The SQLite the journal runs on, in words: ``SQLite 3.54.1 (apsw 3.54.1.0)``."""
    return f"SQLite {apsw.sqlite_lib_version()} (apsw {apsw.apsw_version()})"


_SAID_SHARED: set[str] = set()
"""Journal files this process has said were shared on an old SQLite (said once each)."""


class _Rows:
    """A statement's rows, read whole while the journal's mutex is held, and how many rows it
    changed (a write)."""

    __slots__ = ("rowcount", "rows")

    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


def _a(kind: object) -> str:
    """``an index``, ``a table``: a kind of SQLite object as a sentence names one."""
    return f"{'an' if str(kind)[:1] in 'aeiou' else 'a'} {kind}"


def _loop_here() -> object | None:
    """The event loop running in this thread (asyncio's loop, or the token of a trio run);
    None where none runs."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")
    if trio is None:
        return None
    try:
        token: object = trio.lowlevel.current_trio_token()
    except RuntimeError:
        return None
    return token


class _Group:
    """One commit of the open transaction, scheduled on the loop ``loop`` for its next turn
    (asyncio's ``call_soon``, trio's ``run_sync_soon``): the runs waiting in
    :meth:`SqliteJournal.durable` share it."""

    __slots__ = ("done", "loop")

    def __init__(self, loop: object | None) -> None:
        self.loop = loop
        self.done = anyio.Event()

    def schedule(self, commit: Callable[[_Group], None]) -> None:
        if isinstance(self.loop, asyncio.AbstractEventLoop):
            self.loop.call_soon(commit, self)
        else:
            self.loop.run_sync_soon(commit, self)  # type: ignore[attr-defined]


def _pid_alive(pid: int, started: str | None = None) -> bool:
    """Whether process ``pid`` of this machine is alive, and, when ``started`` says when
    the lock's holder started, is that process: a crashed holder's pid that another process
    has taken since is the holder no more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    now = None if started is None else _started(pid)
    return now is None or now == started


def _started(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat``'s 22nd
    field), or None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rpartition(b")")[2].split()  # the name, in parentheses, may hold anything
    return fields[19].decode("ascii", "replace") if len(fields) > 19 else None


_OWN_START: tuple[int, str | None] = (-1, None)


def _own_start() -> str | None:
    """:func:`_started` of this process, read once (a forked child reads its own)."""
    global _OWN_START
    pid = os.getpid()
    if _OWN_START[0] != pid:
        _OWN_START = (pid, _started(pid))
    return _OWN_START[1]


_SINCE = "\x1fstarted "
"""What a lock's holder holds after its name: when the process started (:func:`_started`),
kept apart from what a message shows."""

_KERNEL = "\x1fkernel "
"""What a lock's holder holds after its name when it also holds the run's kernel lock
(:mod:`~interpreters.journal._runlock`), with the lock file it holds it in (``DEVICE:INODE``):
the kernel, not the pid, then says whether it lives. It comes before :data:`_SINCE`, which an
opdsl before it reads to the end of the text."""


def _since(holder: object) -> str | None:
    """When a lock's holder started, if the lock says (one written before opdsl kept it
    does not)."""
    if not isinstance(holder, str):
        return None
    started = holder.partition(_SINCE)[2]
    return started or None


def _kernel_file(holder: object) -> str | None:
    """The lock file a lock's holder took the run's kernel lock in, or None (it took none)."""
    if not isinstance(holder, str) or _KERNEL not in holder:
        return None
    return holder.partition(_KERNEL)[2].partition("\x1f")[0] or None


def _shown(holder: object) -> str:
    """A lock's holder as a message names it: ``pid N on HOST``."""
    return str(holder).partition("\x1f")[0]


def _lock_holder(kernel: str | None) -> str:
    """This process as a lock names it: ``pid N on HOST``, the lock file it holds the run's
    kernel lock in (``kernel``, when it does), and when it started."""
    started = _own_start()
    return (
        _holder()
        + ("" if kernel is None else _KERNEL + kernel)
        + ("" if started is None else _SINCE + started)
    )


class SqliteJournal(Journal):
    """The embedded journal: one SQLite file in WAL mode.

    Group commit: the entries' writes of every run sharing this journal are committed
    together, instead of one commit each: the write that opens a transaction schedules its
    commit on the event loop's next turn, and every write made meanwhile joins it. The begin
    of an effect that acts on the world (a tool, an agent, an emit, a checkpoint, a question)
    is committed before its handler runs (the driver awaits :meth:`durable`), and that wait
    commits everything the run wrote before it, so nothing the program does after a finish
    reaches the world before the finish is committed. A model call (and a clock, chance or
    sleep effect) does not wait: its begin is committed by the scheduled commit while the call
    is under way. A crash leaves a prefix of the run, and an effect it cut off is performed
    again on resume, as always. A commit that fails stops every run whose entries it held, at
    its next write, so none goes on past a gap. Runs, locks and run ends are committed at
    once.

    ``group_commit``: None (the default) groups while more than one run is being written
    through this journal object, and commits each write at once while only one is (a lone
    run's finish would otherwise wait for its next effect to be committed); True always
    groups; False never does.

    Example:
        >>> import tempfile, os
        >>> j = SqliteJournal(os.path.join(tempfile.mkdtemp(), "runs.db"))
        >>> j.runs()
        []
    """

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float = 30.0,
        read_only: bool = False,
        create: bool = True,
        group_commit: bool | None = None,
    ) -> None:
        self.path = Path(path)
        self._busy_timeout = busy_timeout
        self._grouping = False if read_only else group_commit
        #: the runs this object is writing now (their locks were taken through it)
        self._writing: set[str] = set()
        self._in_tx = False
        self._group: _Group | None = None
        #: the number of the last transaction opened, and every one up to this one has ended
        self._tx = 0
        self._ended = 0
        #: the transactions that failed (the last few), and why
        self._tx_failed: dict[int, JournalError] = {}
        #: the transaction this thread's last grouped write went into (``tx``; 0: none)
        self._local = threading.local()
        #: the runs with entries in the open transaction
        self._tx_runs: set[str] = set()
        #: runs whose entries a failed commit lost, and what it said: told at their next write
        self._lost: dict[str, str] = {}
        self.read_only = read_only
        if self.path.is_dir():
            raise JournalError(f"{self.path} is a directory, not a journal file")
        if (read_only or not create) and not self.path.is_file():
            raise JournalError(
                f"no journal at {self.path} (give --db or $OPDSL_DB the file runs were written to)"
            )
        try:
            if read_only:
                self._db = self._connect_read_only(busy_timeout)
                self._check_tables()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # apsw never opens a transaction by itself (as isolation_level=None), and one
                # connection may be used from any thread (the mutex below keeps them apart)
                self._db = apsw.Connection(str(self.path))
                self._prepare(busy_timeout)
        except apsw.NotADBError:
            raise self._not_a_database(self._db) from None
        except (apsw.BusyError, apsw.LockedError):
            raise JournalError(
                f"journal {self.path} is busy: other processes held it for {busy_timeout:g} s "
                "while it was being opened; nothing was changed, try again"
            ) from None
        except apsw.Error as exc:
            raise JournalError(f"{self.path} is corrupt or not an opdsl journal: {exc}") from None
        except OSError as exc:
            raise JournalError(f"cannot open journal {self.path}: {exc}") from None
        except UnicodeEncodeError:  # SQLite takes a file name as UTF-8
            shown = str(os.fsencode(self.path))[1:]
            raise JournalError(
                f"journal path {shown} is not UTF-8 text, which SQLite needs of a file name; "
                "give the journal a path that is"
            ) from None
        self._mutex = threading.Lock()
        #: the kernel's locks of the runs this object writes (see ``_runlock``)
        self._kernel = KernelLocks(self.path)
        if not read_only:
            self._kernel.prepare()
        self._cursor = self._db.cursor()
        #: this file, as the process-wide set of held runs knows it
        self._key = str(self.path.resolve())
        self._runs_known: dict[str, tuple[list[int], set[str]]] = {}
        self._has_history: bool | None = None  # the attempts and resumes tables: see _older
        self._content_table: bool | None = None
        #: pieces given by :meth:`put_content`, written with the next entry's write
        self._pieces: dict[str, str] = {}
        #: begins held back (:meth:`begin_unwaited`), by run and address
        self._held: dict[str, dict[str, _Held]] = {}
        #: the loops whose timer writes the held begins whose time has come (weakly: the
        #: journal keeps no hold on a loop), and the last one set
        self._hold_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        self._hold_loop: Callable[[], asyncio.AbstractEventLoop | None] = _no_loop
        #: seconds a begin may be held back (0: never)
        self.hold = HOLD

    @property
    def grouped(self) -> bool:
        # an open transaction is grouped until it is committed, whatever else changed
        if self._grouping is None:
            return len(self._writing) > 1 or self._in_tx
        return self._grouping

    def _connect_read_only(self, busy_timeout: float) -> apsw.Connection:
        """Open for reading only: nothing is created, and a file the user may not write (or a
        WAL journal in a read-only folder) can still be read."""
        uri = self.path.resolve().as_uri()
        flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        db = apsw.Connection(f"{uri}?mode=ro", flags=flags)
        db.set_busy_timeout(int(busy_timeout * 1000))
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchall()
            return db
        except apsw.NotADBError:
            refusal = self._not_a_database(db)
            db.close()
            raise refusal from None
        except apsw.CorruptError:
            db.close()
            raise
        except apsw.Error:
            # a WAL file whose -shm cannot be made here: read the file as it stands
            db.close()
            return apsw.Connection(f"{uri}?immutable=1", flags=flags)

    def _not_a_database(self, db: apsw.Connection) -> JournalError:
        """SQLite cannot read the file as a database: its first bytes (read through SQLite's
        own handle, never a second one) say whether it was one."""
        try:
            head = db.read("main", 0, 0, 16)[1]
        except apsw.Error:
            head = b""
        if head == b"SQLite format 3\x00":
            return JournalError(
                f"{self.path} is corrupt or not an opdsl journal: its header is damaged"
            )
        return JournalError(f"{self.path} is not an opdsl journal (not a SQLite database)")

    def _tables(self, kind: str = "table") -> set[str]:
        return {
            r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type=?", (kind,))
        }

    def _check_tables(self) -> None:
        """Read-only: the file must already be an opdsl journal (a cut-off set-up is named)."""
        tables = self._tables()
        version = self._version(tables)
        if version is not None:
            self._check_schema(tables, version)
            return
        made = sorted(self._check_unfinished(tables))
        if not made:
            raise JournalError(
                f"{self.path} holds no journal yet: it is an empty SQLite database (the set-up "
                "of a new journal was cut off, or another program made it); the next run "
                "written to it makes the journal"
            )
        raise JournalError(
            f"{self.path} is an opdsl journal whose set-up was cut off (it has the table(s) "
            f"{', '.join(made)}, no schema version and no runs); the next run written to it "
            "finishes it"
        )

    def _version(self, tables: set[str]) -> int | None:
        """The schema version the file says, None when it says none (no meta row)."""
        if "meta" not in tables:
            return None
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            return None
        if not str(row[0]).isdigit() or len(str(row[0])) > 9:
            raise JournalError(
                f"journal {self.path} is corrupt: its schema version {str(row[0])[:20]!r} is "
                "not a number; restore it from a backup (nothing was changed)"
            )
        return int(row[0])

    def _check_unfinished(self, tables: set[str]) -> set[str]:
        """A file with no schema version: nothing yet, or opdsl's own set-up cut off (0.3.0
        made the tables one by one, the ``meta`` table first, so a kill left some of them,
        empty); its tables, or a refusal of anything else."""
        tables = tables - {"sqlite_sequence"}
        if tables and ("meta" not in tables or tables - _TABLES):
            raise JournalError(
                f"{self.path} is a SQLite database of something else (tables: {', '.join(sorted(tables))})"
            )
        held = [
            t for t in sorted(tables) if self._db.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchall()
        ]
        if held:
            raise JournalError(
                f"journal {self.path} is corrupt: it has opdsl's tables and rows in "
                f"{', '.join(held)} but no schema version; restore it from a backup (nothing "
                "was changed)"
            )
        return tables

    def _check_schema(self, tables: set[str], version: int) -> None:
        """An opdsl journal this version can read: its schema version, and its tables."""
        if version > SCHEMA_VERSION:
            raise JournalError(
                f"{self.path} was written by a newer opdsl (schema {version}; this one reads "
                f"up to {SCHEMA_VERSION}); upgrade opdsl to read it"
            )
        missing = {"runs", "entries"} - tables
        if missing:
            raise JournalError(
                f"journal {self.path} is corrupt: the table(s) {', '.join(sorted(missing))} are "
                "missing; restore it from a backup (nothing was changed)"
            )

    def _prepare(self, busy_timeout: float) -> None:
        """WAL mode and this version's tables, tried again while the file is busy, for up to
        ``busy_timeout`` seconds in all. SQLite waits for most locks itself, but answers busy
        at once where waiting could deadlock: a statement that read the file and must now
        write it while another process holds the write lock (turning a file that is not yet
        in WAL mode to it does that), as many processes opening one new journal do."""
        deadline = time.monotonic() + busy_timeout
        pause = 0.005
        while True:
            self._db.set_busy_timeout(max(1, int((deadline - time.monotonic()) * 1000)))
            try:
                # a new file's pages hold three 1 KB pieces of content, not two (no effect on
                # a file that exists); set before WAL mode, which writes the first page
                self._db.pragma("page_size", _PAGE_SIZE)
                self._db.pragma("journal_mode", "wal")
                self._db.pragma("synchronous", "normal")
                self._setup()
            except (apsw.BusyError, apsw.LockedError):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.1)
            else:
                self._db.set_busy_timeout(int(busy_timeout * 1000))
                return

    def _setup(self) -> None:
        """Make the file a journal of this version, or check that it is one. Making it (its
        tables and its version row, or an older version's upgrade) is one transaction under
        the write lock, looked at again inside it: any number of processes may race to make
        one new file, and each sees no journal or a whole one."""
        if self._whole():
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if not self._whole():  # made by another process while this one waited
                tables = self._tables()
                older = "entries" in tables and (self._version(tables) or 0) < SCHEMA_VERSION
                if older:
                    self._check_movable()
                    # views and other tables' triggers that name ``entries`` keep naming it
                    # (SQLite would make them name the old table, dropped below)
                    self._db.execute("PRAGMA legacy_alter_table=ON")
                    try:
                        self._db.execute("ALTER TABLE entries RENAME TO entries_by_run")
                    finally:
                        self._db.execute("PRAGMA legacy_alter_table=OFF")
                self._db.execute(_SCHEMA)
                if older:
                    self._entries_in_written_order()
                # a version 1 file: its entries read as they are; new ones may refer to content
                self._db.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value=excluded.value "
                    "WHERE CAST(value AS INTEGER) < CAST(excluded.value AS INTEGER)",
                    (str(SCHEMA_VERSION),),
                )
            self._db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(apsw.Error):
                self._db.execute("ROLLBACK")
            raise

    def _check_movable(self) -> None:
        """Before an older file's entries are moved (:meth:`_setup`): refused, the file left as
        it was, when the move would lose something that is not opdsl's (a column, an index or
        a trigger of its entries table, which go with the old table) or when a name the move
        makes (the old table's, the new index's) is taken."""
        cols = [r[1] for r in self._db.execute("PRAGMA table_info(entries)")]
        extra = [c for c in cols if c not in _ENTRY_COLS]
        missing = [c for c in _ENTRY_COLS if c not in cols]
        others = [
            f"{kind} {name}"
            for kind, name in self._db.execute(
                "SELECT type, name FROM sqlite_master WHERE tbl_name='entries' AND "
                "type IN ('index', 'trigger') AND name NOT LIKE 'sqlite_autoindex_entries_%'"
            )
        ]
        problems = []
        if missing:
            problems.append(f"its entries table lacks the column(s) {', '.join(missing)}")
        if extra:
            problems.append(
                f"its entries table has column(s) opdsl does not keep ({', '.join(extra)}), "
                "which the move would drop"
            )
        if others:
            problems.append(
                f"its entries table has {', '.join(others)}, not opdsl's, which the move would drop"
            )
        for name, kept_for in (("entries_at", "its index"), ("entries_by_run", "the move")):
            found = self._named(name)
            if found is not None and f"index {name}" not in others:
                problems.append(
                    f"the name {name}, which opdsl keeps for {kept_for}, is taken by "
                    f"{_a(found[0])} on {found[1]}"
                )
        if problems:
            raise JournalError(
                f"journal {self.path}: its entries could not be moved to schema "
                f"{SCHEMA_VERSION}: {'; '.join(problems)}. Drop or rename what is named "
                "(with a copy kept) and open it again; nothing was changed"
            )

    def _entries_in_written_order(self) -> None:
        """An older file's entries (kept in the order of their runs, renamed
        ``entries_by_run``) moved into this version's table, inside :meth:`_setup`'s
        transaction: all of them, or none and the file as it was."""
        cols = ", ".join(_ENTRY_COLS)
        try:
            self._db.execute(
                f"INSERT INTO entries ({cols}) SELECT {cols} FROM entries_by_run "
                "ORDER BY run_id, seq"
            )
            self._db.execute("DROP TABLE entries_by_run")
        except apsw.Error as exc:
            raise JournalError(
                f"journal {self.path}: its entries could not be moved to schema "
                f"{SCHEMA_VERSION} ({exc}); nothing was changed"
            ) from None

    def _whole(self) -> bool:
        """Whether the file is a whole journal of this version (a newer one, or one missing
        its runs or entries, is refused); False for nothing yet, a cut-off set-up or an older
        version, which :meth:`_setup` finishes."""
        tables = self._tables()
        version = self._version(tables)
        if version is None:
            self._check_unfinished(tables)
            return False
        self._check_schema(tables, version)
        if version != SCHEMA_VERSION or not tables >= _TABLES:
            return False
        return self._tables("index") >= _INDEXES and self._keyed()

    def _keyed(self) -> bool:
        """Whether the index that finds an entry by run and address is there (False: it is
        made); one of that name that is not it (not unique, on other columns or another
        table) is refused, never dropped."""
        found = self._named("entries_at")
        if found is None:
            return False
        cols = [r[2] for r in self._db.execute("PRAGMA index_info(entries_at)")]
        # (seq, name, unique, origin, partial): unique, and over every row
        flags = [
            r[2:5:2] for r in self._db.execute("PRAGMA index_list(entries)") if r[1] == "entries_at"
        ]
        if found == ("index", "entries") and cols == ["run_id", "address"] and flags == [(1, 0)]:
            return True
        raise JournalError(
            f"journal {self.path}: the name entries_at, which opdsl keeps for the unique index "
            f"of its entries by run and address, is taken by {_a(found[0])} on {found[1]}"
            f"{'' if not cols else ' (' + ', '.join(map(str, cols)) + ')'} that is not it; "
            "drop or rename it (with a copy kept) and open the file again; nothing was changed"
        )

    def _named(self, name: str) -> tuple[str, str] | None:
        """The kind of the object named ``name`` in the file and the table it is on
        (``("index", "runs")``), None when there is none."""
        found = self._db.execute(
            "SELECT type, tbl_name FROM sqlite_master WHERE name=?", (name,)
        ).fetchone()
        return None if found is None else (str(found[0]), str(found[1]))

    def _exec(self, sql: str, params: tuple[Any, ...] = ()) -> _Rows:
        """Run one statement, committed at once (an open group of entries' writes first)."""
        try:
            with self._mutex:
                try:
                    self._into_tx(False)
                    rows = self._db.execute(sql, params).fetchall()
                except apsw.ConstraintError:
                    raise
                except apsw.Error as exc:
                    raise self._statement_failed(exc) from None
                return _Rows(rows, self._db.changes())
        except UnicodeEncodeError:
            raise self._not_text(params) from None
        except UnicodeDecodeError as exc:  # a text SQLite keeps as it was given: a file's
            raise JournalError(
                f"journal {self.path} is corrupt: a text in it is not UTF-8 (byte "
                f"{exc.object[exc.start : exc.start + 1]!r} at {exc.start}); it was changed "
                "outside opdsl (nothing was changed)"
            ) from None

    def _write_entry(self, run_id: str, sql: str, params: tuple[Any, ...]) -> int:
        """An entry's write (a begin, a finish) of run ``run_id``: with group commit on, into
        the open transaction, committed soon after (:meth:`durable` waits for it). Through the
        cursor kept for these writes (the commonest statements, two per effect); returns how
        many rows it changed."""
        with self._mutex:
            return self._write_locked(run_id, sql, params)

    def _write_locked(self, run_id: str, sql: str, params: tuple[Any, ...]) -> int:
        """:meth:`_write_entry`, the mutex held. A run whose entries a failed commit lost is
        refused here too, with the write (another thread's commit may fail between a check
        made before the mutex was taken and this write)."""
        if self._lost:
            self._unlost(run_id)
        try:
            grouped = self.grouped
            if self._pieces and not grouped:  # the pieces and their entry: one commit
                changed = self._with_pieces(sql, params)
            else:
                # grouped, the pieces wait for the group's commit, which writes them first
                # (one statement for all of them, not one for each entry)
                self._into_tx(grouped)
                self._cursor.execute(sql, params)
                changed = self._db.changes()
        except apsw.ConstraintError:
            raise
        except apsw.Error as exc:
            raise self._statement_failed(exc) from None
        except UnicodeEncodeError:
            raise self._not_text(params) from None
        if self._in_tx:
            self._tx_runs.add(run_id)
            self._local.tx = self._tx
        else:
            self._local.tx = 0
        return changed

    def _with_pieces(self, sql: str, params: tuple[Any, ...]) -> int:
        """An entry's write with the pieces it needs, in one transaction of its own, committed
        here (writes that are not grouped: no transaction is open)."""
        self._open_tx()
        try:
            self._write_pieces()
            self._cursor.execute(sql, params)
            changed = self._db.changes()
        except BaseException:
            with contextlib.suppress(apsw.Error):
                self._db.execute("ROLLBACK")
            self._end_tx()
            raise
        self._commit_open()
        return changed

    def _into_tx(self, grouped: bool) -> None:
        """Before a write (the mutex held): a grouped one goes into the open transaction (one
        is opened), any other commits the open one first."""
        if grouped:
            if not self._in_tx:
                self._open_tx()
            self._commit_soon()
        elif self._in_tx:
            # with the pieces it waits for: none committed without them. One that fails is
            # the failure of the runs whose writes it held (each is told, :meth:`_end_tx`),
            # not of this write, which is made on its own after it
            with contextlib.suppress(JournalError):
                self._commit_open()

    def _open_tx(self) -> None:
        """Begin a transaction (the mutex held)."""
        self._db.execute("BEGIN")
        self._in_tx = True
        self._tx += 1

    def _end_tx(self, failed: JournalError | None = None) -> None:
        """The open transaction has ended (the mutex held): committed, or rolled back because
        of ``failed``. The runs with entries in a failed one lost them: each is stopped at its
        next write, and a wait for it (:meth:`durable`) raises ``failed``."""
        if failed is not None:
            if not self._db.getautocommit():
                with contextlib.suppress(apsw.Error):
                    self._db.execute("ROLLBACK")
            self._runs_known.clear()
            self._pieces.clear()  # those of its entries, lost with them
            for run_id in self._tx_runs:
                self._lost[run_id] = str(failed)
                self._held.pop(run_id, None)  # resumed from what was kept, without them
            self._tx_failed[self._tx] = failed
            if len(self._tx_failed) > _FAILED_KEPT:
                del self._tx_failed[next(iter(self._tx_failed))]
        self._in_tx = False
        self._ended = self._tx
        self._tx_runs.clear()
        group = self._group
        if group is not None and group.loop is _loop_here():
            # its commit is made: its waiters go on now, and the journal keeps no hold on the
            # loop (one stopped before the scheduled commit ran would be kept to the end)
            self._group = None
            group.done.set()

    def _commit_open(self) -> None:
        """Commit the open transaction, the pieces waiting for it first (the mutex held). One
        that fails is rolled back and ended failed (:meth:`_end_tx`), and its error raised."""
        try:
            if self._pieces:
                if not self._in_tx:
                    self._open_tx()
                self._write_pieces()
            if self._in_tx:
                self._db.execute("COMMIT")
                self._end_tx()
        except Exception as exc:
            failed = (
                self._failed(exc, "the commit")
                if isinstance(exc, apsw.Error)
                else JournalError(f"journal {self.path}: the commit failed: {exc!r}")
            )
            if self._in_tx:
                self._end_tx(failed)
            raise failed from None

    def _statement_failed(self, exc: apsw.Error) -> JournalError:
        """What a statement's failure says (the mutex held); where SQLite rolled the open
        transaction back with it (a full disk, an I/O error), that transaction has failed."""
        failed = self._failed(exc)
        if self._in_tx and self._db.getautocommit():
            self._end_tx(failed)
        return failed

    def _not_text(self, params: tuple[Any, ...]) -> JournalError:
        """A text given to be written or looked up that no UTF-8 holds (a lone surrogate:
        Python reads a byte that is not UTF-8 as one, with ``surrogateescape``)."""
        given = next(
            (p for p in params if isinstance(p, str) and lone_surrogate(p) is not None), None
        )
        shown = "" if given is None else f" ({ascii(given[:80])})"
        return JournalError(
            f"journal {self.path}: a text given to it{shown} holds a lone surrogate, which is "
            "no character and cannot be written as UTF-8; nothing was written"
        )

    def _failed(self, exc: apsw.Error, what: str = "") -> JournalError:
        """What ``exc`` says of the journal, failing ``what`` (``the commit``)."""
        if self.read_only and isinstance(exc, apsw.ReadOnlyError):
            return JournalError(f"journal {self.path} was opened read-only; it cannot be written")
        if isinstance(exc, apsw.BusyError | apsw.LockedError):
            # another process (a gc, a VACUUM, a sqlite3 shell in a transaction) held the
            # file's write lock past this connection's wait
            return JournalError(
                f"journal {self.path} is busy: another writer held its write lock for more "
                f"than {self._busy_timeout:g} s, so {what or 'this write'} was not made (what "
                "was committed before stays; a run it stopped resumes once the file is free)"
            )
        return JournalError(
            f"journal {self.path}: {what} failed: {exc}" if what else f"journal {self.path}: {exc}"
        )

    def _commit_soon(self) -> None:
        """After a grouped write: the open transaction is committed on the event loop's next
        turn (with every write the runs sharing this journal make meanwhile), whether or not a
        run waits for it in :meth:`durable`. With no loop running in this thread, the next
        :meth:`durable` or :meth:`close` commits it."""
        loop = _loop_here()
        if loop is None:
            return
        group = self._group
        if group is not None and group.loop is loop:
            return  # one is on its way
        # none, or one that a loop which has ended since scheduled (its callbacks never ran)
        group = self._group = _Group(loop)
        group.schedule(self._flush)

    def _flush(self, group: _Group) -> None:
        """The commit ``group`` stands for (:meth:`_commit_soon`)."""
        if self._group is group:
            self._group = None
        try:
            self._commit()
        except JournalError:
            pass  # its waiters and its runs are told (_end_tx): a wait raises it, a write too
        finally:
            group.done.set()

    def _settled(self, tx: int) -> bool:
        """Whether transaction ``tx`` has ended; one that failed raises its error."""
        with self._mutex:
            if tx > self._ended:
                return False
            failed = self._tx_failed.get(tx)
        if failed is not None:
            raise failed
        return True

    async def durable(self) -> None:
        # the transaction this task's last write went into (a task's begin and its wait run
        # in one thread with no await between: no other write of this thread comes between)
        tx = getattr(self._local, "tx", 0)
        if not tx or self._settled(tx):
            return
        group = self._group
        here = _loop_here()
        if group is not None and group.loop is here:
            await group.done.wait()  # a commit is on its way: it takes this write too
        else:  # written while no event loop ran: committed now, after one turn of this one
            group = self._group = _Group(here)
            try:
                # one turn of the loop, for the other runs' writes to join this commit
                await anyio.lowlevel.checkpoint()
            finally:
                self._flush(group)
        if not self._settled(tx):  # the commit waited for came before this write's
            self._commit()
            if not self._settled(tx):
                raise JournalError(f"journal {self.path}: a write could not be committed")

    def _commit(self) -> None:
        with self._mutex:
            self._commit_open()

    def close(self) -> None:
        try:
            if self._held:
                with self._mutex:
                    for run_id in list(self._held):
                        self._write_held(run_id)
            self._commit()
            self._db.close()
        finally:
            self._kernel.close()

    # -- runs -----------------------------------------------------------------------------

    def create_run(self, run: RunRecord) -> None:
        data = run.model_dump()
        exists = f"run {run.run_id} already exists"
        held, stray = self._exec(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE run_id=?), "
            "EXISTS (SELECT 1 FROM entries WHERE run_id=?)",
            (run.run_id, run.run_id),
        ).rows[0]
        if held:
            raise JournalError(exists)
        if stray:
            # a file changed outside opdsl (a run's row deleted by hand, or entries put in): a
            # run of that id would take them for its own record
            raise JournalError(
                f"journal {self.path} holds entries of a run {run.run_id} but no such run (the "
                "file was changed outside opdsl); a run is not created over them: give it "
                "another id, or delete those entries (with a copy kept); nothing was changed"
            )
        try:
            self._exec(
                f"INSERT INTO runs ({', '.join(_RUN_COLS)}) VALUES ({', '.join('?' * len(_RUN_COLS))})",
                tuple(data[c] for c in _RUN_COLS),
            )
        except apsw.ConstraintError:  # made since by another process
            raise JournalError(exists) from None
        if run.run_id in self._writing:
            # its writer's own new run, with no entries (above): none asked for at its first write
            self._runs_known[run.run_id] = ([0], set())

    def reopen_run(self, run_id: str, at: float | None = None) -> None:
        self.run(run_id)
        self._exec(
            "UPDATE runs SET status='running', finished_at=NULL, error_json=NULL WHERE run_id=?",
            (run_id,),
        )
        if at is not None:
            self._exec("INSERT INTO resumes (run_id, at) VALUES (?, ?)", (run_id, at))

    def set_config(self, run_id: str, config_json: str) -> None:
        self.run(run_id)
        self._exec("UPDATE runs SET config_json=? WHERE run_id=?", (config_json, run_id))

    def attempts(self, run_id: str) -> list[Attempt]:
        rows = self._older(
            "SELECT address, kind, started_at, status, finished_at, again_at FROM attempts "
            "WHERE run_id=? ORDER BY rowid",
            run_id,
        )
        out = []
        for address, kind, started_at, status, finished_at, again_at in rows:
            texts = (address, kind, status)
            times = (started_at, again_at) + (() if finished_at is None else (finished_at,))
            if not all(isinstance(t, str) for t in texts) or not all(map(_is_time, times)):
                raise JournalError(
                    f"journal {self.path}: an attempts row of run {run_id} is malformed"
                )
            out.append(
                Attempt(
                    address,
                    kind,
                    float(started_at),
                    status,
                    None if finished_at is None else float(finished_at),
                    float(again_at),
                )
            )
        return out

    def resumes(self, run_id: str) -> list[float]:
        rows = self._older("SELECT at FROM resumes WHERE run_id=? ORDER BY rowid", run_id)
        if not all(_is_time(at) for (at,) in rows):
            raise JournalError(f"journal {self.path}: a resumes row of run {run_id} is malformed")
        return [float(at) for (at,) in rows]

    def _older(self, sql: str, run_id: str) -> list[tuple[Any, ...]]:
        """Rows of a table a journal made by an older opdsl, opened read-only, may not have
        (it is made when the file is next opened for writing): none, then."""
        if self._has_history is None:
            self._has_history = {"attempts", "resumes"} <= self._tables()
        return self._exec(sql, (run_id,)).fetchall() if self._has_history else []

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        *,
        at: float,
        result_json: str | None = None,
        error_json: str | None = None,
        final_state_json: str | None = None,
    ) -> None:
        with self._mutex:
            if run_id in self._held:  # begun, never finished: written as begun
                self._write_held(run_id)
            self._into_tx(False)  # the run's last entries are committed before its end
        if self._lost:  # they were not: its end would be written over a gap
            self._unlost(run_id)
        self._exec(
            "UPDATE runs SET status=?, finished_at=?, result_json=?, error_json=?, final_state_json=? "
            "WHERE run_id=?",
            (status, at, result_json, error_json, final_state_json, run_id),
        )

    def _record(self, row: tuple[Any, ...]) -> RunRecord:
        try:
            return RunRecord.model_validate(dict(zip(_RUN_COLS, row, strict=True)))
        except ValidationError as exc:
            raise JournalError(f"journal {self.path}: a run record is malformed: {exc}") from None

    def run(self, run_id: str) -> RunRecord:
        row = self._exec(
            f"SELECT {', '.join(_RUN_COLS)} FROM runs WHERE run_id=?", (run_id,)
        ).fetchone()
        if row is None:
            raise JournalError(f"no run {run_id!r} in {self.path}")
        return self._record(row)

    def runs(self) -> list[RunRecord]:
        rows = self._exec(
            f"SELECT {', '.join(_RUN_COLS)} FROM runs ORDER BY created_at, run_id"
        ).fetchall()
        return [self._record(r) for r in rows]

    # -- entries ----------------------------------------------------------------------------

    def _known(self, run_id: str) -> tuple[list[int], set[str]]:
        # the run's only writer holds its lock, so its next seq and its addresses can be
        # kept here instead of asked for on every write
        known = self._runs_known.get(run_id)
        if known is None:
            rows = self._exec(
                "SELECT seq, address FROM entries WHERE run_id=?", (run_id,)
            ).fetchall()
            known = ([max((r[0] for r in rows), default=-1) + 1], {r[1] for r in rows})
            if run_id in self._held:  # asked again (after a failed commit): its held begins
                with self._mutex:  # (which another thread's hold timer may be writing)
                    held = self._held.get(run_id) or {}
                    known[1].update(held)
                    known[0][0] = max([known[0][0], *(h[1] + 1 for h in held.values())])
            self._runs_known[run_id] = known
        return known

    def _unlost(self, run_id: str) -> None:
        """Refuse a write to a run whose entries a failed grouped commit lost (its end
        included): what it goes on with would follow a gap. It stops with that error, and
        resumes from what was kept."""
        lost = self._lost.get(run_id)
        if lost is not None:
            raise JournalError(
                f"run {run_id}: a commit of its last entries failed, so they were not kept "
                f"({lost}); nothing more is written to it until it is resumed"
            )

    def begin(self, run_id: str, address: str, kind: str, effect_json: str, at: float) -> None:
        if self._lost:
            self._unlost(run_id)
        self._begin(run_id, address, kind, effect_json, at)

    def begin_unwaited(
        self,
        run_id: str,
        address: str,
        kind: str,
        effect_json: str,
        at: float,
        pieces: Mapping[str, str] | None = None,
    ) -> None:
        """Under group commit, in an asyncio loop, the begin is held back: the entry is written
        once, whole, at its :meth:`finish`, where a begin and its finish wrote its row twice,
        in two commits. One still under way after :attr:`hold` seconds is written as begun (a
        reader elsewhere sees a long call under way; a crash after that leaves it begun), and
        so is one still held when its run ends, when its entries are read here, when the run
        writes an entry after it (a run's entries are never committed with a gap), or when
        the journal is closed. Its ``pieces`` are held with it and written in the transaction
        that writes it. Otherwise, as :meth:`begin`."""
        if self.hold > 0 and self.grouped:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                if self._lost:
                    self._unlost(run_id)
                next_seq, addresses = self._known(run_id)
                if address not in addresses:  # (one begun before: its row is begun again)
                    due = loop.time() + self.hold
                    with self._mutex:
                        held = self._held.get(run_id)
                        if held is None:
                            held = self._held[run_id] = {}
                        held[address] = (due, next_seq[0], kind, effect_json, at, pieces or None)
                        if self._hold_loop() is not loop:
                            self._hold_timer(loop, due)
                    next_seq[0] += 1
                    addresses.add(address)
                    return
        super().begin_unwaited(run_id, address, kind, effect_json, at, pieces)

    def _hold_timer(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        """The hold's timer set on ``loop`` for ``when``, unless one is set there already
        (the mutex held): one a loop, whatever the number of loops writing."""
        if loop not in self._hold_loops:
            loop.call_at(when, self._held_due)
            self._hold_loops.add(loop)
        self._hold_loop = weakref.ref(loop)

    def _held_due(self) -> None:
        """The hold's timer: every held begin whose time has come written as begun, and the
        timer set for the next."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        later = math.inf
        with self._mutex:
            self._hold_loops.discard(loop)
            if self._hold_loop() is loop:
                self._hold_loop = _no_loop
            for run_id, held in list(self._held.items()):
                upto = -1
                for due, seq, *_ in held.values():
                    if due <= now:
                        upto = max(upto, seq)
                    elif due < later:
                        later = due
                if upto >= 0:
                    self._write_held(run_id, upto)
            if later < math.inf:
                self._hold_timer(loop, later)

    def _write_held(self, run_id: str, upto: float = math.inf) -> None:
        """Write the held begins of ``run_id`` whose seq is ``upto`` or less as begun, with
        their pieces, in the order of their seqs (the mutex held; a run's held begins are kept
        in that order, so this looks at those it writes and one more). One that cannot be
        written stops its run, as a failed commit of its entries does: it is told at its next
        write."""
        held = self._held.get(run_id)
        if held is None:
            return
        if run_id in self._lost:  # resumed from what was kept, without them
            del self._held[run_id]
            return
        while held:
            address, entry = next(iter(held.items()))
            _, seq, kind, effect_json, at, pieces = entry
            if seq > upto:
                return
            if pieces:
                self._pieces.update(pieces)
            try:
                self._write_locked(
                    run_id, _INSERT_BEGUN, (run_id, seq, address, kind, effect_json, at)
                )
            except Exception as exc:
                self._runs_known.pop(run_id, None)
                self._held.pop(run_id, None)
                self._lost[run_id] = f"its begin of {address} could not be written: {exc}"
                return
            del held[address]
        self._held.pop(run_id, None)

    def _begin(self, run_id: str, address: str, kind: str, effect_json: str, at: float) -> None:
        next_seq, addresses = self._known(run_id)
        if run_id in self._held:
            # those before it first (a run's entries are never committed with a gap), and a
            # held one begun again (never finished) from its written begin
            with self._mutex:
                entry = self._held[run_id].get(address) if run_id in self._held else None
                self._write_held(run_id, math.inf if entry is None else entry[1])
            if self._lost:
                self._unlost(run_id)
        if address in addresses:
            # begun before and left unfinished by a crash or a stop: begin it again (a scope or
            # a question goes on from its first start; an effect's earlier attempt is kept)
            goes_on = kind in GOES_ON
            if not goes_on:
                self._write_entry(
                    run_id,
                    "INSERT INTO attempts (run_id, address, kind, started_at, status, "
                    "finished_at, again_at) SELECT run_id, address, kind, started_at, status, "
                    f"finished_at, ? FROM entries WHERE run_id=? AND address=? AND status IN "
                    f"({_BEGIN_FROM_SQL})",
                    (at, run_id, address),
                )
            changed = self._write_entry(
                run_id,
                "UPDATE entries SET effect_json=?, started_at=CASE WHEN ? THEN started_at "
                "ELSE ? END, status='started', finished_at=NULL, error_json=NULL "
                f"WHERE run_id=? AND address=? AND status IN ({_BEGIN_FROM_SQL})",
                (effect_json, goes_on, at, run_id, address),
            )
            if changed == 0:
                raise JournalError(
                    f"run {run_id}: address {address} is already finished; entries are append-only"
                )
            return
        try:
            self._write_entry(
                run_id,
                _INSERT_BEGUN,
                (run_id, next_seq[0], address, kind, effect_json, at),
            )
        except apsw.ConstraintError as exc:
            self._runs_known.pop(run_id, None)
            raise JournalError(f"run {run_id}: cannot begin address {address}: {exc}") from None
        next_seq[0] += 1
        addresses.add(address)

    def finish(
        self,
        run_id: str,
        address: str,
        status: EntryEnd,
        *,
        at: float,
        result_json: str | None = None,
        error_json: str | None = None,
        usage_json: str | None = None,
    ) -> None:
        if self._lost:
            self._unlost(run_id)
        if run_id in self._held:
            with self._mutex:
                held = self._held.get(run_id)
                entry = None if held is None else held.pop(address, None)
                if entry is not None:
                    if not held:
                        del self._held[run_id]
                    self._finish_held(run_id, address, entry, status, at, result_json,
                                      error_json, usage_json)  # fmt: skip
                    return
        changed = self._write_entry(
            run_id,
            "UPDATE entries SET status=?, result_json=?, error_json=?, usage_json=?, finished_at=? "
            f"WHERE run_id=? AND address=? AND status IN ({_FINISH_FROM_SQL})",
            (status, _kept(result_json), _kept(error_json), _kept(usage_json), at, run_id, address),
        )
        if changed == 0:
            raise JournalError(f"run {run_id}: cannot finish address {address}: it is not started")

    def _finish_held(
        self,
        run_id: str,
        address: str,
        entry: _Held,
        status: EntryEnd,
        at: float,
        result_json: str | None,
        error_json: str | None,
        usage_json: str | None,
    ) -> None:
        """Write a held entry whole (the mutex held, the entry taken from the held ones), after
        the held begins before it, with its pieces. One that cannot be written is held again
        (written as begun when its run ends, as it was before it was held)."""
        _, seq, kind, effect_json, started, pieces = entry
        self._write_held(run_id, seq)
        if run_id in self._lost:
            self._unlost(run_id)
        if pieces:
            self._pieces.update(pieces)
        try:
            self._write_locked(
                run_id,
                _INSERT_WHOLE,
                (
                    run_id, seq, address, kind, effect_json, status, _kept(result_json),
                    _kept(error_json), _kept(usage_json), started, at,
                ),
            )  # fmt: skip
        except BaseException as exc:
            if run_id not in self._lost:  # held again, in its place among the run's
                before = self._held.get(run_id, {})
                self._held[run_id] = dict(
                    sorted([*before.items(), (address, entry)], key=lambda item: item[1][1])
                )
            if isinstance(exc, apsw.ConstraintError):
                self._runs_known.pop(run_id, None)
                raise JournalError(
                    f"run {run_id}: cannot finish address {address}: {exc}"
                ) from None
            raise

    def add_entries(self, entries: Iterable[Entry]) -> None:
        self._commit()
        self._runs_known.clear()
        rows = [
            tuple(_kept(v) if c in _TEXT_COLS else v for c, v in e.as_dict().items())
            for e in entries
        ]
        sql = f"INSERT INTO entries ({', '.join(_ENTRY_COLS)}) VALUES ({', '.join('?' * len(_ENTRY_COLS))})"
        try:
            with self._mutex:
                self._db.execute("BEGIN")
                try:
                    self._write_pieces()
                    self._db.executemany(sql, rows)
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
        except apsw.Error as exc:
            raise self._failed(exc, "the import of entries") from None

    def put_content(self, pieces: Mapping[str, str]) -> None:
        """Kept until the next entry's write, and committed with it (one commit, not two: the
        entry that needs them follows)."""
        with self._mutex:
            self._pieces.update(pieces)

    def _write_pieces(self) -> None:
        """The pieces waiting for an entry, into the transaction open now (the mutex held)."""
        if self._pieces:
            pieces, self._pieces = self._pieces, {}
            self._db.executemany(
                "INSERT OR IGNORE INTO content (hash, body) VALUES (?, ?)",
                ((piece_key(h), stored_body(body)) for h, body in pieces.items()),
            )

    def content(self, hashes: Iterable[str]) -> dict[str, str]:
        wanted = list(hashes)
        out: dict[str, str] = {h: self._pieces[h] for h in wanted if h in self._pieces}
        if self._held:  # and those held with a begin held back, written with it
            for held in list(self._held.values()):
                for *_, pieces in list(held.values()):
                    if pieces:
                        out.update((h, pieces[h]) for h in wanted if h in pieces)
        wanted = [h for h in wanted if h not in out and is_digest(h)]  # others: none
        if not wanted or not self._has_content:
            return out
        for i in range(0, len(wanted), 500):
            part = wanted[i : i + 500]
            rows = self._exec(
                f"SELECT hash, body FROM content WHERE hash IN ({', '.join('?' * len(part))})",
                tuple(map(piece_key, part)),
            ).fetchall()
            for key, kept in rows:
                h = key.hex() if isinstance(key, bytes) else str(key)
                try:
                    body = kept_body(kept, f"piece {h}")
                except ContentError as exc:
                    raise JournalError(f"journal {self.path}: {exc}") from None
                # a file someone hands us may have changed a piece under its name: what is
                # read is what the hash says, or nothing is
                if digest(body) != h:
                    raise JournalError(
                        f"journal {self.path}: piece {h[:64]} does not hold the text its "
                        "hash names; the file was changed outside opdsl"
                    )
                out[h] = body
        return out

    @property
    def _has_content(self) -> bool:
        # a version 1 file opened read-only has no content table (nor needs one)
        if self._content_table is None:
            self._content_table = "content" in self._tables()
        return self._content_table

    def content_hashes(self) -> set[str]:
        if not self._has_content:
            return set()
        rows = self._exec("SELECT hash FROM content").fetchall()
        return {key.hex() if isinstance(key, bytes) else str(key) for (key,) in rows}

    def delete_content(self, hashes: Iterable[str]) -> int:
        gone = 0
        wanted = [h for h in hashes if is_digest(h)]
        for i in range(0, len(wanted), 500):
            part = wanted[i : i + 500]
            cur = self._exec(
                f"DELETE FROM content WHERE hash IN ({', '.join('?' * len(part))})",
                tuple(map(piece_key, part)),
            )
            gone += max(cur.rowcount, 0)
        return gone

    @contextlib.contextmanager
    def alone(self) -> Iterator[Journal]:
        """A connection of its own to the file in a write transaction: every other writer, of
        this process or another, waits (each for its busy timeout) until the block ends, and
        what the block read is what it commits against."""
        self._commit()
        sweeper = SqliteJournal(self.path, busy_timeout=self._busy_timeout, create=False)
        try:
            try:
                sweeper._db.execute("BEGIN IMMEDIATE")
            except (apsw.BusyError, apsw.LockedError):
                raise JournalError(
                    f"journal {self.path} is busy: other processes held it for "
                    f"{self._busy_timeout:g} s; nothing was changed, try again"
                ) from None
            try:
                yield sweeper
            except BaseException:
                with contextlib.suppress(apsw.Error):
                    sweeper._db.execute("ROLLBACK")
                raise
            try:
                sweeper._db.execute("COMMIT")
            except apsw.Error as exc:
                with contextlib.suppress(apsw.Error):
                    sweeper._db.execute("ROLLBACK")
                raise self._failed(exc, "the commit") from None
        finally:
            sweeper.close()

    def entries(self, run_id: str) -> list[Entry]:
        if run_id in self._held:  # read here: its held begins are written first
            with self._mutex:
                self._write_held(run_id)
        self.run(run_id)
        rows = self._exec(
            f"SELECT {', '.join(_ENTRY_COLS)} FROM entries WHERE run_id=? ORDER BY seq", (run_id,)
        ).fetchall()
        out = []
        for r in rows:
            if bytes in map(type, r):  # texts kept compressed
                try:
                    r = tuple(_text_of(c, v) for c, v in zip(_COLS, r, strict=True))
                except ContentError as exc:
                    raise JournalError(
                        f"journal {self.path}: entry {r[2]} of run {run_id}: {exc}"
                    ) from None
            e = Entry(*r)
            problem = _malformed(e)
            if problem is not None:
                raise JournalError(
                    f"journal {self.path}: entry {e.address} of run {run_id} is malformed: "
                    f"{problem}"
                )
            out.append(e)
        return out

    def delete_run(self, run_id: str) -> None:
        self._commit()
        self.run(run_id)
        self.acquire(run_id)  # (refused for a run this process is writing)
        self._held.pop(run_id, None)
        try:
            with self._mutex:
                self._db.execute("BEGIN")
                try:
                    for table in ("entries", "attempts", "resumes", "runs"):
                        self._db.execute(f"DELETE FROM {table} WHERE run_id=?", (run_id,))
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
        except apsw.Error as exc:
            raise self._failed(exc, f"the removal of run {run_id}") from None
        finally:
            self.release(run_id)
        self._runs_known.pop(run_id, None)

    def vacuum(self) -> None:
        """Give the space of removed runs back to the file system."""
        self._exec("VACUUM")
        self._exec(
            "PRAGMA wal_checkpoint(TRUNCATE)"
        )  # WAL mode: the file shrinks at the checkpoint

    # -- one writer per run -----------------------------------------------------------------

    def writer_alive(self, run_id: str) -> bool | None:
        """Whether the process that holds ``run_id``'s lock is alive: None when no process
        holds it, or when that cannot be told from here (a holder on another machine, or in
        a container whose kernel lock is not seen)."""
        row = self._exec("SELECT pid, host, holder FROM locks WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            return None
        file = _kernel_file(row[2])
        if file is not None:
            held = self._kernel.held_elsewhere(run_id)
            if held is not None and file == self._kernel.file:
                return held or self._kernel.holds(run_id)
        if row[1] != socket.gethostname():
            return None
        return _pid_alive(int(row[0]), _since(row[2]))

    def acquire(self, run_id: str) -> None:
        if self.read_only:
            raise JournalError(f"journal {self.path} was opened read-only; it cannot be written")
        self._runs_known.pop(run_id, None)
        kernel = self._kernel.take(run_id)
        if kernel is False:  # a live process of this machine holds it, whatever its namespace
            if (self._key, run_id) in _HELD or self._kernel.holds(run_id):
                raise RunLocked(f"run {run_id} is already being written by this process")
            row = self._exec("SELECT holder FROM locks WHERE run_id=?", (run_id,)).fetchone()
            holder = (
                f"another process (it holds the run's lock in {self._kernel.path})"
                if row is None
                else _shown(row[0])
            )
            raise self._locked(run_id, holder)
        try:
            self._lock_row(run_id, self._kernel.file if kernel else None)
        except BaseException:
            if kernel:
                self._kernel.free(run_id)
            raise
        _HELD.add((self._key, run_id))
        self._writing.add(run_id)
        self._lost.pop(run_id, None)  # taken again to be resumed: it goes on from what was kept

    def _locked(self, run_id: str, holder: str) -> RunLocked:
        return RunLocked(
            f"run {run_id} is being written by {holder}; wait for it or stop that process"
        )

    def _lock_row(self, run_id: str, kernel: str | None) -> None:
        """Write this process's lock row for ``run_id`` (``kernel``: the lock file it holds
        the run's kernel lock in), taking over the row of a holder that ended."""
        me, host = _lock_holder(kernel), socket.gethostname()
        try:
            self._exec(
                "INSERT INTO locks (run_id, holder, pid, host) VALUES (?, ?, ?, ?)",
                (run_id, me, os.getpid(), host),
            )
            if not _WAL_RESET_FIXED:
                self._say_if_shared()
            return
        except apsw.ConstraintError:
            pass
        row = self._exec("SELECT holder, pid, host FROM locks WHERE run_id=?", (run_id,)).fetchone()
        if row is None:  # released in between
            return self._lock_row(run_id, kernel)
        holder, pid, their_host = row
        if pid == os.getpid() and their_host == host and (self._key, run_id) in _HELD:
            raise RunLocked(f"run {run_id} is already being written by this process")
        # a holder that took the kernel lock in this very lock file ended when the kernel let
        # go of it (this process has it now), whatever its pid, host name or namespace; any
        # other (no kernel lock, or one in a file deleted or replaced since) ended when its
        # pid of this machine did, or is this process's own, left behind when the journal
        # could not be written at release
        theirs = _kernel_file(holder)
        ended = (kernel is not None and theirs == kernel) or (
            their_host == host and (pid == os.getpid() or not _pid_alive(pid, _since(holder)))
        )
        if not ended:
            raise self._locked(run_id, _shown(holder))
        # take the run over, only if nobody else did meanwhile
        _before_takeover(run_id)
        taken = self._exec(
            "UPDATE locks SET holder=?, pid=?, host=? WHERE run_id=? AND pid=? AND holder=?",
            (me, os.getpid(), host, run_id, pid, holder),
        )
        if taken.rowcount != 1:
            return self._lock_row(run_id, kernel)  # someone else took it first: look again
        return None

    def _say_if_shared(self) -> None:
        """On a SQLite that has the WAL-reset bug, one line when another process writes this
        file too (the bug needs two writers)."""
        if self._key in _SAID_SHARED:
            return
        others = self._exec(
            "SELECT count(*) FROM locks WHERE NOT (pid=? AND host=?)",
            (os.getpid(), socket.gethostname()),
        ).fetchone()
        if others and others[0]:
            _SAID_SHARED.add(self._key)
            sys.stderr.write(
                f"opdsl: warning: other processes write the journal {self.path} too, and "
                f"{sqlite_library()} has SQLite's WAL-reset bug (fixed in 3.51.3), which can "
                "corrupt it then; install apsw's wheel, which bundles a current SQLite\n"
            )

    def release(self, run_id: str) -> None:
        _HELD.discard((self._key, run_id))
        self._writing.discard(run_id)
        try:
            try:
                if run_id in self._held:  # begun, never finished: written as begun
                    with self._mutex:
                        self._write_held(run_id)
            finally:
                self._held.pop(run_id, None)
                self._lost.pop(run_id, None)  # written no more until taken again
                self._runs_known.pop(run_id, None)  # (a long-lived journal keeps no run's)
            self._exec("DELETE FROM locks WHERE run_id=? AND pid=?", (run_id, os.getpid()))
        finally:  # a row left behind is this process's own, taken over at the next acquire
            self._kernel.free(run_id)


def open_journal(
    db: str | Path | Journal | None, *, read_only: bool = False, create: bool = True
) -> Journal:
    """A journal from a path, a journal object, or the default (``OPDSL_DB``, else ``.opdsl/runs.db``).

    ``read_only``: the file must exist; nothing is created and nothing can be written.
    ``create=False``: the file must exist (commands that continue a run).
    """
    if isinstance(db, Journal):
        return db
    if db is None:
        db = os.environ.get("OPDSL_DB") or DEFAULT_DB
    return SqliteJournal(db, read_only=read_only, create=create)


_WAL_RESET_FIXED = _has_wal_reset_fix(apsw.sqlite_lib_version())


def _before_takeover(run_id: str) -> None:
    """A hook between reading a dead holder's lock and taking it (tests pause here)."""
