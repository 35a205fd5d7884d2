"""The workflow directed from the real Claude Code CLI, offline: ``opdsl mcp install`` in a
project, then ``claude -p`` there twice, as a person types to it (the goal, then ``APPROVE``
on the resumed session). Its model is the loopback Anthropic server, scripted as a director
that plans and asks for APPROVE, then moves the workflow through ``opdsl mcp director`` (the
server ``.mcp.json`` registers): the plan, the drafter's test and hand-over, the hand-over to
the implementor (the run's model, answering over HTTP from the loopback OpenAI-compatible
server), the validator's verdict, DONE."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.programs.test_director import JOURNEY_PLAN, STEP_COMMITS, TEST_GREET, _repo, git_log
from tests.programs.test_director_claude_code import CLAUDE, MODEL
from tests.programs.test_director_readme import Director
from tests.servers import Reply, ScriptedServer, anthropic

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not CLAUDE.exists(),
    reason=f"the real Claude Code CLI is not installed at {CLAUDE} (make cli installs it)",
)

TOOL = "mcp__opdsl-director__"


class Session:
    """The director's model: each answer decided by what the conversation holds so far."""

    def __init__(self) -> None:
        #: the text of every tool result the session got, in order
        self.results: list[str] = []

    def __call__(self, req: dict[str, Any]) -> Reply:
        messages = req["messages"]
        if not req.get("tools"):
            return anthropic("ok", model=MODEL)(req)  # a side request (a title, a summary)
        results = [
            _text(b.get("content"))
            for m in messages
            if isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]
        self.results = results
        said = json.dumps([m["content"] for m in messages if m["role"] == "user"])
        if "APPROVE" not in said:
            return anthropic(
                "Here is the plan:\n" + json.dumps(JOURNEY_PLAN) + "\nReply APPROVE to start.",
                model=MODEL,
            )(req)
        moves: list[tuple[str, dict[str, Any]]] = [
            ("fsm_to", {"state": "DRAFT", "plan": JOURNEY_PLAN}),
            ("Write", {"file_path": "test_greet.py", "content": TEST_GREET}),
            ("handoff_draft", {"summary": "greet.py, tested", "tests": ["test_greet.py"]}),
            ("fsm_to", {"state": "BUFFER"}),
            ("run_implementor", {}),
            ("handoff_verdict", {"verdict": "PASS run=1"}),
            ("fsm_to", {"state": "DONE"}),
        ]
        done = len(results)
        if done >= len(moves):
            return anthropic("The workflow is DONE.", model=MODEL)(req)
        name, arguments = moves[done]
        if name == "Write":
            cwd = re.search(r"Working directory: (\S+)", json.dumps(req.get("system")))
            folder = cwd[1] if cwd else "."
            arguments = {**arguments, "file_path": f"{folder}/{arguments['file_path']}"}
        full = name if name == "Write" else TOOL + name
        return anthropic("", [(f"toolu_{done}", full, arguments)], model=MODEL)(req)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def _claude(project: Path, env: dict[str, str], prompt: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [str(CLAUDE), "-p", "--output-format", "json", "--model", MODEL, *args],
        input=prompt,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-2000:])
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_a_claude_code_session_directs_the_workflow_from_plan_to_done(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPDSL_", "CLAUDE")) or k == "OPDSL_SEAL_KEY"
    }
    env["PYTHONPATH"] = str(ROOT)
    installed = subprocess.run(
        [sys.executable, "-m", "interpreters", "mcp", "install"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    # the user answered Claude Code's trust question for the project on their first `claude`
    trusted = {"projects": {str(repo): {"hasTrustDialogAccepted": True}}}
    (home / ".claude.json").write_text(json.dumps(trusted))
    session = Session()
    with ScriptedServer([Director()] * 40) as implementor, ScriptedServer() as director:
        director.add(*[session] * 60)
        env.update(
            {
                "HOME": str(home),
                "ANTHROPIC_API_KEY": "sk-test-any",
                "ANTHROPIC_BASE_URL": director.url,
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "MCP_CONNECTION_NONBLOCKING": "0",
                "OPENAI_API_KEY": "sk-test",
                "OPENAI_BASE_URL": f"{implementor.url}/v1",
                "OPDSL_MODEL": "openai:gpt-4.1-mini",
            }
        )
        first = _claude(repo, env, "greet people by name")
        assert "Reply APPROVE to start." in first["result"], first
        second = _claude(
            repo,
            env,
            "APPROVE",
            "--resume",
            first["session_id"],
            "--permission-mode",
            "acceptEdits",
        )
    assert second["result"] == "The workflow is DONE.", (second, session.results)
    results = session.results
    assert results[0].startswith("state=DRAFT") and results[3].startswith("state=BUFFER"), results
    assert results[4].startswith("HANDOFF state=VALIDATE run=1 step=2"), results
    assert results[6].startswith("state=DONE"), results
    assert git_log(repo)[:2] == STEP_COMMITS
    assert (repo / "test_greet.py").read_text() == TEST_GREET
