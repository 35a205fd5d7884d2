"""A synchronous tool cut by a ``timeout`` runs on in its thread and may still act after the
deadline; one marked ``@isolated`` (or ``BoundTool(isolated=True)``) runs in a child process
that the deadline kills with what it started. The ``TimedOut`` says which kind was cut and
whether its work can still land."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure

from interpreters import BoundTool, MemoryJournal, isolated, run
from op import Op, TimedOut, timeout, tool
from tests.fixtures import isolated_tools

# the decorator, and BoundTool's parameter: the two ways a tool opts in
isolated(isolated_tools.slow_write_isolated)
isolated(isolated_tools.double)
REFUSES = BoundTool.from_function(isolated_tools.refuses, isolated=True)


def cut_off(name: str, path: str, seconds: float) -> Op[Any]:
    return (yield from timeout(0.4, tool(name, {"path": path, "seconds": seconds})))


def timed_out(result: Any) -> TimedOut:
    assert isinstance(result.value, Failure), result
    cut = result.value.failure()
    assert isinstance(cut, TimedOut)
    return cut


def test_an_isolated_tool_is_killed_at_the_deadline_and_its_work_never_lands(
    tmp_path: Path,
) -> None:
    target = tmp_path / "out.txt"
    started = time.monotonic()
    result = run(
        cut_off,
        "slow_write_isolated",
        str(target),
        3.0,
        tools=[isolated_tools.slow_write_isolated],
        db=MemoryJournal(),
    )
    assert time.monotonic() - started < 2.5  # the deadline, not the tool's 3 seconds
    (note,) = timed_out(result).cut
    assert "tool 'slow_write_isolated' at 1.1" in note
    assert "child process (isolated), killed at the deadline" in note
    assert "nothing it does lands after it" in note
    # past the moment it (and the process it started) would have written
    time.sleep(max(0.0, started + 3.3 - time.monotonic()))
    assert not target.exists() and not Path(f"{target}.child").exists()


def test_a_thread_tool_cut_off_is_said_to_run_on_and_it_does(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    result = run(
        cut_off,
        "slow_write",
        str(target),
        1.0,
        tools=[isolated_tools.slow_write],
        db=MemoryJournal(),
    )
    (note,) = timed_out(result).cut
    assert "a synchronous tool in a worker thread, which cannot be stopped" in note
    assert "its work may still land after the deadline" in note and "@isolated" in note
    deadline = time.monotonic() + 3
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert target.read_text() == "landed"  # as the note said it might


def test_an_isolated_tool_answers_fails_and_prints_as_any_tool() -> None:
    def program() -> Op[list[Any]]:
        a = yield from tool("double", {"n": 21})
        b = yield from tool("refuses", {"reason": "no thanks"})
        return [a.output, b.ok, b.error]

    result = run(program, tools=[isolated_tools.double, REFUSES], db=MemoryJournal())
    assert result.value == ['{"n":42}', False, "tool 'refuses' raised ValueError: no thanks"]


def test_what_cannot_be_isolated_is_refused_when_bound() -> None:
    def local(n: int) -> int:
        return n

    with pytest.raises(TypeError, match="define .*local.* at the top level of a module"):
        BoundTool.from_function(local, isolated=True)
    assert BoundTool.from_function(isolated_tools.slow_write, isolated=True).isolated

    async def waits() -> None: ...

    with pytest.raises(TypeError, match="@isolated is for synchronous tools"):
        isolated(waits)
