"""Durable runs: resume in place, fork from a checkpoint, replay, answer, dry-run.

A run is named in its journal by its program (``module:function``), its arguments, and a
config (the model spec, the tools by reference, the seed, the state type), so a new process
can rebuild it. Everything that reaches the program again is fed from the journal: a resumed
run performs no completed effect twice, and a replay performs none at all.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec, SourceFileLoader
from pathlib import Path
from types import CodeType
from typing import Any, assert_never, final

from interpreters._live import AgentBackend, LiveHandlers, as_workspace
from interpreters.journal import Entry, Journal, JournalError, RunRecord, open_journal
from interpreters.journal._status import can_resume
from interpreters.models._base import (
    Model,
    ScriptedModel,
    example_of,
    redact_spec,
    resolve_model,
)
from interpreters.models._remote import Prices
from interpreters.models._remote import RemoteModel as HttpModel  # isinstance loads no httpx
from interpreters.observe._otel import export_journal, trace_sinks
from interpreters.runtime._clock import Clock, SystemClock, VirtualClock
from interpreters.runtime._driver import (
    RunResult,
    execute,
    nearest_checkpoint,
    new_run_id,
    program_name,
)
from interpreters.runtime._events import EventBus, Sink, as_sinks
from interpreters.runtime._frame import Call, Handlers
from interpreters.runtime._replay import Divergence, ReplayLog, divergence
from interpreters.runtime._services import Services
from interpreters.runtime._sync import blocking
from interpreters.tools._bound import BoundTool, ToolLike, ToolRegistry
from interpreters.tools._workspace import Workspace
from op import (
    Agent,
    Ask,
    Checkpoint,
    EffectFinished,
    EffectStarted,
    Emit,
    Event,
    Infer,
    LeafEffect,
    Now,
    OpdslError,
    Random,
    Response,
    RunFinished,
    Sleep,
    ToolResult,
    TurnRecord,
    Usage,
    Uuid,
    canonical_json,
    default_state,
    workspace_of,
)
from op import Tool as ToolEffect
from state import CRDTModel

__all__ = [
    "CodeChanged",
    "Plan",
    "ProgramNotFound",
    "aanswer",
    "adry_run",
    "areplay",
    "aresume",
    "config_for",
    "dry_run",
    "checkpoint_labels",
    "check_code",
    "code_of",
    "find_checkpoint",
    "load_object",
    "load_program",
    "load_tools",
    "replay",
    "resume",
]


class ProgramNotFound(OpdslError):
    """A ``module:attr`` reference cannot be imported."""


def load_object(ref: str, what: str = "object") -> Any:
    """Import ``module:attr.path``."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ProgramNotFound(f"{what} {ref!r} should look like module:function")
    if "<locals>" in attr:
        raise ProgramNotFound(
            f"{what} {ref!r} is defined inside a function; define it at module level so a new "
            "process can import it, or pass it explicitly"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ProgramNotFound(f"cannot import {what} {ref!r}: {exc}") from None
    except SyntaxError as exc:
        raise ProgramNotFound(
            f"cannot import {what} {ref!r}: a syntax error in {exc.filename}, line {exc.lineno}: {exc.msg}"
        ) from None
    except Exception as exc:  # the module itself raised while it was imported
        raise ProgramNotFound(
            f"cannot import {what} {ref!r}: importing {module_name} raised {type(exc).__name__}: {exc}"
        ) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ProgramNotFound(
                f"cannot import {what} {ref!r}: {module_name} has no {attr!r}"
            ) from None
    return obj


def load_program(ref: str) -> Callable[..., Any]:
    """Import the program ``module:function``; anything but a generator function is refused."""
    obj = load_object(ref, "program")
    if not callable(obj):
        raise ProgramNotFound(f"program {ref!r} is a {type(obj).__name__}, not a function")
    if not inspect.isgeneratorfunction(inspect.unwrap(obj)):
        raise ProgramNotFound(
            f"{ref!r} is not a program: a program is a generator function (def + yield from)"
        )
    return obj  # type: ignore[no-any-return]


def _program_of(
    record: RunRecord,
    config: Mapping[str, Any],
    program: Callable[..., Any] | None,
    accept_changed_code: bool = False,
) -> Callable[..., Any]:
    """The program that continues or replays ``record``. A run imported from a file names code
    someone else chose: it runs only when the caller names the same program again. One loaded
    by the name its journal holds comes from the file the run started with (:func:`check_code`)."""
    if program is None and config.get("imported_from"):
        raise OpdslError(
            f"run {record.run_id} was imported from {config['imported_from']} and names the program "
            f"{record.program}; pass --program {record.program} (program= in the API) to run that code"
        )
    if program is None:
        check_code(record.run_id, config, [record.program], accept=accept_changed_code)
        program = load_program(record.program)
    if program_name(program) != record.program:
        raise OpdslError(f"run {record.run_id} is of {record.program}, not {program_name(program)}")
    return program


def _tool_refs(tools: Iterable[ToolLike]) -> list[str] | None:
    refs = []
    for t in tools:
        fn = t.fn if isinstance(t, BoundTool) else t
        ref = program_name(fn)
        if "<locals>" in ref or "<lambda>" in ref:
            return None
        refs.append(ref)
    return refs


def config_for(
    *,
    model: str | Model | None,
    tools: Iterable[ToolLike],
    seed: int | str | None,
    tool_refs: list[str] | None = None,
    workspace: str | None = None,
    code: Iterable[str] = (),
) -> str:
    """The config a run records so that a new process can resume it; ``code``: references
    (``module:attr``) of the code it runs (program, state type), whose modules are recorded
    with the tools' by :func:`code_of`."""
    refs = tool_refs if tool_refs is not None else _tool_refs(tools)
    config: dict[str, Any] = {
        "model": redact_spec(model) if isinstance(model, str) else None,
        "tools": refs,
        "seed": seed,
        "workspace": workspace,
    }
    modules = code_of([*code, *(refs or ())])
    if modules:
        config["code"] = modules
    return canonical_json(config)


class CodeChanged(OpdslError):
    """A module a run was recorded with is not the file it was: changed, or found elsewhere."""


def _chain(ref: str) -> list[str]:
    """The modules importing ``module:attr`` runs: its packages from the top, then itself."""
    parts = ref.partition(":")[0].split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts)) if all(parts[: i + 1])]


