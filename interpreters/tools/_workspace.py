"""A workspace: a directory the model's tools are confined to, with git through gitpython.

Confinement rules (every tool goes through :meth:`Workspace.resolve` and :meth:`Workspace.open`):

- a path is relative to the root, or absolute inside it; ``..`` and absolute paths that land
  outside are refused, and so are NUL bytes, components over 255 bytes and paths over 4096;
- ``.git`` and ``.opdsl`` are untouchable, and files the program locked cannot be written,
  edited or deleted;
- symlinks are resolved and must stay inside the root; files are then opened component by
  component from the root with ``O_NOFOLLOW``, so a symlink swapped in after the check makes
  the open fail instead of escaping;
- ``delete_path`` never deletes the root.

A refused call is a ``ToolResult`` error the model can read, and nothing is touched.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, final

import anyio
import git
import regex

from interpreters.runtime._redact import SECRET_MARKERS, Redactor, looks_secret
from interpreters.tools._bound import Tool
from interpreters.tools._process import kill_group
from interpreters.tools._sandbox import bwrap_argv, sandbox_problem
from op import ToolResult

__all__ = ["SECRET_MARKERS", "Workspace", "WorkspaceError"]
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


class WorkspaceError(Exception):
    """A tool call the workspace refuses; the message is for the model."""


def _fail(message: str) -> ToolResult:
    return ToolResult.failure(message)


@final
class Workspace:
    """Tools over one directory, confined to it.

    Example:
        >>> import tempfile
        >>> ws = Workspace(tempfile.mkdtemp())
        >>> sorted(t.name for t in ws.tools())[:3]
        ['delete_path', 'edit_file', 'git_diff']
    """

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

    # -- paths ----------------------------------------------------------------------------

    def resolve(self, path: str, *, write: bool = False) -> Path:
        """The real path of ``path`` inside the root, or :class:`WorkspaceError`."""
        if not isinstance(path, str) or not path:
            raise WorkspaceError("a path is needed")
        if "\x00" in path:
            raise WorkspaceError(f"path {path!r} contains a NUL byte")
        if len(path.encode()) > 4096 or any(len(p.encode()) > 255 for p in path.split("/")):
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
        if write and self.is_locked(rel.as_posix()):
            raise WorkspaceError(
                f"{rel.as_posix()} is locked: the program does not allow changing it"
            )
        return real

    def relative(self, real: Path) -> str:
        return real.relative_to(self.root).as_posix() or "."

    def is_locked(self, rel: str) -> bool:
        return any(rel == pat or fnmatch.fnmatch(rel, pat) for pat in self.locked)

    def lock(self, *patterns: str) -> None:
        """Refuse writes to files matching ``patterns`` (paths relative to the root, or globs)."""
        self.locked.update(patterns)

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

    # -- file tools -----------------------------------------------------------------------

    def read_file(self, path: str, start_line: int = 1, end_line: int | None = None) -> ToolResult:
        """Read a text file, or lines start_line..end_line of it (1-based, inclusive)."""
        try:
            real = self.resolve(path)
            if real.is_dir():
                return _fail(f"{path} is a directory; use list_files")
            fd = self.open(real, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
        except (WorkspaceError, FileNotFoundError) as exc:
            return _fail(str(exc) if isinstance(exc, WorkspaceError) else f"{path} does not exist")
        except OSError as exc:  # a socket cannot be opened at all
            return _fail(f"{path} is not a regular file; it cannot be read ({exc.strerror})")
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a socket"
                if stat.S_ISSOCK(mode)
                else "a device"
            )
            return _fail(f"{path} is {kind}, not a regular file; it cannot be read")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            whole = start_line == 1 and end_line is None
            if whole and size > self.max_read:
                return _fail(
                    f"{path} is {size:,} bytes, more than {self.max_read:,}; read a line range"
                )
            data = f.read(self.max_read * 4 if not whole else self.max_read + 1)
        if b"\x00" in data[:8192]:
            return _fail(f"{path} is a binary file; it cannot be read as text")
        text = data.decode("utf-8", "replace")
        lines = text.splitlines(keepends=True)
        if start_line < 1 or (end_line is not None and end_line < start_line):
            return _fail(f"bad line range {start_line}..{end_line}; lines count from 1")
        chosen = lines[start_line - 1 : end_line]
        if not chosen and lines:
            return _fail(f"{path} has {len(lines)} lines; line {start_line} is past its end")
        return ToolResult(output="".join(chosen))

    def write_file(self, path: str, content: str) -> ToolResult:
        """Write a whole file (created with its folders if missing)."""
        try:
            real = self.resolve(path, write=True)
            if real.is_dir():
                return _fail(f"{path} is a directory")
            self._check_hard_links(real)
            fd = self.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create_dirs=True)
        except WorkspaceError as exc:
            return _fail(str(exc))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        return ToolResult(output=f"wrote {len(content)} characters to {self.relative(real)}")

    def edit_file(self, path: str, old: str, new: str) -> ToolResult:
        """Replace the one exact occurrence of ``old`` with ``new``."""
        if not old:
            return _fail("old must not be empty")
        current = self.read_file(path)
        if not current.ok:
            return current
        text = current.output
        count = text.count(old)
        if count == 0:
            return _fail(
                f"{path}: the text to replace was not found; read the file and copy it exactly"
            )
        if count > 1:
            starts = [m.start() for m in re.finditer(re.escape(old), text)]
            lines = [text.count("\n", 0, s) + 1 for s in starts]
            return _fail(
                f"{path}: the text to replace occurs {count} times (lines {', '.join(map(str, lines))}); include more context so it occurs once"
            )
        return self.write_file(path, text.replace(old, new, 1))

    def list_files(self, path: str = ".", pattern: str | None = None) -> ToolResult:
        """List files under ``path`` (respecting .gitignore), optionally matching a glob."""
        try:
            base = self.relative(self.resolve(path))
        except WorkspaceError as exc:
            return _fail(str(exc))
        files = [f for f in self.files() if base == "." or f == base or f.startswith(base + "/")]
        if pattern:
            files = [
                f
                for f in files
                if fnmatch.fnmatch(f, pattern) or fnmatch.fnmatch(f.rsplit("/", 1)[-1], pattern)
            ]
        return ToolResult(output="\n".join(files) if files else "(no files)")

    def files(self) -> list[str]:
        """Every file of the workspace that git would not ignore, sorted."""
        repo = self.repo()
        if repo is not None:
            out = repo.git.ls_files("--cached", "--others", "--exclude-standard", "-z")
            names = sorted({n for n in out.split("\x00") if n and (self.root / n).exists()})
            return [n for n in names if not any(p in FORBIDDEN for p in n.split("/"))]
        result = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if d not in FORBIDDEN)
            for name in filenames:
                result.append((Path(dirpath) / name).relative_to(self.root).as_posix())
        return sorted(result)

    def search(
        self, pattern: str, path: str = ".", glob: str | None = None, max_results: int = 100
    ) -> ToolResult:
        """Search text files for a regular expression; answers file:line: text."""
        try:
            rx = regex.compile(pattern)
        except regex.error as exc:
            return _fail(f"bad regular expression {pattern!r}: {exc}")
        deadline = time.monotonic() + self.search_seconds
        listing = self.list_files(path, glob)
        if not listing.ok:
            return listing
        hits: list[str] = []
        for name in listing.output.splitlines():
            if name == "(no files)":
                break
            read = self.read_file(name)
            if not read.ok:
                continue
            for i, line in enumerate(read.output.splitlines(), start=1):
                try:
                    # a backtracking pattern cannot hang the run: the search has a time bound
                    found = rx.search(line, timeout=max(0.001, deadline - time.monotonic()))
                except TimeoutError:
                    return _fail(
                        f"the regular expression {pattern[:80]!r} took longer than {self.search_seconds:g}s "
                        f"(stopped in {name}, line {i}); use a simpler pattern"
                    )
                if found:
                    hits.append(f"{name}:{i}: {line[:200]}")
                    if len(hits) >= max_results:
                        return ToolResult(
                            output="\n".join(hits) + f"\n(stopped at {max_results} matches)"
                        )
        return ToolResult(output="\n".join(hits) if hits else "(no matches)")

    def delete_path(self, path: str) -> ToolResult:
        """Delete a file or a folder (a symlink: the link, never what it points to)."""
        try:
            if not isinstance(path, str) or not path.strip("/"):
                raise WorkspaceError("a path is needed")
            head, _, name = path.rstrip("/").rpartition("/")
            if name in (".", ".."):
                real = self.resolve(path, write=True)
            else:
                # the entry itself, in its real folder: a symlink is removed, not followed
                real = self.resolve(head or ("/" if path.startswith("/") else ".")) / name
                if os.path.islink(real):
                    self._check_name(real)
                else:
                    real = self.resolve(self.relative(real), write=True)
        except WorkspaceError as exc:
            return _fail(str(exc))
        if real == self.root:
            return _fail("refusing to delete the workspace root")
        rel = self.relative(real)
        st = os.lstat(real) if os.path.lexists(real) else None
        if st is None:
            return _fail(f"{path} does not exist")
        if stat.S_ISLNK(st.st_mode):
            real.unlink()
            return ToolResult(output=f"deleted the link {rel} (not what it points to)")
        locked = [f for f in self._all_files(real) if self.is_locked(f)]
        try:
            self._check_hard_links(real)
        except WorkspaceError as exc:
            return _fail(str(exc))
        if locked:
            return _fail(f"{rel} holds locked files: {', '.join(locked[:5])}")
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(real)
        else:
            real.unlink()
        return ToolResult(output=f"deleted {rel}")

    def _check_name(self, real: Path) -> None:
        """A symlink about to be removed: its own name must be allowed and not locked."""
        rel = real.relative_to(self.root)
        if any(p in FORBIDDEN for p in rel.parts):
            raise WorkspaceError(f"{rel.as_posix()} is inside a folder tools may not touch")
        if self.is_locked(rel.as_posix()):
            raise WorkspaceError(
                f"{rel.as_posix()} is locked: the program does not allow changing it"
            )

    def _all_files(self, real: Path) -> list[str]:
        """Every file at or under ``real``, git-ignored ones included, relative to the root."""
        if not real.is_dir() or real.is_symlink():
            return [self.relative(real)]
        out = []
        for dirpath, _dirs, names in os.walk(real):
            out += [self.relative(Path(dirpath) / n) for n in names]
        return out

    def _check_hard_links(self, real: Path) -> None:
        """Refuse to change a file (or a folder's file) that is a hard link to a locked file."""
        if not self.locked:
            return
        linked = set()
        for rel in self._all_files(real):
            with suppress(OSError):
                st = os.lstat(self.root / rel)
                if st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
                    linked.add((st.st_dev, st.st_ino))
        if not linked:
            return
        for rel in self._all_files(self.root):
            if self.is_locked(rel) and not any(p in FORBIDDEN for p in rel.split("/")):
                with suppress(OSError):
                    st = os.lstat(self.root / rel)
                    if (st.st_dev, st.st_ino) in linked:
                        raise WorkspaceError(
                            f"{self.relative(real)} is a hard link to the locked file {rel}"
                        )

    # -- commands ---------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        # only what a build or a test runner needs, never the rest of the parent's environment
        env = {}
        for name, value in os.environ.items():
            if looks_secret(name, self.secret_names):
                continue
            if name in self.pass_env or name.startswith("LC_"):
                env[name] = value
        # no .pyc files: they would litter the repository, and one written by an earlier
        # command can look current after an edit (same size, same second)
        env.update(
            {
                "PAGER": "cat",
                "GIT_PAGER": "cat",
                "CI": "1",
                "TQDM_DISABLE": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        return env

    def _redact(self, text: str) -> str:
        return Redactor.from_env(extra_names=self.secret_names)(text)

    async def run(
        self, command: list[str] | str, cwd: str = ".", timeout: float | None = None
    ) -> ToolResult:
        """Run an allowed command in the workspace (an argument list; a string only when the
        program allows a shell). Answers its exit code and output."""
        if isinstance(command, str):
            if not self.shell:
                return _fail(
                    'give the command as a list of arguments, e.g. ["pytest", "-q"]; no shell is allowed here'
                )
            argv = ["/bin/sh", "-c", command]
            program = command.strip().split(" ", 1)[0] if command.strip() else ""
        else:
            argv = list(command)
            program = argv[0] if argv else ""
        if not program:
            return _fail("an empty command")
        if os.path.basename(program) not in self.allow:
            return _fail(
                f"{program!r} is not an allowed command here; allowed: {', '.join(self.allow)}"
            )
        if argv[0] in ("python", "python3"):
            argv[0] = sys.executable  # the interpreter opdsl runs on, with its packages
        try:
            where = self.resolve(cwd)
        except WorkspaceError as exc:
            return _fail(str(exc))
        if not where.is_dir():
            return _fail(f"{cwd} is not a directory")
        # the model may shorten a command's time, never lengthen it past the workspace's
        limit = self.timeout if timeout is None else max(0.0, min(float(timeout), self.timeout))
        problem = sandbox_problem()
        if problem is None:
            argv = bwrap_argv(argv, root=self.root, cwd=where, network=self.network)
        elif self.confine:
            say_once(
                f"opdsl: workspace commands are refused: {problem}; set OPDSL_UNCONFINED=1 "
                "(or Workspace(confine=False)) to run them unconfined, with the allowlist only"
            )
            return _fail(f"commands cannot run here: they must be confined and {problem}")
        else:
            say_once(
                f"opdsl: workspace commands are NOT confined ({problem}): only the allowlist "
                "limits them"
            )
        chunks: list[bytes] = []
        size = 0
        reason = None
        try:
            process = await anyio.open_process(
                argv, cwd=where, env=self._env(), stdin=None, stderr=-2, start_new_session=True
            )
        except OSError as exc:
            return _fail(f"cannot start {program!r}: {exc.strerror or exc}")
        try:
            assert process.stdout is not None
            with anyio.move_on_after(limit) as hard:
                while True:
                    data = b""
                    with anyio.move_on_after(self.idle_timeout) as idle:
                        try:
                            data = await process.stdout.receive(65536)
                        except anyio.EndOfStream:
                            break
                    if idle.cancelled_caught:
                        reason = f"no output for {self.idle_timeout:g}s"
                        break
                    size += len(data)
                    if sum(len(c) for c in chunks) < self.max_output * 2:
                        chunks.append(data)
            if hard.cancelled_caught:
                reason = f"timed out after {limit:g}s"
            if reason is None:
                await process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    await kill_group(process, self.grace)
                with anyio.move_on_after(5):
                    await process.aclose()
        text = self._redact(b"".join(chunks).decode("utf-8", "replace"))
        if len(text) > self.max_output:
            text = (
                text[: self.max_output] + f"\n[output cut: {size - self.max_output:,} more bytes]"
            )
        if reason is not None:
            return ToolResult.failure(
                f"{reason}; the command and its children were killed", output=text
            )
        code = process.returncode
        if code != 0:
            return ToolResult.failure(f"exit code {code}", output=text)
        return ToolResult(output=text)

    # -- git --------------------------------------------------------------------------------

    def repo(self) -> git.Repo | None:
        try:
            repo = git.Repo(self.root)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            return None
        if Path(repo.working_tree_dir or "").resolve() != self.root:
            return None
        return repo

    def _need_repo(self) -> git.Repo:
        repo = self.repo()
        if repo is None:
            raise WorkspaceError(f"{self.root} is not the root of a git repository")
        return repo

    def git_status(self) -> ToolResult:
        """The git status of the workspace (short form)."""
        try:
            return ToolResult(
                output=self._need_repo().git.status("--short", "--branch") or "(clean)"
            )
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(str(exc))

    def git_diff(self, staged: bool = False, path: str | None = None) -> ToolResult:
        """The diff of the working tree (or of what is staged)."""
        try:
            repo = self._need_repo()
            args = ["--cached"] if staged else []
            if path:
                args += ["--", self.relative(self.resolve(path))]
            return ToolResult(output=self._cap(repo.git.diff(*args)) or "(no changes)")
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(str(exc))

    def git_log(self, n: int = 10) -> ToolResult:
        """The last commits, one a line."""
        try:
            repo = self._need_repo()
            if not repo.head.is_valid():
                return ToolResult(output="(no commits yet)")
            return ToolResult(output=repo.git.log(f"-{max(1, min(n, 200))}", "--oneline"))
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(str(exc))

    def git_add(self, paths: list[str] | None = None) -> ToolResult:
        """Stage files (all changes when no paths are given)."""
        try:
            repo = self._need_repo()
            if paths:
                rels = [self.relative(self.resolve(p)) for p in paths]
                repo.git.add("--", *rels)
            else:
                repo.git.add("-A")
            return ToolResult(output=repo.git.status("--short") or "(nothing to stage)")
        except (WorkspaceError, git.GitCommandError) as exc:
            return _fail(str(exc))

    def git_commit(self, message: str) -> ToolResult:
        """Commit what is staged with ``message`` exactly as given; hooks off, unsigned."""
        if not message.strip():
            return _fail("a commit message is needed")
        try:
            repo = self._need_repo()
            name, email = self.author
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
        out = {}
        for ref in repo.refs:
            path = ref.path
            if path.startswith(f"refs/opdsl/{prefix}"):
                out[path.removeprefix("refs/opdsl/")] = ref.commit.tree.hexsha
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

    # -- as tools -----------------------------------------------------------------------------

    def tools(self) -> list[Tool]:
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
        return [Tool.from_function(fn, read_only=fn.__name__ in read_only) for fn in fns]

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

    def program_tools(self) -> list[Tool]:
        """Tools for programs rather than models: staging, committing, the branch, snapshots."""
        fns = (
            self.git_add,
            self.git_commit,
            self.current_branch,
            self.snapshot_files,
            self.restore_files,
        )
        return [Tool.from_function(fn) for fn in fns]
