"""What a lock keeps: the state of every locked path, taken before and after each command and
when the locks change, so that a change made by any means (a file tool, a command, a link) is
seen, named and put back.

A lock is a path or a glob pattern relative to the workspace root (``*`` crosses ``/``). The
runner lock adds the files that decide how tests run: pytest's configuration files and
``conftest.py`` files at any depth, and the modules Python or ``python -m pytest`` would load
from the folder they run in instead of the installed ones (``sitecustomize``, ``pytest``, ...).
Of ``pyproject.toml``, ``setup.cfg`` and ``tox.ini`` only the pytest settings are locked: the
rest of those files may change.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import stat
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, final

__all__ = [
    "RUNNER_FILES",
    "RUNNER_SETTINGS",
    "Entry",
    "LockSet",
    "changes",
    "pytest_settings",
    "put_back",
]

RUNNER_FILES = (
    "conftest.py",
    "*/conftest.py",
    "pytest.ini",
    "*/pytest.ini",
    ".pytest.ini",
    "*/.pytest.ini",
    "pytest.toml",
    "*/pytest.toml",
    ".pytest.toml",
    "*/.pytest.toml",
    "sitecustomize.py",
    "*/sitecustomize.py",
    "usercustomize.py",
    "*/usercustomize.py",
    "pytest.py",
    "pytest",
    "pytest/*",
    "_pytest.py",
    "_pytest",
    "_pytest/*",
    "pluggy.py",
    "pluggy",
    "pluggy/*",
)
"""Files locked whole by the runner lock: pytest's own configuration, conftest.py files, and
what would shadow Python's start-up hooks or pytest itself."""

RUNNER_SETTINGS = (
    "pyproject.toml",
    "*/pyproject.toml",
    "setup.cfg",
    "*/setup.cfg",
    "tox.ini",
    "*/tox.ini",
)
"""Files of which the runner lock keeps only the pytest settings."""

#: a locked file's bytes are kept (to put it back) up to this size; past it, only its hash
KEEP_BYTES = 8 * 1024 * 1024

_FORBIDDEN = (".git", ".opdsl")


@final
@dataclass(frozen=True, slots=True)
class Entry:
    """One locked path as it stands: what it is, a digest of what it holds, and (for a file
    not too large) its bytes. Two entries are the same state when kind and digest agree."""

    kind: Literal["absent", "file", "link", "dir", "other", "settings"]
    digest: str = ""
    data: bytes | None = None

    def same(self, other: Entry) -> bool:
        return (self.kind, self.digest) == (other.kind, other.digest)


def pytest_settings(name: str, data: bytes | None) -> str:
    """The pytest settings ``data`` holds, as one canonical string (``""``: none).

    ``name`` says the format: ``pyproject.toml`` (its ``[tool.pytest]`` and
    ``[tool.pytest.ini_options]`` tables), or an INI file (``setup.cfg``'s ``[tool:pytest]``,
    ``tox.ini``'s ``[pytest]``). An INI section counts as pytest's when its header names pytest
    in any case, and runs to the next header at the start of a line: more than pytest reads,
    never less. A file that does not parse is its own state (``unreadable:`` and its hash).
    """
    if data is None:
        return ""
    if name.rsplit("/", 1)[-1] == "pyproject.toml":
        try:
            tool = tomllib.loads(data.decode("utf-8")).get("tool", {})
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            return "unreadable:" + hashlib.sha256(data).hexdigest()
        found = tool.get("pytest") if isinstance(tool, dict) else None
        return "" if found is None else json.dumps(found, sort_keys=True, default=str)
    kept: list[str] = []
    inside = False
    for line in data.decode("utf-8", "replace").splitlines():
        header = line.lstrip().startswith("[")
        if header and "pytest" in line.lower():
            inside = True
        elif line.startswith("[") and "pytest" not in line.lower():
            inside = False
        if inside:
            kept.append(line.rstrip())
    return "\n".join(kept)