def _sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def code_of(refs: Iterable[str]) -> dict[str, dict[str, str | None]]:
    """Each module the code named by ``refs`` was imported from, the packages above it
    included: its file and the SHA-256 of that file (a namespace package: no file). What
    :func:`check_code` holds a resume to. Modules of no file (built in) and ``__main__``
    are left out: nothing can be planted in their place."""
    out: dict[str, dict[str, str | None]] = {}
    for ref in refs:
        for name in _chain(ref):
            module = sys.modules.get(name)
            if module is None or name == "__main__":
                break
            path = getattr(module, "__file__", None)
            if isinstance(path, str):
                out[name] = _file_entry(path)
            elif getattr(module, "__path__", None) is not None:
                out[name] = {"path": None, "sha256": None}  # a namespace package
            else:
                break
    return out


_ENTRIES: dict[tuple[str, int, int, int], dict[str, str | None]] = {}
""":func:`code_of`'s entries by file and its identity (inode, mtime, size): a process that
starts many runs of one program hashes its files once, and again when they change."""


def _file_entry(path: str) -> dict[str, str | None]:
    try:
        st = os.stat(path)
    except OSError:
        return {"path": str(Path(path).resolve()), "sha256": None}
    key = (path, st.st_ino, st.st_mtime_ns, st.st_size)
    entry = _ENTRIES.get(key)
    if entry is None:
        real = str(Path(path).resolve())
        entry = _ENTRIES[key] = {"path": real, "sha256": _sha256(real)}
    return dict(entry)


def _find_spec(name: str) -> ModuleSpec | None:
    """Where ``import name`` would load ``name`` from, found without running any module (the
    packages above it are looked up the same way, never imported)."""
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__spec__", None)
    parent = name.rpartition(".")[0]
    path: list[str] | None = None
    if parent:
        above = _find_spec(parent)
        if above is None or above.submodule_search_locations is None:
            return None
        path = list(above.submodule_search_locations)
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(name, path)
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None


def check_code(
    run_id: str, config: Mapping[str, Any], refs: Iterable[str], *, accept: bool = False
) -> None:
    """Before ``refs`` are imported for run ``run_id``: each module on their way that the run
    recorded (:func:`code_of`) must be found at the same file, with the same SHA-256, else
    :class:`CodeChanged` names it (a program edited since, or a module of the same name
    planted earlier on the import path). Nothing runs to find out, and a module checked is
    then run from the very bytes checked (never from a ``.pyc`` beside it, which whoever
    could write its folder could have planted). ``accept``: the user knows, and the code is
    imported as it is now. A run imported from a file is not checked: its user names its
    code again."""
    recorded = config.get("code")
    if accept or config.get("imported_from") or not isinstance(recorded, dict):
        return
    for ref in refs:
        for name in _chain(ref):
            want = recorded.get(name)
            if isinstance(want, dict):
                _check_module(run_id, name, want)


