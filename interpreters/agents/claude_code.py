"""Claude Code headless (``claude -p --output-format stream-json --verbose``) as a backend.

Given opdsl's tools (``agent("claude-code", prompt, tools=[...])``), Claude Code runs with no
tool of its own: its only tools are those opdsl serves it over MCP (:mod:`._bridge`), and
everything around it is pinned down, because a headless Claude Code otherwise trusts more
than it should:

- it runs in an empty scratch folder with a private ``HOME`` (its settings, hooks,
  ``CLAUDE.md`` and ``.mcp.json`` are read from the working folder and home, and it writes its
  sessions and logs there), with ``--setting-sources ""`` and ``--strict-mcp-config``;
- ``--tools ""`` turns every built-in tool off, ``--allowedTools`` names exactly the served
  ones (without it, ``-p`` mode denies MCP calls and still reports success), and
  ``--permission-mode dontAsk`` denies anything else;
- the first request waits for the MCP server (``MCP_CONNECTION_NONBLOCKING=0`` and
  ``alwaysLoad``), and the init line is checked before the agent acts: exactly the served
  tools, the one server ``connected``, the model asked for; anything else kills it;
- a final ``success`` is not taken at its word: denied calls (``permission_denials``) fail
  the turn;
- the prompt is read on standard input, never from the command line (where one starting with
  ``-``, such as ``--settings={"hooks": ...}``, would be an option, and options that take lists
  swallow a prompt after them);
- the process group is killed at the end, so the MCP server it started goes with it, and
  when opdsl itself ends (SIGTERM, SIGKILL), so is the group and the turn's private folder is
  removed (:mod:`._lifeline`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, final

from interpreters.agents._bridge import SERVER, mcp_problem, serve_tools
from interpreters.agents.kit import (
    CliBackend,
    Refused,
    Session,
    ToolHost,
    Turn,
    check_init,
    register_backend,
)
from interpreters.models._usage import anthropic_usage
from op import Agent, ModelError

PREFIX = f"mcp__{SERVER}__"

__all__ = ["ClaudeCodeBackend"]


@final
class ClaudeCodeBackend(CliBackend):
    """``claude -p --output-format stream-json --verbose``."""

    name = "claude-code"
    command = "claude"
    homes = ("HOME", "CLAUDE_CONFIG_DIR")
    home_state = (".claude/", ".claude.json")
    serves_tools = True
    supports_cooperative_stop = True  # its stream-json lines are message boundaries
    cli_max_turns = True  # --max-turns; running out ends with subtype error_max_turns
    #: how long one served tool call may take, and how much of its answer the agent reads
    #: (Claude Code replaces a longer answer by a file path it cannot open without tools)
    tool_timeout: float = 600.0
    max_tool_output: int = 30_000

    @asynccontextmanager
    async def session(
        self, exe: str, effect: Agent, tools: ToolHost | None
    ) -> AsyncIterator[Session]:
        if tools is None:
            async with super().session(exe, effect, None) as plain:
                yield plain
            return
        problem = mcp_problem() if tools.specs else None
        if problem is not None:
            raise ModelError(f"the claude-code backend cannot be given opdsl's tools: {problem}")
        folder = private_folder()
        try:
            home, scratch = folder / "home", folder / "work"
            home.mkdir()
            scratch.mkdir()
            env = {**os.environ, **self.env}
            _carry_login(home, env.get("CLAUDE_CONFIG_DIR"), env.get("HOME"))
            async with self._serving(tools, folder) as config:
                served = [PREFIX + spec.name for spec in tools.specs]
                yield Session(
                    self.served_argv(exe, effect, config, served),
                    env={
                        "HOME": str(home),
                        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
                        "MCP_CONNECTION_NONBLOCKING": "0",
                        "MCP_CONNECT_TIMEOUT_MS": "20000",
                        "MCP_TOOL_TIMEOUT": str(int(self.tool_timeout * 1000) + 10_000),
                        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    },
                    cwd=str(scratch),
                    served=frozenset(spec.name for spec in tools.specs),
                    stdin=self.stdin(effect),
                    private=str(folder),
                )
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    @asynccontextmanager
    async def _serving(self, tools: ToolHost, folder: Path) -> AsyncIterator[dict[str, Any]]:
        if not tools.specs:  # no tool at all: no MCP server either
            yield {"mcpServers": {}}
            return
        async with serve_tools(
            tools, folder, timeout=self.tool_timeout, max_output=self.max_tool_output
        ) as config:
            yield config

    def served_argv(
        self, exe: str, effect: Agent, config: dict[str, Any], served: list[str]
    ) -> list[str]:
        """The command line of a turn whose only tools are ``served`` (MCP names)."""
        o = effect.options
        argv = [exe, "-p", "--output-format", "stream-json", "--verbose"]
        argv += ["--mcp-config", json.dumps(config), "--strict-mcp-config"]
        argv += ["--tools", ""]
        if served:
            argv += ["--allowedTools", ",".join(served)]
        argv += ["--permission-mode", "dontAsk", "--setting-sources", ""]
        argv += ["--no-session-persistence", "--max-turns", str(int(o.get("max_turns") or 30))]
        if o.get("model"):
            argv += ["--model", str(o["model"])]
        if o.get("system_prompt"):
            argv += ["--system-prompt", str(o["system_prompt"])]
        return [*argv, *self.extra_args]

    def endpoint(self, env: Mapping[str, str]) -> str:
        return env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"

    def stdin(self, effect: Agent) -> bytes:
        """The prompt: ``-p`` with no prompt argument reads it on standard input."""
        return effect.prompt.encode("utf-8", "replace")

    def argv(self, exe: str, effect: Agent) -> list[str]:
        o = effect.options
        argv = [exe, "-p", "--output-format", "stream-json", "--verbose"]
        if o.get("model"):
            argv += ["--model", str(o["model"])]
        if o.get("max_turns"):
            argv += ["--max-turns", str(int(o["max_turns"]))]
        if o.get("allowed_tools") is not None:
            allowed = [str(t) for t in o["allowed_tools"]]
            # --tools sets which tools exist at all; --allowedTools which run without asking
            base = sorted({t.split("(", 1)[0] for t in allowed})
            argv += ["--tools", ",".join(base), "--allowedTools", ",".join(allowed)]
        if o.get("mcp_config"):
            argv += [
                "--mcp-config",
                json.dumps(o["mcp_config"])
                if not isinstance(o["mcp_config"], str)
                else o["mcp_config"],
                "--strict-mcp-config",
            ]
        if o.get("resume"):
            argv.append(
                f"--resume={o['resume']}"
            )  # one token: a value starting with '-' stays a value
        if o.get("permission_mode"):
            argv += ["--permission-mode", str(o["permission_mode"])]
        return [*argv, *self.extra_args]

    def handle(self, line: dict[str, Any], turn: Turn, effect: Agent) -> None:
        kind = line.get("type")
        if not turn.session_id and kind != "system" and not turn.init_seen:
            raise Refused("claude-code acted before its init line")
        if kind == "system" and line.get("subtype") == "init":
            turn.init_seen = True
            turn.session_id = line.get("session_id")
            if isinstance(line.get("model"), str):
                turn.model = line["model"]
            tools = [str(t) for t in line.get("tools") or []]
            servers = line.get("mcp_servers") or []
            if turn.served is not None:
                _check_served(turn.served, tools, servers)
                tools, servers = [], []  # checked: exactly opdsl's
            check_init(self.name, effect, line.get("model"), tools, servers)
        elif kind == "assistant":
            message = line.get("message") or {}
            turn.open_turn()
            mid = str(message.get("id") or turn.turns)
            u = message.get("usage") or {}
            prev = turn.usage_by_id.get(mid)
            out_tokens = max(int(u.get("output_tokens") or 0), prev.output_tokens if prev else 0)
            turn.usage_by_id[mid] = anthropic_usage(u).model_copy(
                update={"output_tokens": out_tokens}
            )
            for block in message.get("content") or []:
                if block.get("type") == "text":
                    turn.text = block.get("text", "")
                elif block.get("type") == "tool_use":
                    name = str(block.get("name"))
                    if turn.served is not None and name.startswith(PREFIX):
                        name = name[len(PREFIX) :]  # opdsl's own tool, by its own name
                    turn.tool_start(str(block.get("id")), name, block.get("input"))
        elif kind == "user":
            for block in (line.get("message") or {}).get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    content = block.get("content")
                    text = content if isinstance(content, str) else _text_of(content)
                    turn.tool_end(str(block.get("tool_use_id")), not block.get("is_error"), text)
            turn.close_turn()
        elif kind == "result":
            turn.finished = True
            turn.close_all()
            if isinstance(line.get("result"), str):
                turn.text = line["result"]
            turn.cost = line.get("total_cost_usd")
            u = line.get("usage") or {}
            if u:
                turn.usage_total = anthropic_usage(u)
            if line.get("num_turns"):
                turn.turns = max(turn.turns, int(line["num_turns"]))
            if line.get("subtype") == "error_max_turns":
                turn.max_turns_exhausted = True  # it stopped where it was told to: not a failure
            elif line.get("is_error") or line.get("subtype") != "success":
                turn.error = f"{line.get('subtype')}: {line.get('result') or line.get('errors') or ''}".strip()
            elif line.get("permission_denials"):
                denied = sorted({str(d.get("tool_name")) for d in line["permission_denials"]})
                turn.error = f"claude-code was denied tool calls: {', '.join(denied)}"


def _check_served(served: frozenset[str], offered: list[str], servers: list[Any]) -> None:
    """The init of a turn with opdsl's tools: exactly those, from the one server, connected."""
    if served and not servers:
        raise Refused("claude-code started without opdsl's MCP server")
    for server in servers:
        name = server.get("name") if isinstance(server, dict) else str(server)
        status = server.get("status") if isinstance(server, dict) else None
        if name != SERVER:
            raise Refused(f"claude-code connected MCP server {name!r}, which was not allowed")
        if status != "connected":
            raise Refused(
                f"opdsl's MCP server is {status!r}, not connected, as claude-code starts: its "
                "tools would be missing from the first request"
            )
    extra = sorted(t for t in offered if not t.startswith(PREFIX) or t[len(PREFIX) :] not in served)
    if extra:
        raise Refused(f"claude-code offers tools that opdsl does not serve: {', '.join(extra)}")
    missing = sorted(served - {t[len(PREFIX) :] for t in offered})
    if missing:
        raise Refused(f"claude-code does not offer opdsl's tools {', '.join(missing)}")


