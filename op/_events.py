"""The event protocol every interpreter speaks to its sinks.

Rules every interpreter keeps:

- exactly one ``RunStarted`` and one ``RunFinished`` per run, on every exit path;
- every ``EffectStarted`` is closed by one ``EffectFinished`` with the same address, whose
  status is ``completed``, ``failed``, ``cancelled`` (a timeout or budget closed it), or
  ``unresolved`` (the process died with it open; reported by whoever reads the journal);
- ``CheckpointSaved`` follows each checkpoint's ``EffectFinished``;
- ``Emitted`` carries the program's own ``emit``; ``TokenDelta`` streams model text;
- ``ConflictDetected`` reports set elements that more than one ``par`` branch added.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from op._values import Usage

__all__ = [
    "AgentEnd",
    "AgentStart",
    "CheckpointSaved",
    "ConflictDetected",
    "EffectFinished",
    "EffectStarted",
    "Emitted",
    "Event",
    "RunFinished",
    "RunStarted",
    "TokenDelta",
    "ToolEnd",
    "ToolStart",
    "TurnEnd",
    "TurnStart",
]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    run_id: str
    at: float


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    program: str
    args: Any = None
    parent_run: str | None = None


class RunFinished(_Event):
    type: Literal["run_finished"] = "run_finished"
    status: Literal["completed", "failed", "waiting", "cancelled"]
    error: str | None = None
    address: str | None = None


class EffectStarted(_Event):
    type: Literal["effect_started"] = "effect_started"
    address: str
    kind: str
    effect: Any = None


class EffectFinished(_Event):
    type: Literal["effect_finished"] = "effect_finished"
    address: str
    kind: str
    status: Literal["completed", "failed", "cancelled", "unresolved"]
    duration_s: float = 0.0
    usage: Usage | None = None
    error: str | None = None


class CheckpointSaved(_Event):
    type: Literal["checkpoint_saved"] = "checkpoint_saved"
    address: str
    name: str


class Emitted(_Event):
    type: Literal["emitted"] = "emitted"
    address: str
    name: str
    data: Any = None


class TokenDelta(_Event):
    type: Literal["token_delta"] = "token_delta"
    address: str
    text: str
    #: a piece of the model's thinking (its reasoning before the answer), not of the answer
    thinking: bool = False


class ConflictDetected(_Event):
    type: Literal["conflict_detected"] = "conflict_detected"
    address: str
    conflicts: dict[str, list[Any]]


class AgentStart(_Event):
    """An agent turn began (emitted at spawn, before any output of the agent)."""

    type: Literal["agent_start"] = "agent_start"
    address: str
    backend: str
    model: str | None = None
    session_id: str | None = None


class AgentEnd(_Event):
    type: Literal["agent_end"] = "agent_end"
    address: str
    backend: str
    status: Literal["completed", "failed", "timeout", "crashed", "refused", "stopped"]
    reason: str | None = None


class TurnStart(_Event):
    type: Literal["turn_start"] = "turn_start"
    address: str
    turn: int


class TurnEnd(_Event):
    type: Literal["turn_end"] = "turn_end"
    address: str
    turn: int


class ToolStart(_Event):
    type: Literal["tool_start"] = "tool_start"
    address: str
    tool_id: str
    name: str
    input: Any = None


class ToolEnd(_Event):
    type: Literal["tool_end"] = "tool_end"
    address: str
    tool_id: str
    status: Literal["ok", "error", "unresolved"]
    output: str = ""


Event = Annotated[
    RunStarted
    | RunFinished
    | EffectStarted
    | EffectFinished
    | CheckpointSaved
    | Emitted
    | TokenDelta
    | ConflictDetected
    | AgentStart
    | AgentEnd
    | TurnStart
    | TurnEnd
    | ToolStart
    | ToolEnd,
    Field(discriminator="type"),
]
