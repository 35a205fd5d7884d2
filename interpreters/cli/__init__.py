"""The ``opdsl`` command (also ``python -m interpreters``), the demo and ``opdsl new``."""

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """The ``opdsl`` command (:func:`interpreters.cli._main.main`). The command's module is
    imported here, inside the process's first call, so that a Ctrl-C while it loads is one
    line and status 130 rather than a traceback."""
    try:
        from interpreters.cli import _main
    except KeyboardInterrupt:
        print("opdsl: stopped; no run was left to continue", file=sys.stderr)
        return 130
    return _main.main(argv)
