"""A workspace: a directory the model's tools are confined to (the rules are in ``_paths``;
the tools in ``_files``, ``_commands``, ``_git`` and ``_snapshots``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

import git

from interpreters.tools._bound import BoundTool
from interpreters.tools._paths import (
    DEFAULT_ALLOW,
    FORBIDDEN,
    PASS_ENV,
    SECRET_MARKERS,
    WorkspaceError,
    _fail,
    say_once,
)
from interpreters.tools._snapshots import _Snapshots
from op import ToolResult

__all__ = [
    "DEFAULT_ALLOW",
    "FORBIDDEN",
    "PASS_ENV",
    "SECRET_MARKERS",
    "Workspace",
    "WorkspaceError",
    "say_once",
]


@final
class Workspace(_Snapshots):
    """Tools over one directory, confined to it.

    Example:
        >>> import tempfile
        >>> ws = Workspace(tempfile.mkdtemp())
        >>> sorted(t.name for t in ws.tools())[:3]
        ['delete_path', 'edit_file', 'git_diff']
    """

    # -- as tools -----------------------------------------------------------------------------

    def tools(self) -> list[BoundTool]:
        """The tools a model gets: files, search, commands and read-only git."""
        read_only = {"read_file", "list_files", "search", "git_status", "git_diff", "git_log"}
        fns: list[Callable[..., Any]] = [
            self.read_file,
            self.write_file,
            self.edit_file,
            self.list_files,
            self.search,
            self.delete_path,
            self.run,
            self.git_status,
            self.git_diff,
            self.git_log,
        ]
        return [BoundTool.from_function(fn, read_only=fn.__name__ in read_only) for fn in fns]

    def snapshot_files(self, name: str) -> ToolResult:
        """Snapshot the workspace's files under ``name``; answers the tree id."""
        try:
            return ToolResult(output=self.snapshot(name))
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(f"cannot snapshot: {exc}")

    def restore_files(self, tree: str) -> ToolResult:
        """Put the workspace's files back as a snapshot tree holds them (ignored files stay)."""
        try:
            self.restore(tree)
            return ToolResult(output=f"restored {tree[:12]}")
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(f"cannot restore: {exc}")

    def lock_files(self, patterns: list[str]) -> ToolResult:
        """Lock files (paths or glob patterns) against writes and deletes by the file tools:
        what a program must keep as it is (tests, a plan). Locks last as long as the process;
        a program that needs them after a resume locks again."""
        bad = [p for p in patterns if not p or p.startswith("/") or ".." in p.split("/")]
        if bad:
            return _fail(f"cannot lock {bad[0]!r}: give paths inside the workspace")
        self.lock(*patterns)
        return ToolResult(output=f"locked: {', '.join(sorted(self.locked))}")

    def unlock_files(self, patterns: list[str]) -> ToolResult:
        """Unlock what ``lock_files`` locked under exactly these patterns (a program that
        moves on to new work)."""
        self.unlock(*patterns)
        return ToolResult(output=f"locked: {', '.join(sorted(self.locked)) or 'nothing'}")

    def program_tools(self) -> list[BoundTool]:
        """Tools for programs rather than models: staging, committing, the branch, snapshots."""
        fns = (
            self.git_add,
            self.git_commit,
            self.current_branch,
            self.snapshot_files,
            self.restore_files,
            self.lock_files,
            self.unlock_files,
        )
        return [BoundTool.from_function(fn) for fn in fns]
