"""What an agent CLI is started under, so that it ends with opdsl, however opdsl ends.

An agent CLI runs in a process group of its own (so that a turn's end can kill it and all it
started: its MCP server, the commands it ran). That group does not hear what ends opdsl: a
SIGTERM or SIGKILL to opdsl, or a crash, would leave Claude Code and its MCP server running.
So opdsl starts the CLI under this launcher, by path (``python -I -S _lifeline.py FD FOLDER --
ARGV...``), which imports only the standard library:

- ``FD`` is the read end of a pipe whose write end only opdsl holds. When opdsl ends, for any
  reason, the pipe reads end-of-file: the launcher kills its whole process group at once and
  removes ``FOLDER`` (the turn's private folder, if it has one; ``""`` for none) once the
  group is gone, from a process of its own that outlives the group.
- Otherwise it is transparent: the CLI inherits its standard input and output, its exit status
  is the launcher's (a CLI ended by a signal ends the launcher with the same signal), and a
  SIGTERM to the group (opdsl ending the turn) is the CLI's to answer within its grace time;
  the launcher waits for it.
"""

from __future__ import annotations

# only what starts fast: a turn waits for this launcher (subprocess and shutil would treble it)
import os
import signal
import sys
import threading
import time

#: the longest the remover waits for the killed group to be gone before it removes the folder
REMOVE_WAIT = 10.0


def _remove_when_gone(group: int, folder: str) -> None:
    """Wait (in a session of its own, outside ``group``) until the group is gone, then remove
    ``folder``."""
    import shutil

    ends = time.monotonic() + REMOVE_WAIT
    while time.monotonic() < ends:
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(0.02)
    shutil.rmtree(folder, ignore_errors=True)


def _watch(fd: int, folder: str) -> None:
    """Block until opdsl is gone, then end the whole group (this process included)."""
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    group = os.getpgid(0)
    if folder:
        import contextlib

        # setsid: the remover is in a session of its own, out of the group, once spawned
        with contextlib.suppress(OSError):
            os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", __file__, "--remove", str(group), folder],
                os.environ,
                setsid=True,
            )
    os.killpg(group, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[1] == "--remove":
        _remove_when_gone(int(argv[2]), argv[3])
        return 0
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: _lifeline.py FD FOLDER -- ARGV...\n")
        return 2
    fd, folder, command = int(argv[1]), argv[2], argv[4:]
    os.set_inheritable(fd, False)  # the CLI does not hold opdsl's lifeline
    # a SIGTERM to the group is the CLI's to answer; this waits for it (a handler, not
    # SIG_IGN, which the CLI would inherit)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    threading.Thread(target=_watch, args=(fd, folder), daemon=True).start()
    try:
        pid = os.posix_spawnp(command[0], command, os.environ)
    except OSError as exc:
        sys.stderr.write(f"cannot start {command[0]}: {exc}\n")
        return 127
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code < 0:  # ended by a signal: so is this
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
