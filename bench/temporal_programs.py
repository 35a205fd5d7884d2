"""The programs and tools of ``bench/temporal.py``, in a module of their own: Temporal's
workflow sandbox imports a program's module again, and refuses one that touches the process
(paths, arguments) as the bench script does."""

from __future__ import annotations

import asyncio

from op import Op, tool


def noop(i: int) -> int:
    return i


def program(n: int) -> Op[int]:
    total = 0
    for i in range(n):
        total += int((yield from tool("noop", {"i": i})).output)
    return total


async def pause(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "ok"


def slow_program() -> Op[int]:
    for _ in range(8):
        yield from tool("pause", {"seconds": 0.5})
    return 8
