"""Confining workspace commands with bubblewrap (``bwrap``).

A command's arguments can name any path, so the workspace's own path checks cannot confine
it; the operating system does. Each command runs in fresh namespaces:

- the root file system read-only; the workspace the only writable place, with its ``.git``
  read-only (git operations go through the git tools) and its ``.opdsl`` (and the run's
  journal, wherever in the workspace it lies) read-only, so no command can plant a journal
  entry; the workspace's sibling folders and files hidden, whatever its depth;
- a private ``/tmp`` and ``/dev``, and a ``/proc`` of its own PID namespace, so no process of
  the host (opdsl's own among them) can be seen, and nothing outlives the command: when it
  ends or is killed, the namespace and every process in it go with it, ``setsid`` or not;
- the seal key (which marks runs as the user's own, see ``journal/_seal.py``) unreadable,
  ``/dev/null`` bound in its place, so no command can seal a journal of its own making;
- no network unless the workspace allows it;
- only the environment the workspace passes on (secrets removed).

Where bubblewrap is missing or cannot run (no user namespaces), commands are refused with a
message that says why, unless the user opted in to running them unconfined.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["JOURNAL_SIDECARS", "SiblingsVisible", "bwrap_argv", "sandbox_problem"]


@functools.cache
def sandbox_problem() -> str | None:
    """Why commands cannot be confined here, or None when bubblewrap works."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)"
    try:
        probe = subprocess.run(
            [exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "--", "true"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot run: {exc}"
    if probe.returncode != 0:
        first = (probe.stderr.strip().splitlines() or ["no reason given"])[0]
        return f"bubblewrap cannot run here ({first}); user namespaces may be disabled"
    return None


SYSTEM_FOLDERS = frozenset(
    ("bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "nix", "proc", "run")
    + ("sbin", "snap", "sys", "tmp", "usr", "var")
)
"""The top-level folders the system runs from: a workspace's siblings when it lies directly
under ``/``, left as the read-only root shows them."""

RUN_LOCKS = "-runlocks"
"""The file beside a journal its writers hold their runs' kernel locks in
(:mod:`interpreters.journal._runlock`)."""

JOURNAL_SIDECARS = ("", "-wal", "-shm", "-journal", RUN_LOCKS)
"""A SQLite journal's own file, the files SQLite keeps beside it and the one its run locks
are held in (all read as the journal)."""


class SiblingsVisible(Exception):
    """A layout the sandbox cannot confine as it promises: the workspace lies in a folder
    whose other entries cannot be hidden from its commands, or its ``.opdsl`` is a link
    (which a command could replace with a folder holding a journal of its own)."""


def bwrap_argv(
    argv: list[str],
    *,
    root: Path,
    cwd: Path,
    network: bool,
    writable: tuple[Path, ...] = (),
    readable: tuple[Path, ...] = (),
    read_only: tuple[Path, ...] = (),
) -> list[str]:
    """``argv`` wrapped in bubblewrap, confined to ``root`` (see the module docstring);
    ``writable``: other folders it may write (an agent CLI's own home); ``readable``: paths it
    must still see if the workspace's siblings are hidden (the CLI's executable);
    ``read_only``: places inside ``root`` the command may read but not change (the journal a
    run writes, when it lies in the workspace: a folder whole, a file with its SQLite
    sidecars). The workspace's ``.opdsl`` folder is always read-only (made if missing), so
    nothing a command writes is read later as a journal.

    Raises :class:`SiblingsVisible` when the workspace lies directly in a system folder
    (``/usr``, ``/etc``, ...) or in the Python's own prefix, where its siblings cannot be
    hidden, unless ``$OPDSL_SHOW_SIBLINGS=1`` accepts that."""
    exe = shutil.which("bwrap") or "bwrap"
    out = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # what the commands need to run, wherever it lives: the Python (a virtualenv in /tmp, an
    # editable install's source on its import path) and the folders of PATH, read-only
    places = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent}
    places |= {Path(p) for p in sys.path if p and os.path.isabs(p)}
    places |= {Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(p)}
    needed = {p.resolve() for p in places}
    out += _hide_siblings(root, needed)
    # never a folder that holds the workspace, which would show its siblings again
    for place in sorted(needed):
        if place.is_dir() and place != root and place not in root.parents:
            out += ["--ro-bind", str(place), str(place)]
    for extra in readable:
        out += ["--ro-bind", str(extra), str(extra)]
    out += ["--bind", str(root), str(root)]
    for extra in writable:
        out += ["--bind", str(extra), str(extra)]
    key = _seal_key_place()
    out += _pin_seal_key(key, [root, *writable])
    # what the commands need that lies inside the workspace (a project's own .venv, where
    # opdsl's Python may be): read-only again over the workspace's writable bind, else a
    # command could plant a .pth that Python runs at its next start outside the sandbox
    for place in sorted(needed):
        if place.is_dir() and root in place.parents:
            out += ["--ro-bind", str(place), str(place)]
    git_dir = root / ".git"
    if git_dir.exists():
        out += ["--ro-bind", str(git_dir), str(git_dir)]
        real = _gitdir_inside(git_dir, root)
        if real is not None:  # a .git file naming a folder in the workspace: that one too
            out += ["--ro-bind", str(real), str(real)]
    else:
        # nothing to keep read-only: a .git a command makes is never used (see UNGUARDED)
        UNGUARDED.add(root)
    journal_dir = root / ".opdsl"
    if journal_dir.is_symlink() or (journal_dir.exists() and not journal_dir.is_dir()):
        raise SiblingsVisible(
            f"{journal_dir} is not a folder (a link, or a file), which a command could replace "
            "with a journal of its own; make it a folder"
        )
    with contextlib.suppress(FileExistsError):
        journal_dir.mkdir()
    for place in (journal_dir, *read_only):
        out += _read_only(root, place)
    if key is not None and key[1].exists():  # unreadable: /dev/null in its place
        out += ["--ro-bind", "/dev/null", str(key[1])]
    out += ["--unshare-all", "--die-with-parent", "--new-session"]
    if network:
        out.append("--share-net")
    out += ["--chdir", str(cwd), "--"]
    return out + argv


UNGUARDED: set[Path] = set()
"""Workspaces a confined command ran in while they had no ``.git`` to keep read-only: a
``.git`` there now may be a command's (its config can name programs git runs, its hooks are
programs), so the workspace's git tools do not use it, in this process."""


def _seal_key_place() -> tuple[Path, Path] | None:
    """The seal key's path as opdsl finds it and its real path, the key made first if it is
    missing (so that none made while a command runs could be seen: it would be this one);
    None when there is none to hide. A key opdsl refuses (a link, readable by others) is
    hidden all the same."""
    from interpreters.journal._seal import SealKeyError, key_path, seal_key

    try:
        key = key_path()
    except SealKeyError:
        return None
    with contextlib.suppress(SealKeyError):
        seal_key()
    if not os.path.lexists(key):
        return None
    return key, Path(os.path.realpath(key))


def _pin_seal_key(key: tuple[Path, Path] | None, writable: Iterable[Path]) -> list[str]:
    """bwrap arguments that keep a command from moving the seal key's folder away and
    leaving a key of its own in its place, where the key lies in a folder it may write (a
    workspace that is the home folder, an agent CLI's home): each folder from there down to
    the key is bound onto itself, and a mount point cannot be renamed or removed. A link on
    that way (``~/.config`` a link to dotfiles) cannot be pinned, and could be replaced by
    one to a key of the command's: refused."""
    if key is None:
        return []
    given, real = key
    out: list[str] = []
    for place in writable:
        for path in dict.fromkeys((given, real)):
            if place not in path.parents:
                continue
            below = [
                f for f in sorted(path.parents, key=lambda f: len(f.parts)) if place in f.parents
            ]
            for step in (*below, path):
                if step.is_symlink():
                    raise SiblingsVisible(
                        f"the seal key {given} is found through the link {step}, in {place}, "
                        "which commands may write: one could put a link to a key of its own "
                        f"in its place; set OPDSL_SEAL_KEY to the key's real path, {real}"
                    )
            out += [arg for folder in below for arg in ("--bind", str(folder), str(folder))]
    return out


def _gitdir_inside(git_file: Path, root: Path) -> Path | None:
    """The folder a ``.git`` file names (``gitdir: PATH``) when it lies inside ``root``."""
    if not git_file.is_file():
        return None
    try:
        head = git_file.read_text("utf-8", "replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    if not head.startswith("gitdir:"):
        return None
    target = (git_file.parent / head.removeprefix("gitdir:").strip()).resolve()
    return target if root in target.parents and target.is_dir() else None


def _hide_siblings(root: Path, needed: set[Path]) -> list[str]:
    """bwrap arguments that hide the other entries of the workspace's folder.

    In a folder of its own (``/srv/ws``, ``/home/me/src/ws``) the folder is replaced by an
    empty tmpfs, and what the commands need that lived there is bound back afterwards. Directly
    under ``/`` each top-level entry that is not one of the system's :data:`SYSTEM_FOLDERS` is
    hidden on its own (a folder by a tmpfs, a file by an empty one). In a system folder itself
    (``/usr/ws``) or in the Python's prefix, hiding the siblings would hide what the commands
    run on: refused, unless ``$OPDSL_SHOW_SIBLINGS=1``."""
    parent = root.parent
    if parent == Path("/"):
        out = []
        for entry in sorted(parent.iterdir()):
            if entry == root or entry.name in SYSTEM_FOLDERS or entry in needed:
                continue
            if entry.is_symlink():
                continue  # where it points is hidden or shown on its own account
            if entry.is_dir():
                out += ["--tmpfs", str(entry)]
            elif entry.is_file():
                out += ["--ro-bind", "/dev/null", str(entry)]
        return out
    prefixes = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    system = len(parent.parts) == 2 and parent.name in SYSTEM_FOLDERS - {"tmp"}
    if system or parent in prefixes:
        if os.environ.get("OPDSL_SHOW_SIBLINGS") == "1":
            return []
        what = "a system folder" if system else "the folder of the Python that runs them"
        raise SiblingsVisible(
            f"the workspace {root} lies in {parent}, {what}, so its commands would see the "
            f"other entries of {parent}; move the workspace into a folder of its own, or set "
            "OPDSL_SHOW_SIBLINGS=1 to run them with those readable"
        )
    return [] if parent == Path("/tmp") else ["--tmpfs", str(parent)]


def _read_only(root: Path, place: Path) -> list[str]:
    """bwrap arguments that make ``place`` (inside ``root``) read-only: a folder whole (a file
    in a folder: that folder); a file directly in the root with its SQLite sidecars, an empty
    read-only file standing in for each one missing (so that none can be planted beside it).
    A journal's run-lock file is never shown: a stand-in takes its place."""
    real = place.resolve()
    if root not in real.parents:
        return []
    if real.is_file() and real.parent != root:  # a journal in a folder: the folder whole
        real = real.parent
    if real.is_dir():
        # and a stand-in for each run-lock file in it (a command's lock on one would stop
        # every writer of its journal)
        locks = [p for p in real.iterdir() if p.name.endswith(RUN_LOCKS) and p.is_file()]
        return ["--ro-bind", str(real), str(real)] + [
            arg for p in sorted(locks) for arg in ("--ro-bind", "/dev/null", str(p))
        ]
    out = []
    for suffix in JOURNAL_SIDECARS:
        path = real.with_name(real.name + suffix)
        # the run-lock file never: a command's lock on it would stop every writer of the
        # journal, its own run's resume too (a stand-in takes its locks instead)
        source = path if path.exists() and suffix != RUN_LOCKS else Path("/dev/null")
        out += ["--ro-bind", str(source), str(path)]
    return out
