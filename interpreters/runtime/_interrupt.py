"""Ctrl-C: a run stops before its next effect, even while a synchronous tool blocks (which no
cancellation can reach); a second Ctrl-C interrupts at once.

Runs that overlap in one process share one SIGINT handler, installed by the first and removed
by the last, so the handler that was there before is always the one put back. A run is stopped
by replacing its driver's ``perform`` with one that raises, so the check costs the normal path
nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from op.effects import AnyEffect

if TYPE_CHECKING:
    from interpreters.runtime._driver import Driver
    from interpreters.runtime._frame import Frame

__all__ = ["interrupt", "stop_on_interrupt"]

_RUNNING: list[Driver] = []
"""The runs of this process that Ctrl-C stops; one handler serves them all."""
_PREVIOUS: list[Any] = []  # the SIGINT handler to put back when the last run ends


def interrupt(driver: Driver) -> None:
    """Stop ``driver``'s run before its next effect: its ``perform`` is replaced by one that
    raises ``KeyboardInterrupt``."""
    driver.interrupted = True

    async def stopped(effect: AnyEffect, address: str, frame: Frame) -> Any:
        raise KeyboardInterrupt

    driver.perform = stopped  # type: ignore[method-assign]


def _on_interrupt(signum: int, frame: Any) -> None:
    if any(d.interrupted for d in _RUNNING):
        raise KeyboardInterrupt  # a second Ctrl-C: at once
    for driver in _RUNNING:
        interrupt(driver)
    previous = _PREVIOUS[0] if _PREVIOUS else None
    if previous is not signal.default_int_handler and callable(previous):
        previous(signum, frame)  # asyncio's: cancels what awaits, so a model call stops too


@contextlib.contextmanager
def stop_on_interrupt(driver: Driver) -> Iterator[None]:
    """While the block runs, Ctrl-C stops ``driver``'s run at its next effect (only in the
    main thread of the main interpreter, where signals are delivered)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not _RUNNING:
        try:
            _PREVIOUS[:] = [signal.signal(signal.SIGINT, _on_interrupt)]
        except ValueError:  # not the main interpreter
            yield
            return
    _RUNNING.append(driver)
    try:
        yield
    finally:
        _RUNNING.remove(driver)
        if not _RUNNING:
            signal.signal(signal.SIGINT, _PREVIOUS.pop())
