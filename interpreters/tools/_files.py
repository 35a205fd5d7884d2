"""The workspace's file tools: read, write, edit, list, search, delete.

Two refusals guard a file against a model that writes before it reads (what a small model does):
``edit_file`` refuses an ``old`` text that is not in the file, or not once, and answers with the
nearest passages and their line numbers, to copy from; ``write_file`` refuses to shrink a file
git tracks to under half its size unless ``read_file`` (or ``write_file``) has been given that
file through this workspace (a run's workspace is its own; a resumed run's has what the
journal says it read), and says how to go on.
"""

from __future__ import annotations

import difflib
import fnmatch
import heapq
import os
import re
import shutil
import stat
import time
from collections.abc import Mapping
from contextlib import suppress
from functools import cached_property
from pathlib import Path
from typing import Any

import regex

from interpreters.tools._git import _Git
from interpreters.tools._paths import (
    FORBIDDEN,
    WorkspaceError,
    _fail,
)
from interpreters.tools._search import SearchStopped, search_line
from op import ToolResult

__all__ = ["SHRINK", "_Files"]

SHRINK = 0.5
"""``write_file`` refuses to make a tracked file it has not read smaller than this share of it."""

_NEAREST = 3  # passages an edit whose text was not found is answered with
_CANDIDATES = 8  # the fewest windows (the likeliest) compared in full, for the _NEAREST shown
_COMPARED = 4_000_000  # and more while their lengths squared (what ratio costs) sum to under this
_EXACT = 1_000  # characters of old up to which a window is compared by difflib's ratio itself
_SHOWN = 5  # occurrences an edit whose text occurs more than once is answered with