def _check_module(run_id: str, name: str, want: Mapping[str, Any]) -> None:
    spec = _find_spec(name)
    found = None
    if spec is not None and spec.has_location and spec.origin:
        found = str(Path(spec.origin).resolve())
    was = want.get("path")
    if was is None and found is None:
        return  # a namespace package then and now (or gone: the import says so)
    if spec is None or found is None or found != was:
        now = f"now found at {found}" if found else "no longer found"
        raise CodeChanged(
            f"run {run_id} ran module {name} from {was or 'a namespace package'}; it is "
            f"{now} (pass --accept-changed-code to run what is there now)"
        )
    try:
        with open(found, "rb") as f:
            data = f.read()
    except OSError:
        data = None
    if data is None or hashlib.sha256(data).hexdigest() != want.get("sha256"):
        raise CodeChanged(
            f"run {run_id} ran module {name} from {found}, which has changed since "
            "(pass --accept-changed-code to run it as it is now)"
        )
    if name not in sys.modules and isinstance(spec.loader, SourceFileLoader):
        try:
            _run_checked(spec, data)
        except Exception as exc:
            raise ProgramNotFound(
                f"cannot import {name}: importing it raised {type(exc).__name__}: {exc}"
            ) from None


class _CheckedSource(SourceFileLoader):
    """Runs a module from the source bytes that were checked, never from a ``.pyc``."""

    def __init__(self, fullname: str, path: str, data: bytes) -> None:
        super().__init__(fullname, path)
        self.data = data

    def get_code(self, fullname: str) -> CodeType:
        return compile(self.data, self.path, "exec", dont_inherit=True)


def _run_checked(found: ModuleSpec, data: bytes) -> None:
    """Import the module ``found`` names from ``data``, as the import system would."""
    name = found.name
    parent, _, child = name.rpartition(".")
    if parent and parent not in sys.modules:
        importlib.import_module(parent)
    assert found.origin is not None
    loader = _CheckedSource(name, found.origin, data)
    spec = importlib.util.spec_from_file_location(
        name,
        found.origin,
        loader=loader,
        submodule_search_locations=found.submodule_search_locations,
    )
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if parent:
        setattr(sys.modules[parent], child, module)


def load_tools(refs: Iterable[str]) -> list[ToolLike]:
    """Import tools by ``module:attr`` (a function, a ``Tool``, or a list of them)."""
    out: list[ToolLike] = []
    for ref in refs:
        obj = load_object(ref, "tool")
        for t in obj if isinstance(obj, list | tuple) else [obj]:
            if not (isinstance(t, BoundTool) or callable(t)):
                raise ProgramNotFound(
                    f"tool {ref}: {type(t).__name__} {t!r:.40} is not a function or BoundTool"
                )
            out.append(t)
    return out


def _initial_state(
    record: RunRecord,
    config: Mapping[str, Any],
    state_type: type[CRDTModel] | None = None,
    accept_changed_code: bool = False,
) -> CRDTModel | None:
    """The state the run started with, as ``state_type`` (default: the type its journal names,
    imported from the file it was recorded with)."""
    if record.state_json is None:
        return None
    cls: Any = state_type
    if cls is None:
        ref = config.get("state_type")
        if not isinstance(ref, str):
            raise JournalError(f"run {record.run_id} recorded a state but not its type")
        check_code(record.run_id, config, [ref], accept=accept_changed_code)
        cls = load_object(ref, "state type")
        if not (isinstance(cls, type) and issubclass(cls, CRDTModel)):
            raise ProgramNotFound(f"state type {ref!r} is not a CRDTModel")
    return cls.model_validate_json(record.state_json)  # type: ignore[no-any-return]


