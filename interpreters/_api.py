"""The programmatic API: ``run`` and ``arun``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from interpreters._live import AgentBackend, Answer, LiveInterpreter
from interpreters._loading import config_for
from interpreters._resume import guard_journal
from interpreters.journal import Journal, RunRecord, open_journal
from interpreters.journal._seal import sealed_if_can
from interpreters.models._base import Model
from interpreters.runtime._clock import Clock
from interpreters.runtime._driver import RunResult, program_name
from interpreters.runtime._events import Sink, as_sinks
from interpreters.runtime._sync import blocking
from interpreters.tools._bound import ToolLike
from interpreters.tools._mcp import MCPServer, open_mcp
from interpreters.tools._workspace import Workspace
from op import workspace_of
from state import CRDTModel

T = TypeVar("T")

__all__ = ["arun", "run"]


async def arun(
    program: Callable[..., Generator[Any, Any, T]],
    *args: Any,
    model: str | Model | None = None,
    tools: Iterable[ToolLike] = (),
    agents: Mapping[str, AgentBackend] | None = None,
    state: CRDTModel | None = None,
    db: str | Path | Journal | None = None,
    on_event: Sink | Iterable[Sink] | None = None,
    clock: Clock | None = None,
    seed: int | str | None = None,
    answer: Answer | None = None,
    run_id: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    tool_refs: list[str] | None = None,
    workspace: str | Path | Workspace | None = None,
    mcp: Mapping[str, MCPServer] | None = None,
) -> RunResult[T]:
    """Run ``program(*args, **kwargs)`` live and return its :class:`RunResult`.

    ``workspace`` binds the workspace tools (files, search, commands, git) confined to that
    folder, and makes every checkpoint snapshot its files. ``db`` is a journal file (default: ``$OPDSL_DB``, else ``.opdsl/runs.db``) or a journal
    object such as ``MemoryJournal()``; ``on_event`` takes one sink or several; ``clock``
    defaults to real time (tests pass a ``VirtualClock``). ``mcp`` names MCP servers whose
    tools the run is given (``{"git": MCPServer.stdio([...])}``: ``git_git_status``, ...),
    started for the run and ended with it (:func:`interpreters.tools.open_mcp`).
    """
    tool_list = list(tools)
    if workspace is None:
        # a program may name its workspace among its arguments (the Coder's repository)
        workspace = workspace_of(program, args, dict(kwargs or {}))
    root = workspace.root if isinstance(workspace, Workspace) else workspace
    journal = open_journal(db)
    # a stdio server may not change the journal the run writes, if it lies in the workspace
    path = getattr(journal, "path", None)
    async with open_mcp(
        mcp, root=root, read_only=[path] if isinstance(path, Path) else []
    ) as served:
        interp = LiveInterpreter(
            model=model,
            tools=[*tool_list, *served.tools],
            agents=agents,
            answer=answer,
            journal=journal,
            sinks=as_sinks(on_event),
            clock=clock,
            seed=seed,
            workspace=workspace,
        )
        ws = interp.handlers.workspace
        if interp.journal is not None:
            guard_journal(ws, interp.journal)
        name = program_name(program)
        record = RunRecord(
            run_id="-",
            program=name,
            config_json=served.record(
                config_for(
                    model=model,
                    tools=tool_list,
                    seed=seed,
                    tool_refs=tool_refs,
                    workspace=None if ws is None else str(ws.root),
                    # the files the code came from, which a resume checks before importing them again
                    code=[name] if state is None else [name, program_name(type(state))],
                )
            ),
        )
        record = sealed_if_can(record)  # the caller's own program: the user's run
        return await interp.arun(
            program, *args, state=state, run_id=run_id, record=record, **dict(kwargs or {})
        )


def run(
    program: Callable[..., Generator[Any, Any, T]],
    *args: Any,
    model: str | Model | None = None,
    tools: Iterable[ToolLike] = (),
    agents: Mapping[str, AgentBackend] | None = None,
    state: CRDTModel | None = None,
    db: str | Path | Journal | None = None,
    on_event: Sink | Iterable[Sink] | None = None,
    clock: Clock | None = None,
    seed: int | str | None = None,
    answer: Answer | None = None,
    run_id: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    tool_refs: list[str] | None = None,
    workspace: str | Path | Workspace | None = None,
    mcp: Mapping[str, MCPServer] | None = None,
    backend: str = "asyncio",
) -> RunResult[T]:
    """:func:`arun` from synchronous code (``backend`` is ``"asyncio"`` or ``"trio"``).

    Example:
        >>> from op import Op, infer
        >>> from interpreters import ScriptedModel
        >>> def hello() -> Op[str]:
        ...     reply = yield from infer("Say hi")
        ...     return reply.text
        >>> from interpreters import MemoryJournal
        >>> run(hello, model=ScriptedModel(["hi!"]), db=MemoryJournal()).value
        'hi!'
    """

    call = functools.partial(
        arun,
        program,
        *args,
        model=model,
        tools=tools,
        agents=agents,
        state=state,
        db=db,
        on_event=on_event,
        clock=clock,
        seed=seed,
        answer=answer,
        run_id=run_id,
        kwargs=kwargs,
        tool_refs=tool_refs,
        workspace=workspace,
        mcp=mcp,
    )
    return blocking(call, backend=backend)
