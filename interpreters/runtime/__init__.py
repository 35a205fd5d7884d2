"""The runtime: the one loop that drives every program, its addresses, scopes, budgets and
state replicas, reading a journal back, the clock, the event bus and redaction.

It does no I/O of its own and imports no HTTP, git, SQLite or console library (a test
enforces it), so an interpreter that runs inside another engine can reuse it.
"""

from interpreters.runtime._clock import (
    AsyncioDeadline,
    Clock,
    Deadline,
    SystemClock,
    VirtualClock,
    asyncio_deadline,
)
from interpreters.runtime._driver import (
    Driver,
    RunResult,
    execute,
    nearest_checkpoint,
    new_run_id,
    program_name,
)
from interpreters.runtime._events import EventBus, Sink, as_sinks
from interpreters.runtime._frame import (
    Call,
    Frame,
    Handlers,
    LocalEffect,
    RecordedEffect,
    Replica,
    RunHandlers,
    WaitingForAnswer,
)
from interpreters.runtime._interpreter import Interpreter
from interpreters.runtime._redact import REDACTED, Redactor
from interpreters.runtime._replay import Divergence, ReplayedError, ReplayLog
from interpreters.runtime._schedule import AnyioScheduler, AsyncioScheduler, Scheduler
from interpreters.runtime._services import Services

__all__ = [
    "AnyioScheduler",
    "AsyncioDeadline",
    "AsyncioScheduler",
    "Deadline",
    "Scheduler",
    "Services",
    "REDACTED",
    "Call",
    "Clock",
    "Divergence",
    "Driver",
    "EventBus",
    "Frame",
    "Handlers",
    "Interpreter",
    "LocalEffect",
    "RunHandlers",
    "RecordedEffect",
    "Redactor",
    "Replica",
    "ReplayLog",
    "ReplayedError",
    "RunResult",
    "Sink",
    "SystemClock",
    "VirtualClock",
    "WaitingForAnswer",
    "as_sinks",
    "asyncio_deadline",
    "execute",
    "nearest_checkpoint",
    "new_run_id",
    "program_name",
]
