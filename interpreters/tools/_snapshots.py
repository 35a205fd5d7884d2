"""Snapshots of the workspace as git trees, and putting them back."""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import suppress
from pathlib import Path

from interpreters.tools._commands import _Commands
from interpreters.tools._paths import (
    FORBIDDEN,
    say_once,
)

__all__ = ["_Snapshots"]


class _Snapshots(_Commands):
    # -- snapshots --------------------------------------------------------------------------

    def _index_env(self, index: str) -> dict[str, str]:
        return {"GIT_INDEX_FILE": index}

    def snapshot(self, ref: str) -> str:
        """Record the whole workspace (tracked and untracked, not ignored) as a git tree, kept
        alive by ``ref`` (under ``refs/opdsl/``), without touching the user's index, branch,
        stash or files. Returns the tree id."""
        repo = self._need_repo()
        fd, index = tempfile.mkstemp(prefix="opdsl-index-")
        os.close(fd)
        os.unlink(index)
        try:
            env = self._index_env(index)
            if repo.head.is_valid():
                repo.git.read_tree("HEAD", env=env)
            repo.git.add("-A", "--", ".", env=env)
            tree = repo.git.write_tree(env=env)
            commit = repo.git.commit_tree(
                tree,
                "-m",
                f"opdsl snapshot {ref}",
                env={
                    **env,
                    "GIT_AUTHOR_NAME": "opdsl",
                    "GIT_AUTHOR_EMAIL": "opdsl@localhost",
                    "GIT_COMMITTER_NAME": "opdsl",
                    "GIT_COMMITTER_EMAIL": "opdsl@localhost",
                },
            )
            repo.git.update_ref(f"refs/opdsl/{ref}", commit)
            return str(tree)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(index)

    def restore(self, tree: str) -> None:
        """Make the files (tracked and untracked, not ignored) those of a snapshot tree; the
        user's index, branch and ignored files are left alone."""
        repo = self._need_repo()
        wanted = set(repo.git.ls_tree("-r", "--name-only", "-z", tree).split("\x00")) - {""}
        for name in self.files():
            if name not in wanted:
                with suppress(FileNotFoundError):
                    (self.root / name).unlink()
        fd, index = tempfile.mkstemp(prefix="opdsl-index-")
        os.close(fd)
        os.unlink(index)
        try:
            env = self._index_env(index)
            repo.git.read_tree(tree, env=env)
            repo.git.checkout_index("-a", "-f", env=env)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(index)
        self._prune_empty_dirs()
        self.relock()  # the program put these files back: the locks keep them as they are now

    def save_before_restore(self, tree: str) -> str | None:
        """Before a fork puts the files of ``tree`` back: keep what is there now (the user's own
        edits and new files since the run) as a snapshot of its own, and say how to get it back.
        Returns its tree id, or None when there was nothing to keep."""
        name = f"saved/{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{time.monotonic_ns() % 1_000_000}"
        current = self.snapshot(name)
        if current == tree:
            self.drop_snapshot(name)
            return None
        say_once(
            f"opdsl: the workspace's files differed from the checkpoint; they were saved as tree "
            f"{current[:12]} (refs/opdsl/{name}); bring them back with: git -C {self.root} checkout {current} -- ."
        )
        return current

    def _prune_empty_dirs(self) -> None:
        for dirpath, dirnames, filenames in os.walk(self.root, topdown=False):
            rel = Path(dirpath).relative_to(self.root)
            if rel.parts and rel.parts[0] in FORBIDDEN:
                continue
            if dirpath != str(self.root) and not dirnames and not filenames:
                with suppress(OSError):
                    os.rmdir(dirpath)

    def snapshots(self, prefix: str = "") -> dict[str, str]:
        """Snapshot refs (under ``refs/opdsl/``) and the trees they keep."""
        repo = self.repo()
        if repo is None:
            return {}
        # git lists only the folder the prefix is in (every ref of the repository, read for
        # each run gc removes, made gc's time grow as the square of the runs)
        wanted = f"refs/opdsl/{prefix}"
        listed = repo.git.for_each_ref("--format=%(refname) %(tree)", wanted.rpartition("/")[0])
        out = {}
        for line in listed.splitlines():
            path, _, tree = line.partition(" ")
            if path.startswith(wanted) and tree:  # a ref to no commit keeps no snapshot
                out[path.removeprefix("refs/opdsl/")] = tree
        return out

    def drop_snapshots(self, prefix: str) -> int:
        """Delete the snapshot refs under ``refs/opdsl/<prefix>``; returns how many."""
        repo = self.repo()
        if repo is None:
            return 0
        names = list(self.snapshots(prefix))
        for name in names:
            repo.git.update_ref("-d", f"refs/opdsl/{name}")
        return len(names)

    def drop_snapshot(self, name: str) -> int:
        """Delete the one snapshot ref ``refs/opdsl/<name>``; returns 1, or 0 if there is none."""
        if name not in self.snapshots(name):
            return 0
        self._need_repo().git.update_ref("-d", f"refs/opdsl/{name}")
        return 1
