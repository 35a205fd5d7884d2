"""Confining workspace commands with bubblewrap (``bwrap``).

A command's arguments can name any path, so the workspace's own path checks cannot confine
it; the operating system does. Each command runs in fresh namespaces:

- the root file system read-only; the workspace the only writable place, with its ``.git``
  read-only (git operations go through the git tools); the workspace's sibling folders hidden;
- a private ``/tmp`` and ``/dev``, and a ``/proc`` of its own PID namespace, so no process of
  the host (opdsl's own among them) can be seen, and nothing outlives the command: when it
  ends or is killed, the namespace and every process in it go with it, ``setsid`` or not;
- no network unless the workspace allows it;
- only the environment the workspace passes on (secrets removed).

Where bubblewrap is missing or cannot run (no user namespaces), commands are refused with a
message that says why, unless the user opted in to running them unconfined.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["bwrap_argv", "sandbox_problem"]


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


def bwrap_argv(
    argv: list[str],
    *,
    root: Path,
    cwd: Path,
    network: bool,
    writable: tuple[Path, ...] = (),
    readable: tuple[Path, ...] = (),
) -> list[str]:
    """``argv`` wrapped in bubblewrap, confined to ``root`` (see the module docstring);
    ``writable``: other folders it may write (an agent CLI's own home); ``readable``: paths it
    must still see if the workspace's siblings are hidden (the CLI's executable)."""
    exe = shutil.which("bwrap") or "bwrap"
    out = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    parent = root.parent
    # hide the workspace's siblings (../other-project), unless the parent holds the Python
    # that runs the commands or is a top-level folder the system needs
    runtime = (
        Path(sys.prefix).resolve(),
        Path(sys.base_prefix).resolve(),
        Path(sys.executable).resolve(),
    )
    if len(parent.parts) > 2 and not any(p == parent or parent in p.parents for p in runtime):
        out += ["--tmpfs", str(parent)]
    # the Python that runs commands stays visible, wherever it lives (a virtualenv in /tmp),
    # with its import path (an editable install's source), read-only; never a folder that
    # holds the workspace, which would show its siblings again
    places = {Path(sys.prefix), Path(sys.base_prefix), *(Path(p) for p in sys.path if p)}
    for place in sorted({p.resolve() for p in places}):
        if place.is_dir() and place != root and place not in root.parents:
            out += ["--ro-bind", str(place), str(place)]
    for extra in readable:
        out += ["--ro-bind", str(extra), str(extra)]
    out += ["--bind", str(root), str(root)]
    for extra in writable:
        out += ["--bind", str(extra), str(extra)]
    git_dir = root / ".git"
    if git_dir.exists():
        out += ["--ro-bind", str(git_dir), str(git_dir)]
    out += ["--unshare-all", "--die-with-parent", "--new-session"]
    if network:
        out.append("--share-net")
    out += ["--chdir", str(cwd), "--"]
    return out + argv
