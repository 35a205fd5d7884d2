"""``--model scripted:answers.json``: the model's place in its answers is the run's. A run
resumed after a crash, or continued by ``opdsl answer``, in a new process, goes on from the
answer it had reached (what it already consumed is never given again)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interpreters import MemoryJournal, ScriptedModel, resume, run
from interpreters.cli._main import main
from tests.fixtures import scripted_runs
from tests.helpers import RawJournal

ROOT = Path(__file__).resolve().parents[3]


def opdsl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def answers(tmp_path: Path, *texts: str) -> str:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(list(texts)), encoding="utf-8")
    return f"scripted:{path}"


def only_run() -> str:
    row = RawJournal(".opdsl/runs.db").execute("SELECT run_id FROM runs").fetchone()
    return str(row[0])


def test_a_resume_after_a_crash_goes_on_from_the_runs_next_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = answers(tmp_path, "bug", "docs", "perf")
    marker = tmp_path / "crashed"
    crashed = subprocess.run(
        [
            sys.executable,
            "-m",
            "interpreters",
            "run",
            "tests.fixtures.scripted_runs:triage",
            "--arg",
            f"marker={marker}",
            "--model",
            spec,
            "--tools",
            "tests.fixtures.scripted_runs:TOOLS",
            "--quiet",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert crashed.returncode == 3 and marker.exists(), crashed.stderr
    code, out, err = opdsl(capsys, "resume", only_run(), "--quiet")
    assert code == 0, err
    assert json.loads(out) == ["bug", "docs", "perf"]


def test_opdsl_answer_continues_with_the_answer_after_those_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = answers(tmp_path, "note 1", "note 2", "note 3", "the summary")
    code, _, err = opdsl(capsys, "run", "tests.fixtures.scripted_runs:summarize", "--model", spec)
    assert code == 0 and "waiting for an answer" in err
    code, out, err = opdsl(capsys, "answer", only_run(), "the team", "--quiet")
    assert (code, out.strip()) == (0, "the team: the summary"), err


def test_one_scripted_model_gives_each_run_its_own_place() -> None:
    model = ScriptedModel(["bug", "docs"])
    first = run(scripted_runs.two_labels, model=model, db=MemoryJournal())
    second = run(scripted_runs.two_labels, model=model, db=MemoryJournal())
    assert first.value == second.value == ["bug", "docs"]
    assert len(model.requests) == 4


def test_an_answer_through_the_api_gets_the_runs_fourth_answer() -> None:
    journal = MemoryJournal()
    first = run(scripted_runs.summarize, model=ScriptedModel(["a", "b", "c", "d"]), db=journal)
    assert first.status == "waiting"
    done = resume(
        first.run_id,
        db=journal,
        program=scripted_runs.summarize,
        model=ScriptedModel(["a", "b", "c", "d"]),
        answer="me",
    )
    assert done.value == "me: d"
