"""Codex (``codex exec --json``) as a backend; its cost is unknown, never zero.

Given opdsl's tools (``agent("codex", prompt, tools=[...])``), Codex reaches them over MCP as
Claude Code does (:mod:`._bridge`): the one MCP server it is given, by ``-c mcp_servers=...``
(which replaces every server its own configuration names), is opdsl's. Codex cannot be told to
offer no tool of its own, and its stream has no init line listing them, so the turn fails
closed as it goes: its sandbox is ``read-only`` (its own commands cannot write), it runs in an
empty scratch folder, and the first item that is not one of opdsl's tools (a command, a file
change, another server's tool) kills it.

The prompt is read on standard input (``codex exec ... -``), never from the command line,
where one starting with ``-`` (``--config=...``, ``--version``) would be an option and one
that is a subcommand's name (``resume``, ``review``) would run that subcommand. The values
of options are given as one argument each (``--model=M``), so none is taken for an option.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, final

from interpreters.agents._bridge import SERVER, mcp_problem, serve_tools
from interpreters.agents.claude_code import private_folder
from interpreters.agents.kit import CliBackend, Refused, Session, ToolHost, Turn, register_backend
from interpreters.tools._sandbox import sandbox_problem
from op import Agent, ModelError, Usage

__all__ = ["CodexBackend"]


@final
class CodexBackend(CliBackend):
    """``codex exec --json``: one turn per exec; no cost is reported (it stays unknown)."""

    name = "codex"
    command = "codex"
    reports_cost = False  # its stream carries tokens, never money
    supports_cooperative_stop = True  # its JSON lines are item boundaries
    # codex exec has no max-turns option: opdsl counts its finished tool calls (commands,
    # file changes, MCP calls) and ends the turn after the N-th, before its next step
    cli_max_turns = False
    homes = ("HOME", "CODEX_HOME")
    home_state = (".codex/",)
    serves_tools = True  # over MCP, its own tools refused as they are used
    #: how long one served tool call may take, and how much of its answer the agent reads
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
            raise ModelError(f"the codex backend cannot be given opdsl's tools: {problem}")
        folder = private_folder()
        try:
            scratch = folder / "work"
            scratch.mkdir()
            if tools.specs:
                async with serve_tools(
                    tools, folder, timeout=self.tool_timeout, max_output=self.max_tool_output
                ) as config:
                    yield self._served(exe, effect, config["mcpServers"][SERVER], tools, folder)
            else:
                yield self._served(exe, effect, None, tools, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _served(
        self, exe: str, effect: Agent, server: dict[str, Any] | None, tools: ToolHost, folder: Path
    ) -> Session:
        """The turn's command line: opdsl's server the only one, codex's sandbox read-only."""
        o = effect.options
        cwd = folder / "work"
        argv = [exe, "exec", "--json", "--skip-git-repo-check", "--sandbox=read-only"]
        if o.get("model"):
            argv.append(f"--model={o['model']}")
        argv.append(f"--cd={cwd}")
        if server is None:
            argv += ["-c", "mcp_servers={}"]
        else:
            entry = {
                "command": server["command"],
                "args": server["args"],
                # the first request waits for it (else its tools are missing from it)
                "required": True,
                # opdsl's tools run without asking (codex exec has no one to ask), only they
                "default_tools_approval_mode": "approve",
                "enabled_tools": sorted(spec.name for spec in tools.specs),
                "startup_timeout_sec": 30,
                "tool_timeout_sec": int(self.tool_timeout) + 10,
            }
            argv += ["-c", f"mcp_servers={{{SERVER}={_toml(entry)}}}"]
        return Session(
            [*argv, *self.extra_args, "-"],
            cwd=str(cwd),
            served=frozenset(spec.name for spec in tools.specs),
            stdin=self.stdin(effect),
            private=str(folder),
        )

    def _confined(self, effect: Agent) -> bool:
        # given opdsl's tools, its own cannot write and are refused as they are used; the
        # tools' socket lives outside any folder bubblewrap would show it
        if effect.options.get("tools") is not None and effect.options.get("confine") is None:
            return False
        return super()._confined(effect)

    def endpoint(self, env: Mapping[str, str]) -> str:
        """The provider's ``base_url`` as the ``-c`` options name it, else ``OPENAI_BASE_URL``,
        else OpenAI's."""
        config = [a for i, a in enumerate(self.extra_args) if i and self.extra_args[i - 1] == "-c"]
        config += [a[len("--config=") :] for a in self.extra_args if a.startswith("--config=")]
        provider = next(
            (
                m[1]
                for c in config
                if (m := re.fullmatch(r'\s*model_provider\s*=\s*"([^"]+)"\s*', c))
            ),
            None,
        )
        if provider is not None:
            for c in config:
                if c.lstrip().startswith(f"model_providers.{provider}"):
                    found = re.search(r'base_url\s*=\s*"([^"]+)"', c)
                    if found:
                        return found[1]
        return env.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"

    def confined_by_default(self) -> bool:
        # where bubblewrap is installed, codex's own workspace-write sandbox runs commands
        # through it with a helper (codex-linux-sandbox) its npm build does not ship, and every
        # command fails; opdsl's confinement around it does the same job and works
        return sandbox_problem() is None

    def argv(self, exe: str, effect: Agent) -> list[str]:
        o = effect.options
        argv = [exe, "exec", "--json", "--skip-git-repo-check"]
        if o.get("model"):
            argv.append(f"--model={o['model']}")
        # confined by opdsl, codex's own sandbox would nest inside bubblewrap: it is the fence
        default = "danger-full-access" if self._confined(effect) else "workspace-write"
        argv.append(f"--sandbox={o.get('sandbox', default)}")
        if o.get("cwd"):
            argv.append(f"--cd={o['cwd']}")
        return [*argv, *self.extra_args, "-"]  # "-": the prompt is on standard input

    def stdin(self, effect: Agent) -> bytes:
        return effect.prompt.encode("utf-8", "replace")

    def handle(self, line: dict[str, Any], turn: Turn, effect: Agent) -> None:
        kind = line.get("type")
        if kind == "thread.started":
            turn.init_seen = True
            turn.session_id = line.get("thread_id")
            return
        if not turn.init_seen:
            raise Refused("codex acted before thread.started")
        if kind == "turn.started":
            turn.open_turn()
        elif kind in ("item.started", "item.completed"):
            item = line.get("item") or {}
            itype, iid = item.get("type"), str(item.get("id"))
            if itype == "agent_message" and kind == "item.completed":
                turn.text = item.get("text", "")
            elif turn.served is not None and itype not in _QUIET:
                _check_served_item(turn.served, item)
                turn.tool_start(iid, str(item.get("tool")), item.get("arguments"))
                if kind == "item.completed":
                    failed = item.get("status") == "failed" or item.get("error")
                    turn.tool_end(iid, not failed, _mcp_text(item))
            elif itype in ("command_execution", "mcp_tool_call", "file_change"):
                name = {"command_execution": "shell", "file_change": "edit"}.get(
                    itype, str(item.get("tool"))
                )
                turn.tool_start(
                    iid, name, item.get("command") or item.get("arguments") or item.get("changes")
                )
                if kind == "item.completed":
                    ok = item.get("status") == "completed" and item.get("exit_code", 0) is not None
                    if itype == "command_execution" and item.get("exit_code") is None:
                        return  # an abandoned command: left open, closed as unresolved at the end
                    turn.tool_end(
                        iid,
                        ok and item.get("status") != "failed",
                        str(item.get("aggregated_output") or ""),
                    )
        elif kind == "turn.completed":
            u = line.get("usage") or {}
            turn.usage_total = Usage(
                input_tokens=int(u.get("input_tokens") or 0),
                output_tokens=int(u.get("output_tokens") or 0),
                cached_tokens=int(u.get("cached_input_tokens") or 0),
            )
            turn.finished = True
            turn.close_all()
        elif kind == "turn.failed":
            turn.finished = True
            turn.error = str((line.get("error") or {}).get("message"))
            turn.close_all()


