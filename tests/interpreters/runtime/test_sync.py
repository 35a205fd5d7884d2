"""``blocking``: the async API from sync code, also from code an event loop is running (a
journal whose reads are async, read inside an async replay)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading

import pytest

from interpreters import MemoryJournal, run
from interpreters.runtime._sync import blocking
from op import Op, tool


async def _where() -> int:
    await asyncio.sleep(0)
    return threading.get_ident()


def test_blocking_runs_here_without_a_loop_and_in_a_thread_under_one() -> None:
    assert blocking(_where) == threading.get_ident()

    async def inside() -> tuple[int, int]:
        return blocking(_where), threading.get_ident()

    other, here = asyncio.run(inside())
    assert other != here


def test_a_second_ctrl_c_as_the_loop_closes_leaves_nothing_for_asyncio_to_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Ctrl-C stops the run by raising in asyncio's main task; a second one landing while
    the loop closes (here: where asyncio closes its async generators, which is what Python's
    own SIGINT handler would raise there) kept asyncio from marking the task's exception
    seen, and asyncio logged it with a traceback once the task was collected."""

    def ctrl_c() -> str:
        os.kill(os.getpid(), signal.SIGINT)  # the run stops before its next effect
        return "done"

    def twice() -> Op[str]:
        first = yield from tool("ctrl_c", {})
        yield from tool("ctrl_c", {})
        return first.output

    def second_ctrl_c(self: asyncio.AbstractEventLoop) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(asyncio.BaseEventLoop, "shutdown_asyncgens", second_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run(twice, tools=[ctrl_c], db=MemoryJournal())
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
