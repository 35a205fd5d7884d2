"""How a command that raised ends: whose the error is decides what is said and the status.

- The user's: what they typed or named was refused (:class:`UsageError`; opdsl's own errors,
  :class:`~op.OpdslError`, which it raises with a message for its caller: an unknown
  program, checkpoint or model spec, changed code; a journal that is missing, not a journal
  or corrupt, :class:`~interpreters.journal.JournalError`; a value a journal cannot hold;
  a file that cannot be read or written, :class:`OSError`). One line, ``opdsl: error: ...``,
  status :data:`USAGE` (2).
- A replay that diverged: its report, status 1 (as a run that failed).
- Output whose reader went away (``opdsl runs --json | head``): nothing said, status 141,
  as for a command ended by SIGPIPE; what is left to print goes nowhere.
- Anything else is a bug of opdsl's (a ``TypeError`` or ``ValueError`` among them: they are
  not taken for bad input): its traceback, a line that says so, status :data:`INTERNAL`.

Every text is redacted (the secrets in the environment never show) and shown with its
control characters escaped.
"""

from __future__ import annotations

import sys

__all__ = ["INTERNAL", "PIPE_CLOSED", "USAGE", "ended_by"]

USAGE = 2
"""Wrong input: the user's to fix."""

PIPE_CLOSED = 141
"""The reader of the output went away: 128 + SIGPIPE, as the shell reports a command it ended."""

INTERNAL = 70
"""An internal error: a bug of opdsl's (``EX_SOFTWARE`` of sysexits.h), never taken for bad
input (2) or a run that failed (1)."""


def _users() -> tuple[type[BaseException], ...]:
    from interpreters.cli._command import UsageError
    from interpreters.journal import JournalError
    from interpreters.journal._content import ContentError
    from op import OpdslError
    from op.effects import NotSerializable

    # ContentError: a journal's content that is not what opdsl wrote (a file changed outside it)
    return (UsageError, OpdslError, JournalError, ContentError, NotSerializable, OSError)


def ended_by(exc: Exception) -> int:
    """Say why the command stopped at ``exc`` and give its status."""
    from interpreters._redact import Redactor
    from interpreters._shown import visible
    from interpreters.runtime._replay import Divergence

    if isinstance(exc, BrokenPipeError):
        _stdout_to_nowhere()
        return PIPE_CLOSED
    redact = Redactor.from_env()
    if isinstance(exc, Divergence):
        print(f"opdsl: {exc}", file=sys.stderr)
        return 1
    if isinstance(exc, _users()):
        message = redact(" ".join(str(exc).split()))
        print(f"opdsl: error: {visible(message, lines=False)}", file=sys.stderr)
        return USAGE
    import traceback

    shown = redact("".join(traceback.format_exception(exc)))
    said = redact(" ".join(f"{type(exc).__name__}: {exc}".split()))
    print(visible(shown.rstrip("\n")), file=sys.stderr)
    print(
        f"opdsl: internal error: {visible(said, lines=False)}; this is a bug in opdsl, not in "
        "what was typed: please report it with the traceback above",
        file=sys.stderr,
    )
    return INTERNAL


def _stdout_to_nowhere() -> None:
    """Point stdout at the null device, so that the flush as Python ends raises nothing."""
    import os

    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):  # stdout is no file (a test's capture): nothing to flush
        pass
