"""Running programs: the driver, the interpreters, handlers, journals, sinks and the CLI.

::

    from interpreters import run, ScriptedModel
    result = run(program, "task", model=ScriptedModel(["done"]))
    result.value, result.state, result.run_id, result.status
"""

from interpreters._api import arun, run
from interpreters._clock import Clock, SystemClock, VirtualClock
from interpreters._driver import (
    Call,
    Driver,
    Handlers,
    RecordedEffect,
    RunResult,
    WaitingForAnswer,
    execute,
    program_name,
)
from interpreters._journal import Entry, Journal, JournalError, MemoryJournal, RunRecord
from interpreters._live import AgentBackend, LiveHandlers, LiveInterpreter, new_run_id
from interpreters._models import CallInfo, Model, ModelScriptExhausted, ScriptedModel, resolve_model
from interpreters._scripted import ANY, Expect, ScriptedInterpreter, ScriptMismatch, expect
from interpreters._sinks import ConsoleSink, EventBus, JsonlSink, Sink
from interpreters._tools import Tool, ToolRegistry

__all__ = [
    "ANY",
    "AgentBackend",
    "Call",
    "CallInfo",
    "Clock",
    "ConsoleSink",
    "Driver",
    "Entry",
    "EventBus",
    "Expect",
    "Handlers",
    "Journal",
    "JournalError",
    "JsonlSink",
    "LiveHandlers",
    "LiveInterpreter",
    "MemoryJournal",
    "Model",
    "ModelScriptExhausted",
    "RecordedEffect",
    "RunRecord",
    "RunResult",
    "ScriptMismatch",
    "ScriptedInterpreter",
    "ScriptedModel",
    "Sink",
    "SystemClock",
    "Tool",
    "ToolRegistry",
    "VirtualClock",
    "WaitingForAnswer",
    "arun",
    "execute",
    "expect",
    "new_run_id",
    "program_name",
    "resolve_model",
    "run",
]