@final
class LockSet:
    """The locked patterns of a workspace, and how to read their state."""

    def __init__(self, patterns: Iterable[str], *, runner: bool) -> None:
        self.patterns = frozenset(patterns)
        self.runner = runner
        self.exact = frozenset(p for p in self.patterns if not _is_glob(p))
        globs = [p for p in self.patterns if _is_glob(p)]
        if runner:
            globs += RUNNER_FILES
        self._globs = re.compile("|".join(fnmatch.translate(p) for p in globs)) if globs else None
        self._settings = (
            re.compile("|".join(fnmatch.translate(p) for p in RUNNER_SETTINGS)) if runner else None
        )

    def __bool__(self) -> bool:
        return bool(self.patterns) or self.runner

    def whole(self, rel: str) -> bool:
        """Whether ``rel`` is locked as a whole file."""
        return rel in self.exact or (self._globs is not None and bool(self._globs.match(rel)))

    def settings(self, rel: str) -> bool:
        """Whether ``rel`` is a file whose pytest settings are locked."""
        return self._settings is not None and bool(self._settings.match(rel))

    def state(self, root: Path) -> dict[str, Entry]:
        """Every locked path's entry: each exact path (absent or not), and every file, link or
        folder under ``root`` that a pattern matches (``.git`` and ``.opdsl`` aside)."""
        out = {rel: _entry(root, rel) for rel in self.exact}
        if self._globs is None and self._settings is None:
            return out
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in _FORBIDDEN]
            base = os.path.relpath(dirpath, root)
            for name in (*dirnames, *filenames):
                rel = name if base == "." else f"{base}/{name}"
                if rel in out:
                    continue
                if self.whole(rel):
                    out[rel] = _entry(root, rel)
                elif self.settings(rel):
                    found = _entry(root, rel)
                    if found.kind == "file":
                        text = pytest_settings(rel, found.data)
                        found = Entry("settings", _digest(text), found.data)
                    out[rel] = found
        return out


def changes(before: Mapping[str, Entry], after: Mapping[str, Entry]) -> dict[str, str]:
    """What changed between two states, by path: ``created``, ``removed`` or ``changed``."""
    out: dict[str, str] = {}
    absent = Entry("absent")
    for rel in sorted(set(before) | set(after)):
        was, now = before.get(rel, absent), after.get(rel, absent)
        if _unset(was).same(_unset(now)):
            continue
        if _unset(was).kind == "absent":
            out[rel] = "created"
        elif now.kind == "absent":
            out[rel] = "removed"
        else:
            out[rel] = "changed"
    return out


def put_back(root: Path, rel: str, entry: Entry) -> bool:
    """Make ``rel`` what ``entry`` says it was: a file rewritten with its bytes, a path that
    was absent removed (whatever now stands there). False when it cannot be (a file too large
    to have been kept, a link or folder that was changed)."""
    parts = rel.split("/")
    if entry.kind == "absent":
        _remove_from(root, parts)
        return True
    if entry.kind not in ("file", "settings") or entry.data is None:
        return False
    # every folder on the way must be a real folder: a link or a file put there goes
    where = root
    for part in parts[:-1]:
        where = where / part
        if where.is_symlink() or (os.path.lexists(where) and not where.is_dir()):
            where.unlink()
        where.mkdir(exist_ok=True)
    target = root / rel
    if os.path.lexists(target):
        _remove(target)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(entry.data)
    return True


_NO_SETTINGS = hashlib.sha256(b"").hexdigest()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _unset(entry: Entry) -> Entry:
    """A file with no pytest settings counts as no file for the runner lock."""
    return Entry("absent") if entry.kind == "settings" and entry.digest == _NO_SETTINGS else entry


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _entry(root: Path, rel: str) -> Entry:
    """The entry of ``rel``, walked from ``root`` without following a link on the way."""
    where = root
    parts = rel.split("/")
    for part in parts[:-1]:
        where = where / part
        try:
            st = os.lstat(where)
        except (FileNotFoundError, NotADirectoryError):
            return Entry("absent")
        if not stat.S_ISDIR(st.st_mode):
            # a link or a file where a folder of the path should be
            return Entry("link" if stat.S_ISLNK(st.st_mode) else "other", f"on the way: {part}")
    where = where / parts[-1]
    try:
        st = os.lstat(where)
    except (FileNotFoundError, NotADirectoryError):
        return Entry("absent")
    if stat.S_ISLNK(st.st_mode):
        return Entry("link", os.readlink(where))
    if stat.S_ISDIR(st.st_mode):
        return Entry("dir")
    if not stat.S_ISREG(st.st_mode):
        return Entry("other", oct(stat.S_IFMT(st.st_mode)))
    digest = hashlib.sha256()
    kept = bytearray()
    fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            if len(kept) <= KEEP_BYTES:
                kept += chunk
    return Entry("file", digest.hexdigest(), bytes(kept) if len(kept) <= KEEP_BYTES else None)


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink()
    else:
        shutil.rmtree(path)


def _remove_from(root: Path, parts: list[str]) -> None:
    """Remove what stands at ``parts``, or the first link or file on the way to it."""
    where = root
    for i, part in enumerate(parts):
        where = where / part
        if not os.path.lexists(where):
            return
        if i == len(parts) - 1 or where.is_symlink() or not where.is_dir():
            _remove(where)
            return
