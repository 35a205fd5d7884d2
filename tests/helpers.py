"""Shared test helpers: an event recorder that checks the event protocol, the sample
repository the Coder works on, and a look into a journal file through the journal's own SQLite."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import apsw

from interpreters import RunRecord, SqliteJournal
from op.events import EffectFinished, EffectStarted, Event, RunFinished, RunStarted

E = TypeVar("E")


class Recorder:
    """A sink that keeps events and checks the protocol of DESIGN section 6."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def check_protocol(self) -> None:
        runs = Counter(e.run_id for e in self.events if isinstance(e, RunStarted))
        ends = Counter(e.run_id for e in self.events if isinstance(e, RunFinished))
        assert runs == ends and all(n == 1 for n in runs.values()), (runs, ends)
        starts = Counter((e.run_id, e.address) for e in self.events if isinstance(e, EffectStarted))
        closes = Counter(
            (e.run_id, e.address) for e in self.events if isinstance(e, EffectFinished)
        )
        assert starts == closes, (
            f"unclosed or doubly closed effects: {starts - closes} {closes - starts}"
        )
        assert isinstance(self.events[0], RunStarted) and isinstance(self.events[-1], RunFinished)

    def finished(self) -> dict[str, str]:
        return {e.address: e.status for e in self.events if isinstance(e, EffectFinished)}


SAMPLE = Path(__file__).resolve().parents[1] / "interpreters" / "cli" / "demo" / "sample_repo"


def sh(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` and return what it printed."""
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def sample_repo(tmp_path: Path) -> Path:
    """A git repository holding the bundled sample (a calculator whose test fails), one commit:
    the demo's own, with a committer configured for the tests' git commands."""
    from interpreters.cli._demo import _sample

    root = _sample(tmp_path)
    sh(root, "config", "user.name", "Dev")
    sh(root, "config", "user.email", "dev@example.com")
    return root


class RawJournal:
    """A journal file opened with plain SQL, through the SQLite library the journal itself runs
    on (apsw's), never Python's ``sqlite3``: that is a second SQLite library in the process,
    blind to the journal's locks, and closing its connection it takes itself for the file's
    last user and deletes the WAL: the journal's next reads in this process fail ("disk I/O
    error", "database disk image is malformed") and commits can be lost.

    Outside a ``with`` block each statement is committed at once; a ``with`` block is one
    transaction. ``execute`` gives the cursor untyped, as ``sqlite3``'s rows are."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        if read_only:
            flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
            self._db = apsw.Connection(f"{Path(path).resolve().as_uri()}?mode=ro", flags=flags)
        else:
            self._db = apsw.Connection(str(path))
        self._db.set_busy_timeout(30_000)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._db.execute(sql, params)

    def changes(self) -> int:
        """How many rows the last statement changed (``sqlite3``'s ``rowcount``)."""
        return self._db.changes()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RawJournal:
        self._db.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._db.__exit__(*exc)


def grouped_journal(path: Path, *runs: str) -> SqliteJournal:
    """A SQLite journal at ``path`` that groups its commits, holding ``runs`` (made, and
    taken for writing)."""
    journal = SqliteJournal(path, group_commit=True)
    for run_id in runs:
        journal.create_run(RunRecord(run_id=run_id, program="p"))
        journal.acquire(run_id)
    return journal


def running(marker: bytes) -> list[int]:
    """The processes (not zombies) whose command line holds ``marker``, read from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not (name.isascii() and name.isdigit()) or int(name) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes()
            stat = Path(f"/proc/{name}/stat").read_bytes()  # its name may hold any bytes
        except OSError:  # gone meanwhile
            continue
        if marker in argv and stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X"):
            found.append(int(name))
    return found
