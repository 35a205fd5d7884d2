"""The agent effect against fake CLIs that print the real formats (put on PATH for the test)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from interpreters import AgentError, ClaudeCodeBackend, MemoryJournal, replay, run
from interpreters.agents.kit import register_backend
from interpreters.tools._sandbox import sandbox_problem
from op import Budget, Op, TurnRecord, agent, limit
from op.events import AgentEnd, AgentStart, ToolEnd, ToolStart, TurnEnd, TurnStart
from tests.helpers import Recorder

FAKES = Path(__file__).resolve().parents[2] / "fixtures" / "fake_cli"


@pytest.fixture(autouse=True)
def fake_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ARGV_FILE", str(tmp_path / "argv.json"))
    monkeypatch.setenv("FAKE_STDIN_FILE", str(tmp_path / "stdin.txt"))


def delegate(backend: str = "claude-code", **options: Any) -> Op[Any]:
    try:
        record = yield from agent(backend, "make the tests pass", **options)
    except AgentError as exc:
        return {
            "kind": exc.kind,
            "crashed": exc.record.crashed,
            "reason": exc.record.crash_reason,
            "tools": [t["status"] for t in exc.record.tool_calls],
            "text": exc.record.text,
        }
    return record


def contract(rec: Recorder) -> None:
    """Exactly one AgentStart and one AgentEnd; turns and tools paired."""
    assert len(rec.of(AgentStart)) == 1 and len(rec.of(AgentEnd)) == 1
    assert [e.turn for e in rec.of(TurnStart)] == [e.turn for e in rec.of(TurnEnd)]
    assert sorted(e.tool_id for e in rec.of(ToolStart)) == sorted(
        e.tool_id for e in rec.of(ToolEnd)
    )
    types = [type(e).__name__ for e in rec.events if type(e).__name__.startswith("Agent")]
    assert types == ["AgentStart", "AgentEnd"]
    rec.check_protocol()


def go(
    scenario: str, monkeypatch: pytest.MonkeyPatch, backend: str = "claude-code", **options: Any
) -> tuple[Any, Recorder]:
    monkeypatch.setenv("FAKE_SCENARIO", scenario)
    rec = Recorder()
    result = run(delegate, backend, db=MemoryJournal(), on_event=rec, kwargs=options)
    return result.value, rec


def test_success_with_a_tool_call(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    record, rec = go(
        "success",
        monkeypatch,
        model="claude-sonnet-4-5",
        max_turns=5,
        allowed_tools=["Bash(pytest:*)", "Read"],
        resume="-sess",
    )
    assert isinstance(record, TurnRecord)
    assert (record.text, record.session_id, record.turns) == ("All tests pass.", "sess-1", 2)
    assert record.tool_calls[0]["name"] == "Bash" and record.tool_calls[0]["status"] == "ok"
    assert (
        record.usage.cost_usd == 0.0123
        and record.usage.input_tokens == 130
        and record.usage.output_tokens == 12
    )
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:4] == ["-p", "--output-format", "stream-json", "--verbose"]
    assert (tmp_path / "stdin.txt").read_text() == "make the tests pass"  # the prompt
    assert "--resume=-sess" in argv, "the session id is one token"
    assert argv[argv.index("--allowedTools") + 1] == "Bash(pytest:*),Read"
    contract(rec)
    assert [e.status for e in rec.of(ToolEnd)] == ["ok"]


@pytest.mark.parametrize(
    ("scenario", "kind", "reason"),
    [
        ("api_error", "error", "issue with the selected model"),
        ("crash", "crash", "without a final event"),
        ("malformed", "crash", "a malformed line"),
        ("long_line", "crash", "longer than 1048576 bytes"),
        ("no_init", "refused", "acted before its init line"),
        ("wrong_model", "refused", "reported model 'claude-opus-9'"),
        ("extra_tool", "refused", "offers tools that were not allowed: WebFetch"),
        ("mcp", "refused", "MCP server 'intruder'"),
    ],
)
def test_failures_end_the_turn_with_a_partial_record(
    monkeypatch: pytest.MonkeyPatch, scenario: str, kind: str, reason: str
) -> None:
    options: dict[str, Any] = {"model": "claude-sonnet-4-5"}
    if scenario == "extra_tool":
        options["allowed_tools"] = ["Bash", "Read"]
    t0 = time.monotonic()
    out, rec = go(scenario, monkeypatch, **options)
    assert out["kind"] == kind and out["crashed"] and reason in out["reason"], out
    assert time.monotonic() - t0 < 15, "refusals kill the agent instead of waiting for it"
    contract(rec)


def test_open_tools_are_closed_as_unresolved(monkeypatch: pytest.MonkeyPatch) -> None:
    record, rec = go("open_tool", monkeypatch)
    assert record.tool_calls[0]["status"] == "unresolved"
    assert [e.status for e in rec.of(ToolEnd)] == ["unresolved"]
    contract(rec)


def test_noise_on_stdout_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    record, _ = go("noise", monkeypatch)
    assert record.text == "All tests pass."


def test_hang_after_the_last_event_and_hang_mid_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.monotonic()
    record, _ = go("hang_after", monkeypatch)
    assert record.text == "All tests pass." and time.monotonic() - t0 < 15
    register_backend("claude-quick", lambda: _quick())
    out, rec = go("hang_mid", monkeypatch, backend="claude-quick")
    assert out["kind"] == "timeout" and "no output for 1s" in out["reason"]
    contract(rec)


def _quick(idle: float = 1) -> ClaudeCodeBackend:
    b = ClaudeCodeBackend(idle_timeout=idle, grace=0.5)
    b.name = "claude-quick"  # type: ignore[misc]
    return b


def test_children_that_ignore_sigterm_do_not_outlive_a_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_PIDS", str(pids))
    # idle 3 s: time for the children to start and say their pids on a loaded machine
    register_backend("claude-quick", lambda: _quick(3))
    out, rec = go("stubborn", monkeypatch, backend="claude-quick")
    assert out["kind"] == "timeout"
    for pid in map(int, pids.read_text().split()):
        # SIGKILLed with their group: gone (or a zombie) within moments, even on a busy machine
        deadline = time.monotonic() + 5
        while True:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().split()[2]
            except FileNotFoundError:
                break
            if state == "Z":
                break
            assert time.monotonic() < deadline, f"child {pid} still {state} 5 s after the kill"
            time.sleep(0.02)


def test_a_cooperative_stop_between_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    register_backend(
        "claude-stops", lambda: ClaudeCodeBackend(stop=lambda record: record.turns >= 1)
    )
    out, rec = go("success", monkeypatch, backend="claude-stops")
    assert isinstance(out, TurnRecord) and out.stopped and not out.crashed
    assert out.text == "Running the tests." and out.tool_calls == ()
    contract(rec)


def test_codex_turns_usage_unknown_cost_and_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    record, rec = go("success", monkeypatch, backend="codex")
    assert record.text == "Fixed the off-by-one." and record.session_id == "thread-1"
    assert record.usage.cost_usd is None and record.usage.input_tokens == 2000
    assert [t["status"] for t in record.tool_calls] == ["error", "unresolved"], (
        "exit_code null means unresolved"
    )
    contract(rec)
    failed, _ = go("failed", monkeypatch, backend="codex")
    assert failed["kind"] == "error" and "stream disconnected" in failed["reason"]
    cut, rec = go("interrupted", monkeypatch, backend="codex")
    assert cut["kind"] == "crash" and cut["tools"] == ["error", "unresolved"]
    contract(rec)


def test_a_missing_executable_is_a_clear_error_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    result = run(delegate, db=MemoryJournal())
    assert result.status == "failed" and "needs the `claude` executable: it is not on PATH" in str(
        result.error
    )


def test_noop_and_usage_charged_to_budgets_and_replay_starts_no_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert run(delegate, "noop", db=MemoryJournal()).value.backend == "noop"
    monkeypatch.setenv("FAKE_SCENARIO", "success")

    def twice() -> Op[Any]:
        return (yield from limit(Budget(tokens=100), _two()))

    journal = MemoryJournal()
    first = run(twice, db=journal)
    assert first.value.failure().exceeded == "tokens"
    monkeypatch.setenv("PATH", "/nonexistent")  # no CLI now: the replay must not need one
    assert replay(first.run_id, db=journal, program=twice).value == first.value


def _two() -> Op[int]:
    yield from agent("claude-code", "one")
    yield from agent("claude-code", "two")
    return 2


def _served(
    scenario: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[Any, dict[str, Any]]:
    """A turn given opdsl's tools (read_file, write_file), on the fake CLI."""
    monkeypatch.setenv("FAKE_SCENARIO", scenario)
    monkeypatch.setenv("FAKE_ENV_FILE", str(tmp_path / "env.json"))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    started = time.monotonic()
    result = run(
        delegate,
        db=MemoryJournal(),
        workspace=str(work),
        kwargs={"tools": ["read_file", "write_file"], "model": "claude-sonnet-4-5"},
    )
    assert time.monotonic() - started < 20  # a refused agent is killed, not waited for
    seen = json.loads((tmp_path / "env.json").read_text())
    return result.value, seen


