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

import contextlib
import hmac
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
from interpreters.tools._mcp_version import mcp_problem
from op import ToolResult, ToolSpec

__all__ = ["SERVER", "ToolHost", "mcp_problem", "serve_tools"]

SERVER = "opdsl"
"""The MCP server's name: the CLI calls its tools ``mcp__opdsl__<tool>``."""
SHIM = Path(__file__).with_name("_mcp_shim.py")
MAX_REQUEST = 1 << 20
"""The most bytes of one call's request (its JSON line), the tool's arguments included."""
MAX_DEPTH = 64
"""How deep a request's JSON may nest (its arguments are a tool's: shallow)."""
READ_TIMEOUT = 30.0
"""Seconds a connection may take to send its whole request, and the answer to go out."""


@final
class _Frame:
    """The lines of one connection's request, read no further than asked."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def line(self, limit: int) -> bytes | None:
        """The next line (without its line break), or None if it is over ``limit`` bytes or
        the connection ends first."""
        while (end := self.buffer.find(b"\n", 0, limit + 1)) < 0:
            if len(self.buffer) > limit:
                return None
            try:
                self.buffer += await self.stream.receive(65536)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return None
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        return line


def _within_depth(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) nests at most ``limit`` deep."""
    todo = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        if children and depth > limit:
            return False
        todo.extend((child, depth + 1) for child in children)
    return True


@final
@dataclass(frozen=True, slots=True)
class ToolHost:
    """The bound tools an agent may call through opdsl, and what performs a call."""

    specs: tuple[ToolSpec, ...]
    perform: Callable[[str, Mapping[str, Any]], Awaitable[ToolResult]]


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
            try:
                reply = await _request(stream)
            except Exception as exc:  # whatever a frame does ends only its own connection
                reply = {"ok": False, "text": f"error: the call failed ({type(exc).__name__})"}
            # the caller may have gone away
            with (
                anyio.move_on_after(READ_TIMEOUT),
                contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError),
            ):
                await stream.send(json.dumps(reply).encode())

    async def _request(stream: SocketStream) -> dict[str, Any]:
        frame = _Frame(stream)
        data: bytes | None = None
        with anyio.move_on_after(READ_TIMEOUT) as reading:
            # the token first, on a line of its own: nothing else is read before it matches
            given = await frame.line(len(token))
            if given is None or not hmac.compare_digest(given, token.encode()):
                return {"ok": False, "text": "error: refused"}
            data = await frame.line(MAX_REQUEST)
        if reading.cancelled_caught:
            return {"ok": False, "text": f"error: no whole request within {READ_TIMEOUT:g}s"}
        if data is None:
            return {
                "ok": False,
                "text": f"error: the request is over {MAX_REQUEST:,} bytes or cut short",
            }
        return await _perform(data)

    async def _perform(data: bytes) -> dict[str, Any]:
        try:
            request = json.loads(data)
        except (ValueError, RecursionError):
            return {"ok": False, "text": "error: a malformed request"}
        if not isinstance(request, dict):
            return {"ok": False, "text": "error: a malformed request"}
        if not _within_depth(request, MAX_DEPTH):
            return {"ok": False, "text": f"error: the request is nested over {MAX_DEPTH} deep"}
        name, arguments = request.get("name"), request.get("arguments")
        if not isinstance(name, str):
            return {"ok": False, "text": "error: the tool's name is not a string"}
        if name not in names:
            return {"ok": False, "text": f"error: no tool named {name[:100]!r} is served here"}
        if not isinstance(arguments, dict):
            return {"ok": False, "text": f"error: the arguments of {name!r} are not an object"}
        result: ToolResult | None = None
        with anyio.move_on_after(timeout):
            result = await host.perform(name, arguments)
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
