"""The opdsl command: every verb, and one-line errors with exit status 2 for wrong input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interpreters import SqliteJournal
from interpreters.cli._main import main
from tests.helpers import RawJournal

ROOT = Path(__file__).resolve().parents[3]
CHAT = "tests.fixtures.durable_programs:chat"
APPENDER = "tests.fixtures.durable_programs:appender"


def opdsl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(["Here they are."]))
    return f"scripted:{path}"


def _only_run(db: str = ".opdsl/runs.db") -> str:
    return str(RawJournal(db).execute("SELECT run_id FROM runs ORDER BY created_at").fetchone()[0])


def test_run_ask_answer_show_checkpoints_replay_fork(
    capsys: pytest.CaptureFixture[str], script: str
) -> None:
    code, out, err = opdsl(
        capsys, "run", CHAT, "--arg", "topic=notes", "--model", script, "--quiet"
    )
    assert code == 0 and "is waiting for an answer to: Who is the notes for?" in err
    run_id = _only_run()
    code, out, err = opdsl(capsys, "answer", run_id, "the team", "--quiet")
    assert (code, out.strip()) == (0, "the team: Here they are.")
    code, out, err = opdsl(capsys, "show", run_id)
    assert code == 0 and "before-ask" in out and "after-ask" in out and "completed" in out, err
    code, out, err = opdsl(capsys, "checkpoints", run_id)
    # it printed nothing once in a full run: say what it said instead, and how it ended
    assert out.split() == ["1", "before-ask", "completed", "3", "after-ask", "completed"], (
        code,
        err,
    )
    code, out, _ = opdsl(capsys, "replay", run_id)
    assert code == 0 and "same value and state" in out
    code, out, _ = opdsl(capsys, "resume", run_id, "--from", "after-ask", "--quiet")
    assert code == 0 and out.strip() == "the team: Here they are."
    code, out, _ = opdsl(capsys, "runs")
    assert code == 0 and run_id in out and "after-ask" in out


def test_run_with_tools_state_and_dry_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "lines.txt"
    args = [
        "--arg",
        f"path={target}",
        "--arg",
        "count=2",
        "--tools",
        "tests.fixtures.durable_programs:TOOLS",
        "--state",
        "tests.fixtures.durable_programs:Counted",
    ]
    code, out, _ = opdsl(capsys, "run", APPENDER, *args, "--dry-run")
    assert (
        code == 0 and "would run (side effects, skipped): append_line at 3, append_line at 5" in out
    )
    assert not target.exists()
    code, out, _ = opdsl(capsys, "run", APPENDER, *args, "--quiet")
    assert code == 0 and json.loads(out)["n"] == 2 and len(target.read_text().splitlines()) == 2
    run_id = _only_run()
    # a new process resumes it by name: tools come back from the recorded references
    code, out, _ = opdsl(capsys, "resume", run_id, "--from", "line-0", "--quiet")
    assert code == 0 and json.loads(out)["n"] == 2


def test_export_import(capsys: pytest.CaptureFixture[str], script: str, tmp_path: Path) -> None:
    opdsl(capsys, "run", CHAT, "--arg", "topic=x", "--model", script, "--quiet")
    run_id = _only_run()
    code, _, _ = opdsl(capsys, "export", run_id, "-o", "run.jsonl")
    assert code == 0
    code, out, _ = opdsl(capsys, "import", "run.jsonl", "--db", "copy.db")
    assert code == 0 and f"imported run {run_id}" in out
    assert "nothing it names runs, gets a key or changes a folder until you give it again" in out
    assert f"--program {CHAT} --model {script}" in out
    code, out, _ = opdsl(capsys, "export", run_id, "--db", "copy.db")
    # the same run, now saying where it came from
    assert out.replace('\\"imported_from\\":\\"run.jsonl\\",', "") == Path("run.jsonl").read_text()
    # a journal from a file runs no code until the program is named again
    code, _, err = opdsl(capsys, "replay", run_id, "--db", "copy.db")
    assert code == 2 and "was imported from run.jsonl" in err and "--program" in err
    code, out, _ = opdsl(capsys, "replay", run_id, "--db", "copy.db", "--program", CHAT)
    assert code == 0
    code, _, err = opdsl(capsys, "answer", run_id, "me", "--db", "copy.db", "--quiet")
    assert code == 2 and "was imported from run.jsonl" in err
    code, _, err = opdsl(capsys, "replay", run_id, "--db", "copy.db", "--program", "os:system")
    assert code == 2 and "is not a program" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "nope:fn"], "cannot import program 'nope:fn'"),
        (["run", "no_colon"], "should look like module:function"),
        (["run", CHAT, "--arg", "topic"], "--arg 'topic': expected NAME=VALUE"),
        (["run", CHAT, "--arg", "topic=a", "--arg", "topic=b"], "--arg topic is given twice"),
        (["run", CHAT], "missing a required argument: 'topic'"),
        (
            ["run", CHAT, "--arg", "topic=a", "--model", "nosuch:model"],
            "unknown model provider 'nosuch'",
        ),
        (["run", CHAT, "--arg", "topic=a", "--state", "op:Budget"], "is not a CRDTModel class"),
        (["show", "zzz"], "no journal at .opdsl/runs.db"),
        (["replay", "zzz"], "no journal at .opdsl/runs.db"),
        (["resume", "zzz"], "no journal at .opdsl/runs.db"),
        (["import", "missing.jsonl"], "cannot read missing.jsonl"),
        (["runs", "--db", "garbage.db"], "is not an opdsl journal"),
        (["runs", "--db", "."], "is a directory"),
    ],
)
def test_wrong_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    Path("garbage.db").write_text("not a database")
    code, out, err = opdsl(capsys, *argv)
    assert code == 2, (out, err)
    assert err.startswith("opdsl: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert Path("garbage.db").read_text() == "not a database", "nothing was changed"


def test_unknown_checkpoint_and_bad_import_file(
    capsys: pytest.CaptureFixture[str], script: str
) -> None:
    opdsl(capsys, "run", CHAT, "--arg", "topic=x", "--model", script, "--quiet")
    run_id = _only_run()
    code, _, err = opdsl(capsys, "resume", run_id, "--from", "nope")
    assert code == 2 and "checkpoint 'nope' not found" in err
    Path("bad.jsonl").write_text('{"run": {"run_id": 3}}\n')
    code, _, err = opdsl(capsys, "import", "bad.jsonl")
    assert code == 2 and "bad.jsonl, line 1: expected a run record" in err


def test_the_installed_command_exits_2_without_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    SqliteJournal(tmp_path / "r.db").close()
    out = subprocess.run(
        [sys.executable, "-m", "interpreters", "show", "nothing", "--db", str(tmp_path / "r.db")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 2
    assert out.stderr.strip() == f"opdsl: error: no run 'nothing' in {tmp_path / 'r.db'}"


@pytest.mark.parametrize("config", ["not json", "[1, 2]"])
def test_an_imported_run_with_a_bad_config_is_refused_whole(
    config: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_line = {"run": {"run_id": "r1", "program": "m:f", "args_json": "{}", "config_json": config}}
    (tmp_path / "bad.jsonl").write_text(json.dumps(run_line) + "\n")
    db = tmp_path / "copy.db"
    code, _, err = opdsl(capsys, "import", str(tmp_path / "bad.jsonl"), "--db", str(db))
    assert code == 2 and "the run's config is not" in err, err
    assert SqliteJournal(db).runs() == []
