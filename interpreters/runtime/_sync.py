"""Calling the async API from synchronous code, in one place."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

__all__ = ["blocking"]

T = TypeVar("T")


def blocking(call: Callable[[], Awaitable[T]], *, backend: str = "asyncio") -> T:
    """Run ``await call()`` on a fresh event loop (``backend``: asyncio or trio); give the
    arguments with ``functools.partial``, so none of a program's own can clash with ``backend``.

    Example:
        >>> import functools
        >>> async def add(a: int, b: int) -> int:
        ...     return a + b
        >>> blocking(functools.partial(add, 1, b=2))
        3
    """
    return anyio.run(call, backend=backend)
