"""A backend that does nothing and says so: for wiring programs up before an agent is chosen."""

from __future__ import annotations

from typing import final

from interpreters.agents.kit import CallInfo, ToolHost, Turn, register_backend
from op import Agent, TurnRecord
from op.events import AgentEnd, AgentStart

__all__ = ["NoopBackend"]


@final
class NoopBackend:
    """Does nothing and says so: for wiring programs up before an agent is chosen."""

    name = "noop"
    serves_tools = False
    reports_cost = True  # it spends nothing
    supports_cooperative_stop = False  # it has no messages to stop between
    supports_max_turns = True  # it takes no turn at all

    async def __call__(
        self, effect: Agent, call: CallInfo, tools: ToolHost | None = None
    ) -> TurnRecord:
        turn = Turn(call=call, backend=self.name)
        turn.emit(AgentStart(**turn.base(), backend=self.name))
        turn.emit(AgentEnd(**turn.base(), backend=self.name, status="completed"))
        return TurnRecord(backend=self.name, text="", exit_code=0)


register_backend("noop", NoopBackend)
