"""The activities: where a worker performs ``tool``, ``infer``, ``agent`` and ``checkpoint`` with
the tools, models, agents and workspace it was started with (keys stay on the worker).

Each activity rebuilds the effect from its canonical JSON, performs it with opdsl's live
handlers, and returns the result as canonical JSON with the worker's secrets replaced, so no
key reaches the history. An error of the effect is returned as data (the program gets it, as
locally), not raised: Temporal retries only what failed for reasons of its own (a worker that
died). While an effect runs the activity heartbeats, so a worker's death is seen within the
heartbeat timeout, and a cancellation reaches the handler, which stops the effect (a tool's
process group is ended).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, final

from temporalio import activity
from temporalio.exceptions import ApplicationError

from interpreters._durable import ProgramNotFound, load_program
from interpreters._live import AgentBackend, LiveHandlers
from interpreters.models._base import Model
from interpreters.runtime._clock import SystemClock
from interpreters.runtime._events import EventBus
from interpreters.runtime._frame import Call
from interpreters.runtime._redact import Redactor
from interpreters.runtime._replay import error_json
from interpreters.temporal._types import ACTIVITY, Admission, AdmitRequest, EffectCall, Outcome
from interpreters.tools._bound import ToolLike, ToolRegistry
from interpreters.tools._workspace import Workspace
from op import Agent, Checkpoint, Fatal, Infer, LeafEffect, Message, Tool, default_state
from state import canonical_json, to_jsonable

__all__ = ["Activities", "effect_from_json"]


def effect_from_json(text: str) -> LeafEffect:
    """The effect an activity performs, from the canonical JSON the workflow sent."""
    data = json.loads(text)
    kind = data.get("kind")
    if kind == "tool":
        return Tool(name=str(data["name"]), args=dict(data.get("args") or {}))
    if kind == "infer":
        tools = data.get("tools")
        return Infer(
            messages=tuple(Message.model_validate(m) for m in data["messages"]),
            model=data.get("model"),
            tools="all" if tools == "all" else tuple(tools or ()),
            params=dict(data.get("params") or {}),
        )
    if kind == "agent":
        return Agent(
            backend=str(data["backend"]),
            prompt=str(data["prompt"]),
            options=dict(data.get("options") or {}),
        )
    if kind == "checkpoint":
        return Checkpoint(name=str(data["name"]))
    raise ApplicationError(f"an activity cannot perform a {kind!r} effect", non_retryable=True)


@final
class Activities:
    """The activities of one worker. ``programs``: the only programs its workflows may run
    (``module:function``); a run naming another fails at once, before any effect."""

    def __init__(
        self,
        *,
        programs: Iterable[str],
        tools: Iterable[ToolLike] = (),
        model: Model | None = None,
        agents: Mapping[str, AgentBackend] | None = None,
        workspace: Workspace | None = None,
        heartbeat_seconds: float = 2.0,
    ) -> None:
        self.programs = frozenset(programs)
        self.handlers = LiveHandlers(
            model=model, tools=ToolRegistry(tools), agents=agents, workspace=workspace
        )
        self.heartbeat_seconds = heartbeat_seconds
        self.redact = Redactor.from_env()

    def all(self) -> list[Callable[..., Any]]:
        """Every activity, to register on a worker."""
        return [self.admit, self.tool, self.infer, self.agent, self.checkpoint, self.restore]

    @activity.defn(name=ACTIVITY["admit"])
    async def admit(self, request: AdmitRequest) -> Admission:
        """Admit a run of ``request.program`` on this worker, or refuse it. A state type must be
        the program's declared one or come from the program's own module: a run's input
        never makes the worker import a module it was not given."""
        program = request.program
        if program not in self.programs:
            raise ApplicationError(
                f"this worker does not run {program}; it runs "
                f"{', '.join(sorted(self.programs)) or 'no program'} (opdsl worker --program)",
                type="ProgramNotAllowed",
                non_retryable=True,
            )
        try:
            fn = load_program(program)  # here, where an import error can be said plainly
        except ProgramNotFound as exc:
            raise ApplicationError(str(exc), type="ProgramNotFound", non_retryable=True) from None
        wanted = request.state_type
        if wanted is not None:
            declared = default_state(fn)
            same_module = wanted.partition(":")[0] == program.partition(":")[0]
            if not same_module and (declared is None or to_jsonable(type(declared)) != wanted):
                raise ApplicationError(
                    f"state type {wanted} is neither {program}'s declared state nor in its "
                    "module; this worker does not import it",
                    type="StateNotAllowed",
                    non_retryable=True,
                )
        registry = self.handlers.tools
        quick = [n for n in registry.names() if (t := registry.get(n)) is not None and t.quick]
        return Admission(quick_tools=quick, heartbeat_seconds=self.heartbeat_seconds)

    @activity.defn(name=ACTIVITY["tool"])
    async def tool(self, call: EffectCall) -> Outcome:
        return await self._perform(call)

    @activity.defn(name=ACTIVITY["infer"])
    async def infer(self, call: EffectCall) -> Outcome:
        return await self._perform(call)

    @activity.defn(name=ACTIVITY["agent"])
    async def agent(self, call: EffectCall) -> Outcome:
        return await self._perform(call)

    @activity.defn(name=ACTIVITY["checkpoint"])
    async def checkpoint(self, call: EffectCall) -> Outcome:
        return await self._perform(call)

    @activity.defn(name=ACTIVITY["restore"])
    async def restore(self, snapshot_json: str) -> None:
        await self.handlers.restore(json.loads(snapshot_json))

    async def _perform(self, call: EffectCall) -> Outcome:
        effect = effect_from_json(call.effect_json)
        info = Call(call.run_id, call.address, SystemClock(), EventBus([]), off_loop=True)
        work = asyncio.ensure_future(self.handlers.perform(effect, info))
        try:
            while True:
                # heartbeat while the effect runs: a dead worker is noticed, and a cancellation
                # comes back with the heartbeat's answer
                if activity.in_activity() and not activity.info().is_local:
                    activity.heartbeat(call.address)
                done, _ = await asyncio.wait({work}, timeout=self.heartbeat_seconds / 2)
                if done:
                    break
            value = work.result()
        except asyncio.CancelledError:
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            raise
        except Exception as exc:
            text = self.redact(error_json(exc))
            return Outcome(error_json=text, fatal=isinstance(exc, Fatal))
        return Outcome(result_json=self.redact(canonical_json(value)))
