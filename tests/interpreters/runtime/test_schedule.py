"""The driver's scheduling is an interface: the same programs run with ``par`` branches on
plain asyncio tasks (as inside another engine's event loop) as on anyio's task groups."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import pytest

from interpreters import LiveHandlers, MemoryJournal, ToolRegistry
from interpreters.runtime import (
    AnyioScheduler,
    AsyncioScheduler,
    Scheduler,
    Services,
    SystemClock,
    execute,
)
from op import Failure, Inc, Op, RunFailed, get, par, sleep, timeout, tool, update
from state import CRDTModel, GCounter


class CountingScheduler(Scheduler):
    """opdsl's plain asyncio scheduler (no anyio task group: what an engine with its own loop
    brings), counting the branch groups it ran."""

    def __init__(self) -> None:
        self.inner = AsyncioScheduler()
        self.groups = 0

    async def run_all(self, branches: Sequence[Callable[[], Coroutine[Any, Any, None]]]) -> None:
        self.groups += 1
        await self.inner.run_all(branches)

    def cancelled(self) -> type[BaseException]:
        return self.inner.cancelled()

    async def wait_forever(self) -> None:
        await self.inner.wait_forever()


class Tally(CRDTModel):
    n: GCounter = GCounter()


def echo(text: str) -> str:
    return text


def fails(text: str) -> str:
    raise ValueError(text)


def branch(name: str, pause: float) -> Op[str]:
    yield from sleep(pause)
    yield from update(n=Inc(1))
    return (yield from tool("echo", {"text": name})).output


def fans_out() -> Op[tuple[list[str], int, bool]]:
    values = yield from par(branch("a", 0.02), branch("b", 0.0), branch("c", 0.01))
    slow = yield from timeout(0.05, branch("late", 5.0))
    state = yield from get(Tally)
    return list(values), state.n.value, isinstance(slow, Failure)


def one_branch_raises() -> Op[tuple[str, ...]]:
    def bad() -> Op[str]:
        yield from sleep(0.01)
        raise KeyError("branch 2 broke")

    return (yield from par(branch("a", 5.0), bad()))


async def _run(program: Callable[[], Op[Any]], scheduler: Scheduler) -> Any:
    journal = MemoryJournal()
    result = await execute(
        program,
        (),
        {},
        run_id="r1",
        services=Services(
            handlers=LiveHandlers(tools=ToolRegistry([echo, fails])),
            journal=journal,
            clock=SystemClock(),
            scheduler=scheduler,
        ),
        state=Tally(),
    )
    entries = [(e.address, e.kind, e.status) for e in journal.entries("r1")]
    return result, entries


@pytest.mark.parametrize("make", [AnyioScheduler, CountingScheduler])
def test_par_and_timeout_run_alike_on_either_scheduler(make: Callable[[], Scheduler]) -> None:
    scheduler = make()
    result, entries = asyncio.run(_run(fans_out, scheduler))
    assert result.value == (["a", "b", "c"], 3, True)
    reference, reference_entries = asyncio.run(_run(fans_out, AnyioScheduler()))
    assert entries == reference_entries
    if isinstance(scheduler, CountingScheduler):
        assert scheduler.groups == 1


@pytest.mark.parametrize("make", [AnyioScheduler, CountingScheduler])
def test_a_failing_branch_cancels_its_sibling_on_either_scheduler(
    make: Callable[[], Scheduler],
) -> None:
    result, entries = asyncio.run(_run(one_branch_raises, make()))
    with pytest.raises(RunFailed, match="branch 2 broke"):
        _ = result.value
    # the sibling's sleep was cut off, not left running
    assert ("1.1.1", "sleep", "cancelled") in entries
