"""Whether the MCP SDK opdsl needs is installed: asked both where opdsl serves its tools to an
agent's CLI and where it starts MCP servers of its own."""

from __future__ import annotations

import functools
import importlib.metadata

__all__ = ["mcp_problem"]


@functools.cache
def mcp_problem() -> str | None:
    """Why opdsl cannot use MCP here (serve its tools, or start MCP servers), or None."""
    try:
        version = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        return "the mcp package is not installed (pip install 'opdsl[mcp]')"
    if int(version.split(".", 1)[0]) < 2:
        return f"mcp {version} is installed; opdsl's MCP support needs mcp 2.x (pip install 'mcp>=2,<3')"
    return None
