"""The ``opdsl`` command (also ``python -m interpreters``), the demo and ``opdsl new``."""

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """The ``opdsl`` command (:func:`interpreters.cli._main.main`). The command's module is
    imported here, inside the process's first call, so that a Ctrl-C while it loads is one
    line and status 130 rather than a traceback. The process's own command (``argv`` None)
    is called inside the same ``try``: a Ctrl-C in the moment after the command has handled
    its own and before it has handed over to the handler that ends the process at once
    would otherwise be raised where nothing catches it."""
    loaded = False
    try:
        from interpreters.cli import _main

        loaded = True
        return _main.main(argv)
    except KeyboardInterrupt:
        if not loaded:
            return _stopped_loading(argv)
        if argv is not None:
            raise
        from interpreters.cli._interrupt import end_now

        end_now()
    except Exception as exc:
        from interpreters.cli._interrupt import reports_interrupt

        if loaded or not reports_interrupt(exc):
            raise
        # a Ctrl-C that a class being made raised as another error (Python's RuntimeError
        # from ``__set_name__``, pydantic-core's SchemaError) as the command's modules load
        return _stopped_loading(argv)


def _stopped_loading(argv: list[str] | None) -> int:
    """Ctrl-C stopped the command as its modules loaded: one line, status 130."""
    if argv is None:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the process ends next: no more
    print("opdsl: stopped; no run was left to continue", file=sys.stderr)
    # CPython's ``-m`` ends by signal (status -2), not with the status given, when a
    # KeyboardInterrupt once ended a string ``exec`` (a dataclass being made as a module
    # loads) even though it was caught; the next string ``exec`` clears that mark
    exec("")
    return 130
