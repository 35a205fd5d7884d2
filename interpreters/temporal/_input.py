"""A workflow's input, checked whole and once, before anything runs.

Whoever can start a workflow writes its input. Every field is checked here, at the start of
the workflow: a field that is missing, unknown or of the wrong type, JSON nested deeper than
:data:`MAX_NESTING`, arguments that are not an object or do not fit the program, a history
limit out of :data:`HISTORY_LIMITS`, a carried journal that is malformed or of another run.
Each fails the workflow at once with a one-line reason (an ``ApplicationError`` of type
``InputRefused``, not retried), never its task: a task that fails is retried by Temporal for
ever, and the run would stay running with a traceback in the worker's log at each try.

The rules, field by field (``RunInput`` in ``_types``):

- ``run_id``: text, the workflow's own id; ``program``: ``module:function``.
- ``args_json``: a JSON object ``{"args": [...], "kwargs": {...}}``; the arguments must fit
  the program's signature (checked once the program is imported: :func:`check_arguments`).
- ``state_json`` and ``state_type`` (``module:Class``): both or neither.
- ``record``: a journal as ``opdsl export`` writes it, of this run and program, and
  ``pieces`` the pieces of content it refers to (hash: text), each checked against its hash;
  ``restore_at``: the address of one of its checkpoints, only with a record.
- ``seed``, ``parent_run``, ``fork_checkpoint``, ``journal``: text or nothing.
- ``tools_json``: nothing, or a listing of MCP tools (:func:`listing_problem`).
- ``history_limit``: a whole number in :data:`HISTORY_LIMITS`; ``history_bytes``: in
  :data:`HISTORY_BYTES`; ``generation``: from 0.
- Any JSON (the arguments, the state, every line of the record and every JSON value its
  entries hold) nests at most :data:`MAX_NESTING` arrays and objects deep.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, final

from temporalio.exceptions import ApplicationError

from interpreters.journal._base import JournalError
from interpreters.journal._portable import Exported
from interpreters.temporal._carry import read_carried
from interpreters.temporal._types import RunInput
from op import Checkpoint

__all__ = [
    "HISTORY_BYTES",
    "HISTORY_LIMITS",
    "MAX_NESTING",
    "CheckedInput",
    "check_arguments",
    "checked_input",
    "listing_problem",
    "nesting",
    "refused",
]

MAX_NESTING = 100
"""How deep the arrays and objects of any JSON in a run's input may nest."""

HISTORY_LIMITS = (1, 51_200)
"""The range of ``history_limit``: Temporal ends a workflow whose history holds 51,200 events.
A low limit is slow, not endless: each run of the workflow performs an effect before it
continues as new."""

HISTORY_BYTES = (64 * 1024, 50 * 1024 * 1024)
"""The range of ``history_bytes``: Temporal ends a workflow whose history holds 50 MiB."""

_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def refused(message: str) -> ApplicationError:
    """The error that fails a workflow whose input is refused (not retried)."""
    return ApplicationError(message, type="InputRefused", non_retryable=True)


def nesting(text: str) -> int:
    """How deep the arrays and objects of the JSON ``text`` nest (strings are skipped).

    Example:
        >>> nesting('{"a": [1, {"b": "[[["}]}')
        3
    """
    depth = deepest = 0
    for c in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


@final
@dataclass(frozen=True)
class CheckedInput:
    """A run's input once checked: the fields, the arguments parsed, the carried journal."""

    inp: RunInput
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    carried: Exported | None


def checked_input(value: object, workflow_id: str) -> CheckedInput:
    """The run a workflow was started with, from its decoded input; :func:`refused` if any
    field breaks a rule of this module's."""
    if not isinstance(value, dict):
        raise refused(f"a run's input is an object of RunInput's fields, not {_kind(value)}")
    names = [f.name for f in dataclasses.fields(RunInput)]
    unknown = sorted(str(k) for k in value if k not in names)
    if unknown:
        raise refused(f"a run's input has no field {unknown[0]!r} (its fields: {', '.join(names)})")
    for name in ("run_id", "program"):
        if name not in value:
            raise refused(f"a run's input needs its {name}")
    for name in names:
        if name in value:
            _FIELDS[name](name, value[name])
    inp = RunInput(**value)
    if inp.run_id != workflow_id:
        raise refused(f"run_id {inp.run_id!r} is not the workflow's id {workflow_id!r}")
    if (inp.state_json is None) != (inp.state_type is None):
        raise refused("state_json and state_type come together: give both or neither")
    if inp.restore_at is not None and inp.record is None:
        raise refused("restore_at names a checkpoint of a record; the input has no record")
    if inp.pieces and inp.record is None:
        raise refused("pieces are the content of a record; the input has no record")
    args, kwargs = _arguments(inp.args_json)
    carried = None if inp.record is None else _carried(inp)
    return CheckedInput(inp=inp, args=args, kwargs=kwargs, carried=carried)


def check_arguments(
    program: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], ref: str
) -> None:
    """:func:`refused` unless ``program(*args, **kwargs)`` fits the program's signature."""
    try:
        inspect.signature(program).bind(*args, **kwargs)
    except TypeError as exc:
        raise refused(f"the arguments do not fit the program {ref}: {exc}") from None
    except ValueError:  # no signature to read (a builtin): the call itself will say
        return


