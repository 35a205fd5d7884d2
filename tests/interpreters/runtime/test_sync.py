"""``blocking``: the async API from sync code, also from code an event loop is running (a
journal whose reads are async, read inside an async replay)."""

from __future__ import annotations

import asyncio
import threading

from interpreters.runtime._sync import blocking


async def _where() -> int:
    await asyncio.sleep(0)
    return threading.get_ident()


def test_blocking_runs_here_without_a_loop_and_in_a_thread_under_one() -> None:
    assert blocking(_where) == threading.get_ident()

    async def inside() -> tuple[int, int]:
        return blocking(_where), threading.get_ident()

    other, here = asyncio.run(inside())
    assert other != here
