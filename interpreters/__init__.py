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

if TYPE_CHECKING:  # what the type checkers see; a test holds it to _WHERE and _MOVED
    from interpreters._api import (
        arun as arun,
    )
    from interpreters._api import (
        run as run,
    )
    from interpreters._dry_run import (
        DryRunInterpreter as DryRunInterpreter,
    )
    from interpreters._durable import (
        Plan as Plan,
    )
    from interpreters._durable import (
        ProgramNotFound as ProgramNotFound,
    )
    from interpreters._durable import (
        aanswer as aanswer,
    )
    from interpreters._durable import (
        adry_run as adry_run,
    )
    from interpreters._durable import (
        areplay as areplay,
    )
    from interpreters._durable import (
        aresume as aresume,
    )
    from interpreters._durable import (
        dry_run as dry_run,
    )
    from interpreters._durable import (
        load_program as load_program,
    )
    from interpreters._durable import (
        replay as replay,
    )
    from interpreters._durable import (
        resume as resume,
    )
    from interpreters._live import (
        LiveHandlers as LiveHandlers,
    )
    from interpreters._live import (
        LiveInterpreter as LiveInterpreter,
    )
    from interpreters._replaying import (
        ReplayInterpreter as ReplayInterpreter,
    )
    from interpreters._sinks import (
        ConsoleSink as ConsoleSink,
    )
    from interpreters._sinks import (
        JsonlSink as JsonlSink,
    )
    from interpreters.agents import (
        AgentError as AgentError,
    )
    from interpreters.agents import (
        ClaudeCodeBackend as ClaudeCodeBackend,
    )
    from interpreters.agents import (
        CodexBackend as CodexBackend,
    )
    from interpreters.agents import (
        NoopBackend as NoopBackend,
    )
    from interpreters.journal import (
        Entry as Entry,
    )
    from interpreters.journal import (
        Journal as Journal,
    )
    from interpreters.journal import (
        JournalError as JournalError,
    )
    from interpreters.journal import (
        MemoryJournal as MemoryJournal,
    )
    from interpreters.journal import (
        RunLocked as RunLocked,
    )
    from interpreters.journal import (
        RunRecord as RunRecord,
    )
    from interpreters.journal import (
        SqliteJournal as SqliteJournal,
    )
    from interpreters.journal import (
        check_integrity as check_integrity,
    )
    from interpreters.journal import (
        export_run as export_run,
    )
    from interpreters.journal import (
        import_run as import_run,
    )
    from interpreters.journal import (
        open_journal as open_journal,
    )
    from interpreters.models._base import (
        CallInfo as CallInfo,
    )
    from interpreters.models._base import (
        ModelScriptExhausted as ModelScriptExhausted,
    )
    from interpreters.models._base import (
        ScriptedModel as ScriptedModel,
    )
    from interpreters.models._base import (
        resolve_model as resolve_model,
    )
    from interpreters.models._fallback import (
        FallbackModel as FallbackModel,
    )
    from interpreters.runtime._clock import (
        Clock as Clock,
    )
    from interpreters.runtime._clock import (
        SystemClock as SystemClock,
    )
    from interpreters.runtime._clock import (
        VirtualClock as VirtualClock,
    )
    from interpreters.runtime._driver import (
        RunResult as RunResult,
    )
    from interpreters.runtime._events import (
        Sink as Sink,
    )
    from interpreters.runtime._interpreter import (
        Interpreter as Interpreter,
    )
    from interpreters.runtime._replay import (
        Divergence as Divergence,
    )
    from interpreters.runtime._replay import (
        ReplayedError as ReplayedError,
    )
    from interpreters.testing._scripted import (
        ANY as ANY,
    )
    from interpreters.testing._scripted import (
        Expect as Expect,
    )
    from interpreters.testing._scripted import (
        ScriptedInterpreter as ScriptedInterpreter,
    )
    from interpreters.testing._scripted import (
        ScriptMismatch as ScriptMismatch,
    )
    from interpreters.testing._scripted import (
        expect as expect,
    )
    from interpreters.tools._bound import (
        BoundTool as BoundTool,
    )
    from interpreters.tools._bound import BoundTool as Tool  # noqa: F401 - the name before 0.3.0
    from interpreters.tools._bound import (
        ToolLike as ToolLike,
    )
    from interpreters.tools._bound import (
        ToolRegistry as ToolRegistry,
    )
    from interpreters.tools._bound import (
        isolated as isolated,
    )
    from interpreters.tools._bound import (
        quick as quick,
    )
    from interpreters.tools._bound import (
        read_only as read_only,
    )
    from interpreters.tools._mcp import (
        MCPServer as MCPServer,
    )
    from interpreters.tools._workspace import (
        Workspace as Workspace,
    )
    from interpreters.tools._workspace import (
        WorkspaceError as WorkspaceError,
    )


