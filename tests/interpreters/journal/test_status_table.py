"""Both journals follow the one table of status moves (``interpreters/journal/_status.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from interpreters import JournalError, MemoryJournal, RunRecord, SqliteJournal
from interpreters.journal import Journal
from interpreters.journal._status import (
    BEGIN_FROM,
    ENTRY_STATUSES,
    FINISH_FROM,
    can_begin,
    can_finish,
)


@pytest.fixture(params=["memory", "sqlite"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Journal:
    made: Callable[[], Journal] = (
        MemoryJournal if request.param == "memory" else (lambda: SqliteJournal(tmp_path / "r.db"))
    )
    j = made()
    j.create_run(RunRecord(run_id="r", program="m:f"))
    return j


@pytest.mark.parametrize("status", sorted(ENTRY_STATUSES))
def test_begin_and_finish_follow_the_table(journal: Journal, status: str) -> None:
    journal.begin("r", "1", "tool", "{}", 1.0)
    if status != "started":
        journal.finish("r", "1", status, at=2.0)  # type: ignore[arg-type]
    if can_begin(status):
        journal.begin("r", "1", "tool", "{}", 3.0)
        assert journal.entries("r")[0].status == "started"
    else:
        with pytest.raises(JournalError, match="append-only"):
            journal.begin("r", "1", "tool", "{}", 3.0)
    current = journal.entries("r")[0].status
    if can_finish(current):
        journal.finish("r", "1", "completed", at=4.0)
    else:
        with pytest.raises(JournalError, match="cannot finish"):
            journal.finish("r", "1", "completed", at=4.0)
    assert BEGIN_FROM <= ENTRY_STATUSES and FINISH_FROM <= ENTRY_STATUSES