def _shown(text: str) -> str:
    """``text`` read keeping bytes that are not UTF-8, as ``read_file`` shows it (U+FFFD)."""
    if text.isascii():
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _not_text(path: str, what: str, value: str) -> str | None:
    """Why ``value`` (a tool's argument) cannot be written: it holds a lone surrogate, which is
    no character (JSON's ``"\\udcff"`` gives one); read back through ``surrogateescape`` it
    would become a raw byte."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"{path}: {what} holds {value[exc.start]!a} at character {exc.start}, a lone "
            "surrogate, which is not text; nothing was written"
        )
    return None


class _Files(_Git):
    # -- file tools -----------------------------------------------------------------------

    @cached_property
    def read_paths(self) -> set[str]:
        """The files (relative paths) ``read_file`` gave or ``write_file`` wrote through this
        workspace: the ones ``write_file`` may shrink."""
        return set()

    def replayed(self, name: str, args: Mapping[str, Any], result: ToolResult) -> None:
        """A call of one of these tools that a resumed (or forked) run's journal answered
        instead of performing it: a file it read or wrote counts as read, as it did before."""
        path = args.get("path")
        if name in ("read_file", "write_file") and result.ok and isinstance(path, str):
            with suppress(WorkspaceError, OSError):
                self.read_paths.add(self.relative(self.resolve(path)))

    def read_file(self, path: str, start_line: int = 1, end_line: int | None = None) -> ToolResult:
        """Read a text file, or lines start_line..end_line of it (1-based, inclusive)."""
        result = self._read(path, start_line, end_line)
        if result.ok:
            self.read_paths.add(self.relative(self.resolve(path)))
        return result

    def _read(
        self, path: str, start_line: int = 1, end_line: int | None = None, errors: str = "replace"
    ) -> ToolResult:
        """``read_file`` for the tools' own use: what it reads does not count as read. A byte
        that is not UTF-8 is shown as U+FFFD; ``errors="surrogateescape"`` keeps it instead, so
        the text encodes back to the file's very bytes."""
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
        text = data.decode("utf-8", errors)
        lines = text.splitlines(keepends=True)
        if start_line < 1 or (end_line is not None and end_line < start_line):
            return _fail(f"bad line range {start_line}..{end_line}; lines count from 1")
        chosen = lines[start_line - 1 : end_line]
        if not chosen and lines:
            return _fail(f"{path} has {len(lines)} lines; line {start_line} is past its end")
        return ToolResult(output="".join(chosen))

    def write_file(self, path: str, content: str) -> ToolResult:
        """Write a whole file (created with its folders if missing). To change part of a file,
        use edit_file."""
        try:
            real = self.resolve(path, write=True)
            if real.is_dir():
                return _fail(f"{path} is a directory")
            refused = (
                _not_text(path, "content", content)
                or self._shrinks_unread(real, content)
                or self._replaces_bytes(real, content)
            )
            if refused is not None:
                return _fail(refused)
        except WorkspaceError as exc:
            return _fail(str(exc))
        written = self._write(real, content)
        if written.ok:
            self.read_paths.add(self.relative(real))
        return written

    def _write(self, real: Path, content: str, errors: str = "strict") -> ToolResult:
        """Write ``content`` as UTF-8; ``errors="surrogateescape"``: the bytes a text read so
        (:meth:`_read`) kept go back as they were."""
        try:
            self._check_hard_links(real)
            data = content.encode("utf-8", errors)
            self.check_settings(self.relative(real), data)
            fd = self.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create_dirs=True)
        except WorkspaceError as exc:
            return _fail(str(exc))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return ToolResult(output=f"wrote {len(content)} characters to {self.relative(real)}")

    def _replaces_bytes(self, real: Path, content: str) -> str | None:
        """Why writing ``content`` to ``real`` is refused: the file holds bytes that are not
        UTF-8, which ``read_file`` showed as U+FFFD, and ``content`` holds U+FFFD: written,
        they would stand where those bytes were (a Latin-1 file read and written back)."""
        if "\ufffd" not in content or not real.is_file():
            return None
        with real.open("rb") as f:
            data = f.read(self.max_read)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.end == len(data) and len(data) == self.max_read:
                return None  # a character cut where the read stopped, not a wrong byte
            line = data.count(b"\n", 0, exc.start) + 1
            rel = self.relative(real)
            return (
                f"{rel} is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}): "
                "read_file shows such bytes as U+FFFD, and this content holds U+FFFD, "
                "which would stand in their place; nothing was written. Change the lines you "
                "mean to with edit_file, which keeps the bytes it does not touch."
            )
        return None

    def _shrinks_unread(self, real: Path, content: str) -> str | None:
        """Why writing ``content`` to ``real`` is refused: it would shrink a file git tracks
        to under :data:`SHRINK` of its size, and that file was not read here first."""
        rel = self.relative(real)
        if rel in self.read_paths or not real.is_file():
            return None
        size = real.stat().st_size
        new = len(content.encode("utf-8"))
        if new >= size * SHRINK:
            return None
        repo = self.repo()
        if repo is None or not repo.git.ls_files("--", rel):
            return None
        return (
            f"{rel}: refused to replace a {size:,}-byte file git tracks with {new:,} bytes "
            "unread; nothing was written. To change part of it, use edit_file; to replace it "
            "whole, read it with read_file first, then write it."
        )

    def edit_file(self, path: str, old: str, new: str) -> ToolResult:
        """Replace text in a file: ``old`` is copied exactly from the file (whole lines, enough
        of them to occur once), ``new`` is what it becomes."""
        if not old:
            return _fail("old must not be empty")
        if old == new:
            return _fail(f"{path}: old and new are the same; nothing would change")
        refused = _not_text(path, "old", old) or _not_text(path, "new", new)
        if refused is not None:
            return _fail(refused)
        try:
            real = self.resolve(path, write=True)  # a locked file is refused before it is read
        except WorkspaceError as exc:
            return _fail(str(exc))
        # read keeping bytes that are not UTF-8, so the ones the edit does not touch are
        # written back as they were (not as U+FFFD); what the model is shown has U+FFFD
        current = self._read(path, errors="surrogateescape")
        if not current.ok:
            return current
        text = current.output
        count = text.count(old)
        if count != 1:
            text = _shown(text)
        if count == 0:
            undecoded = (
                " (U+FFFD in read_file's output stands for a byte that is not UTF-8: choose "
                "old and new around it; the bytes an edit does not touch are kept)"
                if "\ufffd" in old and "\ufffd" in text
                else ""
            )
            return _fail(
                f"{path}: the text to replace was not found; nothing was changed.{undecoded} "
                + _nearest(text, old)
            )
        if count > 1:
            starts = [m.start() for m in re.finditer(re.escape(old), text)]
            lines = [text.count("\n", 0, s) + 1 for s in starts]
            return _fail(
                f"{path}: the text to replace occurs {count} times (lines {', '.join(map(str, lines))}); include more context so it occurs once"
                + _occurrences(text, lines, old.count("\n") + 1)
            )
        return self._write(real, text.replace(old, new, 1), errors="surrogateescape")

    def list_files(self, path: str = ".", pattern: str | None = None) -> ToolResult:
        """List files under ``path`` (respecting .gitignore), optionally matching a glob. A
        name that is not UTF-8 is shown as ``read_file`` shows such text (U+FFFD)."""
        files = self._listed(path, pattern)
        if isinstance(files, ToolResult):
            return files
        return ToolResult(output="\n".join(map(_shown, files)) if files else "(no files)")

    def _listed(self, path: str, pattern: str | None) -> list[str] | ToolResult:
        """The files :meth:`list_files` lists, named as the file system has them; a failed
        result for a path that cannot be listed."""
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
        return files

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
        listing = self._listed(path, glob)
        if isinstance(listing, ToolResult):
            return listing
        hits: list[str] = []
        for name in listing:
            read = self._read(name)
            if not read.ok:
                continue
            for i, line in enumerate(read.output.splitlines(), start=1):
                try:
                    # a backtracking pattern cannot hang the run: the search has a time bound,
                    # on the clock (not the CPU time regex's own timeout counts)
                    found = search_line(rx, line, deadline)
                except SearchStopped as exc:
                    why = f"took longer than {self.search_seconds:g}s" if exc.timed_out else exc
                    return _fail(
                        f"the regular expression {pattern[:80]!r} {why} "
                        f"(stopped in {_shown(name)}, line {i}); use a simpler pattern"
                    )
                if found:
                    hits.append(f"{_shown(name)}:{i}: {line[:200]}")
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
            for f in self._all_files(real):
                self.check_settings(f, None)
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
        if not self.locks():
            return
        linked = set()
        for rel in self._all_files(real):
            with suppress(OSError):
                st = os.lstat(self.root / rel)
                if st.st_nlink > 1 and stat.S_ISREG(st.st_mode):
                    linked.add((st.st_dev, st.st_ino))
        if not linked:
            return
        guarded = self.locks()
        for rel in self._all_files(self.root):
            if (guarded.whole(rel) or guarded.settings(rel)) and not any(
                p in FORBIDDEN for p in rel.split("/")
            ):
                with suppress(OSError):
                    st = os.lstat(self.root / rel)
                    if (st.st_dev, st.st_ino) in linked:
                        raise WorkspaceError(
                            f"{self.relative(real)} is a hard link to the locked file {rel}"
                        )