def _named_again(record: RunRecord, config: Mapping[str, Any], given: Mapping[str, object]) -> None:
    """A run imported from a file uses nothing the file names that would run code (its
    program, tools, state type), send a key (its model) or touch a folder (its workspace)
    until the caller gives each again. ``given``: what the caller passed, of what it would
    use (a replay uses no tool, model or workspace). Refused, naming them all, before
    anything is imported, sent or touched."""
    source = config.get("imported_from")
    if not source:
        return
    named: dict[str, Any] = {
        "program": record.program,
        "tools": config.get("tools") or None,
        "model": config.get("model") or None,
        "workspace": config.get("workspace") or None,
        "state_type": config.get("state_type") if record.state_json is not None else None,
    }
    flag = {"state_type": "state"}
    wanted = []
    for what, value in named.items():
        if what in given and given[what] is None and value is not None:
            values = value if isinstance(value, list) else [value]
            option = flag.get(what, what)
            wanted.append(" ".join(f"--{option} {v}" for v in values) + f" ({what}=)")
    if wanted:
        raise OpdslError(
            f"run {record.run_id} was imported from {source}; nothing it names (code to run, a "
            f"model to send a key to, a folder to change) is used until you give it again: "
            f"{', '.join(wanted)}"
        )


def _declared_state(
    program: Callable[..., Any] | None, config: Mapping[str, Any]
) -> type[CRDTModel] | None:
    """For a run imported from a file: the state type the program the caller named declares
    (``@program(state=...)``), which names it as well as ``state_type=`` would."""
    if program is None or not config.get("imported_from"):
        return None
    declared = default_state(program)
    return None if declared is None else type(declared)


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
        if e.kind == "checkpoint" and e.status == "completed":
            name = str(json.loads(e.effect_json).get("name"))
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


