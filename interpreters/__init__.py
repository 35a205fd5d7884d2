"""Running programs: the driver, the interpreters, handlers, journals, sinks and the CLI.

::

    from interpreters import run, ScriptedModel
    result = run(program, "task", model=ScriptedModel(["done"]))   # journaled to .opdsl/runs.db
    result.value, result.state, result.run_id, result.status
    resume(result.run_id, from_checkpoint="before-verify")          # fork from a checkpoint
    replay(result.run_id)                                           # check it, offline
"""

import importlib
import warnings

# not ``from typing import TYPE_CHECKING``: importing typing is most of what loading this
# package costs, and the ``opdsl`` command loads it before it can catch a Ctrl-C
TYPE_CHECKING = False

if TYPE_CHECKING:
    from interpreters._api import arun, run
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
    from interpreters._live import AgentBackend, LiveHandlers, LiveInterpreter
    from interpreters._sinks import ConsoleSink, JsonlSink
    from interpreters.agents import (
        AgentError,
        ClaudeCodeBackend,
        CliBackend,
        CodexBackend,
        NoopBackend,
        backends,
        register_backend,
    )
    from interpreters.journal import (
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
    from interpreters.models._base import (
        CallInfo,
        Model,
        ModelScriptExhausted,
        ScriptedModel,
        register_provider,
        resolve_model,
    )
    from interpreters.runtime._clock import Clock, SystemClock, VirtualClock
    from interpreters.runtime._driver import Driver, RunResult, execute, new_run_id, program_name
    from interpreters.runtime._events import EventBus, Sink
    from interpreters.runtime._frame import Call, Handlers, RecordedEffect, WaitingForAnswer
    from interpreters.runtime._replay import Divergence, ReplayedError
    from interpreters.testing._scripted import (
        ANY,
        Expect,
        ScriptedInterpreter,
        ScriptMismatch,
        expect,
    )
    from interpreters.tools._bound import BoundTool, ToolLike, ToolRegistry, quick, read_only
    from interpreters.tools._bound import BoundTool as Tool  # noqa: F401 - the name before 0.3.0
    from interpreters.tools._workspace import Workspace, WorkspaceError


_WHERE: dict[str, str] = {
    "ANY": "interpreters.testing._scripted",
    "AgentBackend": "interpreters._live",
    "AgentError": "interpreters.agents",
    "Call": "interpreters.runtime._frame",
    "CallInfo": "interpreters.models._base",
    "ClaudeCodeBackend": "interpreters.agents",
    "CliBackend": "interpreters.agents",
    "Clock": "interpreters.runtime._clock",
    "CodexBackend": "interpreters.agents",
    "ConsoleSink": "interpreters._sinks",
    "Divergence": "interpreters.runtime._replay",
    "Driver": "interpreters.runtime._driver",
    "Entry": "interpreters.journal",
    "EventBus": "interpreters.runtime._events",
    "Expect": "interpreters.testing._scripted",
    "Handlers": "interpreters.runtime._frame",
    "Journal": "interpreters.journal",
    "JournalError": "interpreters.journal",
    "JsonlSink": "interpreters._sinks",
    "LiveHandlers": "interpreters._live",
    "LiveInterpreter": "interpreters._live",
    "MemoryJournal": "interpreters.journal",
    "Model": "interpreters.models._base",
    "ModelScriptExhausted": "interpreters.models._base",
    "NoopBackend": "interpreters.agents",
    "Plan": "interpreters._durable",
    "ProgramNotFound": "interpreters._durable",
    "RecordedEffect": "interpreters.runtime._frame",
    "ReplayedError": "interpreters.runtime._replay",
    "RunLocked": "interpreters.journal",
    "RunRecord": "interpreters.journal",
    "RunResult": "interpreters.runtime._driver",
    "ScriptMismatch": "interpreters.testing._scripted",
    "ScriptedInterpreter": "interpreters.testing._scripted",
    "ScriptedModel": "interpreters.models._base",
    "Sink": "interpreters.runtime._events",
    "SqliteJournal": "interpreters.journal",
    "SystemClock": "interpreters.runtime._clock",
    "BoundTool": "interpreters.tools._bound",
    "ToolLike": "interpreters.tools._bound",
    "ToolRegistry": "interpreters.tools._bound",
    "VirtualClock": "interpreters.runtime._clock",
    "WaitingForAnswer": "interpreters.runtime._frame",
    "Workspace": "interpreters.tools._workspace",
    "WorkspaceError": "interpreters.tools._workspace",
    "aanswer": "interpreters._durable",
    "adry_run": "interpreters._durable",
    "areplay": "interpreters._durable",
    "aresume": "interpreters._durable",
    "arun": "interpreters._api",
    "backends": "interpreters.agents",
    "check_integrity": "interpreters.journal",
    "dry_run": "interpreters._durable",
    "execute": "interpreters.runtime._driver",
    "expect": "interpreters.testing._scripted",
    "export_run": "interpreters.journal",
    "import_run": "interpreters.journal",
    "load_program": "interpreters._durable",
    "new_run_id": "interpreters.runtime._driver",
    "open_journal": "interpreters.journal",
    "program_name": "interpreters.runtime._driver",
    "register_provider": "interpreters.models._base",
    "read_only": "interpreters.tools._bound",
    "quick": "interpreters.tools._bound",
    "register_backend": "interpreters.agents",
    "replay": "interpreters._durable",
    "resolve_model": "interpreters.models._base",
    "resume": "interpreters._durable",
    "run": "interpreters._api",
}
"""Where each public name lives: a name is imported when first used, so `from interpreters
import ScriptedInterpreter` loads no HTTP, git, SQLite or console library."""

__all__ = [
    "ANY",
    "AgentBackend",
    "AgentError",
    "BoundTool",
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
    "quick",
    "read_only",
    "register_backend",
    "register_provider",
    "replay",
    "resolve_model",
    "resume",
    "run",
]


def __getattr__(name: str) -> object:
    if name == "Tool":
        warnings.warn(
            "interpreters.Tool is now interpreters.BoundTool (op.Tool is the effect)",
            DeprecationWarning,
            stacklevel=2,
        )
        name = "BoundTool"
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'interpreters' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
