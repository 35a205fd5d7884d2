"""A regular-expression search of text that ends by a wall-clock deadline, whatever the load.

The ``regex`` module's ``timeout=`` counts the process's CPU time (C's ``clock()``), not the
time that passes. A process on a loaded machine gets a share of a core, so its CPU time runs
slower than the clock: a backtracking pattern over a 50,000-character line stopped after
13 s against a bound of 5 s. So each line is searched here in two steps:

1. in this process, with ``timeout=`` at most :data:`SLICE` of CPU time: nearly every line
   ends well within it;
2. a line that needs more is searched again in a child process, which is killed when the
   deadline passes (the clock's time, not the CPU's): the search then stops within moments
   of its bound, however little of a core the process gets.

What the first step may overrun is one :data:`SLICE` of CPU time, however long that takes on
the clock (a tenth of a second with half a core).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import regex

__all__ = ["SLICE", "SearchStopped", "search_line"]

SLICE = 0.05
"""The CPU seconds a line may take in this process before it is searched in a child."""

_CHILD = """\
import json, sys, regex
job = json.loads(sys.stdin.buffer.read())
rx = regex.compile(job["pattern"], job["flags"])
try:
    found = rx.search(job["line"], timeout=job["seconds"]) is not None
except TimeoutError:
    sys.exit(3)
sys.stdout.write("1" if found else "0")
"""


class SearchStopped(Exception):
    """The line was not searched to its end: the deadline passed (``timed_out``), or the
    process that searched it could not (the message says why)."""

    def __init__(self, why: str = "") -> None:
        super().__init__(why)
        self.timed_out = not why


def search_line(rx: regex.Pattern[str], line: str, deadline: float) -> bool:
    """Whether ``rx`` matches somewhere in ``line``, known before ``deadline`` (a
    ``time.monotonic()`` time); :class:`SearchStopped` if it is not.

    Example:
        >>> search_line(regex.compile("b+"), "abba", time.monotonic() + 1)
        True
    """
    left = deadline - time.monotonic()
    if left <= 0:
        raise SearchStopped()
    try:
        return rx.search(line, timeout=min(SLICE, left)) is not None
    except TimeoutError:
        return _in_child(rx, line, deadline)


def _in_child(rx: regex.Pattern[str], line: str, deadline: float) -> bool:
    left = deadline - time.monotonic()
    if left <= 0:
        raise SearchStopped()
    job = json.dumps({"pattern": rx.pattern, "flags": rx.flags, "line": line, "seconds": left})
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _CHILD],
            input=job.encode(),
            capture_output=True,
            timeout=left,  # then it is killed (and waited for) before this returns
            env={},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SearchStopped() from None
    except OSError as exc:
        raise SearchStopped(f"could not start a process to search a long line: {exc}") from None
    if done.returncode == 3:  # its own bound (CPU time, never longer than the clock's)
        raise SearchStopped()
    if done.stdout not in (b"0", b"1"):
        last = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
        raise SearchStopped(f"failed on a long line in its own process ({last[:200]})")
    return done.stdout == b"1"
