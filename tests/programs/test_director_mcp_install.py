"""``opdsl mcp install`` and ``uninstall`` in a project, run as the user runs them: what is
written is listed, merged into Claude Code's own files beside what the user has there, the
same twice over, printed and not written with ``--dry-run``, and taken out exactly again; the
SessionStart hook it installs says when a workflow is in progress."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.programs.test_director import _repo

ROOT = Path(__file__).resolve().parents[2]

WRITTEN = [
    ".claude/agents/drafter.md",
    ".claude/agents/unblocker.md",
    ".claude/agents/validator.md",
    ".claude/commands/agent.md",
    ".claude/settings.json",
    ".mcp.json",
    ".opdsl/mcp-install.json",
]


def opdsl(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "interpreters", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )


def files(project: Path) -> list[str]:
    return sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())


def test_install_merges_lists_and_uninstall_takes_exactly_that_out(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    mine = {"permissions": {"allow": ["Bash(ls:*)"]}, "model": "opus"}
    (project / ".claude" / "settings.json").write_text(json.dumps(mine))

    dry = opdsl(project, "mcp", "install", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert files(project) == [".claude/settings.json"]  # nothing written
    assert json.loads((project / ".claude" / "settings.json").read_text()) == mine
    assert sorted(
        line.split()[2][:-1] for line in dry.stdout.splitlines() if line.startswith("would write")
    ) == sorted(str(project / f) for f in WRITTEN)

    for _ in range(2):  # twice: the same files, nothing added twice
        done = opdsl(project, "mcp", "install")
        assert done.returncode == 0, done.stderr
        assert sorted(line.split()[1] for line in done.stdout.splitlines()) == sorted(
            str(project / f) for f in WRITTEN
        )
    assert files(project) == WRITTEN
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    tools = ["fsm_status", "fsm_to", "run_implementor", "handoff_draft", "handoff_verdict"]
    assert settings["permissions"]["allow"][0] == "Bash(ls:*)" and settings["model"] == "opus"
    for tool in tools:
        assert settings["permissions"]["allow"].count(f"mcp__opdsl-director__{tool}") == 1
    assert settings["env"]["MCP_TOOL_TIMEOUT"] == "14400000"
    assert settings["enabledMcpjsonServers"] == ["opdsl-director"]
    assert len(settings["hooks"]["SessionStart"]) == 1
    server = json.loads((project / ".mcp.json").read_text())["mcpServers"]["opdsl-director"]
    assert server["args"] == ["-m", "interpreters", "mcp", "director"]
    assert "opdsl-director" in (project / ".claude" / "commands" / "agent.md").read_text()

    # the hook: silent with no workflow, one line with one in progress
    hook = settings["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    quiet = subprocess.run(shlex.split(hook), cwd=project, env=env, capture_output=True, text=True)
    assert quiet.returncode == 0 and quiet.stdout == ""
    (project / ".opdsl").mkdir(exist_ok=True)
    named = {"run_id": "abc123", "implementor": "claude-code:haiku"}
    (project / ".opdsl" / "director.json").write_text(json.dumps(named))
    told = subprocess.run(shlex.split(hook), cwd=project, env=env, capture_output=True, text=True)
    assert "in progress here (run abc123, implementor claude-code:haiku)" in told.stdout

    # a prompt the user changed is left; everything else opdsl wrote goes
    validator = project / ".claude" / "agents" / "validator.md"
    validator.write_text(validator.read_text() + "Be strict.\n")
    gone = opdsl(project, "mcp", "uninstall")
    assert gone.returncode == 0, gone.stderr
    assert f"left {validator}: it was changed since opdsl wrote it" in gone.stdout
    assert files(project) == [
        ".claude/agents/validator.md",
        ".claude/settings.json",
        ".opdsl/director.json",
    ]
    assert json.loads((project / ".claude" / "settings.json").read_text()) == mine


def test_install_refuses_to_overwrite_a_file_that_is_not_its_own(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".claude" / "commands").mkdir(parents=True)
    (project / ".claude" / "commands" / "agent.md").write_text("my own /agent\n")
    refused = opdsl(project, "mcp", "install")
    assert refused.returncode == 2
    assert "agent.md exists and is not opdsl's; nothing was written" in refused.stderr
    assert files(project) == [".claude/commands/agent.md"]
    (project / ".mcp.json").write_text("{broken")
    (project / ".claude" / "commands" / "agent.md").unlink()
    refused = opdsl(project, "mcp", "install")
    assert refused.returncode == 2 and ".mcp.json is not JSON" in refused.stderr
    assert files(project) == [".mcp.json"]


def _served_status(project: Path, server: dict[str, Any]) -> str:
    """Start the server ``.mcp.json`` records, as Claude Code starts it (a subprocess on
    stdio, in the project), and answer its ``fsm_status``."""
    pytest.importorskip("mcp")
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OPDSL_") or k == "OPDSL_SEAL_KEY"
    }
    env["PYTHONPATH"] = str(ROOT)
    # the workflow starting asks the claude-code backend its --version, and no more
    bin_dir = project.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "claude").write_text('#!/bin/sh\necho 2.0.0 "(Claude Code)"\n')
    (bin_dir / "claude").chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    params = StdioServerParameters(
        command=server["command"], args=server["args"], env=env, cwd=str(project)
    )

    async def status() -> str:
        async with Client(stdio_client(params), mode="legacy", cache=None) as client:
            result = await client.call_tool("fsm_status", {})
            return "".join(getattr(b, "text", "") for b in result.content)

    return anyio.run(status)


def test_the_implementor_model_and_mode_installed_are_the_served_directors(
    tmp_path: Path,
) -> None:
    project = _repo(tmp_path)
    refused = opdsl(project, "mcp", "install", "--implementor", "codex")
    assert refused.returncode == 2
    assert "--implementor 'codex' is not a backend (model, claude-code)" in refused.stderr
    assert not (project / ".mcp.json").exists() and not (project / ".claude").exists()
    chosen = ("--implementor", "claude-code", "--model", "haiku", "--mode", "direct")
    done = opdsl(project, "mcp", "install", *chosen)
    assert done.returncode == 0, done.stderr
    server = json.loads((project / ".mcp.json").read_text())["mcpServers"]["opdsl-director"]
    assert server["args"] == ["-m", "interpreters", "mcp", "director", *chosen]
    said = _served_status(project, server)
    assert "implementor=claude-code:haiku" in said and "mode=direct" in said, said

    # installed again without them: the defaults, the options not left behind
    (project / ".opdsl" / "director.json").unlink()
    again = opdsl(project, "mcp", "install")
    assert again.returncode == 0, again.stderr
    server = json.loads((project / ".mcp.json").read_text())["mcpServers"]["opdsl-director"]
    assert server["args"] == ["-m", "interpreters", "mcp", "director"]
    said = _served_status(project, server)
    assert "implementor=model:default" in said and "mode=progressive" in said, said
    gone = opdsl(project, "mcp", "uninstall")
    assert gone.returncode == 0, gone.stderr
    assert not (project / ".mcp.json").exists()


def test_the_session_start_hook_runs_the_python_it_names_from_any_folder(
    tmp_path: Path,
) -> None:
    # a project, its Python inside it, in a folder a shell would split and expand
    project = tmp_path / "my $HOME; touch pwned"
    venv = project / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    if sys.prefix != sys.base_prefix:  # opdsl's own venv: its packages, its config
        (venv / "lib").symlink_to(Path(sys.prefix) / "lib")
        (venv / "pyvenv.cfg").write_text((Path(sys.prefix) / "pyvenv.cfg").read_text())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def opdsl_mcp(command: str) -> None:  # with the venv's Python, as the hook names it
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "interpreters", "mcp", command],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr

    opdsl_mcp("install")
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    hook = settings["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    before = files(project)
    # Claude Code runs a hook's command with a shell
    (project / ".opdsl").mkdir(exist_ok=True)
    named = {"run_id": "abc123", "implementor": "model:default"}
    (project / ".opdsl" / "director.json").write_text(json.dumps(named))
    told = subprocess.run(["sh", "-c", hook], cwd=project, env=env, capture_output=True, text=True)
    assert told.returncode == 0, told.stderr
    assert "in progress here (run abc123, implementor model:default)" in told.stdout
    assert files(project) == sorted([*before, ".opdsl/director.json"])  # nothing else ran
    opdsl_mcp("uninstall")
    assert [f for f in files(project) if not f.startswith(".venv/")] == [".opdsl/director.json"]


def test_install_keeps_the_users_own_settings_and_uninstall_takes_out_only_its_own(
    tmp_path: Path,
) -> None:
    ours = "14400000"
    for theirs in ("60000", ours):  # their own timeout: shorter, or the same as opdsl's
        project = tmp_path / f"project-{theirs}"
        (project / ".claude").mkdir(parents=True)
        mine = {
            "env": {"MCP_TOOL_TIMEOUT": theirs, "FOO": "bar"},
            "permissions": {"allow": ["Bash(ls:*)", "mcp__opdsl-director__fsm_status"]},
            "model": "opus",
        }
        text = json.dumps(mine, indent=2) + "\n"
        (project / ".claude" / "settings.json").write_text(text)
        for _ in range(2):
            done = opdsl(project, "mcp", "install")
            assert done.returncode == 0, done.stderr
        settings = json.loads((project / ".claude" / "settings.json").read_text())
        assert settings["env"] == {"MCP_TOOL_TIMEOUT": theirs, "FOO": "bar"}
        assert settings["permissions"]["allow"].count("mcp__opdsl-director__fsm_status") == 1
        gone = opdsl(project, "mcp", "uninstall")
        assert gone.returncode == 0, gone.stderr
        assert (project / ".claude" / "settings.json").read_text() == text, theirs

    # none of their own: install sets it, uninstall takes it out and leaves theirs
    project = tmp_path / "project-none"
    (project / ".claude").mkdir(parents=True)
    text = json.dumps({"env": {"FOO": "bar"}, "model": "opus"}, indent=2) + "\n"
    (project / ".claude" / "settings.json").write_text(text)
    assert opdsl(project, "mcp", "install").returncode == 0
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings["env"] == {"FOO": "bar", "MCP_TOOL_TIMEOUT": ours}
    assert opdsl(project, "mcp", "uninstall").returncode == 0
    assert (project / ".claude" / "settings.json").read_text() == text
