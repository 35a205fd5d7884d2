"""The MCP server an agent CLI starts to reach opdsl's tools: a stdio shim, nothing more.

It is run by file path (``python _mcp_shim.py SPEC``) so that it imports only the ``mcp``
package and the standard library. ``SPEC`` is a private JSON file (mode 0600) written by the
interpreter: the tools to list (name, description, JSON Schema), the Unix socket to forward
calls to, and a token the interpreter checks. A call is sent as two lines: the token, then
the request (``{"name": ..., "arguments": {...}}``); the answer is one JSON object. The shim performs nothing itself: every call
goes over the socket to the interpreter, which runs the bound tool with the same checks,
confinement and redaction as a call from a model, bounds its time and truncates its output.

The shim ends when its standard input closes (the CLI ended) or the interpreter stops
answering (the turn is over).
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

try:
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
except ImportError as exc:  # pragma: no cover - reported through the CLI's init line
    sys.stderr.write(f"opdsl's MCP server needs the mcp package (2.x): {exc}\n")
    raise SystemExit(3) from None

#: the longest answer the shim waits for; the interpreter bounds each tool well below it
WAIT = 3600.0


def _forward(path: str, token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(WAIT)
        conn.connect(path)
        # the token on a line of its own, first: the interpreter reads nothing else before it
        request = {"name": name, "arguments": arguments}
        conn.sendall(token.encode() + b"\n" + json.dumps(request).encode() + b"\n")
        chunks: list[bytes] = []
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    reply: dict[str, Any] = json.loads(b"".join(chunks) or b"{}")
    return reply


def main(spec_path: str) -> None:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    tools = [
        types.Tool(name=t["name"], description=t["description"], input_schema=t["schema"])
        for t in spec["tools"]
    ]
    names = {t.name for t in tools}

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in names:
            text, failed = f"no tool named {params.name!r} is served here", True
        else:
            try:
                reply = await anyio.to_thread.run_sync(
                    _forward, spec["socket"], spec["token"], params.name, params.arguments or {}
                )
                text, failed = str(reply.get("text", "")), not reply.get("ok", False)
            except (OSError, ValueError) as exc:
                text, failed = f"opdsl did not answer the call ({exc}); the turn is over", True
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=failed
        )

    server: Server[Any] = Server("opdsl", on_list_tools=list_tools, on_call_tool=call_tool)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write("usage: _mcp_shim.py SPEC\n")
        raise SystemExit(2)
    main(sys.argv[1])
