"""The ``opdsl`` command (also ``python -m interpreters``).

Wrong input (an unknown run, checkpoint or program, a malformed ``--arg``, a missing or
corrupt database) prints one line, ``opdsl: error: ...``, and exits with status 2. A run that
fails exits with 1; a replay that diverges prints its report and exits with 1. A bug of
opdsl's own prints its traceback and exits with 70 (``_errors.py`` says whose an error is).

The commands are declared in their groups' modules (:class:`~interpreters.cli._command.Command`
values); :data:`COMMANDS` is their table, in the order ``opdsl --help`` lists them.
"""

from __future__ import annotations

import argparse
import os
import sys

from interpreters.cli import _check, _going_on, _project, _reading, _run, _show, _store, _whatif
from interpreters.cli._command import Command, OnTemporal, UsageError
from interpreters.cli._errors import ended_by
from interpreters.cli._inputs import version
from interpreters.cli._interrupt import (
    begin,
    end_at_once_on_interrupt,
    interrupted,
    redelivering,
    reports_interrupt,
    set_sigint,
)
from interpreters.cli._mcp import MCP
from interpreters.cli._prices import PRICES
from state._canonical import lone_surrogate

__all__ = ["COMMANDS", "main"]

COMMANDS: tuple[Command, ...] = (
    _run.RUN_COMMAND,
    _reading.RUNS,
    _show.SHOW,
    _reading.TAIL,
    _reading.REPORT,
    _reading.DIFF,
    _reading.CHECKPOINTS,
    _going_on.RESUME,
    _going_on.REPLAY,
    _going_on.ANSWER,
    _check.CHECK,
    _whatif.WHATIF,
    _whatif.COST,
    _store.EXPORT,
    _store.IMPORT,
    _store.TRUST,
    _store.GC,
    PRICES,
    _project.DEMO,
    _project.NEW,
    MCP,
    _run.WORKER,
)
"""Every command, in the order ``opdsl --help`` lists them."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opdsl", description="Run, resume and replay agent programs."
    )
    parser.add_argument("--version", action="version", version=f"opdsl {version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_to(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command. Ctrl-C at any moment, from start-up to the process's end, is one line on
    stderr and status 130, never a traceback: before and during the command it is caught here;
    once the command is over (``argv`` None: this is the process's own command) a Ctrl-C ends
    the process at once (see :func:`~interpreters.cli._interrupt.end_at_once_on_interrupt`)."""
    args: argparse.Namespace | None = None
    begin()
    if argv is None:
        import atexit
        import signal
        import warnings

        # a Ctrl-C that lands while asyncio.run ends its loop leaves one of asyncio's own
        # shutdown coroutines unawaited; Python would print a warning about it after the line
        warnings.filterwarnings(
            "ignore",
            message=(
                "coroutine 'BaseEventLoop.shutdown_(asyncgens|default_executor)' was never awaited"
            ),
            category=RuntimeWarning,
        )

        # the last exit hook (the first registered): from there on Python itself tears
        # down, puts back the operating system's default for SIGINT, and a Ctrl-C would
        # kill the process by signal; ignored instead, the status stays the one given
        atexit.register(set_sigint, signal.SIG_IGN)
    hook = sys.unraisablehook
    sys.unraisablehook = redelivering(hook)
    try:
        try:
            wrong = _not_text(sys.argv[1:] if argv is None else argv)
            if wrong is not None:
                code = ended_by(UsageError(wrong))
            else:
                args = _parser().parse_args(argv)
                code = _dispatch(args)
        except KeyboardInterrupt:
            code = interrupted(ending=argv is None)
    finally:
        if argv is None:
            end_at_once_on_interrupt()
            # CPython's ``-m`` (``python -m interpreters``) ends by signal, status -2, when a
            # KeyboardInterrupt once ended a string ``exec`` (a dataclass or namedtuple being
            # made) even though it was caught; the next string ``exec`` clears that mark
            exec("")
        else:
            sys.unraisablehook = hook
    if argv is None and args is not None and _on_temporal(args):
        _exit_at_once(code)
    return code


def _not_text(argv: list[str]) -> str | None:
    """What is wrong with an argument that is not UTF-8 (Python hands its bytes on as lone
    surrogates, which no journal, seal or terminal takes), or None."""
    for i, arg in enumerate(argv, 1):
        if lone_surrogate(arg) is not None:
            try:  # the bytes as given
                shown = str(arg.encode("utf-8", "surrogateescape"))[1:]
            except UnicodeEncodeError:  # a surrogate no byte was read as
                shown = ascii(arg)
            return (
                f"argument {i} ({shown}) is not UTF-8 text: opdsl reads its command line "
                "(run ids, --arg values, paths) as UTF-8"
            )
    return None


def _on_temporal(a: argparse.Namespace) -> bool:
    """Whether the command talks to a Temporal server."""
    declared: Command = a.declared
    return bool(getattr(a, "temporal", None)) or declared.temporal is OnTemporal.SERVES


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command; how an error ends it is :func:`~interpreters.cli._errors.ended_by`'s:
    wrong input is one line and status 2, a bug of opdsl's a traceback and status 70."""
    declared: Command = args.declared
    _import_path(declared)
    try:
        if _on_temporal(args):
            _check_temporal(args, declared)
        code: int = declared.run(args)
        # what is left to print is written here, where a reader that went away is caught
        sys.stdout.flush()
        return code
    except Exception as exc:
        if reports_interrupt(exc):
            raise KeyboardInterrupt from exc
        return ended_by(exc)


def _import_path(command: Command) -> None:
    """Programs are named module:function, importable from the current folder as with
    ``python -m``. When a journal names the code, the current folder (often the workspace,
    which confined commands may write) goes last, so that nothing planted there shadows an
    installed module such as ``programs``; the modules a run recorded are checked before
    they are imported (:func:`interpreters._durable.check_code`)."""
    here = os.getcwd()
    if command.code_from_journal:
        sys.path[:] = [p for p in sys.path if p not in ("", here)] + [here]
    elif "" not in sys.path and here not in sys.path:
        sys.path.insert(0, here)


def _exit_at_once(code: int) -> None:
    """End the process without the interpreter's teardown. The Temporal client's native
    threads can outlive the event loop and abort the process while Python finalizes
    ("PyGILState_Release: thread state ... must be current", temporalio/sdk-python#300),
    turning a command that succeeded into a crash; what it printed is flushed first."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _check_temporal(a: argparse.Namespace, command: Command) -> None:
    """``--temporal``: the extra must be installed; reading commands read the server's runs."""
    if command.temporal is OnTemporal.SERVES and not a.temporal:
        raise UsageError(f"opdsl {command.name} needs --temporal HOST:PORT")
    try:
        from interpreters.temporal import TemporalJournal
    except ImportError:
        raise UsageError(
            "--temporal needs the temporal extra: pip install 'opdsl[temporal]'"
        ) from None
    if a.db:
        raise UsageError("--temporal and --db name two places for the runs; give one")
    if command.temporal is OnTemporal.READS:
        a.db = TemporalJournal(a.temporal)


if __name__ == "__main__":
    sys.exit(main())
