"""A workspace: a directory the model's tools are confined to, with git through gitpython.

Confinement rules (every tool goes through :meth:`Workspace.resolve` and :meth:`Workspace.open`):

- a path is relative to the root, or absolute inside it; ``..`` and absolute paths that land
  outside are refused, and so are NUL bytes, components over 255 bytes and paths over 4096;
- ``.git`` and ``.opdsl`` are untouchable, and files the program locked cannot be written,
  edited or deleted, by the path given or the path it resolves to (``_locks`` says what a lock
  keeps; commands are checked around each run, in ``_commands``);
- symlinks are resolved and must stay inside the root; files are then opened component by
  component from the root with ``O_NOFOLLOW``, so a symlink swapped in after the check makes
  the open fail instead of escaping;
- ``delete_path`` never deletes the root.

A refused call is a ``ToolResult`` error the model can read, and nothing is touched.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from interpreters._redact import SECRET_MARKERS
from interpreters.tools._locks import Entry, LockSet, changes, put_back, pytest_settings
from interpreters.tools._sandbox import JOURNAL_SIDECARS
from op import ToolResult
from state._canonical import lone_surrogate

__all__ = [
    "DEFAULT_ALLOW",
    "FORBIDDEN",
    "PASS_ENV",
    "SECRET_MARKERS",
    "WorkspaceError",
    "_Paths",
    "_fail",
    "say_once",
]

FORBIDDEN = (".git", ".opdsl")
PASS_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "SHELL",
    "TMPDIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "NODE_PATH",
    "NO_COLOR",
)
"""The variables a command gets from opdsl's environment (secret-looking names never)."""
DEFAULT_ALLOW = (
    "python",
    "python3",
    "pytest",
    "ruff",
    "mypy",
    "make",
    "npm",
    "node",
    "ls",
    "cat",
    "echo",
    "true",
    "false",
    "git",
)


_SAID: set[str] = set()


def say_once(line: str) -> None:
    """One line on stderr, once a process."""
    if line not in _SAID:
        _SAID.add(line)
        sys.stderr.write(line + "\n")


def _holds_seal_key(real: Path, *, write: bool) -> bool:
    """Whether ``real`` is the seal key (``journal/_seal.py``), or, to write or delete, a
    folder that holds it: a workspace that holds the user's config folder (their home) still
    keeps the key out of the file tools' reach."""
    from interpreters.journal._seal import SealKeyError, key_path

    try:
        key = key_path()
    except SealKeyError:
        return False
    key = Path(os.path.realpath(key))
    return real == key or (write and real in key.parents)


class WorkspaceError(Exception):
    """A tool call the workspace refuses; the message is for the model."""


def _fail(message: str) -> ToolResult:
    return ToolResult.failure(message)


