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
            print("opdsl: stopped; no run was left to continue", file=sys.stderr)
            return 130
        if argv is not None:
            raise
        from interpreters.cli._interrupt import end_now

        end_now()
