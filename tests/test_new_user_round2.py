"""What a new user trips over, round 2: the command's answers (a result that says it failed,
two open questions, flags the API has), what ``show`` and the report say of a resumed run.
Each test failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interpreters.cli._main import main
from tests.helpers import sample_repo


def opdsl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- 4. a result that says it failed ------------------------------------------------------------


def test_a_coder_run_that_fails_exits_1_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = sample_repo(tmp_path)
    script = tmp_path / "answers.json"
    script.write_text("[]")
    code, out, err = opdsl(
        capsys,
        "run",
        "programs.coder:coder",
        "--arg",
        f"repo={repo}",
        "--arg",
        "task=fix add",
        "--model",
        f"scripted:{script}",
        "--quiet",
        "--db",
        str(tmp_path / "runs.db"),
    )
    assert code == 1, (out, err)
    assert json.loads(out)["ok"] is False  # the result is still printed, as it is
    assert "completed, but its result says it failed: work: ModelScriptExhausted" in err


def test_a_declared_failed_predicate_and_an_ok_field_make_the_run_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "runs.db")
    base = ("--quiet", "--db", db)
    code, out, err = opdsl(
        capsys, "run", "tests.fixtures.round2_programs:label", "--arg", "count=0", *base
    )
    assert (code, out.strip()) == (1, "[]")
    assert "its result says it failed: no label was given" in err
    code, out, err = opdsl(
        capsys, "run", "tests.fixtures.round2_programs:label", "--arg", "count=2", *base
    )
    assert (code, json.loads(out)) == (0, ["bug", "bug"]), err
    code, out, err = opdsl(capsys, "run", "tests.fixtures.round2_programs:checked", *base)
    assert code == 1 and "its result says it failed: the check found 2 problems" in err


# -- 6. two open questions ----------------------------------------------------------------------


def test_two_open_questions_print_the_exact_answer_commands_and_say_waiting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shlex

    monkeypatch.chdir(tmp_path)
    code, out, err = opdsl(
        capsys, "run", "tests.fixtures.round2_programs:two_questions", "--db", "runs.db"
    )
    assert code == 0, err
    # the live view says the run waits, in words; nothing reads as an error
    assert "1.1.1 ask waiting for an answer" in out and "1 par waiting" in out
    assert "unresolved" not in out and "cancelled" not in out and "WaitingForAnswer" not in out
    commands = [line.split("#")[0].strip() for line in err.splitlines() if "opdsl answer" in line]
    assert len(commands) == 2 and all("--at" in c for c in commands), err
    assert commands[0].endswith("--at 1.1.1 TEXT") and "# Which colour?" in err
    run_id = commands[0].split()[2]
    code, out, _ = opdsl(capsys, "show", run_id, "--db", "runs.db")
    assert [line.split("│")[3].strip() for line in out.splitlines() if "│ 1" in line] == [
        "waiting"
    ] * 3
    # each printed command works as it is (TEXT replaced by the answer)
    argv = shlex.split(commands[0].replace("TEXT", "red"))[1:]
    code, out, err = opdsl(capsys, *argv)
    assert code == 0, err
    # one question left: the command needs no --at
    assert f"answer it with: opdsl answer {run_id} --db runs.db TEXT" in err
    code, out, err = opdsl(capsys, "answer", run_id, "--db", "runs.db", "large", "--quiet")
    assert (code, json.loads(out)) == (0, ["red", "large"]), err


# -- 7. the command speaks as the API does --------------------------------------------------------


def test_runs_json_says_run_id_and_run_takes_run_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "runs.db")
    label = "tests.fixtures.round2_programs:label"
    code, _, err = opdsl(
        capsys, "run", label, "--arg", "count=1", "--run-id", "triage-1", "--db", db, "--quiet"
    )
    assert code == 0 and "run triage-1 completed" in err
    code, out, _ = opdsl(capsys, "runs", "--json", "--db", db)
    (listed,) = json.loads(out)
    assert listed["run_id"] == "triage-1" and "run" not in listed and listed["parent_run"] is None
    code, out, _ = opdsl(capsys, "show", "triage-1", "--json", "--db", db)
    assert json.loads(out)["run_id"] == "triage-1"
    # the same id again, or one a command line cannot name again, is refused in one line
    code, _, err = opdsl(
        capsys, "run", label, "--arg", "count=1", "--run-id", "triage-1", "--db", db
    )
    assert code == 2 and "run triage-1 already exists" in err
    code, _, err = opdsl(
        capsys, "run", label, "--arg", "count=1", "--run-id", "a b\x1b", "--db", db
    )
    assert code == 2 and err.startswith("opdsl: error: --run-id 'a b\\x1b': a run id is")


def test_replay_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "runs.db")
    opdsl(
        capsys,
        "run",
        "tests.fixtures.round2_programs:label",
        "--arg",
        "count=2",
        "--run-id",
        "r1",
        "--db",
        db,
        "--quiet",
    )
    code, out, _ = opdsl(capsys, "replay", "r1", "--json", "--db", db)
    assert code == 0
    assert json.loads(out) == {
        "run_id": "r1",
        "replayed": True,
        "status": "completed",
        "value": ["bug", "bug"],
        "state": None,
    }


def test_json_piped_into_a_reader_that_goes_away_ends_quietly(tmp_path: Path) -> None:
    import subprocess
    import sys

    from interpreters import SqliteJournal
    from interpreters import run as run_program
    from tests.fixtures.round2_programs import label

    db = tmp_path / "runs.db"
    for n in range(5):
        run_program(label, n, db=str(db))
    SqliteJournal(db).close()
    for argv in (["runs", "--json"], ["runs"]):
        # the reader closes its end before the command writes: as `| head -0` does
        opdsl = subprocess.Popen(
            [sys.executable, "-m", "interpreters", *argv, "--db", str(db)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
        )
        assert opdsl.stdout is not None and opdsl.stderr is not None
        opdsl.stdout.close()
        err = opdsl.stderr.read().decode()
        assert (opdsl.wait(timeout=60), err) == (141, ""), argv
