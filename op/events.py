"""The events every interpreter emits to its sinks (a callback, a JSONL file, the console):
one ``RunStarted`` and one ``RunFinished`` per run, ``EffectStarted``/``EffectFinished`` pairs,
``CheckpointSaved``, the program's own ``Emitted``, ``TokenDelta`` while a model streams, and
an agent's turn (``AgentStart`` ... ``AgentEnd``). What a sink is written against.

Example:
    >>> from op.events import EffectStarted
    >>> EffectStarted(run_id="r", at=0.0, address="1", kind="infer").type
    'effect_started'
"""

from op._events import (
    AgentEnd,
    AgentStart,
    CheckpointSaved,
    ConflictDetected,
    EffectFinished,
    EffectStarted,
    Emitted,
    Event,
    RunFinished,
    RunStarted,
    TokenDelta,
    ToolEnd,
    ToolStart,
    TurnEnd,
    TurnStart,
)

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
