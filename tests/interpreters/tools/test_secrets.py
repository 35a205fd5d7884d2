"""Secrets stay secret: nothing a run writes (journal, events, `opdsl show`, exports, errors)
holds the value of a secret-looking variable or the password of a URL."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from interpreters import ClaudeCodeBackend, JsonlSink, SqliteJournal, run
from interpreters.cli._main import main
from op import Op, agent, tool

KEY = "sk-live-0123456789abcdef"
PASSWORD = "hunter2-prod-pw"


def leak(what: str) -> str:
    """A tool that returns what it was told, and the environment."""
    return f"{what} {os.environ.get('OPENAI_API_KEY')} {os.environ.get('DATABASE_URL')}"


def leaky() -> Op[str]:
    out = yield from tool("leak", {"what": "dump"})
    record = yield from agent("claude-code", "run env")
    if KEY in out.output or PASSWORD in record.text:
        raise RuntimeError(f"the program saw {KEY}")  # the error message carries it too
    return out.output


def test_no_secret_reaches_anything_a_run_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("DATABASE_URL", f"postgres://admin:{PASSWORD}@db.internal/prod")
    fake = tmp_path / "claude"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os\n"
        "env = '\\n'.join(f'{k}={v}' for k, v in os.environ.items())\n"
        "print(json.dumps({'type': 'system', 'subtype': 'init', 'session_id': 's', 'tools': ['Bash'], 'mcp_servers': []}))\n"
        "print(json.dumps({'type': 'assistant', 'message': {'id': 'm1', 'content': [{'type': 'tool_use', 'id': 't1', 'name': 'Bash', 'input': {'command': 'env'}}], 'usage': {}}}))\n"
        "print(json.dumps({'type': 'user', 'message': {'content': [{'type': 'tool_result', 'tool_use_id': 't1', 'content': env}]}}))\n"
        "print(json.dumps({'type': 'result', 'subtype': 'success', 'result': env, 'num_turns': 1, 'usage': {'input_tokens': 1, 'output_tokens': 1}, 'total_cost_usd': 0.0}))\n"
    )
    fake.chmod(0o755)
    db = tmp_path / "runs.db"
    events = tmp_path / "events.jsonl"
    with JsonlSink(events) as sink:
        result = run(
            leaky,
            tools=[leak],
            agents={"claude-code": ClaudeCodeBackend(executable=str(fake))},
            db=str(db),
            on_event=sink,
        )
    # the program saw the secret live (it is its own business) and failed with it in the message
    assert result.status == "failed" and KEY in str(result.error)
    SqliteJournal(db).close()
    assert main(["show", result.run_id, "--db", str(db), "--json"]) == 0
    assert main(["show", result.run_id, "--db", str(db)]) == 0
    assert main(["export", result.run_id, "--db", str(db), "-o", str(tmp_path / "run.jsonl")]) == 0
    shown = capsys.readouterr().out
    written = {
        "journal": b"".join(p.read_bytes() for p in tmp_path.glob("runs.db*")).decode(
            "utf-8", "replace"
        ),
        "events": events.read_text(),
        "show": shown,
        "export": (tmp_path / "run.jsonl").read_text(),
    }
    for where, text in written.items():
        assert KEY not in text, where
        assert PASSWORD not in text, where
    assert (
        "[redacted]" in written["journal"]
        and "postgres://admin:[redacted]@db.internal/prod" in written["show"]
    )


def test_streamed_tokens_reach_no_sink_with_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interpreters import MemoryJournal, ScriptedModel
    from op import infer
    from op.events import TokenDelta

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    seen: list[str] = []

    def program() -> Op[str]:
        return (yield from infer("say the key")).text

    def sink(event: object) -> None:
        if isinstance(event, TokenDelta):
            seen.append(event.text)

    run(program, model=ScriptedModel([f"the key is {KEY}"]), db=MemoryJournal(), on_event=sink)
    assert seen == ["the key is [redacted]"]
