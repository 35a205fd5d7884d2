"""The workspace's git tools (through gitpython, never a shell string)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from interpreters.tools._paths import (
    WorkspaceError,
    _fail,
    _Paths,
)
from interpreters.tools._sandbox import UNGUARDED
from op import ToolResult

if TYPE_CHECKING:
    import git

__all__ = ["_Git"]


_SAFE_GIT = [
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "diff.external=",
    "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false",
    "submodule.recurse=false",
    "gc.auto=0",
]
"""What every git command opdsl runs outside the sandbox is given (``-c``, over any config):
nothing a repository's config names is run (an fsmonitor, hooks, an external diff, an
automatic gc's), and no repository nested in the workspace is looked into (a command a model
ran may have made one, with a config of its own; ``-c`` reaches git's own child processes)."""

_GITLINK = "160000"


class _Git(_Paths):
    # -- git --------------------------------------------------------------------------------

    def repo(self) -> git.Repo | None:
        import git  # gitpython: loaded when a workspace first uses git, not before

        if self._unguarded_git():
            return None
        try:
            repo = git.Repo(self.root)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            return None
        if Path(repo.working_tree_dir or "").resolve() != self.root:
            return None
        repo.git.set_persistent_git_options(c=_SAFE_GIT)
        return repo

    def _unguarded_git(self) -> bool:
        """Whether the workspace's ``.git`` may be a command's: a confined command ran here
        while there was none to keep read-only, and there is one now."""
        return self.root in UNGUARDED and (self.root / ".git").exists()

    def _need_repo(self) -> git.Repo:
        repo = self.repo()
        if repo is None:
            if self._unguarded_git():
                raise WorkspaceError(
                    f"{self.root}/.git was made while commands ran here (there was none when "
                    "they began, so none was kept read-only): opdsl runs no git in it, as its "
                    "config and hooks may be a command's"
                )
            raise WorkspaceError(f"{self.root} is not the root of a git repository")
        return repo

    def git_status(self) -> ToolResult:
        """The git status of the workspace (short form)."""
        import git

        try:
            return ToolResult(
                output=self._need_repo().git.status(
                    "--short", "--branch", "--ignore-submodules=all"
                )
                or "(clean)"
            )
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(str(exc))

    def git_diff(self, staged: bool = False, path: str | None = None) -> ToolResult:
        """The diff of the working tree (or of what is staged)."""
        import git

        try:
            repo = self._need_repo()
            args = ["--no-ext-diff", "--no-textconv", "--ignore-submodules=all"]
            args += ["--cached"] if staged else []
            if path:
                args += ["--", self.relative(self.resolve(path))]
            return ToolResult(output=self._cap(repo.git.diff(*args)) or "(no changes)")
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(str(exc))

    def git_log(self, n: int = 10) -> ToolResult:
        """The last commits, one a line."""
        import git

        try:
            repo = self._need_repo()
            if not repo.head.is_valid():
                return ToolResult(output="(no commits yet)")
            return ToolResult(output=repo.git.log(f"-{max(1, min(n, 200))}", "--oneline"))
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(str(exc))

    def git_add(self, paths: list[str] | None = None) -> ToolResult:
        """Stage files (all changes when no paths are given)."""
        import git

        try:
            repo = self._need_repo()
            if paths:
                rels = [self.relative(self.resolve(p)) for p in paths]
                repo.git.add("--", *rels)
            else:
                repo.git.add("-A")
            left = self._unstage_nested(repo)
            status = repo.git.status("--short", "--ignore-submodules=all") or "(nothing to stage)"
            if left:
                status += (
                    "\n[not staged: " + ", ".join(left) + ": a git repository inside the "
                    "workspace, which opdsl does not commit]"
                )
            return ToolResult(output=status)
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(str(exc))

    def _unstage_nested(self, repo: git.Repo) -> list[str]:
        """Take back what was just staged as a repository nested in the workspace (a gitlink
        HEAD does not have): a command may have made it, with a config that runs code
        wherever git looks into it. The paths taken back."""
        staged = repo.git.ls_files("--stage", "-z").split("\x00")
        links = {e.split("\t", 1)[1] for e in staged if e.startswith(_GITLINK + " ")}
        if not links:
            return []
        known = set()
        if repo.head.is_valid():
            tree = repo.git.ls_tree("-r", "-z", "HEAD").split("\x00")
            known = {e.split("\t", 1)[1] for e in tree if e.startswith(_GITLINK + " ")}
        new = sorted(links - known)
        if new:
            repo.git.rm("--cached", "-f", "-q", "--", *new)  # the index only, never the files
        return new

    def git_commit(self, message: str, author: str = "") -> ToolResult:
        """Commit what is staged with ``message`` exactly as given; hooks off, unsigned.
        ``author``: ``Name <email>`` (default: the workspace's author)."""
        import git

        if not message.strip():
            return _fail("a commit message is needed")
        name, email = self.author
        if author:
            found = re.fullmatch(r"\s*([^<>]+?)\s*<([^<>\s]+@[^<>\s]+)>\s*", author)
            if found is None:
                return _fail(f"author {author!r} should look like Name <email@host>")
            name, email = found.group(1), found.group(2)
        try:
            repo = self._need_repo()
            env = {
                "GIT_AUTHOR_NAME": name,
                "GIT_AUTHOR_EMAIL": email,
                "GIT_COMMITTER_NAME": name,
                "GIT_COMMITTER_EMAIL": email,
            }
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", delete=False, suffix=".msg"
            ) as f:
                f.write(message)
            try:
                # -c options go before the subcommand: hooks off (whatever the repository's
                # config says), never signed
                git_ = repo.git(c=["core.hooksPath=/dev/null", "commit.gpgsign=false"])
                git_.commit(
                    "--file", f.name, "--cleanup=verbatim", "--no-verify", "--no-gpg-sign", env=env
                )
            finally:
                os.unlink(f.name)
            return ToolResult(output=repo.head.commit.hexsha)
        except git.GitCommandError as exc:
            return ToolResult.failure(
                f"commit failed: {(exc.stderr or exc.stdout or str(exc)).strip()[:500]}"
            )
        except WorkspaceError as exc:
            return _fail(str(exc))

    def current_branch(self) -> ToolResult:
        """The checked-out branch (or the commit, when detached)."""
        try:
            repo = self._need_repo()
            if repo.head.is_detached:
                return ToolResult(output=repo.head.commit.hexsha)
            return ToolResult(output=repo.active_branch.name)
        except (WorkspaceError, TypeError) as exc:
            return _fail(str(exc))

    def _cap(self, text: str) -> str:
        if len(text) > self.max_output:
            return (
                text[: self.max_output]
                + f"\n[output cut: {len(text) - self.max_output:,} more characters]"
            )
        return text
