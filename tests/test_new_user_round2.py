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
        "--arg",  # named, so that no linter or test runner starts before the model is asked
        'test=["python", "-c", "pass"]',
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
    from interpreters import SqliteJournal
    from interpreters.observe._report import report_data

    journal = SqliteJournal(tmp_path / "runs.db", read_only=True)
    asked = report_data(journal.run(run_id), journal.entries(run_id))["run"]["waiting_at"]
    assert asked == [["1.1.1", "Which colour?"], ["1.2.1", "Which size?"]]
    journal.close()
    # without --at, the refusal names the exact command for each question
    code, _, err = opdsl(capsys, "answer", run_id, "--db", "runs.db", "red")
    assert code == 2 and err.count("\n") == 1, err
    assert (
        f"answer one: opdsl answer {run_id} --db runs.db --at 1.1.1 TEXT (Which colour?); " in err
    )
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


def test_replay_json_of_a_run_that_diverges(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "notes.py").write_text(
        "from op import Op, checkpoint, tool\n\n\n"
        "def note(text: str) -> str:\n    return text\n\n\n"
        "def keep(text: str) -> Op[str]:\n"
        "    yield from checkpoint('before')\n"
        "    done = yield from tool('note', {'text': text})\n"
        "    return done.output\n"
    )

    def opdsl(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "interpreters", *argv, "--db", "runs.db"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    ran = opdsl("run", "notes:keep", "--arg", "text=hi", "--tools", "notes:note", "--run-id", "n1")
    assert ran.returncode == 0, ran.stderr
    source = (tmp_path / "notes.py").read_text()
    (tmp_path / "notes.py").write_text(source.replace("{'text': text}", "{'text': text.upper()}"))
    replayed = opdsl("replay", "n1", "--json", "--accept-changed-code")
    assert replayed.returncode == 1, replayed.stderr
    said = json.loads(replayed.stdout)
    assert (said["replayed"], said["address"], said["checkpoint"]) == (
        False,
        "2",
        {"name": "before", "address": "1"},
    )
    assert said["where"].endswith("notes.py:10 in keep")
    assert (said["recorded"]["args"], said["now"]["args"]) == ({"text": "hi"}, {"text": "HI"})
    assert said["divergence"].startswith("notes:keep diverged from its journal at address 2")


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


# -- 8. a run killed and resumed, as show and the report tell it ---------------------------------


def test_show_and_the_report_tell_a_run_that_was_killed_and_resumed(tmp_path: Path) -> None:
    import subprocess
    import sys

    from interpreters import SqliteJournal
    from interpreters.observe._report import report_data

    db = str(tmp_path / "runs.db")

    def opdsl(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "interpreters", *argv, "--db", db],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    program = "tests.fixtures.round2_programs:budgeted_steps"
    tools = "tests.fixtures.round2_programs:crash_once"
    marker = f"marker={tmp_path / 'crashed'}"
    killed = opdsl("run", program, "--arg", marker, "--tools", tools, "--run-id", "k1", "--quiet")
    assert killed.returncode == 9, killed.stderr  # the process died in step 2
    resumed = opdsl("resume", "k1", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "step1;step2;"

    shown = opdsl("show", "k1")
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in shown.stdout.splitlines() if line.startswith("│")]
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in lines[1:]]
    # the limit, the first step, the second's cut-off attempt, the resume, its second attempt
    assert [(c[0], c[1], c[2]) for c in cells] == [
        ("1", "checkpoint", "completed"),
        ("2", "limit", "completed"),
        ("2.1", "tool", "completed"),
        ("2.2", "tool", "stopped"),
        ("↻", "resumed", cells[4][2]),
        ("2.2", "tool", "completed"),
    ], shown.stdout
    assert "(attempt 1 of 2: the run stopped during it)" in cells[3][5]
    assert "(attempt 2 of 2)" in cells[5][5]
    # the scope spans the whole scope: from its start before the kill to its end after it
    assert float(cells[1][3].removesuffix("s")) >= 0.3

    journal = SqliteJournal(db, read_only=True)
    record, entries = journal.run("k1"), journal.entries("k1")
    (attempt,) = journal.attempts("k1")
    (resumed_at,) = journal.resumes("k1")
    scope = next(e for e in entries if e.kind == "limit")
    assert scope.started_at < attempt.started_at < resumed_at <= attempt.again_at
    assert scope.finished_at is not None and scope.finished_at > resumed_at
    data = report_data(record, entries, attempts=journal.attempts("k1"), resumes=[resumed_at])
    tried = [e for e in data["entries"] if e["address"] == "2.2"]
    assert [(e["status"], e["attempt"], e["attempts"]) for e in tried] == [
        ("stopped", 1, 2),
        ("completed", 2, 2),
    ]
    assert data["resumes"] == [resumed_at]
    page = opdsl("report", "k1", "-o", str(tmp_path / "k1.html"))
    assert page.returncode == 0, page.stderr
    assert f'"resumes": [{resumed_at}]' in (tmp_path / "k1.html").read_text()