_WHERE: dict[str, str] = {
    "aanswer": "interpreters._durable",
    "adry_run": "interpreters._durable",
    "AgentError": "interpreters.agents",
    "ANY": "interpreters.testing._scripted",
    "areplay": "interpreters._durable",
    "aresume": "interpreters._durable",
    "arun": "interpreters._api",
    "BoundTool": "interpreters.tools._bound",
    "CallInfo": "interpreters.models._base",
    "check_integrity": "interpreters.journal",
    "ClaudeCodeBackend": "interpreters.agents",
    "Clock": "interpreters.runtime._clock",
    "CodexBackend": "interpreters.agents",
    "ConsoleSink": "interpreters._sinks",
    "Divergence": "interpreters.runtime._replay",
    "dry_run": "interpreters._durable",
    "Entry": "interpreters.journal",
    "Expect": "interpreters.testing._scripted",
    "FallbackModel": "interpreters.models._fallback",
    "expect": "interpreters.testing._scripted",
    "export_run": "interpreters.journal",
    "import_run": "interpreters.journal",
    "Journal": "interpreters.journal",
    "JournalError": "interpreters.journal",
    "JsonlSink": "interpreters._sinks",
    "LiveHandlers": "interpreters._live",
    "LiveInterpreter": "interpreters._live",
    "load_program": "interpreters._durable",
    "MCPServer": "interpreters.tools._mcp",
    "MemoryJournal": "interpreters.journal",
    "ModelScriptExhausted": "interpreters.models._base",
    "NoopBackend": "interpreters.agents",
    "open_journal": "interpreters.journal",
    "Plan": "interpreters._durable",
    "DryRunInterpreter": "interpreters._dry_run",
    "Interpreter": "interpreters.runtime._interpreter",
    "ProgramNotFound": "interpreters._durable",
    "isolated": "interpreters.tools._bound",
    "quick": "interpreters.tools._bound",
    "read_only": "interpreters.tools._bound",
    "replay": "interpreters._durable",
    "ReplayedError": "interpreters.runtime._replay",
    "ReplayInterpreter": "interpreters._replaying",
    "resolve_model": "interpreters.models._base",
    "resume": "interpreters._durable",
    "run": "interpreters._api",
    "RunLocked": "interpreters.journal",
    "RunRecord": "interpreters.journal",
    "RunResult": "interpreters.runtime._driver",
    "ScriptedInterpreter": "interpreters.testing._scripted",
    "ScriptedModel": "interpreters.models._base",
    "ScriptMismatch": "interpreters.testing._scripted",
    "Sink": "interpreters.runtime._events",
    "SqliteJournal": "interpreters.journal",
    "SystemClock": "interpreters.runtime._clock",
    "ToolLike": "interpreters.tools._bound",
    "ToolRegistry": "interpreters.tools._bound",
    "VirtualClock": "interpreters.runtime._clock",
    "Workspace": "interpreters.tools._workspace",
    "WorkspaceError": "interpreters.tools._workspace",
}
"""The public names, each with the module it lives in: the one list ``__all__``, ``dir()`` and
the lazy imports are made from. A name is imported when first used, so ``from interpreters
import run`` loads no HTTP, git or console library."""

_MOVED: dict[str, tuple[str, str]] = {
    "AgentBackend": ("interpreters.agents.kit", "Backend"),
    "backends": ("interpreters.agents.kit", "backends"),
    "Call": ("interpreters.models.kit", "CallInfo"),
    "CliBackend": ("interpreters.agents.kit", "CliBackend"),
    "Driver": ("interpreters.runtime", "Driver"),
    "EventBus": ("interpreters.runtime", "EventBus"),
    "execute": ("interpreters.runtime", "execute"),
    "Handlers": ("interpreters.runtime", "Handlers"),
    "Model": ("interpreters.models.kit", "Model"),
    "new_run_id": ("interpreters.runtime", "new_run_id"),
    "program_name": ("interpreters.runtime", "program_name"),
    "RecordedEffect": ("op.effects", "LeafEffect"),
    "register_backend": ("interpreters.agents.kit", "register_backend"),
    "register_provider": ("interpreters.models.kit", "register_provider"),
    "WaitingForAnswer": ("interpreters.runtime", "WaitingForAnswer"),
    "Tool": ("interpreters", "BoundTool"),
}
"""Names that were here and moved to the room they belong to (plug-in kits, the engine's
internals) or were renamed: old name -> (where it lives now, its name there). Each still
works until 0.5.0, with a DeprecationWarning that says where it went."""

if TYPE_CHECKING:  # the names that moved, as they were typed, until they go
    from interpreters._live import (
        AgentBackend as AgentBackend,
    )
    from interpreters.agents import (
        CliBackend as CliBackend,
    )
    from interpreters.agents import (
        backends as backends,
    )
    from interpreters.agents import (
        register_backend as register_backend,
    )
    from interpreters.models._base import (
        Model as Model,
    )
    from interpreters.models._base import (
        register_provider as register_provider,
    )
    from interpreters.runtime._driver import (
        Driver as Driver,
    )
    from interpreters.runtime._driver import (
        execute as execute,
    )
    from interpreters.runtime._driver import (
        new_run_id as new_run_id,
    )
    from interpreters.runtime._driver import (
        program_name as program_name,
    )
    from interpreters.runtime._events import (
        EventBus as EventBus,
    )
    from interpreters.runtime._frame import (
        Call as Call,
    )
    from interpreters.runtime._frame import (
        Handlers as Handlers,
    )
    from interpreters.runtime._frame import (
        RecordedEffect as RecordedEffect,
    )
    from interpreters.runtime._frame import (
        WaitingForAnswer as WaitingForAnswer,
    )

__all__ = sorted(_WHERE)  # pyright: ignore[reportUnsupportedDunderAll] - made from the one list


def __getattr__(name: str) -> object:
    moved = _MOVED.get(name)
    if moved is not None:
        where, new = moved
        warnings.warn(
            f"interpreters.{name} is deprecated: use {where}.{new} "
            "(the old name goes in opdsl 0.5.0)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(where), new)
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'interpreters' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return __all__
