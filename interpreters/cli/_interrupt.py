"""Ctrl-C, at any moment from start-up to the process's end: one line on stderr and status
130, never a traceback. The line says what was left: a run to continue, or nothing."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = [
    "STARTED",
    "begin",
    "end_at_once_on_interrupt",
    "end_now",
    "interrupted",
    "redelivering",
    "reports_interrupt",
    "set_sigint",
]

STARTED: list[tuple[str, str | None]] = []
"""(run id, journal) of the runs this command started or continued, for a Ctrl-C message."""

_SAID_STOPPED: list[bool] = []
"""Whether the line that says what Ctrl-C left was printed (it is printed once)."""


def begin() -> None:
    """A command begins: nothing has been said about a Ctrl-C yet."""
    _SAID_STOPPED.clear()


def set_sigint(handler: Any) -> Any:
    """Set the SIGINT handler and give the one it replaced (None off the main thread)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, handler)


def interrupted(*, ending: bool) -> int:
    """Ctrl-C stopped the command: say in one line what it left (a Ctrl-C pressed again
    meanwhile is ignored), and give status 130. ``ending``: the process ends next, so the
    ignoring is not undone (:func:`end_at_once_on_interrupt` takes over)."""
    import signal

    previous = set_sigint(signal.SIG_IGN)
    try:
        if not _SAID_STOPPED:
            print(_stopped(), file=sys.stderr)
            _SAID_STOPPED.append(True)
    finally:
        if not ending and previous is not None:
            set_sigint(previous)
    return 130


def reports_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C that something caught and raised as another error: raised
    from a KeyboardInterrupt (Python 3.11's RuntimeError when one lands in a
    ``__set_name__``), or pydantic-core's SchemaError, which keeps one raised while it built a
    validator (a Ctrl-C landing while a model class is defined, as a command's modules load)
    only as its last line. Explicit causes (``raise ... from``) are followed, as a program's
    "cannot import" error keeps its import's error; an error that merely came while one was
    handled (its context: a bug in a run's cleanup after a Ctrl-C) is said as itself."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            return True
        if type(e).__module__.startswith("pydantic_core") and type(e).__name__ == "SchemaError":
            lines = str(e).strip().splitlines()
            if lines and lines[-1].strip().startswith("KeyboardInterrupt"):
                return True
        e = e.__cause__
    return False


def redelivering(hook: Callable[[Any], object]) -> Callable[[Any], None]:
    """An unraisable-exception hook that delivers a Ctrl-C again when it landed where it
    cannot be raised (a weakref callback, a ``__del__``: Python prints "Exception ignored"
    and goes on as if it was never pressed); other unraisable exceptions go to ``hook``."""

    def redeliver(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            import _thread

            try:
                _thread.interrupt_main()  # the SIGINT handler runs again, in the main thread
            except KeyboardInterrupt:
                # Python's own handler was the one set (between opdsl's), and raised here,
                # in the hook, where it would be lost again: the command stops in one line
                interrupted(ending=True)
                end_now()
            return
        hook(unraisable)

    return redeliver


def end_at_once_on_interrupt() -> None:
    """From here to the process's end (its result is printed; the interpreter tears down), a
    Ctrl-C ends the process at once with status 130 and one line, where Python would raise
    KeyboardInterrupt wherever teardown happened to be (a traceback, or death by signal)."""

    def end(signum: int, frame: Any) -> None:
        end_now()

    set_sigint(end)


def end_now() -> NoReturn:
    """End the process at once with status 130, saying so in one line unless the line that
    says what Ctrl-C left was printed already."""
    try:
        if not _SAID_STOPPED:
            sys.stderr.write("opdsl: stopped\n")
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # a stream the signal caught mid-write: end all the same
        pass
    os._exit(130)


def _stopped() -> str:
    """What Ctrl-C left: a run to continue, or nothing. Nothing is imported unless a run
    began: a Ctrl-C during start-up may have left a module half imported."""
    if not STARTED:
        return "opdsl: stopped; no run was left to continue"
    from interpreters import open_journal
    from interpreters.journal._status import can_resume

    for run_id, db in reversed(STARTED):
        try:
            status = open_journal(db, read_only=True).run(run_id).status
        except Exception:
            continue
        if can_resume(status):
            where = f" --db {db}" if db else ""
            from interpreters._shown import visible

            return visible(f"opdsl: stopped; continue with: opdsl resume {run_id}{where}")
    return "opdsl: stopped; no run was left to continue"
