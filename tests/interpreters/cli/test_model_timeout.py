"""``--model-timeout`` reaches the models of its command as a value, and only them: it bounds
a hanging call, and neither the process's environment nor a later command sees it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from interpreters import resolve_model
from interpreters.cli._main import main
from interpreters.models import HttpModel
from tests.servers import ScriptedServer, hang


def _run_with_timeout(spec: str, seconds: str, tmp_path: Path) -> int:
    """``opdsl run`` of a program that calls the model, with ``--model-timeout SECONDS``."""
    return main(
        [
            "run",
            "tests.fixtures.model_programs:summarize",
            "--arg",
            "path=x",
            "--tools",
            "tests.fixtures.model_programs:TOOLS",
            "--model",
            spec,
            "--model-timeout",
            seconds,
            "--db",
            str(tmp_path / "r.db"),
            "--quiet",
        ]
    )


def test_the_timeout_bounds_the_commands_calls_and_is_gone_after_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OPDSL_MODEL_TIMEOUT", raising=False)
    with ScriptedServer([hang(), hang(), hang()]) as srv:
        spec = f"openai-compatible:m@{srv.url}/v1"
        t0 = time.monotonic()
        code = _run_with_timeout(spec, "1", tmp_path)
        took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 1 and took < 15 and "deadline of 1s" in err, err
    assert "OPDSL_MODEL_TIMEOUT" not in os.environ  # never put in the environment
    later = resolve_model(spec)
    assert isinstance(later, HttpModel) and later.deadline == 600.0  # nor left for later


def test_the_timeout_given_wins_over_the_environments(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("OPDSL_MODEL_TIMEOUT", "not a number")  # unused: the option is given
    with ScriptedServer([hang(), hang(), hang()]) as srv:
        code = _run_with_timeout(f"openai-compatible:m@{srv.url}/v1", "0.5", tmp_path)
    err = capsys.readouterr().err
    assert code == 1 and "deadline of 0.5s" in err, err
    assert os.environ["OPDSL_MODEL_TIMEOUT"] == "not a number"
