"""The ``opdsl`` command (also ``python -m interpreters``), the demo and ``opdsl new``."""

from interpreters.cli._main import main

__all__ = ["main"]
