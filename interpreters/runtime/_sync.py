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
        return anyio.run(call, backend=backend)
    # called from code an event loop is running (a journal read inside an async replay): a
    # loop of its own, in a thread of its own
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: anyio.run(call, backend=backend)).result()
