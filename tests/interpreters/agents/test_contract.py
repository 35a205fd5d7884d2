"""The agent contract to the letter, on the fake CLIs (the real formats, put on PATH): a turn
that runs out of ``max_turns`` returns its record with ``max_turns_exhausted=True``, on Claude
Code (its own option) and on Codex (opdsl keeps it: codex exec has none); a cooperative stop
ends a turn cleanly at a message boundary on a backend that declares it, and arming one on a
backend that does not is refused; every backend declares its capabilities on its class; and
the turn's record says what it ran against (CLI version, model, endpoint)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest

from interpreters import ClaudeCodeBackend, CodexBackend, MemoryJournal, NoopBackend, run
from interpreters.agents.kit import CliBackend, Turn, register_backend
from op import Agent, ModelError, TurnRecord
from op.events import AgentEnd, ToolEnd
from tests.helpers import Recorder
from tests.interpreters.agents.test_agents import FAKES, contract, delegate


@pytest.fixture(autouse=True)
def fake_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ARGV_FILE", str(tmp_path / "argv.json"))
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def go(
    scenario: str,
    monkeypatch: pytest.MonkeyPatch,
    backend: str = "claude-code",
    agents: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[Any, Recorder]:
    monkeypatch.setenv("FAKE_SCENARIO", scenario)
    rec = Recorder()
    result = run(delegate, backend, db=MemoryJournal(), on_event=rec, kwargs=options, agents=agents)
    assert result.status == "completed", result.describe()
    return result.value, rec


def test_claude_code_running_out_of_max_turns_is_a_record_not_a_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    record, rec = go("max_turns", monkeypatch, max_turns=2)
    assert isinstance(record, TurnRecord), record
    assert record.max_turns_exhausted and not record.crashed and record.crash_reason is None
    assert [t["status"] for t in record.tool_calls] == ["ok"] and record.turns == 2
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[argv.index("--max-turns") + 1] == "2"  # the CLI's own option keeps it
    assert [e.status for e in rec.of(AgentEnd)] == ["completed"]
    contract(rec)
    done, _ = go("success", monkeypatch, max_turns=2)
    assert isinstance(done, TurnRecord) and not done.max_turns_exhausted


@pytest.mark.parametrize(("cap", "exhausted", "tools"), [(1, True, ["error"]), (5, False, None)])
def test_codex_has_no_max_turns_option_so_opdsl_keeps_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cap: int, exhausted: bool, tools: Any
) -> None:
    record, rec = go("success", monkeypatch, backend="codex", max_turns=cap)
    assert isinstance(record, TurnRecord), record
    assert record.max_turns_exhausted is exhausted and not record.crashed
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert not any("turns" in a for a in argv)  # nothing of it reaches the CLI
    if exhausted:
        # ended at the boundary after its first tool call: the second never started
        assert [t["status"] for t in record.tool_calls] == tools
        assert record.text == "" and [e.status for e in rec.of(ToolEnd)] == ["error"]
    else:
        assert record.text == "Fixed the off-by-one."
    contract(rec)


@pytest.mark.parametrize("backend", [ClaudeCodeBackend, CodexBackend])
def test_a_cooperative_stop_ends_the_turn_cleanly_at_a_message_boundary(
    monkeypatch: pytest.MonkeyPatch, backend: type[CliBackend]
) -> None:
    assert backend.supports_cooperative_stop
    seen: list[int] = []

    def after_first_step(record: TurnRecord) -> bool:
        seen.append(len(record.tool_calls))
        return record.turns >= 1

    stopping = backend(stop=after_first_step)
    record, rec = go("success", monkeypatch, backend.name, agents={backend.name: stopping})
    assert isinstance(record, TurnRecord), record
    assert record.stopped and not record.crashed and record.crash_reason is None
    assert not record.max_turns_exhausted
    assert [e.status for e in rec.of(AgentEnd)] == ["stopped"]
    assert seen[-1] == len(record.tool_calls)  # the record it stopped on is the one returned
    contract(rec)


class _Plain(CliBackend):
    """A backend that declares no cooperative stop (the default)."""

    name: ClassVar[str] = "plain-agent"
    command: ClassVar[str] = "echo"

    def argv(self, exe: str, effect: Agent) -> list[str]:
        return [exe, '{"text": "hi"}']

    def handle(self, line: dict[str, Any], turn: Turn, effect: Agent) -> None:
        turn.init_seen = turn.finished = True
        turn.text = line["text"]


def test_arming_a_stop_on_a_backend_that_does_not_declare_it_is_refused() -> None:
    assert not _Plain.supports_cooperative_stop
    with pytest.raises(ModelError, match="the plain-agent backend does not support a cooperative"):
        _Plain(stop=lambda record: True)
    register_backend("plain-agent", _Plain)
    result = run(delegate, "plain-agent", db=MemoryJournal())
    assert isinstance(result.value, TurnRecord) and result.value.text == "hi"


CAPABILITIES = ("serves_tools", "reports_cost", "supports_cooperative_stop", "supports_max_turns")


@pytest.mark.parametrize(
    ("backend", "declared"),
    [
        (ClaudeCodeBackend, (True, True, True, True)),
        (CodexBackend, (True, False, True, True)),
        (NoopBackend, (False, True, False, True)),
    ],
)
def test_each_backend_declares_its_capabilities_on_its_class(
    backend: type[Any], declared: tuple[bool, ...]
) -> None:
    assert tuple(getattr(backend, c) for c in CAPABILITIES) == declared
    for capability in CAPABILITIES:  # on the class itself or a class it comes from, not found
        assert any(capability in vars(k) for k in backend.__mro__), capability


def test_the_record_says_what_the_turn_ran_against(monkeypatch: pytest.MonkeyPatch) -> None:
    record, _ = go("success", monkeypatch)
    assert isinstance(record, TurnRecord)
    assert record.environment == {
        "cli_version": "2.1.197 (Claude Code)",
        "model": "claude-sonnet-4-5-20250929",  # what its init says it runs
        "endpoint": "https://api.anthropic.com",
    }
    # an endpoint with a key in it is kept without the key
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://user:sk-secret@127.0.0.1:8123/v1")
    record, _ = go("success", monkeypatch, model="claude-sonnet-4-5")
    assert record.environment["endpoint"] == "http://127.0.0.1:8123/v1"
    assert record.environment["model"] == "claude-sonnet-4-5"
    assert "sk-secret" not in json.dumps(record.model_dump())
    # codex: its model as asked, its endpoint as its -c options name the provider's
    codex = CodexBackend(
        extra_args=[
            "-c",
            'model_provider="local"',
            "-c",
            'model_providers.local={name="local", base_url="http://127.0.0.1:9/v1"}',
        ]
    )
    record, _ = go("success", monkeypatch, "codex", agents={"codex": codex}, model="gpt-x")
    assert record.environment == {
        "cli_version": "codex-cli 0.0.0",
        "model": "gpt-x",
        "endpoint": "http://127.0.0.1:9/v1",
    }
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:7/v1")
    record, _ = go("success", monkeypatch, "codex")
    assert record.environment["endpoint"] == "http://127.0.0.1:7/v1"
    assert record.environment["model"] == "default"
