"""Ending a subprocess and everything it started."""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from typing import Any

import anyio

__all__ = ["kill_group"]


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
