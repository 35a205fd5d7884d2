"""The little scheduling the driver needs, behind one interface, so that the driver runs on
any event loop: anyio's for local runs (asyncio or trio), another engine's inside it.

The driver asks for three things: run a ``par``'s branches at once (a failing branch cancels
its siblings; every error comes back in one group), tell a cancellation from an error, and
wait until cancelled (a replayed effect the record shows was cut off). Deadlines are the
clock's (:meth:`Clock.deadline`), since virtual time drives them in tests.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, final

import anyio

__all__ = ["AnyioScheduler", "AsyncioScheduler", "Scheduler"]


class Scheduler(ABC):
    """How the driver runs concurrent branches and waits."""

    @abstractmethod
    async def run_all(self, branches: Sequence[Callable[[], Coroutine[Any, Any, None]]]) -> None:
        """Run every branch at once until all end. When one raises, cancel the others and
        raise a ``BaseExceptionGroup`` holding what each raised (cancellations included)."""

    @abstractmethod
    def cancelled(self) -> type[BaseException]:
        """The exception this event loop cancels a task with."""

    @abstractmethod
    async def wait_forever(self) -> None:
        """Wait until cancelled."""


@final
class AnyioScheduler(Scheduler):
    """anyio's task groups: asyncio or trio, whichever runs the run."""

    async def run_all(self, branches: Sequence[Callable[[], Coroutine[Any, Any, None]]]) -> None:
        async with anyio.create_task_group() as tg:
            for branch in branches:
                tg.start_soon(branch)

    def cancelled(self) -> type[BaseException]:
        return anyio.get_cancelled_exc_class()

    async def wait_forever(self) -> None:
        await anyio.sleep_forever()


@final
class AsyncioScheduler(Scheduler):
    """Plain asyncio tasks, no anyio: what an engine that brings its own event loop (Temporal's
    workflow loop) can run. anyio's cancellation is delivered again and again until the task
    ends, which an engine's own awaits may swallow; asyncio's is delivered once."""

    async def run_all(self, branches: Sequence[Callable[[], Coroutine[Any, Any, None]]]) -> None:
        async with asyncio.TaskGroup() as tg:
            for branch in branches:
                tg.create_task(branch())

    def cancelled(self) -> type[BaseException]:
        return asyncio.CancelledError

    async def wait_forever(self) -> None:
        await asyncio.Event().wait()