@pytest.mark.parametrize(
    ("scenario", "reason"),
    [
        ("mcp_pending", "opdsl's MCP server is 'pending', not connected"),
        ("mcp_builtin", "offers tools that opdsl does not serve: Bash"),
        ("mcp_intruder", "connected MCP server 'intruder', which was not allowed"),
        ("mcp_missing", "does not offer opdsl's tools write_file"),
        ("wrong_model", "reported model 'claude-opus-9'"),
    ],
)
def test_a_turn_with_opdsls_tools_is_killed_when_its_init_is_not_exactly_them(
    scenario: str, reason: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out, _ = _served(scenario, monkeypatch, tmp_path)
    assert out["kind"] == "refused" and reason in out["reason"], out


def test_denied_calls_fail_a_turn_that_says_success(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out, _ = _served("mcp_denied", monkeypatch, tmp_path)
    assert out["kind"] == "error" and "denied tool calls: mcp__opdsl__run" in out["reason"], out


def test_a_turn_with_opdsls_tools_runs_locked_down(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    record, seen = _served("success", monkeypatch, tmp_path)
    assert isinstance(record, TurnRecord)
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[0] == "-p" and "make the tests pass" not in argv  # the prompt is on stdin
    assert (tmp_path / "stdin.txt").read_text() == "make the tests pass"
    pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert pairs["--tools"] == "" and pairs["--setting-sources"] == ""
    assert pairs["--allowedTools"] == "mcp__opdsl__read_file,mcp__opdsl__write_file"
    assert pairs["--permission-mode"] == "dontAsk" and "--strict-mcp-config" in argv
    assert "--no-session-persistence" in argv
    # run from an empty scratch folder with a private home, never the workspace or ~
    assert seen["cwd"] != str((tmp_path / "work").resolve()) and seen["HOME"] != os.environ["HOME"]
    assert Path(seen["cwd"]).parent == Path(seen["HOME"]).parent
    assert not Path(seen["cwd"]).exists()  # removed when the turn ended
    server = seen["config"]["mcpServers"]["opdsl"]
    assert server["alwaysLoad"] is True and server["args"][0] == "-I"


def test_a_backend_that_cannot_serve_tools_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_SCENARIO", "success")
    result = run(
        delegate,
        "noop",
        db=MemoryJournal(),
        workspace=str(tmp_path),
        kwargs={"tools": ["read_file"]},
    )
    assert result.status == "failed"
    assert "the agent backend 'noop' cannot be given opdsl's tools" in str(result.error)


def test_a_probe_checks_the_cli_runs_without_a_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    record = run(delegate, db=MemoryJournal(), kwargs={"probe": True}).value
    assert isinstance(record, TurnRecord) and record.turns == 0
    assert record.text == "2.1.197 (Claude Code)"
    monkeypatch.setenv("PATH", "/nonexistent")
    result = run(delegate, db=MemoryJournal(), kwargs={"probe": True})
    assert result.status == "failed" and "needs the `claude` executable" in str(result.error)


@pytest.mark.parametrize("kept_in", ["home", "CLAUDE_CONFIG_DIR"])
def test_a_login_is_carried_into_the_private_home_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kept_in: str
) -> None:
    user = tmp_path / "user"
    config = user / ".claude" if kept_in == "home" else tmp_path / "elsewhere"
    config.mkdir(parents=True)
    (config / ".credentials.json").write_text('{"token": "x"}')
    (config / "settings.json").write_text('{"hooks": {}}')
    monkeypatch.setenv("HOME", str(user))
    if kept_in == "home":
        monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    else:
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    record, seen = _served("success", monkeypatch, tmp_path)
    assert isinstance(record, TurnRecord)
    assert seen["HOME"] != str(user) and seen["claude_dir"] == [".credentials.json"]


# -- a prompt is never an option ----------------------------------------------------------------

HOOK = '{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch MARKER"}]}]}}'
HOSTILE = ["-x", f"--settings={HOOK}", '--config=model_provider="evil"', "--version", "resume"]
"""Prompts a program may forward from untrusted text that a CLI's parser would take for an
option (a hook that runs on the host, a configuration, the version) or a subcommand."""


def say(backend: str, prompt: str, options: dict[str, Any]) -> Op[Any]:
    return (yield from agent(backend, prompt, **options))


@pytest.mark.parametrize("prompt", HOSTILE)
@pytest.mark.parametrize(
    "backend", ["claude-code", "claude-code confined", "claude-code with tools", "codex"]
)
def test_a_prompt_is_never_read_as_an_option(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backend: str, prompt: str
) -> None:
    """The fakes parse their arguments as the real CLIs do (--version anywhere prints it,
    --settings= runs its hooks, a last argument named like a subcommand runs it): every
    backend hands the prompt over on standard input, so none of that can happen."""
    marker = tmp_path / "hook-ran"
    prompt = prompt.replace("MARKER", str(marker))
    monkeypatch.setenv("FAKE_ENV_FILE", str(tmp_path / "env.json"))
    # codex runs confined where bubblewrap can run (its default), in the test's folder
    options: dict[str, Any] = {"cwd": str(tmp_path)}
    if backend == "claude-code with tools":
        backend, options = "claude-code", {"tools": ["read_file"]}
    elif backend == "claude-code confined":
        if sandbox_problem() is not None:
            pytest.skip(f"bubblewrap cannot run here: {sandbox_problem()}")
        backend, options["confine"] = "claude-code", True
    (tmp_path / "work").mkdir()
    result = run(
        say, backend, prompt, options, db=MemoryJournal(), workspace=str(tmp_path / "work")
    )
    assert isinstance(result.value, TurnRecord), result.describe()  # a turn, not a version
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert all(arg.strip() != prompt for arg in argv), argv
    assert (tmp_path / "stdin.txt").read_text() == prompt
    assert not marker.exists(), "the prompt's hook ran"


@pytest.mark.parametrize("backend", ["claude-code", "codex"])
def test_a_prompt_longer_than_an_argument_may_be_reaches_the_cli(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backend: str
) -> None:
    """One argument may hold at most 128 KiB on Linux; standard input holds any prompt."""
    prompt = "fix it. " * 40_000  # 320 KB
    result = run(say, backend, prompt, {"cwd": str(tmp_path)}, db=MemoryJournal())
    assert isinstance(result.value, TurnRecord), result.describe()
    assert (tmp_path / "stdin.txt").read_text() == prompt
