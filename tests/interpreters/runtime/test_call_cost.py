"""What each run and each journaled call costs: work done once where once is enough, with
what is journaled the same as it always was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from interpreters import LiveInterpreter, SqliteJournal
from interpreters.runtime._driver import env_redactor
from op import Op, tool


def echo(text: str) -> str:
    return text


def echoes(text: str) -> Op[str]:
    out = yield from tool("echo", {"text": text})
    return out.output


def test_the_environment_is_read_for_secrets_again_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPDSL_TEST_SECRET_TOKEN", raising=False)
    assert env_redactor() is env_redactor()  # nothing changed: the same one
    journal = SqliteJournal(tmp_path / "runs.db")
    interp = LiveInterpreter(tools=[echo], journal=journal)
    first = interp.run_sync(echoes, "tok-abcdef-0123")
    # a secret set between two runs is replaced in the second
    monkeypatch.setenv("OPDSL_TEST_SECRET_TOKEN", "tok-abcdef-0123")
    second = interp.run_sync(echoes, "tok-abcdef-0123")
    texts = {
        run: " ".join(str(e.result_json) for e in journal.entries(run))
        for run in (first.run_id, second.run_id)
    }
    assert "tok-abcdef-0123" in texts[first.run_id]
    assert "tok-abcdef-0123" not in texts[second.run_id]
    assert "[redacted]" in texts[second.run_id]
    # and one removed is no longer a secret
    monkeypatch.delenv("OPDSL_TEST_SECRET_TOKEN")
    assert "OPDSL_TEST_SECRET_TOKEN" not in os.environ
    third = interp.run_sync(echoes, "tok-abcdef-0123")
    assert "tok-abcdef-0123" in " ".join(str(e.result_json) for e in journal.entries(third.run_id))
