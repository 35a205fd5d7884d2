"""The claude-code backend against the real Claude Code CLI, offline: it talks to an
Anthropic-compatible server on 127.0.0.1 whose answers the test scripts, and its Bash tool
really runs in the test's workspace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from interpreters import AgentError, ClaudeCodeBackend, MemoryJournal, run
from op import Op, TurnRecord, agent
from op.events import AgentEnd, ToolEnd
from tests.helpers import Recorder
from tests.servers import ScriptedServer, anthropic

ROOT = Path(__file__).resolve().parents[3]
CLAUDE = ROOT / ".cli" / "node_modules" / "@anthropic-ai" / "claude-code-linux-x64" / "claude"

pytestmark = pytest.mark.skipif(
    not CLAUDE.exists(),
    reason=f"the real Claude Code CLI is not installed at {CLAUDE} (make cli installs it)",
)


def delegate(prompt: str, options: dict[str, Any]) -> Op[Any]:
    try:
        return (yield from agent("claude-code", prompt, **options))
    except AgentError as exc:
        return {"kind": exc.kind, "reason": exc.record.crash_reason}


def real(srv: ScriptedServer, home: Path) -> ClaudeCodeBackend:
    return ClaudeCodeBackend(
        executable=str(CLAUDE),
        timeout=120,
        idle_timeout=60,
        env={
            "ANTHROPIC_BASE_URL": srv.url,
            "ANTHROPIC_API_KEY": "sk-test-any",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "HOME": str(home),
        },
    )


def test_a_real_turn_whose_bash_tool_really_runs(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with ScriptedServer() as srv:
        srv.add(
            anthropic(
                "",
                [("toolu_1", "Bash", {"command": "echo hello > out.txt", "description": "write"})],
            )
        )
        srv.add(*[anthropic("Wrote out.txt.")] * 5)
        rec = Recorder()
        options = {
            "model": "claude-sonnet-4-5",
            "allowed_tools": ["Bash"],
            "cwd": str(work),
            "max_turns": 5,
        }
        result = run(
            delegate,
            "write hello to out.txt",
            options,
            agents={"claude-code": real(srv, tmp_path)},
            db=MemoryJournal(),
            on_event=rec,
        )
        record = result.value
        assert isinstance(record, TurnRecord), record
        assert record.text == "Wrote out.txt." and record.session_id
        assert (work / "out.txt").read_text() == "hello\n"
        assert [t["name"] for t in record.tool_calls] == ["Bash"] and record.tool_calls[0][
            "status"
        ] == "ok"
        assert record.usage.total_tokens > 0
        assert [e.status for e in rec.of(ToolEnd)] == ["ok"] and rec.of(AgentEnd)[
            0
        ].status == "completed"
        assert srv.requests[0]["path"].startswith("/v1/messages")
        assert [t["name"] for t in srv.requests[0]["tools"]] == ["Bash"]


def test_the_real_cli_running_out_of_max_turns_returns_its_record_not_a_failure(
    tmp_path: Path,
) -> None:
    with ScriptedServer() as srv:
        srv.add(
            *[
                anthropic("", [(f"toolu_{i}", "Bash", {"command": "true", "description": "noop"})])
                for i in range(6)
            ]
        )
        options = {
            "model": "claude-sonnet-4-5",
            "allowed_tools": ["Bash"],
            "cwd": str(tmp_path),
            "max_turns": 1,
        }
        out = run(
            delegate,
            "loop",
            options,
            agents={"claude-code": real(srv, tmp_path)},
            db=MemoryJournal(),
        ).value
    assert isinstance(out, TurnRecord), out
    assert out.max_turns_exhausted and not out.crashed and out.crash_reason is None
    assert [t["name"] for t in out.tool_calls] == ["Bash"]
    # what the turn ran against: the real CLI's version, the model its init named, the server
    assert out.environment["cli_version"].endswith("(Claude Code)")
    assert out.environment["model"] == "claude-sonnet-4-5"
    assert out.environment["endpoint"] == srv.url


HOOK = '{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch MARKER"}]}]}}'


def said(request: dict[str, Any]) -> list[str]:
    """The texts of the user's messages a request carries."""
    texts = []
    for message in request["messages"]:
        if message["role"] == "user" and isinstance(message["content"], list):
            texts += [b.get("text", "") for b in message["content"] if b.get("type") == "text"]
        elif message["role"] == "user":
            texts.append(message["content"])
    return texts


@pytest.mark.parametrize("prompt", ["-x", "--version", f"--settings={HOOK}", "update"])
def test_a_prompt_the_real_cli_would_take_for_an_option_reaches_the_model(
    tmp_path: Path, prompt: str
) -> None:
    """Given on the command line, `--version` printed the version, `--settings=` ran its
    SessionStart hook on the host before opdsl saw the init line and `-x` was an unknown
    option; on standard input each is the prompt, word for word (a subcommand's name too)."""
    marker = tmp_path / "hook-ran"
    prompt = prompt.replace("MARKER", str(marker))
    with ScriptedServer() as srv:
        srv.add(*[anthropic("plain answer", model="claude-sonnet-4-5")] * 3)
        options = {"model": "claude-sonnet-4-5", "cwd": str(tmp_path), "max_turns": 2}
        result = run(
            delegate,
            prompt,
            options,
            agents={"claude-code": real(srv, tmp_path)},
            db=MemoryJournal(),
        )
    assert isinstance(result.value, TurnRecord), result.value
    assert result.value.text == "plain answer"
    assert said(srv.requests[0])[-1] == prompt
    assert not marker.exists(), "the prompt's hook ran"
