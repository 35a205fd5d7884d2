"""The one subprocess runner: workspace commands and agent CLIs both run through it.

A process starts in a session of its own with its standard input closed (or reading the bytes
it is given, then at their end). Its output is read
in chunks under a hard deadline and an idle timeout and handed to ``consume``, which may stop
the reading. Whatever ends the reading (the output ends, ``consume`` stops it, a timeout, an
error, the run being cancelled), the process group is ended if it has not exited: SIGTERM,
``grace`` seconds, SIGKILL, shielded from cancellation, so no run leaves a process behind;
what was below it or in its group and still runs (in a session of its own) is SIGKILLed
too, and the run goes on once all of them are gone (at most five seconds more).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, final

import anyio

__all__ = ["Finished", "kill_group", "run_process"]

Ending = Literal["exited", "stopped", "timeout", "idle"]
"""How reading ended: the output ended and the process exited in time; ``consume`` asked to
stop; the hard deadline passed; no output came for the idle timeout."""


@final
@dataclass(frozen=True, slots=True)
class Finished:
    """A process that has been run to its end (or ended)."""

    ending: Ending
    #: the exit status; negative when it was ended by a signal (``-15``, ``-9``)
    returncode: int | None


async def run_process(
    argv: Sequence[str],
    *,
    cwd: str | Path | None,
    env: Mapping[str, str],
    timeout: float,
    idle_timeout: float,
    grace: float,
    consume: Callable[[bytes], bool],
    merge_stderr: bool = False,
    exit_wait: float | None = None,
    stdin: bytes | None = None,
    pass_fds: Sequence[int] = (),
) -> Finished:
    """Run ``argv``, feeding its standard output to ``consume`` (return True to stop reading).

    ``merge_stderr``: standard error joins the output, else it is discarded. ``stdin``: what
    the process reads on its standard input (from a file, so however much it is, no write can
    block), else nothing. ``pass_fds``: file descriptors it inherits. Once the output ends,
    the process is given ``exit_wait`` seconds to exit (default: what is left of ``timeout``,
    after which the ending is ``timeout``). Raises ``OSError`` if it cannot start.
    """
    with tempfile.TemporaryFile() if stdin is not None else open(os.devnull, "rb") as source:
        if stdin is not None:
            source.write(stdin)
            source.seek(0)
        process = await anyio.open_process(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=source,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=pass_fds,
        )
    ending: Ending = "exited"
    try:
        assert process.stdout is not None
        deadline = anyio.current_time() + timeout
        with anyio.move_on_after(timeout) as hard:
            while True:
                chunk = b""
                with anyio.move_on_after(idle_timeout) as idle:
                    try:
                        chunk = await process.stdout.receive(65536)
                    except anyio.EndOfStream:
                        break
                if idle.cancelled_caught:
                    ending = "idle"
                    break
                if consume(chunk):
                    ending = "stopped"
                    break
        if hard.cancelled_caught:
            ending = "timeout"
        elif ending != "idle":
            left = max(0.0, deadline - anyio.current_time())
            with anyio.move_on_after(left if exit_wait is None else exit_wait) as waiting:
                await process.wait()
            if waiting.cancelled_caught and exit_wait is None:
                ending = "timeout"  # it closed its output but kept running
    finally:
        with anyio.CancelScope(shield=True):
            # a descendant is looked for only while the command's pid is still its own
            below = _below(process.pid, descendants=process.returncode is None)
            if process.returncode is None:
                await kill_group(process, grace)
            else:
                # what it left running in its group (a daemon, a stray child) goes with it
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            for pid, _ in filter(_alive, below):  # out of the group: a session of its own
                with suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with anyio.move_on_after(5):
                await process.aclose()
                while any(map(_alive, below)):
                    await anyio.sleep(0.01)
    return Finished(ending, process.returncode)


_Seen = tuple[int, bytes]
"""A process as found in /proc: its pid and its start time (which a reused pid does not
share)."""


def _below(root: int, *, descendants: bool) -> list[_Seen]:
    """The processes in ``root``'s group and (``descendants``) below it, read from /proc.
    Some die only a moment after ``root``: a sandbox's PID namespace is torn down by the
    kernel after bubblewrap itself is killed, and a command in a session of its own there
    is no member of the group the kill reaches. None where /proc is not this process's own
    (another PID namespace's pids would name other processes here) or cannot be read: the
    group kill is then all there is, as before."""
    if not descendants:
        try:
            os.killpg(root, 0)
        except ProcessLookupError:  # the group is empty: nothing to look for (the usual end)
            return []
        except PermissionError:
            pass
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return []
        names = os.listdir("/proc")
    except OSError:
        return []
    group = str(root).encode()
    children: dict[int, list[_Seen]] = {}
    found: dict[_Seen, None] = {}  # in the order found, each once
    for name in names:
        if not (name.isascii() and name.isdigit()):
            continue
        fields = _stat(int(name))
        if fields is None or len(fields) < 20:  # gone meanwhile, or not a shape we know
            continue
        me = (int(name), fields[19])
        with suppress(ValueError):
            children.setdefault(int(fields[1]), []).append(me)
        if fields[2] == group and me[0] != root:
            found[me] = None
    stack = [root] if descendants else []
    while stack:
        for child in children.get(stack.pop(), ()):
            found[child] = None
            stack.append(child[0])
    return list(found)


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat from the state on (the name before them may hold any
    bytes, ``)`` and spaces included), or None if it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def _alive(process: _Seen) -> bool:
    """Whether the process still runs: not gone, not a zombie, and its pid not handed to
    another since."""
    fields = _stat(process[0])
    return (
        fields is not None
        and len(fields) >= 20
        and fields[19] == process[1]
        and fields[0] not in (b"Z", b"X")
    )


async def kill_group(process: Any, grace: float) -> None:
    """SIGTERM the process group, wait ``grace`` seconds, SIGKILL what is left.

    The process must have been started in a session of its own (``start_new_session=True``),
    so that its group holds it and its children and nothing else.
    """
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    with anyio.move_on_after(grace):
        await process.wait()
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with anyio.move_on_after(5):
        await process.wait()
