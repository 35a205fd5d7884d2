"""A workspace: a directory the model's tools are confined to (the rules are in ``_paths``;
the tools in ``_files``, ``_commands``, ``_git`` and ``_snapshots``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

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
        import git  # gitpython: loaded when a workspace first uses git, not before

        try:
            return ToolResult(output=self.snapshot(name))
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(f"cannot snapshot: {exc}")

    def restore_files(self, tree: str) -> ToolResult:
        """Put the workspace's files back as a snapshot tree holds them (ignored files stay)."""
        import git

        try:
            self.restore(tree)
            return ToolResult(output=f"restored {tree[:12]}")
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(f"cannot restore: {exc}")

    def lock_files(self, patterns: list[str], runner: bool = False) -> ToolResult:
        """Lock files (paths or glob patterns) against every change while locked: the file
        tools refuse them, and what a command changes among them is put back and fails the
        command. ``runner``: lock how tests run as well (pytest's configuration files,
        ``conftest.py`` files, the pytest settings of ``pyproject.toml``, ``setup.cfg`` and
        ``tox.ini``, and modules that would shadow pytest or Python's start-up hooks). What a
        program must keep as it is (tests, a plan). Locks last as long as the process; a
        program that needs them after a resume locks again."""
        bad = [p for p in patterns if not p or p.startswith("/") or ".." in p.split("/")]
        if bad:
            return _fail(f"cannot lock {bad[0]!r}: give paths inside the workspace")
        self.lock(*patterns, runner=runner)
        runs = "; how tests run" if self.runner_locked else ""
        return ToolResult(output=f"locked: {', '.join(sorted(self.locked))}{runs}")

    def unlock_files(self, patterns: list[str], runner: bool = False) -> ToolResult:
        """Unlock what ``lock_files`` locked under exactly these patterns (``runner``: and
        how tests run), for a program that moves on to new work."""
        self.unlock(*patterns, runner=runner)
        runs = "; how tests run" if self.runner_locked else ""
        return ToolResult(output=f"locked: {', '.join(sorted(self.locked)) or 'nothing'}{runs}")

    def check_locks(self) -> ToolResult:
        """Fails, naming each, when a locked file changed: what commands changed since the last
        check (already put back), and anything that differs now from when it was locked (put
        back now). A program asks after a turn whose work it is about to trust."""
        now = self.lock_state()
        late = self.put_back(self._reference, now)
        said = [*self.breaches, *([f"found changed: {', '.join(late)}"] if late else [])]
        self.breaches = []
        if said:
            return _fail("locked files were changed, and put back: " + "; ".join(said))
        return ToolResult(output=f"{len(self._reference)} locked paths as they were locked")

    def program_tools(self) -> list[BoundTool]:
        """Tools for programs rather than models: staging, committing, the branch, snapshots,
        locks, and a step's test as the program's judge."""
        fns = (
            self.git_add,
            self.git_commit,
            self.current_branch,
            self.snapshot_files,
            self.restore_files,
            self.lock_files,
            self.unlock_files,
            self.check_locks,
            self.run_test,
        )
        return [BoundTool.from_function(fn) for fn in fns]
