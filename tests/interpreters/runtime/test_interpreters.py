"""Every interpreter has one shape (``runtime/_interpreter.py``): built once, then ``arun``
for each run; the effects of the run's own (``now``, ``random``, ``uuid``, ``sleep``,
``emit``) are performed by one base (``RunHandlers``); programs, tools and state types are
loaded by one loader (``_loading``), the Temporal workflow's included."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import trio
from temporalio.exceptions import ApplicationError

from interpreters import LiveInterpreter, MemoryJournal, ScriptedInterpreter, expect, run
from interpreters._dry_run import DryRunInterpreter, Plan
from interpreters._live import LiveHandlers
from interpreters._loading import ProgramNotFound, as_program, as_state_type, load_program, resolve
from interpreters._replaying import ReplayInterpreter
from interpreters.runtime import (
    Interpreter,
    RunHandlers,
    RunResult,
    Services,
    VirtualClock,
    execute,
)
from interpreters.runtime._frame import Call
from interpreters.temporal._workflow import _Handlers as TemporalHandlers
from interpreters.temporal._workflow import _load_program as temporal_program
from op import (
    Budget,
    Emit,
    Now,
    Op,
    Random,
    Sleep,
    ToolResult,
    Uuid,
    emit,
    now,
    random,
    sleep,
    tool,
    uuid,
)
from op.effects import LeafEffect
from state import CRDTModel, GCounter


class Tally(CRDTModel):
    n: GCounter = GCounter()


def drawn() -> Op[tuple[float, float, str]]:
    yield from emit("start")
    yield from sleep(2.0)
    t = yield from now()
    r = yield from random()
    u = yield from uuid()
    return t, r, u


def shout(text: str) -> str:
    return text.upper()


def shouting() -> Op[str]:
    r = yield from tool("shout", {"text": "hi"})
    return r.output


def not_a_program() -> int:
    return 1


def test_every_interpreter_has_the_one_shape() -> None:
    journal = MemoryJournal()
    recorded = run(shouting, tools=[shout], db=journal)
    interpreters: list[Interpreter[Any]] = [
        LiveInterpreter(tools=[shout]),
        ScriptedInterpreter([(expect("tool", name="shout"), ToolResult(output="HI"))]),
        ReplayInterpreter(recorded.run_id, db=journal),
        DryRunInterpreter(tools=[shout]),
    ]
    outcomes = [asyncio.run(i.arun(shouting)) for i in interpreters]
    assert all(isinstance(i, Interpreter) for i in interpreters)
    assert [o.value for o in outcomes[:3]] == ["HI", "HI", "HI"]
    plan = outcomes[3]
    assert isinstance(plan, Plan) and plan.would_run == ["shout at 1"]
    # and the same from synchronous code, every one
    again = [i.run(shouting) for i in interpreters[:2]]
    again.append(ReplayInterpreter(recorded.run_id, db=journal).run())
    assert [o.value for o in again] == ["HI", "HI", "HI"]
    assert DryRunInterpreter(tools=[shout]).run(shouting).would_run == ["shout at 1"]


def test_the_live_interpreters_old_awaited_run_still_works_with_a_warning() -> None:
    interpreter = LiveInterpreter(tools=[shout])

    async def old_style() -> str:
        with pytest.warns(DeprecationWarning, match=r"await arun\(\.\.\.\) instead"):
            result = await interpreter.run(shouting)  # type: ignore[misc]
        return str(result.value)

    assert asyncio.run(old_style()) == "HI"
    assert trio.run(old_style) == "HI"  # inside trio's loop the same
    assert interpreter.run(shouting).value == "HI"  # no loop running: it runs, no warning


class _OwnOnly(RunHandlers):
    """Handlers of no world-facing effect: the base performs the rest."""

    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        assert isinstance(effect, Emit | Now | Random | Uuid | Sleep)
        return await self.local(effect, call)


def test_the_run_s_own_effects_are_performed_by_one_base() -> None:
    assert issubclass(LiveHandlers, RunHandlers) and issubclass(TemporalHandlers, RunHandlers)
    clock = VirtualClock()

    async def on(handlers: RunHandlers) -> RunResult[tuple[float, float, str]]:
        return await execute(
            drawn,
            (),
            {},
            run_id="same",
            services=Services(handlers=handlers, clock=VirtualClock(start=clock.now())),
        )

    live = asyncio.run(on(LiveHandlers(seed=7)))
    own = asyncio.run(on(_OwnOnly(seed=7)))
    assert live.value == own.value
    assert live.value[0] == clock.now() + 2.0  # slept on the run's clock


def test_one_loader_names_what_is_not_a_program() -> None:
    ref = f"{__name__}:not_a_program"
    with pytest.raises(ProgramNotFound, match="is not a program"):
        load_program(ref)
    with pytest.raises(ProgramNotFound, match="is not a program"):
        as_program(resolve(ref), ref)
    # the Temporal workflow loads through it: a non-program fails the run, not its task
    with pytest.raises(ApplicationError, match="is not a program") as caught:
        temporal_program(ref)
    assert caught.value.non_retryable
    # and an import that fails there is left to fail the task (retried)
    with pytest.raises(ModuleNotFoundError):
        temporal_program("no_such_module_here:program")
    assert as_state_type(Tally, "m:Tally") is Tally
    with pytest.raises(ProgramNotFound, match="state type 'm:Budget' is not a CRDTModel"):
        as_state_type(Budget, "m:Budget")


def test_the_old_names_are_still_importable_from_durable() -> None:
    from interpreters import _durable

    for name in (
        "aanswer",
        "adry_run",
        "areplay",
        "aresume",
        "check_code",
        "checkpoint_labels",
        "config_for",
        "find_checkpoint",
        "guard_journal",
        "load_object",
        "load_program",
        "load_tools",
        "replay",
        "resume",
        "Plan",
        "ProgramNotFound",
        "CodeChanged",
    ):
        assert hasattr(_durable, name), name
