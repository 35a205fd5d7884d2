"""opdsl's bound tools served to an agent CLI over MCP.

A program asks for it with ``agent("claude-code", prompt, tools=["read_file", ...])``. The
interpreter then starts, for that one turn, a Unix socket in a private folder and hands the
CLI an MCP configuration whose only server is :mod:`interpreters.agents._mcp_shim`, a stdio
shim that lists the tools and forwards each call here. Here the call is performed by the
bound tool itself (:class:`ToolHost`): the same argument checks, workspace confinement,
command allowlist and scrubbed environment as a call from the run's model. Each call is
bounded in time, its answer is redacted and truncated, and when the turn ends the socket
closes, so a shim the CLI left behind can do nothing more.
"""

from __future__ import annotations

import functools
import hmac
import importlib.metadata
import json
import os
import secrets
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, final

import anyio
from anyio.abc import SocketStream

from interpreters.runtime import Redactor
from op import ToolResult, ToolSpec

__all__ = ["SERVER", "ToolHost", "mcp_problem", "serve_tools"]

SERVER = "opdsl"
"""The MCP server's name: the CLI calls its tools ``mcp__opdsl__<tool>``."""
SHIM = Path(__file__).with_name("_mcp_shim.py")
MAX_REQUEST = 1 << 20


@final
@dataclass(frozen=True, slots=True)
class ToolHost:
    """The bound tools an agent may call through opdsl, and what performs a call."""

    specs: tuple[ToolSpec, ...]
    perform: Callable[[str, Mapping[str, Any]], Awaitable[ToolResult]]


@functools.cache
def mcp_problem() -> str | None:
    """Why opdsl cannot serve tools over MCP here, or None."""
    try:
        version = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        return "the mcp package is not installed (pip install 'opdsl[mcp]')"
    if int(version.split(".", 1)[0]) < 2:
        return f"mcp {version} is installed; opdsl's MCP server needs mcp 2.x (pip install 'mcp>=2,<3')"
    return None


def render(result: ToolResult, limit: int) -> str:
    """What the agent reads of a tool's result: its output, or its error, cut at ``limit``."""
    text = result.output if result.ok else f"error: {result.error}"
    if len(text) > limit:
        text = text[:limit] + f"\n[... {len(text) - limit} more characters cut by opdsl]"
    return text


@asynccontextmanager
async def serve_tools(
    host: ToolHost,
    folder: Path,
    *,
    timeout: float,
    max_output: int,
    redactor: Redactor | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Serve ``host``'s tools from ``folder`` (private, mode 0700) while the block runs;
    yields the MCP configuration to give the CLI (``--mcp-config``)."""
    clean = redactor if redactor is not None else Redactor.from_env()
    names = {spec.name for spec in host.specs}
    token = secrets.token_hex(16)
    sock = folder / "tools.sock"
    spec_file = folder / "tools.json"
    spec = {
        "socket": str(sock),
        "token": token,
        "tools": [
            {
                "name": s.name,
                "description": s.description,
                "schema": s.parameters or {"type": "object", "properties": {}},
            }
            for s in host.specs
        ],
    }
    fd = os.open(spec_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(spec, f)

    async def answer(stream: SocketStream) -> None:
        async with stream:
            data = b""
            with anyio.move_on_after(30):
                while b"\n" not in data and len(data) <= MAX_REQUEST:
                    try:
                        data += await stream.receive(65536)
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        break
            reply = await _perform(data)
            with anyio.move_on_after(30):
                await stream.send(json.dumps(reply).encode())

    async def _perform(data: bytes) -> dict[str, Any]:
        try:
            request = json.loads(data.split(b"\n", 1)[0])
            assert isinstance(request, dict)
        except (ValueError, AssertionError):
            return {"ok": False, "text": "error: a malformed request"}
        if not hmac.compare_digest(str(request.get("token", "")), token):
            return {"ok": False, "text": "error: refused"}
        name, arguments = request.get("name"), request.get("arguments")
        if name not in names:
            return {"ok": False, "text": f"error: no tool named {name!r} is served here"}
        if not isinstance(arguments, dict):
            return {"ok": False, "text": f"error: the arguments of {name!r} are not an object"}
        result: ToolResult | None = None
        with anyio.move_on_after(timeout):
            result = await host.perform(str(name), arguments)
        if result is None:
            result = ToolResult.failure(
                f"the tool took longer than {timeout:g}s and was stopped; try something smaller"
            )
        return {"ok": result.ok, "text": clean(render(result, max_output))}

    listener = await anyio.create_unix_listener(sock)
    os.chmod(sock, 0o600)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, answer)
        try:
            yield {
                "mcpServers": {
                    SERVER: {
                        "type": "stdio",
                        "command": sys.executable,
                        "args": ["-I", str(SHIM), str(spec_file)],
                        # connect before the first request (not lazily, as -p mode does)
                        "alwaysLoad": True,
                        "timeout": int(timeout * 1000) + 10_000,
                    }
                }
            }
        finally:
            tg.cancel_scope.cancel()
    await listener.aclose()
