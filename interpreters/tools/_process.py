"""The one subprocess runner: workspace commands and agent CLIs both run through it.

A process starts in a session of its own with its standard input closed (or reading the bytes
it is given, then at their end). Its output is read
in chunks under a hard deadline and an idle timeout and handed to ``consume``, which may stop
the reading. Whatever ends the reading (the output ends, ``consume`` stops it, a timeout, an
error, the run being cancelled), the process group is ended if it has not exited: SIGTERM,
``grace`` seconds, SIGKILL, shielded from cancellation, so no run leaves a process behind.
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
            if process.returncode is None:
                await kill_group(process, grace)
            else:
                # what it left running in its group (a daemon, a stray child) goes with it
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            with anyio.move_on_after(5):
                await process.aclose()
    return Finished(ending, process.returncode)


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