def _text_of(content: Any) -> str:
    """A tool result's content blocks as text: their texts joined, else the JSON."""
    if isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") == "text" for b in content
    ):
        return "".join(str(b.get("text", "")) for b in content)
    return json.dumps(content)


def private_folder() -> Path:
    """A fresh private folder (mode 0700) for one turn, short enough for the Unix socket it
    holds: a socket's path is at most 104 bytes on macOS and 108 on Linux, so a long temporary
    folder (``$TMPDIR``) gives way to /tmp."""
    folder = Path(tempfile.mkdtemp(prefix="opdsl-claude-"))
    if len(str(folder)) > 80:
        folder.rmdir()
        folder = Path(tempfile.mkdtemp(prefix="opdsl-claude-", dir="/tmp"))
    return folder


def _carry_login(home: Path, config_dir: str | None, real_home: str | None) -> None:
    """A user logged in to Claude Code (no API key) keeps that login in a private home: its
    credentials file, from ``CLAUDE_CONFIG_DIR`` or ``~/.claude``, and nothing else."""
    for folder in (config_dir, real_home and str(Path(real_home) / ".claude")):
        credentials = Path(folder) / ".credentials.json" if folder else None
        if credentials is not None and credentials.is_file():
            (home / ".claude").mkdir(mode=0o700, exist_ok=True)
            shutil.copy2(credentials, home / ".claude" / ".credentials.json")
            return


register_backend("claude-code", ClaudeCodeBackend)
