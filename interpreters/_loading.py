"""Loading what a run names: its program, tools and state type by ``module:attr``, checked
against the files the run was recorded with, and the config a run records so that a new
process can load them again.

The one loader of ``module:attr`` references: the durable runs, the CLI and the Temporal
workflow and worker all import programs, tools and state types through it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from importlib.machinery import ModuleSpec, SourceFileLoader
from pathlib import Path
from types import CodeType
from typing import Any

from interpreters.journal._base import JournalError, RunRecord
from interpreters.journal._seal import FOREIGN
from interpreters.models._base import Model, redact_spec
from interpreters.runtime._driver import program_name
from interpreters.tools._bound import BoundTool, ToolLike
from op import OpdslError, default_state
from state import CRDTModel, canonical_json

__all__ = [
    "CodeChanged",
    "ProgramNotFound",
    "as_program",
    "as_state_type",
    "check_code",
    "code_of",
    "config_for",
    "declared_state",
    "initial_state",
    "load_object",
    "load_program",
    "load_tools",
    "named_again",
    "program_of",
    "resolve",
]


class ProgramNotFound(OpdslError):
    """A ``module:attr`` reference cannot be imported."""


def resolve(ref: str) -> Any:
    """The object ``module:attr.path`` names, imported as it is, its errors as they come (for
    an engine that decides itself what an import error means: the Temporal workflow, whose
    sandbox may refuse what a worker admitted)."""
    module_name, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def as_program(obj: Any, ref: str) -> Callable[..., Any]:
    """``obj`` (named ``ref``) as a program: anything but a generator function is refused."""
    if not callable(obj):
        raise ProgramNotFound(f"program {ref!r} is a {type(obj).__name__}, not a function")
    if not inspect.isgeneratorfunction(inspect.unwrap(obj)):
        raise ProgramNotFound(
            f"{ref!r} is not a program: a program is a generator function (def + yield from)"
        )
    return obj  # type: ignore[no-any-return]


def as_state_type(obj: Any, ref: str) -> type[CRDTModel]:
    """``obj`` (named ``ref``) as a state type: anything but a ``CRDTModel`` class is refused."""
    if not (isinstance(obj, type) and issubclass(obj, CRDTModel)):
        raise ProgramNotFound(f"state type {ref!r} is not a CRDTModel")
    return obj


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
        ) from exc  # kept: a Ctrl-C a library raised as it (opdsl then says it stopped)
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
    return as_program(load_object(ref, "program"), ref)


def program_of(
    record: RunRecord,
    config: Mapping[str, Any],
    program: Callable[..., Any] | None,
    accept_changed_code: bool = False,
) -> Callable[..., Any]:
    """The program that continues or replays ``record``. A foreign run (imported, or not sealed
    as the user's: :func:`~interpreters.journal._seal.config_of`) names code someone else
    may have chosen: it runs only when the caller names the same program again. One loaded
    by the name its journal holds comes from the file the run started with (:func:`check_code`)."""
    if program is None and config.get(FOREIGN):
        raise OpdslError(
            f"run {record.run_id} {config[FOREIGN]}; it names the program {record.program}: "
            f"pass --program {record.program} (program= in the API) to run that code"
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
    imported as it is now. A foreign run (:func:`config_of`) is not checked: its user names
    its code again."""
    recorded = config.get("code")
    if accept or config.get(FOREIGN) or not isinstance(recorded, dict):
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
            ) from exc


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


def initial_state(
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
        cls = as_state_type(load_object(ref, "state type"), ref)
    return cls.model_validate_json(record.state_json)  # type: ignore[no-any-return]


def named_again(record: RunRecord, config: Mapping[str, Any], given: Mapping[str, object]) -> None:
    """A foreign run (imported, or not sealed as the user's) uses nothing its record names
    that would run code (its program, tools, state type), send a key (its model) or touch a
    folder (its workspace) until the caller gives each again. ``given``: what the caller
    passed, of what it would use (a replay uses no tool, model or workspace). Refused, naming
    them all, before anything is imported, sent or touched."""
    reason = config.get(FOREIGN)
    if not reason:
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
            f"run {record.run_id} {reason}; nothing it names (code to run, a model to send a "
            f"key to, a folder to change) is used until you give it again: "
            f"{', '.join(wanted)}"
        )


def declared_state(
    program: Callable[..., Any] | None, config: Mapping[str, Any]
) -> type[CRDTModel] | None:
    """For a foreign run: the state type the program the caller named declares
    (``@program(state=...)``), which names it as well as ``state_type=`` would; else the one
    the run recorded when it is a class of the program's own module, already imported
    (getting it runs nothing: the module's own attributes, not its ``__getattr__``)."""
    if program is None or not config.get(FOREIGN):
        return None
    declared = default_state(program)
    if declared is not None:
        return type(declared)
    ref = config.get("state_type")
    if not isinstance(ref, str):
        return None
    module_name, _, attr = ref.partition(":")
    module = sys.modules.get(module_name)
    if module is None or module_name != getattr(inspect.unwrap(program), "__module__", None):
        return None
    found = vars(module).get(attr)
    return found if isinstance(found, type) and issubclass(found, CRDTModel) else None