def _kind(value: object) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def _text(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise refused(f"{name} is text, not {_kind(value)}")


def _optional_text(name: str, value: object) -> None:
    if value is not None:
        _text(name, value)


def _reference(name: str, value: object) -> None:
    _text(name, value)
    assert isinstance(value, str)
    if not _REF.fullmatch(value):
        raise refused(f"{name} {value[:80]!r} is not a reference like module:function")


def _optional_reference(name: str, value: object) -> None:
    if value is not None:
        _reference(name, value)


def _json(name: str, value: object) -> None:
    _text(name, value)
    assert isinstance(value, str)
    _shallow(name, value)


def _optional_json(name: str, value: object) -> None:
    if value is not None:
        _json(name, value)
        assert isinstance(value, str)
        try:
            json.loads(value)
        except ValueError as exc:
            raise refused(f"{name} is not JSON: {exc}") from None


def _shallow(name: str, text: str) -> None:
    if nesting(text) > MAX_NESTING:
        raise refused(f"{name} nests deeper than {MAX_NESTING} arrays and objects")


def _pieces(name: str, value: object) -> None:
    if not isinstance(value, dict):
        raise refused(f"{name} is an object of texts by hash, not {_kind(value)}")
    for h, text in value.items():
        if not isinstance(text, str):
            raise refused(f"{name}: piece {str(h)[:70]!r} is text, not {_kind(text)}")
        if not text.startswith('"'):  # a piece that is a JSON string nests nothing
            _shallow(f"{name}: piece {str(h)[:70]!r}", text)


def listing_problem(data: object) -> str | None:
    """What is wrong with ``data`` as a listing of MCP tools (an object of servers, each an
    object whose ``tools`` are objects with a text ``name`` and ``description`` and an object
    of ``parameters``), or None.

    Example:
        >>> listing_problem({"git": {"tools": [{"name": "git_log"}]}})
        "server 'git': tool 1 needs its description as text"
    """
    if not isinstance(data, dict):
        return f"it is an object of servers, not {_kind(data)}"
    for server, entry in data.items():
        tools = entry.get("tools") if isinstance(entry, dict) else None
        if not isinstance(tools, list):
            return f"server {str(server)[:70]!r} has no list of tools"
        for i, t in enumerate(tools, 1):
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                return f"server {str(server)[:70]!r}: tool {i} has no name"
            if not isinstance(t.get("description"), str):
                return f"server {str(server)[:70]!r}: tool {i} needs its description as text"
            if not isinstance(t.get("parameters"), dict):
                return f"server {str(server)[:70]!r}: tool {i} needs its parameters as an object"
    return None


def _listing(name: str, value: object) -> None:
    _optional_json(name, value)
    if value is not None:
        assert isinstance(value, str)
        problem = listing_problem(json.loads(value))
        if problem is not None:
            raise refused(f"{name} is not a listing of MCP tools: {problem}")


def _count(low: int, high: int | None) -> Callable[[str, object], None]:
    def check(name: str, value: object) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise refused(f"{name} is a whole number, not {_kind(value)}")
        if value < low or (high is not None and value > high):
            upto = f"from {low:,} to {high:,}" if high is not None else f"{low:,} or more"
            raise refused(f"{name} is {value:,}; it must be {upto}")

    return check


_FIELDS: dict[str, Callable[[str, object], None]] = {
    "run_id": _text,
    "program": _reference,
    "args_json": _json,
    "state_json": _optional_json,
    "journal": _optional_text,
    "state_type": _optional_reference,
    "seed": _optional_text,
    "record": _optional_text,
    "restore_at": _optional_text,
    "parent_run": _optional_text,
    "fork_checkpoint": _optional_text,
    "history_limit": _count(*HISTORY_LIMITS),
    "generation": _count(0, None),
    "pieces": _pieces,
    "history_bytes": _count(*HISTORY_BYTES),
    "tools_json": _listing,
}
"""The check of each field of ``RunInput``, by name (a test holds it to the dataclass)."""


def _arguments(args_json: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    try:
        data = json.loads(args_json)
    except ValueError as exc:
        raise refused(f"args_json is not JSON: {exc}") from None
    if not isinstance(data, dict) or set(data) - {"args", "kwargs"}:
        raise refused('args_json is an object {"args": [...], "kwargs": {...}}')
    args, kwargs = data.get("args", []), data.get("kwargs", {})
    if not isinstance(args, list):
        raise refused(f"args_json's args are a list, not {_kind(args)}")
    if not isinstance(kwargs, dict):
        raise refused(f"args_json's kwargs are an object, not {_kind(kwargs)}")
    return tuple(args), kwargs


def _carried(inp: RunInput) -> Exported:
    """The journal a run was given (continue-as-new, a fork), checked as an imported file is,
    every JSON value its lines, entries and pieces hold included."""
    text = inp.record or ""
    source = "the journal the run was given"
    for n, line in enumerate(text.splitlines(), start=1):
        _shallow(f"{source}, line {n},", line)
    try:
        exported = read_carried(text, inp.pieces, source=source)
    except JournalError as exc:
        raise refused(str(exc)) from None
    record, entries = exported.run, exported.entries
    if record.run_id != inp.run_id or record.program != inp.program:
        raise refused(
            f"{source} is of run {record.run_id} of {record.program}, not "
            f"run {inp.run_id} of {inp.program}"
        )
    for key, value in record.model_dump().items():
        if key.endswith("_json") and isinstance(value, str):
            _shallow(f"{source}: the run's {key}", value)
    for e in entries:
        for key, value in e.as_dict().items():
            if key.endswith("_json") and isinstance(value, str):
                _shallow(f"{source}: entry {e.address}'s {key}", value)
    if inp.restore_at is not None and not any(
        e.address == inp.restore_at and e.kind == Checkpoint.kind for e in entries
    ):
        raise refused(f"restore_at {inp.restore_at[:40]!r} is not a checkpoint of {source}")
    return exported
