"""The director with Claude Code as its implementor (and as its director), against the real
CLI offline: the CLI talks to an Anthropic-compatible server on 127.0.0.1 that answers as
each role would, and its tools are opdsl's six, served over MCP into the workspace."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from interpreters import ClaudeCodeBackend, MemoryJournal, ScriptedModel, Workspace, resume, run
from programs.director import TOOLS, DirectorResult, DirectorState, director
from tests.programs.test_director import (
    GREET_V2,
    JOURNEY_PLAN,
    STEP_COMMITS,
    TEST_GREET,
    Scripted,
    _repo,
    git_log,
    implementor_calls,
)
from tests.servers import Reply, ScriptedServer, anthropic, closed_port

ROOT = Path(__file__).resolve().parents[2]
CLAUDE = ROOT / ".cli" / "node_modules" / "@anthropic-ai" / "claude-code-linux-x64" / "claude"
MODEL = "claude-sonnet-4-5"

needs_claude = pytest.mark.skipif(
    not CLAUDE.exists(),
    reason=f"the real Claude Code CLI is not installed at {CLAUDE} (make cli installs it)",
)


class Roles:
    """Answers Claude Code's requests as the role its system prompt names would; step 2's
    implementor tries to change the locked test and is wrong twice before it is right."""

    def __init__(self) -> None:
        self.step2_attempts = 0
        self.systems: list[str] = []

    def __call__(self, req: dict[str, Any]) -> Reply:
        system = json.dumps(req.get("system"))
        self.systems.append(system)
        messages = req["messages"]
        last = messages[-1]["content"]
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            return anthropic("done", model=MODEL)(req)  # the turn's tools answered: it ends
        prompt = json.dumps(messages[0]["content"])

        def use(*calls: tuple[str, dict[str, Any]]) -> Reply:
            uses = [(f"toolu_{i}", f"mcp__opdsl__{n}", a) for i, (n, a) in enumerate(calls)]
            return anthropic("", uses, model=MODEL)(req)

        if "You are being checked" in system:
            return anthropic("READY", model=MODEL)(req)
        if "You are the director of" in system:
            return anthropic(json.dumps(JOURNEY_PLAN), model=MODEL)(req)
        if "You are the drafter" in system:
            return use(
                ("write_file", {"path": "test_greet.py", "content": TEST_GREET}),
                ("write_file", {"path": "handoff/draft.md", "content": "greet.py, tested"}),
            )
        if "You are the validator" in system:
            run = re.search(r"Validation run (\d+)", prompt)
            assert run is not None
            return use(
                ("write_file", {"path": "handoff/validate.md", "content": f"PASS run={run[1]}\n"})
            )
        assert "You are the implementor" in system, system[:200]
        if "Step 1" in prompt:
            return use(*implementor_calls(0))
        self.step2_attempts += 1
        return use(*implementor_calls(self.step2_attempts))


def claude(srv: ScriptedServer | None, home: Path, executable: Path = CLAUDE) -> ClaudeCodeBackend:
    home.mkdir(exist_ok=True)
    env = {"ANTHROPIC_API_KEY": "sk-test-any", "HOME": str(home)}
    if srv is not None:
        env["ANTHROPIC_BASE_URL"] = srv.url
    return ClaudeCodeBackend(executable=str(executable), timeout=120, idle_timeout=60, env=env)


def journey(
    tmp_path: Path, backend: ClaudeCodeBackend, **kwargs: Any
) -> tuple[Any, MemoryJournal, Path]:
    """The director run on a fresh repository, the user approving every plan."""
    repo = _repo(tmp_path)
    journal = MemoryJournal()
    result = run(
        director,
        "greet people by name",
        kwargs=kwargs,
        model=ScriptedModel(Scripted()),
        tools=TOOLS,
        workspace=Workspace(repo),
        agents={"claude-code": backend},
        answer=lambda question: "APPROVE",
        db=journal,
    )
    return result, journal, repo


@needs_claude
def test_claude_code_implements_each_step_through_opdsls_tools(tmp_path: Path) -> None:
    roles = Roles()
    with ScriptedServer() as srv:
        srv.add(*[roles] * 40)
        result, journal, repo = journey(
            tmp_path, claude(srv, tmp_path / "home"), implementor="claude-code", model=MODEL
        )
        assert result.status == "completed", result.describe()
        value = result.value
        assert isinstance(value, DirectorResult) and value.done and len(value.commits) == 2
        assert roles.step2_attempts == 3  # failed twice (the test's verdict), then passed
        assert git_log(repo)[:2] == STEP_COMMITS
        assert (repo / "test_greet.py").read_text() == TEST_GREET  # locked, also over MCP
        agents = [e for e in journal.entries(result.run_id) if e.kind == "agent"]
        # a probe, a first call that it answers, then a fresh Claude Code per attempt: step 1
        # once, step 2 three times
        assert len(agents) == 6
        assert json.loads(agents[0].effect_json)["options"] == {"probe": True}
        assert json.loads(agents[1].result_json or "{}")["text"] == "READY"
        options = json.loads(agents[2].effect_json)["options"]
        assert options["tools"] == [
            "read_file",
            "write_file",
            "run",
            "delete_path",
            "finish_step",
            "blocked",
        ]
        assert options["model"] == MODEL and "You are the implementor" in options["system_prompt"]
        refused = json.loads(agents[3].result_json or "{}")["tool_calls"][0]
        assert refused["name"] == "write_file" and refused["status"] == "error"
        assert "test_greet.py is locked" in refused["output"]
        state = result.state
        assert isinstance(state, DirectorState)
        assert state.implementor.value == f"claude-code:{MODEL}"
        # the roles were the run's model: Claude Code only ever saw the implementor's prompt
        assert all("You are the implementor" in s for s in roles.systems[1:])

        # a fork from step 2 starts fresh Claude Code sessions for step 2 onwards
        roles.step2_attempts = 0
        fork = resume(
            result.run_id,
            db=journal,
            from_checkpoint="implement-step-2",
            model=ScriptedModel(Scripted()),
            tools=TOOLS,
            workspace=Workspace(repo),
            agents={"claude-code": claude(srv, tmp_path / "home")},
        )
        assert fork.status == "completed", fork.describe()
        assert roles.step2_attempts == 3
        assert (repo / "greet.py").read_text() == GREET_V2


@needs_claude
def test_every_role_can_be_claude_code(tmp_path: Path) -> None:
    roles = Roles()
    with ScriptedServer() as srv:
        srv.add(*[roles] * 40)
        result, journal, repo = journey(
            tmp_path,
            claude(srv, tmp_path / "home"),
            implementor="claude-code",
            roles="claude-code",
            model=MODEL,
        )
    assert result.status == "completed", result.describe()
    assert isinstance(result.value, DirectorResult) and result.value.done
    seen = {re.search(r"You are the (\w+)", s)[1] for s in roles.systems}  # type: ignore[index]
    assert seen == {"director", "drafter", "implementor", "validator"}
    # the run's own model was never asked: every role went to Claude Code
    assert not [e for e in journal.entries(result.run_id) if e.kind == "infer"]
    assert (repo / "handoff" / "validate.md").read_text() == "PASS run=1\n"
    assert len(git_log(repo)) == 3  # the repository's first commit and the two steps


@pytest.mark.parametrize("roles", ["model", "claude-code"])
def test_a_backend_that_cannot_run_is_refused_before_anything_changes(
    tmp_path: Path, roles: str
) -> None:
    missing = claude(None, tmp_path / "home", tmp_path / "no" / "claude")
    refused = journey(tmp_path, missing, implementor="claude-code", roles=roles)
    _refused_before_anything(*refused, "the claude-code backend needs the `claude` executable")


def _refused_before_anything(result: Any, journal: MemoryJournal, repo: Path, why: str) -> None:
    """The run failed saying ``why``, with no question, model call or tool, and the
    repository as it was."""
    assert result.status == "failed"
    assert why in str(result.error)
    assert len(git_log(repo)) == 1 and not (repo / "handoff").exists()
    kinds = [e.kind for e in journal.entries(result.run_id)]
    assert "ask" not in kinds and "infer" not in kinds and "tool" not in kinds


def test_a_backend_that_is_not_one_is_refused(tmp_path: Path) -> None:
    result, _, _ = journey(tmp_path, claude(None, tmp_path / "home"), implementor="gpt-in-a-box")
    assert result.status == "failed"
    assert "implementor='gpt-in-a-box' is not a backend (model, claude-code)" in str(result.error)


@needs_claude
def test_an_implementor_that_cannot_be_reached_is_refused_before_anything_changes(
    tmp_path: Path,
) -> None:
    """The CLI is there, but its model server is not: found before PLAN, not at IMPLEMENT."""
    unreachable = claude(None, tmp_path / "home")
    unreachable.env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{closed_port()}"
    unreachable.env["CLAUDE_CODE_MAX_RETRIES"] = "0"
    refused = journey(tmp_path, unreachable, implementor="claude-code", model=MODEL)
    _refused_before_anything(*refused, "the implementor backend claude-code cannot be reached")