def _fork_prefix(entries: list[Entry], cp: Entry, new_run: str) -> list[Entry]:
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
        if e.address in reopen and e.kind in ("limit", "timeout", "par"):
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
    unless ``accept_changed_code``. A run imported from a file is refused until ``program``,
    ``tools``, ``model``, ``workspace`` and ``state_type`` are given for each it names.
    """
    journal = open_journal(db, create=False)
    record = journal.run(run_id)
    config = json.loads(record.config_json or "{}")
    state_type = state_type or _declared_state(program, config)
    _named_again(
        record,
        config,
        {
            "program": program,
            "tools": tools,
            "model": model,
            "workspace": workspace,
            "state_type": state_type,
        },
    )
    program = _program_of(record, config, program, accept_changed_code)
    call_args = json.loads(record.args_json)
    model = model if model is not None else config.get("model")
    tool_list: list[ToolLike]
    if tools is not None:
        tool_list = list(tools)
    elif config.get("tools") is None:
        raise OpdslError(
            f"run {run_id} was given tools that cannot be imported by name; pass tools= to resume it"
        )
    else:
        check_code(run_id, config, config["tools"], accept=accept_changed_code)
        tool_list = load_tools(config["tools"])
    entries = journal.entries(run_id)
    state = _initial_state(record, config, state_type, accept_changed_code)
    answers: dict[str, str] = {}
    if from_checkpoint is not None:
        if answer is not None:
            raise OpdslError(
                "answer a run in place (without --from); a fork starts from a checkpoint"
            )
        cp = find_checkpoint(entries, from_checkpoint)
        target_id = new_run_id()
        prefix = _fork_prefix(entries, cp, target_id)
        new_record = RunRecord(
            run_id=target_id,
            program=record.program,
            config_json=record.config_json,
            parent_run=run_id,
            fork_checkpoint=from_checkpoint,
        )
        log = ReplayLog(
            {e.address: e for e in prefix}, restore_at=cp.address, content=journal.content
        )
        run_record = new_record
        on_created: list[Entry] | None = prefix
    else:
        if not can_resume(record.status):
            raise OpdslError(
                f"run {run_id} already completed; replay it to check it, or fork it with --from CHECKPOINT"
            )
        if answer is not None:
            answers = {_question_to_answer(run_id, entries, answer_at): answer}
        target_id = run_id
        log = ReplayLog({e.address: e for e in entries}, content=journal.content)
        run_record = record
        on_created = None
    handlers = LiveHandlers(
        model=resolve_model(model),
        tools=ToolRegistry(tool_list),
        agents=agents,
        seed=config.get("seed"),
        workspace=as_workspace(workspace if workspace is not None else config.get("workspace")),
        answers=answers,
    )
    guard_journal(handlers.workspace, journal)
    return await execute(
        program,
        tuple(call_args.get("args", [])),
        call_args.get("kwargs", {}),
        run_id=target_id,
        services=Services(
            handlers=handlers,
            clock=clock or SystemClock(),
            bus=EventBus([*as_sinks(on_event), *trace_sinks(model)]),
            journal=journal,
        ),
        state=state,
        log=log,
        record=run_record,
        entries=on_created or (),
    )


def _question_to_answer(run_id: str, entries: list[Entry], at: str | None) -> str:
    """The address of the question an answer is for: the only one open, or the one at ``at``."""
    pending = [e for e in entries if e.kind == "ask" and e.status == "started"]
    if not pending:
        raise OpdslError(f"run {run_id} is not waiting for an answer")
    shown = "; ".join(
        f"at {e.address}: {json.loads(e.effect_json).get('question')!r}" for e in pending
    )
    if at is not None:
        if at not in {e.address for e in pending}:
            raise OpdslError(f"run {run_id} has no open question at address {at}; open: {shown}")
        return at
    if len(pending) > 1:
        raise OpdslError(
            f"run {run_id} waits on {len(pending)} questions ({shown}); say which with "
            f"--at ADDRESS (answer_at= in the API)"
        )
    return pending[0].address


def resume(run_id: str, **kwargs: Any) -> RunResult[Any]:
    """:func:`aresume` from synchronous code."""

    return blocking(functools.partial(aresume, run_id, **kwargs))


async def aanswer(run_id: str, text: str, **kwargs: Any) -> RunResult[Any]:
    """Answer a waiting run and continue it."""
    return await aresume(run_id, answer=text, **kwargs)


@final
class _Unreachable(Handlers):
    """Handlers for a replay: every effect must come from the journal."""

    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        raise Divergence(f"replay tried to perform the {effect.kind} effect at {call.address} live")


async def areplay(
    run_id: str,
    *,
    db: str | Journal | None = None,
    program: Callable[..., Any] | None = None,
    args: tuple[Any, ...] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    state_type: type[CRDTModel] | None = None,
    accept_changed_code: bool = False,
) -> RunResult[Any]:
    """Run a recorded run against its journal only and check it ends the same, byte for byte.

    Nothing is written and nothing is performed. A program that no longer does what the
    journal recorded raises :class:`Divergence`, naming the address, the source line, the
    nearest earlier checkpoint and the recorded and new effects as a diff. ``args`` and
    ``kwargs`` call the program with other arguments than the recorded ones (a test replaying
    its cassette): whatever they change in what the program asks for is a divergence.
    """
    journal = open_journal(db, read_only=True)
    record = journal.run(run_id)
    config = json.loads(record.config_json or "{}")
    state_type = state_type or _declared_state(program, config)
    _named_again(record, config, {"program": program, "state_type": state_type})
    program = _program_of(record, config, program, accept_changed_code)
    call_args = json.loads(record.args_json)
    entries = journal.entries(run_id)
    result = await execute(
        program,
        tuple(call_args.get("args", [])) if args is None and kwargs is None else tuple(args or ()),
        call_args.get("kwargs", {}) if args is None and kwargs is None else dict(kwargs or {}),
        run_id=run_id,
        services=Services(handlers=_Unreachable(), clock=VirtualClock()),
        state=_initial_state(record, config, state_type, accept_changed_code),
        log=ReplayLog({e.address: e for e in entries}, strict=True, content=journal.content),
    )
    if isinstance(result.error, Divergence | JournalError):  # a record that cannot be read, too
        raise result.error
    _compare(record, result, entries)
    if os.environ.get("OPDSL_OTEL_REPLAY", "").lower() in ("1", "true") and trace_sinks():
        export_journal(record, entries)  # asked for: the replayed run's trace, from its journal
    return result


def _compare(record: RunRecord, result: RunResult[Any], entries: list[Entry]) -> None:
    last = nearest_checkpoint(entries, len(entries) + max((e.seq for e in entries), default=0) + 1)

    def fail(what: str, recorded: str | None, now: str | None) -> Divergence:
        return divergence(
            program=record.program,
            address="end",
            where="the end of the run",
            checkpoint=last,
            recorded=recorded,
            now=now,
            reason=what,
        )

    if record.status in ("running", "cancelled"):
        return  # an unfinished record: the replay reached its end, which is all it can check
    if result.status != record.status:
        raise fail(
            f"the record ended {record.status}, the replay {result.status}",
            record.status,
            result.status,
        )
    if record.status == "completed":
        now = canonical_json(result._value)
        if now != record.result_json:
            raise fail("the program returned something else", record.result_json, now)
    state_now = None if result.state is None else result.state.canonical()
    if record.final_state_json is not None and not (
        result.state is not None and result.state.matches(json.loads(record.final_state_json))
    ):
        raise fail("the final state differs", record.final_state_json, state_now)


def replay(run_id: str, **kwargs: Any) -> RunResult[Any]:
    """:func:`areplay` from synchronous code."""

    return blocking(functools.partial(areplay, run_id, **kwargs))


# -- dry run ------------------------------------------------------------------------------------


@dataclass
class PlanStep:
    address: str
    kind: str
    what: str
    note: str = ""


@dataclass
class Plan:
    """What a program would do: its effects in order, the checkpoints it passes, and an
    estimate of the usage (from the stub or script answers)."""

    program: str
    status: str
    steps: list[PlanStep] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    would_run: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    #: model calls whose cost could not be estimated (no known price)
    unpriced: int = 0
    value: Any = None
    error: str | None = None

    def render(self) -> str:
        lines = [f"dry run of {self.program}: {self.status}"]
        for s in self.steps:
            note = f"  [{s.note}]" if s.note else ""
            lines.append(f"  {s.address:>8}  {s.kind:<10} {s.what}{note}")
        lines.append(f"checkpoints: {', '.join(self.checkpoints) or 'none'}")
        lines.append(f"tools called: {', '.join(self.tools) or 'none'}")
        if self.would_run:
            lines.append(f"would run (side effects, skipped): {', '.join(self.would_run)}")
        cost = "no model call" if not self.usage.total_tokens else "cost unknown"
        if self.usage.cost_usd is not None:
            cost = f"about ${self.usage.cost_usd:.4f}"
        if self.unpriced and self.usage.total_tokens:
            cost += f" (no price known for {self.unpriced} call(s): cost unknown)"
        lines.append(
            f"estimated usage: {self.usage.input_tokens} input + {self.usage.output_tokens} output tokens "
            f"(output: max_tokens, else a guess of {GUESSED_OUTPUT_TOKENS} a call); {cost}"
        )
        if self.error:
            lines.append(f"error: {self.error}")
        return "\n".join(lines)


GUESSED_OUTPUT_TOKENS = 500
"""A dry run's guess of a model call's output when the call sets no ``max_tokens``."""


def _estimate(messages: Iterable[Any]) -> int:
    return max(1, sum(len(getattr(m, "content", "")) for m in messages) // 4)


@final
class DryRunHandlers(Handlers):
    """No side effects: models answer from a script or a stub, read-only tools run, every other
    tool is recorded as "would run" and answered with a placeholder."""

    def __init__(self, *, model: Model | None, tools: ToolRegistry, plan: Plan) -> None:
        self.model = model
        self.tools = tools
        self.plan = plan
        self.live = LiveHandlers(model=model, tools=tools, seed=0)
        # the price table is read once, not at every stubbed call
        self.prices = model.prices if isinstance(model, HttpModel) else Prices()

    def _stub(self, effect: Infer) -> Response:
        """An estimated answer: input tokens from the prompt, output tokens from ``max_tokens``
        or :data:`GUESSED_OUTPUT_TOKENS`, priced where the model's price is known."""
        name = effect.model or (self.model.model if isinstance(self.model, HttpModel) else None)
        asked = effect.params.get("max_tokens")
        output = asked if isinstance(asked, int) and asked > 0 else GUESSED_OUTPUT_TOKENS
        usage = Usage(input_tokens=_estimate(effect.messages), output_tokens=output)
        cost = None if name is None else self.prices.cost(name, usage)
        text = "(dry run: no model call)"
        if effect.output is not None and not effect.output.calls:  # a typed answer: one that fits
            text = json.dumps(example_of(effect.output.json_schema))
        return Response(
            text=text,
            usage=usage.model_copy(update={"cost_usd": cost}),
            model=name or "no model",
        )

    def _note(self, address: str, note: str) -> None:
        for step in reversed(self.plan.steps):
            if step.address == address:
                step.note = note
                return

    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        match effect:
            case Infer():
                if isinstance(self.model, ScriptedModel):  # offline by nature: it answers
                    reply = await self.live.perform(effect, call)
                    self._note(call.address, "scripted")
                else:  # a real model is never called in a dry run: its usage is estimated
                    reply = self._stub(effect)
                    self._note(call.address, f"stub, not sent to {reply.model}")
                self.plan.usage = self.plan.usage + reply.usage
                self.plan.unpriced += reply.usage.cost_usd is None
                return reply
            case ToolEffect():
                if effect.name not in self.plan.tools:
                    self.plan.tools.append(effect.name)
                bound = self.tools.get(effect.name)
                if bound is not None and bound.read_only:
                    self._note(call.address, "ran: read-only")
                    return await bound.call(effect.args)
                if bound is None:
                    return self.tools.unknown(effect.name)
                self.plan.would_run.append(f"{effect.name} at {call.address}")
                self._note(call.address, "would run")
                return ToolResult(output=f"(dry run: {effect.name} would run here)")
            case Agent():
                self._note(call.address, "would run")
                self.plan.would_run.append(f"agent {effect.backend} at {call.address}")
                return TurnRecord(backend=effect.backend, text="(dry run)")
            case Ask():
                self._note(call.address, "stub answer")
                return "(dry run answer)"
            case Emit() | Checkpoint() | Now() | Random() | Uuid() | Sleep():
                return await self.live.perform(effect, call)
            case _:
                assert_never(effect)


