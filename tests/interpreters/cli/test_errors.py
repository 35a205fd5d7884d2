"""Whose an error is decides how a command ends: the user's input is one line and status 2;
a bug of opdsl's is its traceback and status 70, never passed off as a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest

from interpreters import open_journal, run
from interpreters.cli import _reading
from interpreters.cli._errors import INTERNAL, USAGE
from interpreters.cli._main import main
from tests.fixtures.durable_programs import chat
from tests.helpers import RawJournal


def _opdsl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def _a_journal(tmp_path: Path) -> str:
    db = str(tmp_path / "runs.db")
    run(chat, "x", db=db, model="scripted:" + _answers(tmp_path))
    return db


def _answers(tmp_path: Path) -> str:
    path = tmp_path / "answers.json"
    path.write_text('["hello"]')
    return str(path)


@pytest.mark.parametrize("error", [TypeError, ValueError])
def test_an_internal_type_or_value_error_is_a_bug_shown_with_its_traceback_not_a_usage_error(
    error: type[Exception],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    db = _a_journal(tmp_path)

    def broken(t: float | None) -> str:  # a bug inside opdsl, as a refactor could leave one
        raise error("unsupported operand type(s) for -: 'str' and 'float'")

    monkeypatch.setattr(_reading, "when", broken)
    code, err = _opdsl(capsys, "runs", "--db", db)
    assert code == INTERNAL and INTERNAL not in (0, 1, USAGE), err
    assert "Traceback (most recent call last)" in err and "in broken" in err, err
    assert f"{error.__name__}: unsupported operand" in err
    assert err.rstrip().splitlines()[-1].startswith("opdsl: internal error: ")
    assert "opdsl: error:" not in err and "bug in opdsl" in err


def test_an_internal_errors_text_never_shows_a_secret_of_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = _a_journal(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret-value")

    def broken(t: float | None) -> str:
        raise TypeError("the key was sk-very-secret-value")

    monkeypatch.setattr(_reading, "when", broken)
    code, err = _opdsl(capsys, "runs", "--db", db)
    assert code == INTERNAL and "sk-very-secret-value" not in err and "[redacted]" in err, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--model", "nosuch:model"], "unknown model provider 'nosuch'"),
        (["--model", "scripted:/no/such/answers.json"], "cannot read /no/such/answers.json"),
        (["--model", "openai-compatible:m@http://[::1/v1"], "its URL is not a URL"),
        (["--model-timeout", "0"], "--model-timeout='0': expected a positive number"),
    ],
)
def test_a_bad_model_spec_is_the_users_error_before_anything_runs(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    code, err = _opdsl(
        capsys,
        "run",
        "tests.fixtures.durable_programs:chat",
        "--arg",
        "topic=x",
        "--db",
        str(db),
        "--quiet",
        *argv,
    )
    assert code == USAGE and err.startswith("opdsl: error: ") and said in err, err
    assert len(err.strip().splitlines()) == 1 and not db.exists()


def test_a_recorded_model_that_cannot_be_made_again_is_the_users_error_going_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    answers = _answers(tmp_path)
    db = str(tmp_path / "runs.db")
    done = run(chat, "x", db=db, model="scripted:" + answers)
    Path(answers).unlink()  # the script the run was started with is gone
    code, err = _opdsl(capsys, "answer", done.run_id, "me", "--db", db, "--quiet")
    assert code == USAGE and "cannot read" in err and len(err.strip().splitlines()) == 1, err
    assert open_journal(db, read_only=True).run(done.run_id).status == "waiting"  # untouched


@pytest.mark.parametrize("depth", [500, 100_000])
def test_an_argument_nested_deeper_than_a_journal_writes_is_the_users_error(
    depth: int, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deep = "[" * depth + "]" * depth
    code, err = _opdsl(
        capsys,
        "run",
        "tests.fixtures.durable_programs:chat",
        "--arg",
        f"topic={deep}",
        "--db",
        str(tmp_path / "runs.db"),
        "--quiet",
    )
    assert (code, err) == (
        USAGE,
        "opdsl: error: --arg topic: the JSON value is nested too deeply\n",
    )


@pytest.mark.parametrize(
    ("table", "row"),
    [
        ("attempts", "('1', 'infer', 'x', 'started', NULL, 2.0)"),
        ("attempts", "('1', 'infer', 1.0, 'started', 'soon', 2.0)"),
        ("resumes", "('abc')"),
    ],
)
def test_a_malformed_row_of_a_run_s_history_is_the_users_error_naming_its_table(
    table: str, row: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:

    db = _a_journal(tmp_path)
    with RawJournal(db) as conn:
        (run_id,) = conn.execute("SELECT run_id FROM runs").fetchone()
        columns = "address, kind, started_at, status, finished_at, again_at"
        named = columns if table == "attempts" else "at"
        conn.execute(f"INSERT INTO {table} (run_id, {named}) VALUES (?, {row[1:-1]})", (run_id,))
    conn.close()
    report = ["report", run_id, "-o", str(tmp_path / "r.html")]
    for argv in (["show", run_id], report):
        code, err = _opdsl(capsys, *argv, "--db", db)
        assert code == USAGE, (argv, err)
        assert err.count("\n") == 1 and err.startswith("opdsl: error: "), err
        assert f"{table} row of run {run_id} is malformed" in err, err
