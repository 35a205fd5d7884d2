"""Journals: where runs and their effects are recorded.

``Journal`` is the interface (``_base``); ``MemoryJournal`` keeps everything in memory,
``SqliteJournal`` is the embedded default; ``export_run``/``import_run`` move a run as JSONL,
``check_integrity`` checks one and ``vouch_for`` seals runs as the user's own (``_seal``).
"""

from typing import TYPE_CHECKING

from interpreters.journal._base import (
    DEFAULT_DB,
    Entry,
    EntryStatus,
    Journal,
    JournalError,
    RunLocked,
    RunRecord,
    RunStatus,
)
from interpreters.journal._memory import MemoryJournal
from interpreters.journal._portable import (
    check_integrity,
    drop_unreferenced,
    export_run,
    import_run,
)
from interpreters.journal._seal import vouch_for

if TYPE_CHECKING:
    from interpreters.journal._sqlite import SCHEMA_VERSION, SqliteJournal, open_journal

__all__ = [
    "DEFAULT_DB",
    "SCHEMA_VERSION",
    "Entry",
    "EntryStatus",
    "Journal",
    "JournalError",
    "MemoryJournal",
    "RunLocked",
    "RunRecord",
    "RunStatus",
    "SqliteJournal",
    "check_integrity",
    "drop_unreferenced",
    "export_run",
    "import_run",
    "open_journal",
    "vouch_for",
]


def __getattr__(name: str) -> object:
    # SQLite loads when a SQLite journal is asked for, not with the interface
    if name in ("SCHEMA_VERSION", "SqliteJournal", "open_journal"):
        from interpreters.journal import _sqlite

        return getattr(_sqlite, name)
    raise AttributeError(f"module 'interpreters.journal' has no attribute {name!r}")
