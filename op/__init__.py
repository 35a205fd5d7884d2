"""The opdsl language: effects, their typed constructors, values, events and errors. Pure.

A program is a generator function returning ``Op[T]``::

    from op import Op, infer, tool, checkpoint

    def fix(task: str) -> Op[str]:
        yield from checkpoint("start")
        reply = yield from infer(task, tools="all")
        return reply.text

What a program is written with is here: the effects (their constructors and classes), the
values they take and give, the state operations, ``program`` and the errors a program may
catch. What an interpreter or a sink is written against lives in :mod:`op.effects` (the
unions, the kind sets, ``ModelRequest``) and :mod:`op.events`.
"""

import importlib as _importlib
import warnings as _warnings
from typing import TYPE_CHECKING as _TYPE_CHECKING

from returns.result import (
    Failure,
    Result,
    Success,
)

from op._effects import (
    Agent,
    Ask,
    Checkpoint,
    Emit,
    Get,
    Infer,
    InvalidOutput,
    Limit,
    Merge,
    Now,
    Op,
    Par,
    Patched,
    Put,
    Random,
    Sleep,
    Timeout,
    Tool,
    Update,
    Uuid,
    agent,
    ask,
    checkpoint,
    emit,
    get,
    infer,
    limit,
    merge,
    now,
    par,
    parse_output,
    put,
    random,
    sleep,
    timeout,
    tool,
    update,
    uuid,
)
from op._errors import (
    DuplicateTool,
    Fatal,
    MergeConflict,
    ModelError,
    OpdslError,
    RunFailed,
    RunNotFinished,
)
from op._patched import (
    deprecate_patched,
    patched,
)
from op._program import (
    WorkspaceOf,
    default_state,
    failure_of,
    program,
    workspace_of,
)
from op._text_calls import (
    TextCalls,
    text_calls,
)
from op._values import (
    Budget,
    BudgetExhausted,
    Message,
    Output,
    Response,
    Spent,
    TimedOut,
    ToolCall,
    ToolResult,
    ToolSpec,
    TurnRecord,
    Usage,
    usage_of,
)
from state import (
    Add,
    Append,
    Assign,
    At,
    Dec,
    Inc,
    Remove,
)

_MOVED: dict[str, str] = {
    "AnyEffect": "op.effects",
    "EFFECT_TYPES": "op.effects",
    "Effect": "op.effects",
    "LEAF_KINDS": "op.effects",
    "LEAF_TYPES": "op.effects",
    "LeafEffect": "op.effects",
    "ModelRequest": "op.effects",
    "NotAProgram": "op.effects",
    "NotAnEffect": "op.effects",
    "NotSerializable": "op.effects",
    "SCOPE_KINDS": "op.effects",
    "STATE_KINDS": "op.effects",
    "AgentEnd": "op.events",
    "AgentStart": "op.events",
    "CheckpointSaved": "op.events",
    "ConflictDetected": "op.events",
    "EffectFinished": "op.events",
    "EffectStarted": "op.events",
    "Emitted": "op.events",
    "Event": "op.events",
    "RunFinished": "op.events",
    "RunStarted": "op.events",
    "TokenDelta": "op.events",
    "ToolEnd": "op.events",
    "ToolStart": "op.events",
    "TurnEnd": "op.events",
    "TurnStart": "op.events",
    "canonical_json": "state",
}
"""Names that were here and live in their room now: old name -> the module it is in. Each
still works until opdsl 0.5.0, with a DeprecationWarning that says where it went."""

if _TYPE_CHECKING:  # the names that moved, as they were typed, until they go
    from op.effects import (
        EFFECT_TYPES as EFFECT_TYPES,
    )
    from op.effects import (
        LEAF_KINDS as LEAF_KINDS,
    )
    from op.effects import (
        LEAF_TYPES as LEAF_TYPES,
    )
    from op.effects import (
        SCOPE_KINDS as SCOPE_KINDS,
    )
    from op.effects import (
        STATE_KINDS as STATE_KINDS,
    )
    from op.effects import (
        AnyEffect as AnyEffect,
    )
    from op.effects import (
        Effect as Effect,
    )
    from op.effects import (
        LeafEffect as LeafEffect,
    )
    from op.effects import (
        ModelRequest as ModelRequest,
    )
    from op.effects import (
        NotAnEffect as NotAnEffect,
    )
    from op.effects import (
        NotAProgram as NotAProgram,
    )
    from op.effects import (
        NotSerializable as NotSerializable,
    )
    from op.events import (
        AgentEnd as AgentEnd,
    )
    from op.events import (
        AgentStart as AgentStart,
    )
    from op.events import (
        CheckpointSaved as CheckpointSaved,
    )
    from op.events import (
        ConflictDetected as ConflictDetected,
    )
    from op.events import (
        EffectFinished as EffectFinished,
    )
    from op.events import (
        EffectStarted as EffectStarted,
    )
    from op.events import (
        Emitted as Emitted,
    )
    from op.events import (
        Event as Event,
    )
    from op.events import (
        RunFinished as RunFinished,
    )
    from op.events import (
        RunStarted as RunStarted,
    )
    from op.events import (
        TokenDelta as TokenDelta,
    )
    from op.events import (
        ToolEnd as ToolEnd,
    )
    from op.events import (
        ToolStart as ToolStart,
    )
    from op.events import (
        TurnEnd as TurnEnd,
    )
    from op.events import (
        TurnStart as TurnStart,
    )
    from state import (
        canonical_json as canonical_json,
    )

__all__ = [
    "Add",
    "Agent",
    "Append",
    "Ask",
    "Assign",
    "At",
    "Budget",
    "BudgetExhausted",
    "Checkpoint",
    "Dec",
    "DuplicateTool",
    "Emit",
    "Failure",
    "Fatal",
    "Get",
    "Inc",
    "Infer",
    "InvalidOutput",
    "Limit",
    "Merge",
    "MergeConflict",
    "Message",
    "ModelError",
    "Now",
    "Op",
    "OpdslError",
    "Output",
    "Par",
    "Patched",
    "Put",
    "Random",
    "Remove",
    "Response",
    "Result",
    "RunFailed",
    "RunNotFinished",
    "Sleep",
    "Spent",
    "Success",
    "TextCalls",
    "TimedOut",
    "Timeout",
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "TurnRecord",
    "Update",
    "Usage",
    "Uuid",
    "WorkspaceOf",
    "agent",
    "ask",
    "checkpoint",
    "default_state",
    "deprecate_patched",
    "emit",
    "failure_of",
    "get",
    "infer",
    "limit",
    "merge",
    "now",
    "par",
    "parse_output",
    "patched",
    "program",
    "put",
    "random",
    "sleep",
    "text_calls",
    "timeout",
    "tool",
    "update",
    "usage_of",
    "uuid",
    "workspace_of",
]
"""What a program author needs (the linter holds it to the imports above)."""


def __getattr__(name: str) -> object:
    where = _MOVED.get(name)
    if where is None:
        raise AttributeError(f"module 'op' has no attribute {name!r}")
    _warnings.warn(
        f"op.{name} is deprecated: import it from {where} (the old name goes in opdsl 0.5.0)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(_importlib.import_module(where), name)


def __dir__() -> list[str]:
    return __all__
