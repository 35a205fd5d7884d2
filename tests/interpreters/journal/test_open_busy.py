"""Opening a journal while another process holds its file's write lock waits for the lock, up
to the busy timeout, even where SQLite answers busy at once instead of waiting: a file not yet
in WAL mode, which the opener must turn to it (many processes opening one new journal meet
that). It then opens the journal whole, or says how long it waited."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from interpreters import JournalError, SqliteJournal

HOLD = """
import sys, time, apsw
db = apsw.Connection(sys.argv[1])
db.execute("BEGIN IMMEDIATE")  # the write lock of a file that is not in WAL mode yet
print("held", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("ROLLBACK")
"""


@contextmanager
def held(path: Path, seconds: float) -> Iterator[None]:
    """Another process holds ``path``'s write lock for ``seconds``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield
    finally:
        proc.wait(30)


def test_an_open_waits_for_the_write_lock_it_needs_to_turn_the_file_to_wal(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    with held(db, 3.0):  # long past the moment "held" is read, on a loaded machine too
        began = time.monotonic()
        journal = SqliteJournal(db, busy_timeout=20)
        waited = time.monotonic() - began
    try:
        assert journal.runs() == []
        assert waited > 0.5, f"opened after {waited:.2f} s, while the lock was held"
    finally:
        journal.close()
    assert SqliteJournal(db, read_only=True).runs() == []


def test_a_lock_held_past_the_busy_timeout_is_said_after_that_timeout(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with held(db, 2.0):
        began = time.monotonic()
        with pytest.raises(JournalError, match=r"is busy: other processes held it for 0\.4 s"):
            SqliteJournal(db, busy_timeout=0.4)
        waited = time.monotonic() - began
    assert 0.35 < waited < 1.9, f"refused after {waited:.2f} s, not after its 0.4 s"
    journal = SqliteJournal(db)  # nothing was left half made: it opens whole now
    try:
        assert journal.runs() == []
    finally:
        journal.close()
