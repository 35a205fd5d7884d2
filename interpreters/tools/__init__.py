"""Tools: typed functions bound by name, the workspace (files, search, commands, git,
snapshots) confined to one folder, bubblewrap around commands, the subprocess runner, and
the tools of MCP servers. The workspace (and git) and the MCP client load when first asked
for."""

from typing import TYPE_CHECKING

from interpreters.tools._bound import (
    BoundTool,
    ToolLike,
    ToolRegistry,
    isolated,
    quick,
    read_only,
)

if TYPE_CHECKING:
    from interpreters.tools._mcp import MCPServer, MCPTools, listed_tools, open_mcp
    from interpreters.tools._workspace import Workspace, WorkspaceError

_MCP = ("MCPServer", "MCPTools", "listed_tools", "open_mcp")

__all__ = [
    "BoundTool",
    "MCPServer",
    "MCPTools",
    "ToolLike",
    "ToolRegistry",
    "Workspace",
    "WorkspaceError",
    "listed_tools",
    "open_mcp",
    "isolated",
    "quick",
    "read_only",
]


def __getattr__(name: str) -> object:
    if name in ("Workspace", "WorkspaceError"):
        from interpreters.tools import _workspace

        return getattr(_workspace, name)
    if name in _MCP:
        from interpreters.tools import _mcp

        return getattr(_mcp, name)
    raise AttributeError(f"module 'interpreters.tools' has no attribute {name!r}")