_QUIET = frozenset({"agent_message", "reasoning", "todo_list", "error"})
"""Items that are the model's own words (or codex's warnings), not a tool."""


def _check_served_item(served: frozenset[str], item: dict[str, Any]) -> None:
    """An item of a turn given opdsl's tools: only an MCP call to opdsl's server, of one of
    the tools served; anything else is :class:`Refused` (the process is killed)."""
    itype = item.get("type")
    if itype != "mcp_tool_call":
        raise Refused(f"codex used a tool of its own ({itype}); only opdsl's tools are allowed")
    if item.get("server") != SERVER:
        raise Refused(f"codex called MCP server {item.get('server')!r}, which was not allowed")
    if item.get("tool") not in served:
        raise Refused(f"codex called {item.get('tool')!r}, which opdsl does not serve")


def _mcp_text(item: dict[str, Any]) -> str:
    """What an MCP call answered: its text blocks joined, else its error."""
    result = item.get("result") or {}
    blocks = result.get("content") if isinstance(result, dict) else None
    if isinstance(blocks, list):
        return "".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))
    error = item.get("error")
    return str(error.get("message") if isinstance(error, dict) else error or "")


def _toml(value: Any) -> str:
    """``value`` (strings, numbers, lists, tables) as a TOML inline value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML form for {type(value).__name__}")


register_backend("codex", CodexBackend)
