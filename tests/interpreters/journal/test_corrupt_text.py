"""A journal file changed outside opdsl: a text that is not UTF-8 (SQLite keeps the bytes it is
given), a schema version too long to be one. Every command says so in one line, naming the
file; nothing in it is changed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from interpreters import ScriptedModel, SqliteJournal, run
from interpreters.journal import JournalError
from op import Op, ask, checkpoint, emit, infer
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


def asks() -> Op[str]:
    first = yield from infer("hello " * 60)  # long enough to be kept as pieces
    second = yield from infer("and again " * 40)
    return first.text + second.text


_DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE entries SET effect_json='{\"$chain\" oops' WHERE seq=1",
        "UPDATE entries SET effect_json='not json' WHERE seq=1",
        "UPDATE entries SET result_json='{\"$ref\" nope nope nope nope nope nope nope' WHERE seq=1",
        "UPDATE entries SET usage_json='nope' WHERE seq=1",
        f"UPDATE entries SET effect_json='{_DEEP}' WHERE seq=1",
        f"UPDATE entries SET result_json='{_DEEP}' WHERE seq=1",
    ],
)
def test_an_entry_that_is_not_json_is_one_line_or_shown_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str
) -> None:
    """An effect, result or usage that is not JSON (or JSON nested deeper than Python's
    stack) in a file changed outside opdsl: each reading command says so in one line, or
    shows the text as it is; none ends in an internal error."""
    db = tmp_path / "runs.db"
    done = run(asks, db=str(db), model=ScriptedModel(["fine " * 80, "ok"]))
    assert done.status == "completed", done.error
    raw = RawJournal(db)
    raw.execute(change)
    raw.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for argv in (
        ["show", done.run_id],
        ["show", done.run_id, "--json"],
        ["export", done.run_id, "-o", str(tmp_path / "out.jsonl")],
        ["report", done.run_id, "-o", str(tmp_path / "out.html")],
    ):
        code, out, err = opdsl(capsys, *argv, "--db", str(db))
        assert code in (0, 2) and "Traceback" not in err, (argv, code, err[-500:])
        if code == 2:
            assert len(err.strip().splitlines()) == 1, err
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("UPDATE entries SET started_at='yesterday' WHERE seq=1", "its started_at is 'yesterday'"),
        ("UPDATE entries SET finished_at='x' WHERE seq=1", "its finished_at is 'x', not a time"),
        ("UPDATE entries SET seq='one' WHERE seq=1", "its seq is 'one', not a whole number"),
        ("UPDATE runs SET args_json='[1]'", "its recorded arguments are not"),
        ("UPDATE runs SET args_json='{\"args\":5}'", "its recorded arguments are not"),
        ("UPDATE runs SET args_json='" + "[" * 100_000 + "'", "nested too deep"),
    ],
)
def test_a_row_of_the_wrong_shape_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, said: str
) -> None:
    """A column holding what it never holds (SQLite keeps a word in a REAL column), or a
    run's arguments in another shape: one line naming the entry or run, in every command
    that reads it, even on a run the user vouched for (``opdsl trust``)."""
    db = tmp_path / "runs.db"
    done = run(said_twice, db=str(db))
    raw = RawJournal(db)
    raw.execute(change)
    raw.close()
    code, out, err = opdsl(capsys, "trust", done.run_id, "--db", str(db))
    if said == "nested too deep":  # cannot be sealed: it stays foreign, said so
        assert code == 2 and "nested too deep to read); it cannot be sealed" in err, err
        said = "not sealed as yours"
    else:
        assert code == 0 and "Traceback" not in err, (out, err)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    commands = ["show", "report", "tail", "replay", "resume", "export", "checkpoints"]
    for command in commands:
        code, out, err = opdsl(capsys, command, done.run_id, "--db", str(db))
        assert "internal error" not in err and "Traceback" not in err, (command, err)
        if command in ("replay", "resume") or "entries" in change:
            assert code == 2 and said in err, (command, err)
            assert len(err.strip().splitlines()) == 1, (command, err)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def said_twice() -> Op[str]:
    yield from emit("note", {"n": 1})
    yield from emit("note", {"n": 2})
    return "done"


def marked() -> Op[str]:
    yield from checkpoint("here")
    yield from emit("note", {"n": 1})
    return "done"


DEEP = "'" + "[" * 100_000 + "'"


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE entries SET effect_json='[]' WHERE kind='checkpoint'",
        "UPDATE entries SET effect_json='x' WHERE kind='checkpoint'",
        f"UPDATE entries SET effect_json={DEEP} WHERE kind='checkpoint'",
        f"UPDATE entries SET error_json={DEEP}",
        f"UPDATE runs SET result_json={DEEP}, final_state_json={DEEP}, error_json={DEEP}",
        "UPDATE runs SET result_json='x', final_state_json='x', error_json='x'",
    ],
)
def test_a_recorded_text_of_the_wrong_shape_is_read_or_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str
) -> None:
    """A checkpoint's effect that names none, an error, result or state that is not JSON or
    nested deeper than Python's stack: every reader shows what it can, or says what is wrong
    in one line; none ends in an internal error."""
    db = tmp_path / "runs.db"
    done = run(marked, db=str(db))
    other = run(marked, db=str(db))
    raw = RawJournal(db)
    raw.execute(
        change.replace("WHERE", f"WHERE run_id='{done.run_id}' AND", 1)
        if "WHERE" in change
        else change + f" WHERE run_id='{done.run_id}'"
    )
    raw.close()
    for argv in (
        ["show", done.run_id],
        ["show", done.run_id, "--json"],
        ["tail", done.run_id],
        ["report", done.run_id, "-o", str(tmp_path / "r.html")],
        ["checkpoints", done.run_id],
        ["diff", done.run_id, other.run_id],
        ["replay", done.run_id],
        ["resume", done.run_id, "--from", "here", "--quiet"],
        ["export", done.run_id],
    ):
        code, out, err = opdsl(capsys, *argv, "--db", str(db))
        assert "internal error" not in err and "Traceback" not in err, (argv, err)
        assert code in (0, 1, 2), (argv, code, err)
        if code == 2:
            assert len(err.strip().splitlines()) == 1, (argv, err)
        if "checkpoint'" in change and argv[0] in ("checkpoints", "resume"):
            assert "checkpoint entry 1 is malformed" in err or "is not JSON" in err, err


def waits() -> Op[str]:
    return (yield from ask("Go?"))


def test_a_question_or_an_imported_effect_of_the_wrong_shape_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    waiting = run(waits, db=str(db))
    raw = RawJournal(db)
    raw.execute("UPDATE entries SET effect_json='x' WHERE kind='ask'")
    raw.close()
    code, out, err = opdsl(capsys, "answer", waiting.run_id, "yes", "--db", str(db), "--quiet")
    assert "internal error" not in err and "Traceback" not in err, err
    # a file handed to `opdsl import` whose effect is JSON nested deeper than the stack
    code, out, err = opdsl(capsys, "export", run(marked, db=str(db)).run_id, "--db", str(db))
    lines = out.splitlines()
    entry = json.loads(lines[-1])
    entry["entry"]["effect_json"] = "[" * 100_000
    (tmp_path / "deep.jsonl").write_text("\n".join([*lines[:-1], json.dumps(entry)]) + "\n")
    code, out, err = opdsl(
        capsys, "import", str(tmp_path / "deep.jsonl"), "--db", str(tmp_path / "other.db")
    )
    assert code == 2 and "effect or usage is malformed" in err and "Traceback" not in err, err
