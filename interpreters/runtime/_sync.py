"""Calling the async API from synchronous code, in one place."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

__all__ = ["blocking"]

T = TypeVar("T")


def blocking(call: Callable[[], Awaitable[T]], *, backend: str = "asyncio") -> T:
    """Run ``await call()`` on a fresh event loop (``backend``: asyncio or trio), in a thread of
    its own when this thread already runs a loop; give the arguments with
    ``functools.partial``, so none of a program's own can clash with ``backend``.

    Example:
        >>> import functools
        >>> async def add(a: int, b: int) -> int:
        ...     return a + b
        >>> blocking(functools.partial(add, 1, b=2))
        3
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    if not running:
        # outside the except block: an error of the call is not chained to "no running loop"
        return _run_here(call, backend)
    # called from code an event loop is running (a journal read inside an async replay): a
    # loop of its own, in a thread of its own
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: _run_here(call, backend)).result()


def _run_here(call: Callable[[], Awaitable[T]], backend: str) -> T:
    """``anyio.run``, where a Ctrl-C that ends the run is raised to the caller and nowhere else.

    The Ctrl-C stops a run by raising ``KeyboardInterrupt`` in asyncio's main task; asyncio
    marks the task's exception as seen only when its loop runs once more, as it closes. A
    second Ctrl-C landing in that close leaves it unseen, and asyncio then logs it with a
    traceback ("Task exception was never retrieved") whenever the task is collected, after the
    caller has said in one line what the Ctrl-C left. The caller is given that exception (or
    the second Ctrl-C), so it is marked as seen here."""
    main: list[asyncio.Task[object]] = []

    async def in_task() -> T:
        task = asyncio.current_task() if backend == "asyncio" else None
        if task is not None:
            main.append(task)
        return await call()

    try:
        return anyio.run(in_task, backend=backend)
    finally:
        for task in main:
            if task.done() and not task.cancelled():
                task.exception()
