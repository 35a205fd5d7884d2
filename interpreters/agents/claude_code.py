"""Claude Code headless (``claude -p --output-format stream-json --verbose``) as a backend."""

from __future__ import annotations

import json
from typing import Any, final

from interpreters.agents._base import CliBackend, _check_init, _Refused, _Turn, register_backend
from interpreters.models._usage import anthropic_usage
from op import Agent

__all__ = ["ClaudeCodeBackend"]


@final
class ClaudeCodeBackend(CliBackend):
    """``claude -p --output-format stream-json --verbose``."""

    name = "claude-code"
    command = "claude"
    homes = ("HOME", "CLAUDE_CONFIG_DIR")

    def argv(self, exe: str, effect: Agent) -> list[str]:
        o = effect.options
        argv = [exe, "-p", effect.prompt, "--output-format", "stream-json", "--verbose"]
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

    def handle(self, line: dict[str, Any], turn: _Turn, effect: Agent) -> None:
        kind = line.get("type")
        if not turn.session_id and kind != "system" and "init_seen" not in turn.__dict__:
            raise _Refused("claude-code acted before its init line")
        if kind == "system" and line.get("subtype") == "init":
            turn.__dict__["init_seen"] = True
            turn.session_id = line.get("session_id")
            _check_init(
                self.name,
                effect,
                line.get("model"),
                [str(t) for t in line.get("tools") or []],
                line.get("mcp_servers") or [],
            )
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
                    turn.tool_start(
                        str(block.get("id")), str(block.get("name")), block.get("input")
                    )
        elif kind == "user":
            for block in (line.get("message") or {}).get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    content = block.get("content")
                    text = content if isinstance(content, str) else json.dumps(content)
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
            if line.get("is_error") or line.get("subtype") != "success":
                turn.error = f"{line.get('subtype')}: {line.get('result') or line.get('errors') or ''}".strip()


register_backend("claude-code", ClaudeCodeBackend)