async def adry_run(
    program: Callable[..., Any],
    *args: Any,
    model: str | Model | None = None,
    tools: Iterable[ToolLike] = (),
    state: CRDTModel | None = None,
    kwargs: Mapping[str, Any] | None = None,
    workspace: str | Workspace | None = None,
) -> Plan:
    """Walk ``program`` with no side effects and return its :class:`Plan`."""
    if workspace is None:
        workspace = workspace_of(program, args, dict(kwargs or {}))
    ws = as_workspace(workspace)
    tools = [
        *tools,
        *(ws.tools() if ws is not None else ()),
        *(ws.program_tools() if ws is not None else ()),
    ]
    plan = Plan(program=program_name(program), status="running")

    def collect(event: Event) -> None:
        if isinstance(event, EffectStarted):
            plan.steps.append(PlanStep(event.address, event.kind, _what(event.effect)))
            if event.kind == "checkpoint" and isinstance(event.effect, dict):
                plan.checkpoints.append(str(event.effect.get("name")))
        elif isinstance(event, EffectFinished) and event.status != "completed":
            for step in reversed(plan.steps):
                if step.address == event.address:
                    step.note = (step.note + "; " if step.note else "") + event.status
                    break
        elif isinstance(event, RunFinished):
            plan.status = event.status
            plan.error = event.error

    result = await execute(
        program,
        args,
        dict(kwargs or {}),
        run_id=new_run_id(),
        services=Services(
            handlers=DryRunHandlers(
                model=resolve_model(model), tools=ToolRegistry(tools), plan=plan
            ),
            clock=VirtualClock(),
            bus=EventBus([collect]),
        ),
        state=state,
    )
    plan.value = result._value
    return plan


