"""Time as a service of the interpreter: ``now``, ``sleep``, deadlines and budgets read it.

``SystemClock`` is real time. ``VirtualClock`` is for tests: time stands still while any task
of the run is working, and jumps straight to the next timer (a sleep ending, a deadline
passing) once every task of the run is waiting on the clock, so a one-hour timeout test takes
no time and always ends the same way. The driver tells the clock when ``par`` starts and ends
tasks (``task_started``/``task_done``), which is how it knows everyone is waiting.

Gotcha: a handler waiting on real I/O under a VirtualClock keeps its task counted as working,
so time does not jump while it waits; only clock sleeps let time pass.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, final

import anyio

__all__ = [
    "AsyncioDeadline",
    "Clock",
    "Deadline",
    "SystemClock",
    "VirtualClock",
    "asyncio_deadline",
]


class Deadline(Protocol):
    """What the driver reads of a deadline once its body has ended (an anyio cancel scope
    is one; an engine with its own event loop brings its own)."""

    @property
    def cancelled_caught(self) -> bool:
        """Whether the deadline passed and cut the body off."""
        ...


@final
class AsyncioDeadline:
    """A deadline on a plain asyncio task (see :func:`asyncio_deadline`)."""

    __slots__ = ("cancelled_caught", "fired")

    def __init__(self) -> None:
        self.fired = False
        self.cancelled_caught = False


@contextmanager
def asyncio_deadline(seconds: float) -> Iterator[AsyncioDeadline]:
    """Cancel the current asyncio task once, ``seconds`` from now (the loop's own timer, so an
    engine with a deterministic loop replays it), and swallow that one cancellation when the
    body ends with it, as ``asyncio.timeout`` does. A cancellation from elsewhere propagates."""
    task = asyncio.current_task()
    if task is None:  # pragma: no cover - the driver always runs in a task
        raise RuntimeError("asyncio_deadline needs a running asyncio task")
    deadline = AsyncioDeadline()

    def fire() -> None:
        deadline.fired = True
        task.cancel()

    handle = asyncio.get_running_loop().call_later(max(0.0, seconds), fire)
    try:
        yield deadline
    except asyncio.CancelledError:
        if not deadline.fired or task.uncancel() > 0:
            raise
        deadline.cancelled_caught = True
    finally:
        handle.cancel()


class Clock(ABC):
    """What the driver and handlers ask about time."""

    @abstractmethod
    def now(self) -> float:
        """Seconds since the epoch (what the ``now`` effect returns)."""

    @abstractmethod
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (durations, deadlines)."""

    @abstractmethod
    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""

    @abstractmethod
    @contextmanager
    def deadline(self, seconds: float) -> Iterator[Deadline]:
        """Cancel the body once, ``seconds`` from now; say afterwards whether it did."""
        yield anyio.CancelScope()  # pragma: no cover

    def task_started(self) -> None:  # noqa: B027 - a hook; real time needs no bookkeeping
        """A task of the run began working."""

    def task_done(self) -> None:  # noqa: B027 - a hook; real time needs no bookkeeping
        """A task of the run ended or began waiting on other tasks."""


@final
class SystemClock(Clock):
    """Real time."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    @contextmanager
    def deadline(self, seconds: float) -> Iterator[anyio.CancelScope]:
        with anyio.CancelScope(deadline=anyio.current_time() + seconds) as scope:
            yield scope


@final
class VirtualClock(Clock):
    """A clock that only moves when every task of the run waits on it.

    Example:
        >>> clock = VirtualClock(start=1000.0)
        >>> clock.now()
        1000.0
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._start = start
        self._working = 1
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._ids = itertools.count()

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now - self._start

    def _add_timer(self, at: float, fire: Callable[[], None]) -> int:
        tid = next(self._ids)
        heapq.heappush(self._timers, (at, tid, fire))
        return tid

    def _advance_if_idle(self) -> None:
        while self._working <= 0 and self._timers:
            at, tid, fire = heapq.heappop(self._timers)
            if tid in self._cancelled:
                self._cancelled.discard(tid)
                continue
            self._now = max(self._now, at)
            fire()
            # fire() wakes a task up; it counts itself working again when it resumes,
            # so stop here and let it run
            return

    async def sleep(self, seconds: float) -> None:
        event = anyio.Event()
        tid = self._add_timer(self._now + seconds, event.set)
        self._working -= 1
        try:
            self._advance_if_idle()
            await event.wait()
        finally:
            if not event.is_set():
                self._cancelled.add(tid)
            self._working += 1

    @contextmanager
    def deadline(self, seconds: float) -> Iterator[anyio.CancelScope]:
        with anyio.CancelScope() as scope:
            tid = self._add_timer(self._now + seconds, scope.cancel)
            try:
                yield scope
            finally:
                self._cancelled.add(tid)

    def task_started(self) -> None:
        self._working += 1

    def task_done(self) -> None:
        self._working -= 1
        self._advance_if_idle()
