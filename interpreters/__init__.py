"""Running programs: the driver, the interpreters, handlers, journals, sinks and the CLI.

::

    from interpreters import run, ScriptedModel
    result = run(program, "task", model=ScriptedModel(["done"]))   # journaled to .opdsl/runs.db
    result.value, result.state, result.run_id, result.status
    resume(result.run_id, from_checkpoint="before-verify")          # fork from a checkpoint
    replay(result.run_id)                                           # check it, offline
"""

from interpreters._agents import (
    AgentError,
    ClaudeCodeBackend,
    CliBackend,
    CodexBackend,
    NoopBackend,
    backends,
    register_backend,
)
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
from interpreters._durable import (
    Plan,
    ProgramNotFound,
    aanswer,
    adry_run,
    areplay,
    aresume,
    dry_run,
    load_program,
    replay,
    resume,
)
from interpreters._journal import (
    Entry,
    Journal,
    JournalError,
    MemoryJournal,
    RunLocked,
    RunRecord,
    SqliteJournal,
    check_integrity,
    export_run,
    import_run,
    open_journal,
)
from interpreters._live import AgentBackend, LiveHandlers, LiveInterpreter, new_run_id
from interpreters._models import CallInfo, Model, ModelScriptExhausted, ScriptedModel, resolve_model
from interpreters._replay import Divergence, ReplayedError
from interpreters._scripted import ANY, Expect, ScriptedInterpreter, ScriptMismatch, expect
from interpreters._sinks import ConsoleSink, EventBus, JsonlSink, Sink
from interpreters._tools import Tool, ToolLike, ToolRegistry, read_only
from interpreters._workspace import Workspace, WorkspaceError

__all__ = [
    "ANY",
    "AgentBackend",
    "AgentError",
    "Call",
    "CallInfo",
    "ClaudeCodeBackend",
    "CliBackend",
    "Clock",
    "CodexBackend",
    "ConsoleSink",
    "Divergence",
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
    "NoopBackend",
    "Plan",
    "ProgramNotFound",
    "RecordedEffect",
    "ReplayedError",
    "RunLocked",
    "RunRecord",
    "RunResult",
    "ScriptMismatch",
    "ScriptedInterpreter",
    "ScriptedModel",
    "Sink",
    "SqliteJournal",
    "SystemClock",
    "Tool",
    "ToolLike",
    "ToolRegistry",
    "VirtualClock",
    "WaitingForAnswer",
    "Workspace",
    "WorkspaceError",
    "aanswer",
    "adry_run",
    "areplay",
    "aresume",
    "arun",
    "backends",
    "check_integrity",
    "dry_run",
    "execute",
    "expect",
    "export_run",
    "import_run",
    "load_program",
    "new_run_id",
    "open_journal",
    "program_name",
    "read_only",
    "register_backend",
    "replay",
    "resolve_model",
    "resume",
    "run",
]