def dry_run(program: Callable[..., Any], *args: Any, **kwargs: Any) -> Plan:
    """:func:`adry_run` from synchronous code.

    Example:
        >>> from op import Op, tool, checkpoint
        >>> def deploy() -> Op[str]:
        ...     yield from checkpoint("start")
        ...     r = yield from tool("push", {"branch": "main"})
        ...     return r.output
        >>> def push(branch: str) -> str:
        ...     raise RuntimeError("never called in a dry run")
        >>> plan = dry_run(deploy, tools=[push])
        >>> plan.would_run, plan.checkpoints
        (['push at 2'], ['start'])
    """

    return blocking(functools.partial(adry_run, program, *args, **kwargs))


def _what(effect: Any) -> str:
    if not isinstance(effect, dict):
        return ""
    kind = effect.get("kind")
    if kind == "tool":
        return f"{effect.get('name')} {canonical_json(effect.get('args'))[:60]}"
    if kind == "infer":
        msgs = effect.get("messages") or []
        text = " ".join(str(msgs[-1].get("content", "")).split()) if msgs else ""
        return text[:60]
    if kind in ("checkpoint", "emit"):
        return str(effect.get("name"))
    if kind == "ask":
        return str(effect.get("question"))[:60]
    if kind == "limit":
        return canonical_json(
            {k: v for k, v in (effect.get("budget") or {}).items() if v is not None}
        )
    if kind == "timeout":
        return f"{effect.get('seconds')}s"
    if kind == "par":
        return f"{effect.get('branches')} branches"
    return ""