class _Paths:
    """The workspace's settings and its path rules (see the module docstring)."""

    def __init__(
        self,
        root: str | Path,
        *,
        allow: Sequence[str] = DEFAULT_ALLOW,
        shell: bool = False,
        locked: Iterable[str] = (),
        secret_names: Iterable[str] = (),
        max_output: int = 30_000,
        max_read: int = 1_000_000,
        timeout: float = 120.0,
        idle_timeout: float = 60.0,
        grace: float = 2.0,
        author: tuple[str, str] = ("opdsl", "opdsl@localhost"),
        confine: bool | None = None,
        network: bool = False,
        pass_env: Iterable[str] = PASS_ENV,
    ) -> None:
        path = Path(root)
        if not path.is_dir():
            raise WorkspaceError(f"workspace {root} is not a directory")
        self.root = path.resolve()
        self.allow = tuple(allow)
        self.shell = shell
        self.locked = set(locked)
        #: the runner lock (``_locks.RUNNER_FILES``): how tests run cannot change
        self.runner_locked = False
        #: what commands changed among the locked files (each put back), until checked
        self.breaches: list[str] = []
        self._lockset = LockSet((), runner=False)
        self._reference: dict[str, Entry] = {}
        self.secret_names = tuple(secret_names)
        self.max_output = max_output
        self.max_read = max_read
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.grace = grace
        self.author = author
        #: commands run inside bubblewrap; False (or $OPDSL_UNCONFINED=1) runs them with the
        #: allowlist alone where bubblewrap cannot run, and says they are not confined
        self.confine = confine if confine is not None else os.environ.get("OPDSL_UNCONFINED") != "1"
        self.network = network
        self.pass_env = frozenset(pass_env)
        #: the time one search may take, whatever its pattern
        self.search_seconds = 5.0
        #: the run's journal where it lies in the workspace (see :meth:`guard_journal`):
        #: what commands see read-only and the file tools never change
        self.guarded_paths: set[Path] = set()

    def guard_journal(self, path: str | Path) -> None:
        """Keep the journal file at ``path`` out of every tool's reach if it lies in the
        workspace: commands see it read-only (its folder whole, unless that is the root, else
        the file and its SQLite sidecars), and the file tools refuse to write or delete it or a
        folder that holds it, so nothing a tool does is read later as a recorded entry."""
        real = Path(os.path.realpath(path))
        if self.root in real.parents:
            self.guarded_paths.add(real.parent if real.parent != self.root else real)

    def _guarded(self, real: Path, *, holding: bool = True) -> bool:
        """Whether writing or deleting ``real`` would change the run's journal (``holding``:
        a folder that holds it counts; reading one does not)."""
        for place in self.guarded_paths:
            if place.is_dir():  # the journal's folder
                hit = real == place or place in real.parents
            else:  # a journal directly in the root, with the files SQLite keeps beside it
                hit = real.parent == place.parent and real.name in {
                    place.name + suffix for suffix in JOURNAL_SIDECARS
                }
            if hit or (holding and real in place.parents):
                return True
        return False

    # -- paths ----------------------------------------------------------------------------

    def resolve(self, path: str, *, write: bool = False) -> Path:
        """The real path of ``path`` inside the root, or :class:`WorkspaceError`."""
        if not isinstance(path, str) or not path:
            raise WorkspaceError("a path is needed")
        if "\x00" in path:
            raise WorkspaceError(f"path {path!r} contains a NUL byte")
        try:  # a name read from the file system keeps its bytes that are not UTF-8
            raw = os.fsencode(path)
        except UnicodeEncodeError:
            raw = None
        if raw is None or (write and lone_surrogate(path) is not None):
            # JSON's "\udcff" from a model: no character, and no new file is named with one
            raise WorkspaceError(
                f"path {path[:60]!a} holds a lone surrogate, which is no character; a path is "
                "UTF-8 text"
            )
        if len(raw) > 4096 or any(len(p) > 255 for p in raw.split(b"/")):
            raise WorkspaceError(f"path {path[:60]!r}... is too long")
        candidate = Path(path) if os.path.isabs(path) else self.root / path
        real = Path(os.path.realpath(candidate))
        try:
            rel = real.relative_to(self.root)
        except ValueError:
            raise WorkspaceError(f"path {path!r} is outside the workspace") from None
        parts = rel.parts
        if any(p in FORBIDDEN for p in parts):
            raise WorkspaceError(
                f"path {path!r} is inside {'/'.join(p for p in parts if p in FORBIDDEN)}/, which tools may not touch"
            )
        if self._guarded(real, holding=write):
            # not even read: opening and closing the file in this process would drop the
            # locks SQLite holds on it for the journal (POSIX locks are the process's)
            raise WorkspaceError(
                f"{rel.as_posix()} holds the run's journal, which tools may not touch"
            )
        if _holds_seal_key(real, write=write):
            raise WorkspaceError(
                f"{rel.as_posix() or '.'} holds opdsl's seal key, which tools may not touch"
            )
        if write:
            # locked by the name it was given, or by the file it names
            given = Path(os.path.normpath(candidate))
            lexical = (
                given.relative_to(self.root).as_posix() if given.is_relative_to(self.root) else ""
            )
            for name in (rel.as_posix(), lexical):
                if name and self.is_locked(name):
                    raise WorkspaceError(
                        f"{name} is locked: the program does not allow changing it"
                    )
        return real

    def relative(self, real: Path) -> str:
        return real.relative_to(self.root).as_posix() or "."

    def locks(self) -> LockSet:
        """The locks as they stand (rebuilt when ``locked`` or the runner lock changed)."""
        if self._lockset.patterns != self.locked or self._lockset.runner != self.runner_locked:
            self._lockset = LockSet(self.locked, runner=self.runner_locked)
        return self._lockset

    def is_locked(self, rel: str) -> bool:
        return self.locks().whole(rel)

    def lock(self, *patterns: str, runner: bool = False) -> None:
        """Refuse writes to files matching ``patterns`` (paths relative to the root, or globs);
        ``runner``: lock how tests run as well (``_locks.RUNNER_FILES``, and the pytest
        settings of ``pyproject.toml``, ``setup.cfg`` and ``tox.ini``)."""
        self.locked.update(patterns)
        self.runner_locked = self.runner_locked or runner
        self.relock()

    def unlock(self, *patterns: str, runner: bool = False) -> None:
        """Allow writes again to what :meth:`lock` locked under exactly these ``patterns``
        (``runner``: and lift the runner lock)."""
        self.locked.difference_update(patterns)
        if runner:
            self.runner_locked = False
        self.relock()

    def relock(self) -> None:
        """Take the locked files' state as they stand now as what the locks keep (after the
        locks changed, or the program itself put files back)."""
        self._reference = self.lock_state()

    def lock_state(self) -> dict[str, Entry]:
        """The state of every locked path now (nothing when nothing is locked)."""
        locks = self.locks()
        return locks.state(self.root) if locks else {}

    def put_back(self, before: dict[str, Entry], after: dict[str, Entry]) -> list[str]:
        """Put every locked path that changed from ``before`` to ``after`` back as it was;
        answers what changed, each as ``path (how)``, saying which could not be put back."""
        said = []
        for rel, how in changes(before, after).items():
            try:
                ok = put_back(self.root, rel, before.get(rel, Entry("absent")))
            except OSError:
                ok = False
            said.append(f"{rel} ({how}{'' if ok else ', NOT put back'})")
        return said

    def check_settings(self, rel: str, new: bytes | None) -> None:
        """Refuse (:class:`WorkspaceError`) writing ``new`` to ``rel`` (``None``: deleting it)
        when that changes the pytest settings the runner lock keeps."""
        if not self.locks().settings(rel):
            return
        try:
            with open(self.root / rel, "rb") as f:
                current: bytes | None = f.read()
        except (FileNotFoundError, IsADirectoryError):
            current = None
        if pytest_settings(rel, current) != pytest_settings(rel, new):
            raise WorkspaceError(
                f"{rel}: its pytest settings are locked: the program does not allow changing "
                "how tests run"
            )

    @contextmanager
    def _dir_fd(self, parts: Sequence[str], *, create: bool = False) -> Iterator[int]:
        """An fd of the directory ``parts`` under the root, walked without following symlinks."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts:
                try:
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def open(self, real: Path, flags: int, *, create_dirs: bool = False) -> int:
        """Open a resolved path beneath the root, following no symlink on the way."""
        parts = real.relative_to(self.root).parts
        if not parts:
            raise WorkspaceError("the workspace root is a directory, not a file")
        try:
            with self._dir_fd(parts[:-1], create=create_dirs) as dfd:
                return os.open(parts[-1], flags | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise WorkspaceError(
                    f"{self.relative(real)}: a symlink appeared on the way; refused"
                ) from None
            raise
