"""A journal file changed outside opdsl: a text that is not UTF-8 (SQLite keeps the bytes it is
given), a schema version too long to be one. Every command says so in one line, naming the
file; nothing in it is changed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from interpreters import SqliteJournal, run
from interpreters.journal import JournalError
from op import Op, emit
from tests.helpers import RawJournal
from tests.interpreters.cli.test_cli import opdsl


def said() -> Op[str]:
    yield from emit("note", {"n": 1})
    return "done"


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE runs SET program=CAST(x'70ff3a78' AS TEXT)",
        "UPDATE entries SET effect_json=CAST(x'7b22ff22' AS TEXT)",
        "UPDATE entries SET address=CAST(x'31ff' AS TEXT)",
        "UPDATE meta SET value='" + "9" * 5000 + "' WHERE key='schema_version'",
    ],
)
def test_a_text_changed_outside_opdsl_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str
) -> None:
    db = tmp_path / "runs.db"
    done = run(said, db=str(db))
    assert done.status == "completed"
    raw = RawJournal(db)
    raw.execute(change)
    raw.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with pytest.raises(JournalError, match=f"journal {db} is corrupt") as caught:
        journal = SqliteJournal(db, read_only=True)
        for record in journal.runs():
            journal.entries(record.run_id)
    assert "\n" not in str(caught.value)
    # the list of runs reads no entry: it may be shown; a run's entries are one line
    code, out, err = opdsl(capsys, "runs", "--db", str(db))
    assert code in (0, 2) and "Traceback" not in err, (out, err)
    code, out, err = opdsl(capsys, "show", done.run_id, "--db", str(db))
    assert code == 2 and "is corrupt" in err and "Traceback" not in err, (out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