def _nearest(text: str, old: str) -> str:
    """The passages of ``text`` most like ``old`` (as many lines as it has), with their line
    numbers: what an edit whose text was not found is answered with.

    ``difflib``'s ratio is what ranks them and what they are shown with, but it costs far more
    than its length on a long ``old`` (up to two seconds on 150 lines of code that repeats
    itself), too much to spend on every window of a long file (it took minutes on 1,000 lines).
    So every window is first scored by the three-character pieces of its lines it shares with
    ``old``, one pass over the file that adds each line to the running count once and takes it
    off once, and only the windows that score highest are compared in full: :data:`_CANDIDATES`
    of them, or as many as :data:`_COMPARED` allows for an ``old`` short enough that ``ratio``
    costs little. An ``old`` longer than :data:`_EXACT` characters is compared by
    :func:`_alike`, line by line, instead of by ``ratio`` over its whole text."""
    lines = text.splitlines()
    wanted = old.strip("\n").splitlines() or [old]
    size = len(wanted)
    if not lines:
        return "The file is empty."
    stripped = [line.strip() for line in lines]
    target = "\n".join(line.strip() for line in wanted)
    scored: list[tuple[float, int]] = []
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(target)
    exact = len(target) <= _EXACT
    many = max(_CANDIDATES, _COMPARED // max(len(target), 1) ** 2) if exact else _CANDIDATES
    cut = [line.strip() for line in wanted]
    for start in _likeliest_windows(stripped, cut, many):
        matcher.set_seq1("\n".join(stripped[start : start + size]))
        floor = scored[-1][0] if len(scored) >= _NEAREST else 0.0
        if matcher.real_quick_ratio() <= floor or matcher.quick_ratio() <= floor:
            continue
        score = matcher.ratio() if exact else _alike(stripped[start : start + size], cut)
        scored.append((score, start))
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        del scored[_NEAREST:]
    close = [(ratio, start) for ratio, start in scored if ratio >= 0.5]
    if not close:
        return "Nothing in it is close; read it with read_file and copy the text exactly."
    shown = []
    for ratio, start in sorted(close, key=lambda pair: pair[1]):
        end = min(start + size, len(lines))
        where = f"line {start + 1}" if end == start + 1 else f"lines {start + 1}-{end}"
        alike = "the same but for spaces" if ratio == 1.0 else f"{ratio:.0%} alike"
        shown.append(f"{where} ({alike}):\n" + "\n".join(lines[start:end]))
    return (
        "The nearest text in the file (copy old exactly from it, spaces included):\n"
        + "\n".join(shown)
    )


def _alike(window: list[str], wanted: list[str]) -> float:
    """How alike two runs of lines are, as ``difflib``'s ratio says of their texts, at a cost
    near their length rather than its square: the lines are matched whole first, and a line
    that stands in another's place is compared with it character by character."""
    same = 0
    lines = difflib.SequenceMatcher(None, window, wanted, autojunk=False)
    for tag, i1, i2, j1, j2 in lines.get_opcodes():
        if tag == "equal":
            same += sum(len(line) + 1 for line in window[i1:i2])  # with its newline
        elif tag == "replace":
            for mine, theirs in zip(window[i1:i2], wanted[j1:j2], strict=False):
                chars = difflib.SequenceMatcher(None, mine, theirs, autojunk=False)
                same += sum(block.size for block in chars.get_matching_blocks())
    total = sum(len(line) + 1 for line in window) + sum(len(line) + 1 for line in wanted) - 2
    return min(1.0, 2 * same / total) if total else 1.0


def _pieces(line: str) -> list[str]:
    """The three-character pieces of a (stripped) line; a shorter line is its own piece."""
    return [line[i : i + 3] for i in range(len(line) - 2)] if len(line) > 3 else [line]


def _likeliest_windows(lines: list[str], wanted: list[str], many: int) -> list[int]:
    """The starts of the ``many`` windows of ``len(wanted)`` lines of ``lines`` that share the
    most three-character pieces with ``wanted`` (the earlier first of those that tie), in time
    proportional to the characters of both."""
    size = len(wanted)
    want: dict[str, int] = {}
    for line in wanted:
        for piece in _pieces(line):
            want[piece] = want.get(piece, 0) + 1
    # only the pieces ``wanted`` has can be shared; the others are left out of the count
    kept = [[p for p in _pieces(line) if p in want] for line in lines]
    have: dict[str, int] = dict.fromkeys(want, 0)
    shared = 0
    scores: list[tuple[int, int]] = []
    for end, pieces in enumerate(kept):
        for piece in pieces:
            if have[piece] < want[piece]:
                shared += 1
            have[piece] += 1
        start = end - size + 1
        if start > 0:
            for piece in kept[start - 1]:
                have[piece] -= 1
                if have[piece] < want[piece]:
                    shared -= 1
        if start >= 0 or end == len(lines) - 1 and not scores:
            scores.append((-shared, max(start, 0)))
    return [start for _, start in heapq.nsmallest(many, scores)]


def _occurrences(text: str, lines: list[int], size: int) -> str:
    """Each occurrence with the lines around it, for an edit whose text occurs more than once."""
    all_lines = text.splitlines()
    shown = []
    for line in lines[:_SHOWN]:
        start, end = max(line - 2, 0), min(line - 1 + size + 1, len(all_lines))
        shown.append(f"lines {start + 1}-{end}:\n" + "\n".join(all_lines[start:end]))
    return ":\n" + "\n".join(shown)
