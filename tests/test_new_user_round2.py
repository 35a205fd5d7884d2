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
