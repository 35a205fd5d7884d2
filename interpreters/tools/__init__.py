"""Tools: typed functions bound by name, the workspace (files, search, commands, git,
snapshots) confined to one folder, bubblewrap around commands, and the subprocess runner.
The workspace (and git) loads when first asked for."""

from typing import TYPE_CHECKING

from interpreters.tools._bound import BoundTool, ToolLike, ToolRegistry, quick, read_only

if TYPE_CHECKING:
    from interpreters.tools._workspace import Workspace, WorkspaceError

__all__ = [
    "BoundTool",
    "ToolLike",
    "ToolRegistry",
    "Workspace",
    "WorkspaceError",
    "quick",
    "read_only",
]


def __getattr__(name: str) -> object:
    if name in ("Workspace", "WorkspaceError"):
        from interpreters.tools import _workspace

        return getattr(_workspace, name)
    raise AttributeError(f"module 'interpreters.tools' has no attribute {name!r}")
