"""Resuming a run: in place (fed from its journal, then live), or forked into a new run from
one of its checkpoints; answering a waiting run is a resume with the answer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interpreters._answer import question_to_answer
from interpreters._live import AgentBackend, LiveHandlers, as_workspace
from interpreters._loading import (
    check_code,
    declared_state,
    initial_state,
    load_tools,
    named_again,
    program_of,
)
from interpreters.journal import Entry, Journal, RunRecord, open_journal
from interpreters.journal._base import JournalError, checkpoint_name, recorded_call
from interpreters.journal._seal import FOREIGN, config_of, foreign, sealed_if_can, unsealed
from interpreters.journal._status import can_resume
from interpreters.models._base import Model, resolve_model
from interpreters.observe._otel import trace_sinks
from interpreters.runtime._clock import Clock, SystemClock
from interpreters.runtime._driver import RunResult, execute, new_run_id
from interpreters.runtime._events import EventBus, Sink, as_sinks
from interpreters.runtime._replay import ReplayLog
from interpreters.runtime._services import Services
from interpreters.runtime._sync import blocking
from interpreters.tools._bound import ToolLike, ToolRegistry
from interpreters.tools._mcp import MCPServer, open_mcp, servers_of
from interpreters.tools._workspace import Workspace
from op import Checkpoint, OpdslError
from op.effects import SCOPE_KINDS
from state import CRDTModel
from state._canonical import lone_surrogate

__all__ = [
    "aanswer",
    "aresume",
    "checkpoint_labels",
    "find_checkpoint",
    "fork_prefix",
    "guard_journal",
    "resume",
]


def guard_journal(workspace: Workspace | None, journal: Journal) -> None:
    """Keep a journal file that lies in the run's workspace out of its tools' reach
    (:meth:`Workspace.guard_journal`)."""
    path = getattr(journal, "path", None)
    if workspace is not None and isinstance(path, Path):
        workspace.guard_journal(path)


def checkpoint_labels(entries: list[Entry]) -> list[tuple[str, Entry]]:
    """Every completed checkpoint with the label that names it: ``NAME``, then ``NAME#2``, ...
    for the times a name was reached again (what ``--from`` takes)."""
    seen: dict[str, int] = {}
    out = []
    for e in entries:
        if e.kind == Checkpoint.kind and e.status == "completed":
            name = checkpoint_name(e)
            if name is None:
                raise JournalError(
                    f"run {e.run_id}: checkpoint entry {e.address} is malformed: its effect "
                    "names no checkpoint"
                )
            seen[name] = seen.get(name, 0) + 1
            out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", e))
    return out


def find_checkpoint(entries: list[Entry], name: str) -> Entry:
    """The checkpoint ``name`` (``name#k``: the k-th time it was reached, from 1)."""
    base, _, nth = name.partition("#")
    if nth and not (nth.isdigit() and int(nth) >= 1):
        raise OpdslError(f"checkpoint {name!r}: after '#' comes a count from 1, like {base}#2")
    labels = dict(checkpoint_labels(entries))
    found = labels.get(base if nth in ("", "1") else f"{base}#{nth}")
    if found is None:
        hits = sum(1 for label in labels if label.partition("#")[0] == base)
        known = sorted({label.partition("#")[0] for label in labels})
        reached = f"reached {hits} time(s)" if hits else "never reached"
        raise OpdslError(
            f"checkpoint {name!r} not found in run {entries[0].run_id if entries else '?'}: {base!r} was "
            f"{reached}; checkpoints: {', '.join(known) or 'none'}"
        )
    return found


def fork_prefix(entries: list[Entry], cp: Entry, new_run: str) -> list[Entry]:
    """The parent's entries up to a checkpoint, as the fork's own; scopes still open at the
    checkpoint are reopened, so the fork finishes them live."""
    # scopes that were still open at the checkpoint: its ancestors, and any scope (a par
    # sibling's) with effects recorded after it
    reopen = set()
    for later in [cp, *(e for e in entries if e.seq > cp.seq)]:
        parts = later.address.split(".")
        for i in range(1, len(parts)):
            reopen.add(".".join(parts[:i]))
    out = []
    for e in entries:
        if e.seq > cp.seq:
            continue
        if e.address in reopen and e.kind in SCOPE_KINDS:
            e = e.replace(
                status="started",
                result_json=None,
                error_json=None,
                usage_json=None,
                finished_at=None,
            )
        out.append(e.replace(run_id=new_run))
    # keep seq contiguous in the fork
    return [e.replace(seq=i) for i, e in enumerate(sorted(out, key=lambda e: e.seq))]


async def aresume(
    run_id: str,
    *,
    db: str | Journal | None = None,
    from_checkpoint: str | None = None,
    program: Callable[..., Any] | None = None,
    model: str | Model | None = None,
    tools: Iterable[ToolLike] | None = None,
    agents: Mapping[str, AgentBackend] | None = None,
    answer: str | None = None,
    answer_at: str | None = None,
    on_event: Sink | Iterable[Sink] | None = None,
    clock: Clock | None = None,
    workspace: str | Workspace | None = None,
    state_type: type[CRDTModel] | None = None,
    accept_changed_code: bool = False,
    mcp: Mapping[str, MCPServer] | None = None,
) -> RunResult[Any]:
    """Continue a run in place, or fork a new run from one of its checkpoints.

    In place: the program runs again from its start, fed from the journal, and goes on live
    from the first effect without a finished entry; an effect a crash left open is performed
    again with the same idempotency key. ``answer`` answers a run that waits on ``ask``
    (``answer_at``: the question's address, needed when it waits on several); the answer is
    journaled when the program reaches the question again, so a resume that diverges first
    leaves the run waiting as it was.
    With ``from_checkpoint`` (``NAME`` or ``NAME#k``) a new run is made with a parent link;
    it replays the parent up to that checkpoint and goes on live; the parent is untouched.

    The program, tools and state type the journal names are imported from the files the run
    started with: a module changed or found elsewhere since is refused (:class:`CodeChanged`)
    unless ``accept_changed_code``. A foreign run (imported, or not sealed as the user's) is
    refused until ``program``, ``tools``, ``model``, ``workspace`` and ``state_type`` are given
    for each it names.

    The MCP servers the run was started with (``mcp``: others in their place) are started
    again, and what they offer now is compared with what they offered at the run's start: a
    tool the journal depends on that changed refuses the resume unless ``accept_changed_code``.
    """
    if answer is not None and lone_surrogate(answer) is not None:
        raise OpdslError(
            f"the answer to run {run_id} holds a lone surrogate, which is no character and "
            "cannot be written as UTF-8; nothing was changed"
        )
    journal = open_journal(db, create=False)
    record = journal.run(run_id)
    config = config_of(record)
    state_type = state_type or declared_state(program, config)
    given = {"program": program, "tools": tools, "model": model, "workspace": workspace}
    named_again(record, config, {**given, "state_type": state_type})
    program = program_of(record, config, program, accept_changed_code)
    call_args, call_kwargs = recorded_call(record)
    model = model if model is not None else config.get("model")
    tool_list = _tools_of(record, config, tools, accept_changed_code)
    entries = journal.entries(run_id)
    state = initial_state(record, config, state_type, accept_changed_code)
    if from_checkpoint is not None:
        if answer is not None:
            raise OpdslError(
                "answer a run in place (without --from); a fork starts from a checkpoint"
            )
        target = _fork(journal, record, entries, from_checkpoint)
    else:
        target = _in_place(journal, record, entries, answer, answer_at)
    if mcp is None and config.get(FOREIGN) and config.get("mcp"):
        raise OpdslError(
            f"run {run_id} {config[FOREIGN]}, and names MCP servers; name them again (--mcp, "
            "mcp= in the API) to run their commands"
        )
    ws_folder = workspace if workspace is not None else config.get("workspace")
    path = getattr(journal, "path", None)
    async with open_mcp(
        servers_of(config) if mcp is None else mcp,
        root=ws_folder.root if isinstance(ws_folder, Workspace) else ws_folder,
        recorded=config.get("mcp") or {},
        entries=entries,
        run_id=run_id,
        accept=accept_changed_code,
        # a stdio server may not change the journal, if it lies in the workspace
        read_only=[path] if isinstance(path, Path) else [],
    ) as served:
        handlers = LiveHandlers(
            model=resolve_model(model),
            tools=ToolRegistry([*tool_list, *served.tools]),
            agents=agents,
            seed=config.get("seed"),
            workspace=as_workspace(ws_folder),
            answers=target.answers,
        )
        guard_journal(handlers.workspace, journal)
        return await execute(
            program,
            call_args,
            call_kwargs,
            run_id=target.record.run_id,
            services=Services(
                handlers=handlers,
                clock=clock or SystemClock(),
                bus=EventBus([*as_sinks(on_event), *trace_sinks(model)]),
                journal=journal,
            ),
            state=state,
            log=target.log,
            record=target.record,
            entries=target.entries,
            in_place=target.in_place,
        )


def _tools_of(
    record: RunRecord, config: Mapping[str, Any], tools: Iterable[ToolLike] | None, accept: bool
) -> list[ToolLike]:
    """The tools a resumed run is given: those passed, else those its journal names."""
    if tools is not None:
        return list(tools)
    refs = config.get("tools")
    if refs is None:
        raise OpdslError(
            f"run {record.run_id} was given tools that cannot be imported by name; pass tools= "
            "to resume it"
        )
    check_code(record.run_id, config, refs, accept=accept)
    return load_tools(refs)


@dataclass(frozen=True, slots=True)
class _Target:
    """The run a resume drives: its record, the record it is fed from, the entries written
    after it is created (a fork's prefix) and the answers it is given."""

    record: RunRecord
    log: ReplayLog
    entries: list[Entry] = field(default_factory=list)
    answers: dict[str, str] = field(default_factory=dict)
    #: the run goes on in place (not a fork): it must still be in the journal
    in_place: bool = False


def _fork(journal: Journal, record: RunRecord, entries: list[Entry], name: str) -> _Target:
    """A new run, fed from the parent's entries up to the checkpoint ``name``."""
    cp = find_checkpoint(entries, name)
    target_id = new_run_id()
    prefix = fork_prefix(entries, cp, target_id)
    forked = RunRecord(
        run_id=target_id,
        program=record.program,
        args_json=record.args_json,
        config_json=unsealed(record.config_json),
        parent_run=record.run_id,
        fork_checkpoint=name,
    )
    if foreign(record) is None:  # a fork of the user's own run is theirs; of a foreign one, not
        forked = sealed_if_can(forked)
    log = ReplayLog({e.address: e for e in prefix}, restore_at=cp.address, content=journal.content)
    return _Target(forked, log, prefix)


def _in_place(
    journal: Journal,
    record: RunRecord,
    entries: list[Entry],
    answer: str | None,
    answer_at: str | None,
) -> _Target:
    """The run itself, fed from all its entries (and answered, when it waits)."""
    if not can_resume(record.status):
        raise OpdslError(
            f"run {record.run_id} already completed; replay it to check it, or fork it with "
            "--from CHECKPOINT"
        )
    answers = {}
    if answer is not None:
        answers = {question_to_answer(record.run_id, entries, answer_at): answer}
    log = ReplayLog({e.address: e for e in entries}, content=journal.content)
    return _Target(record, log, answers=answers, in_place=True)


def resume(run_id: str, **kwargs: Any) -> RunResult[Any]:
    """:func:`aresume` from synchronous code."""

    return blocking(functools.partial(aresume, run_id, **kwargs))


async def aanswer(run_id: str, text: str, **kwargs: Any) -> RunResult[Any]:
    """Answer a waiting run and continue it."""
    return await aresume(run_id, answer=text, **kwargs)
