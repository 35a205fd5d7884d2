"""Codex (``codex exec --json``) as a backend; its cost is unknown, never zero.

The prompt is read on standard input (``codex exec ... -``), never from the command line,
where one starting with ``-`` (``--config=...``, ``--version``) would be an option and one
that is a subcommand's name (``resume``, ``review``) would run that subcommand. The values
of options are given as one argument each (``--model=M``), so none is taken for an option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, final

from interpreters.agents.kit import CliBackend, Refused, Turn, register_backend
from interpreters.tools._sandbox import sandbox_problem
from op import Agent, Usage

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


register_backend("codex", CodexBackend)
