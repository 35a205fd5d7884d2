"""Reading a journal back: decoding recorded results, errors and scope outcomes, and
reporting divergence.

A replay re-runs the program from its start and answers each effect from the entry at the
same address. The program must ask for the same effect there; if it does not, the run has
*diverged* and :class:`Divergence` says where (address and source line), the nearest
checkpoint before it, and the recorded and new effects side by side as a diff.
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, assert_never, final

from pydantic import BaseModel, ValidationError

from interpreters.journal._base import Entry, checkpoint_name, json_object
from op import (
    Agent,
    Ask,
    BudgetExhausted,
    Checkpoint,
    Emit,
    Fatal,
    Infer,
    Limit,
    Now,
    OpdslError,
    Patched,
    Random,
    Response,
    Sleep,
    TimedOut,
    Timeout,
    Tool,
    ToolResult,
    TurnRecord,
    Uuid,
)
from op.effects import LeafEffect
from state import canonical_json
from state._canonical import lone_escaped

__all__ = [
    "Divergence",
    "FinishedScope",
    "ReplayLog",
    "ReplayedError",
    "decode_cut_off",
    "decode_error",
    "decode_result",
    "error_json",
    "finished_scope",
    "marker_name",
    "nearest_checkpoint",
    "source_line",
    "unused_entry",
]


class Divergence(OpdslError, Fatal):
    """The program no longer does what its journal recorded.

    Built by :func:`divergence`, it also holds what its message says, apart: ``address``,
    ``where`` (the source line), ``checkpoint`` (name, address) or None, ``reason``, and the
    ``recorded`` and ``now`` effects (``opdsl check`` reports them).
    """

    address: str | None = None
    where: str | None = None
    checkpoint: tuple[str, str] | None = None
    reason: str | None = None
    recorded: str | None = None
    now: str | None = None


class ReplayedError(OpdslError):
    """A recorded error whose own class could not be rebuilt; ``type_name`` names it."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name


@dataclass
class ReplayLog:
    """The recorded entries a run is fed from.

    ``strict``: the record must cover the whole program (``replay``); otherwise the program
    goes on live where the record ends (``resume``). ``restore_at``: the address of the
    checkpoint whose state snapshot a fork restores.
    """

    entries: dict[str, Entry]
    strict: bool = False
    restore_at: str | None = None
    used: set[str] = field(default_factory=set)
    #: the pieces of content the entries refer to, by hash (the record's journal's)
    content: Callable[[Iterable[str]], Mapping[str, str]] | None = None
    #: the names of the ``patched`` markers this record took the old code at (it passed them
    #: without the marker, or recorded False), in the order met
    old_code: list[str] = field(default_factory=list)


_DECODED: dict[tuple[str, str], Any] = {}


M = TypeVar("M", bound=BaseModel)


def _model(cls: type[M], text: str) -> M:
    """``cls`` from its recorded text. A text with a lone surrogate (a journal from before
    opdsl refused them may hold one), which pydantic's JSON parser refuses, is read as the
    program saw it."""
    try:
        return cls.model_validate_json(text)
    except ValidationError as refused:
        try:  # Python's parser takes one, raw or escaped
            return cls.model_validate(json.loads(text))
        except (ValueError, ValidationError):
            raise refused from None


def decode_result(effect: LeafEffect, text: str | None) -> Any:
    """The value the program saw for ``effect``, from its recorded JSON.

    Results are immutable values, so equal texts decode to one shared value (a bounded cache:
    replays of long runs repeat the same small results often).
    """
    if text is None:
        return None
    key = (effect.kind, text)
    found = _DECODED.get(key)
    if found is not None:
        return found
    value = _decode(effect, text)
    if len(text) < 4096 and isinstance(value, Response | ToolResult | TurnRecord | str | float):
        if len(_DECODED) > 10_000:
            _DECODED.clear()
        _DECODED[key] = value
    return value


def _decode(effect: LeafEffect, text: str) -> Any:
    """The value a leaf effect's recorded result stands for: the type its live handler gave."""
    match effect:
        case Infer():
            return _model(Response, text)
        case Tool():
            return _model(ToolResult, text)
        case Agent():
            return _model(TurnRecord, text)
        case Emit() | Checkpoint() | Sleep():
            return None
        case Now() | Random():
            return float(json.loads(text))
        case Uuid() | Ask():
            return str(json.loads(text))
        case Patched():
            return json.loads(text) is True
        case _:
            assert_never(effect)


def _type_name(cls: type[BaseException]) -> str:
    """How an error's class is recorded: a built-in by its name (``ValueError``), any other
    as ``module:qualname`` (so a replay can rebuild it)."""
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}:{cls.__qualname__}"


def error_json(exc: BaseException, address: str | None = None) -> str:
    """The one error-JSON format of the journal, for an entry's error and a run's alike:
    ``{"type", "message"}``, and for a run the ``address`` where the error left the program.

    Read back by :func:`decode_error`, which also reads the formats written before 0.4.0
    (an entry's ``builtins:ValueError``; a run's bare class name for every class)."""
    # a diagnostic, not data: a lone surrogate in it is kept as its escape
    data: dict[str, Any] = {"type": _type_name(type(exc)), "message": lone_escaped(str(exc))}
    if address is not None:
        data["address"] = address
    return canonical_json(data)


def decode_error(text: str | None) -> Exception:
    """Rebuild a recorded exception: its own class when its module is loaded and it can be
    built from its message, else a :class:`ReplayedError` naming it."""
    data = json.loads(text or "{}")
    type_name = str(data.get("type", "Exception"))
    message = str(data.get("message", ""))
    module, colon, qual = type_name.partition(":")
    if not colon:  # a built-in, recorded by its name
        module, qual = "builtins", type_name
    try:
        # only classes of modules already loaded: a journal never makes opdsl import (and so
        # run) a module it names
        obj: Any = sys.modules[module]
        for part in qual.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, type) and issubclass(obj, Exception):
            if issubclass(obj, KeyError) and message.startswith("'") and message.endswith("'"):
                message = message[1:-1]
            err = obj(message)
            if str(err) == message or isinstance(err, KeyError):
                return err
    except Exception:
        pass
    return ReplayedError(type_name, message)


@final
@dataclass(frozen=True, slots=True)
class FinishedScope:
    """A scope (``limit``, ``timeout``, ``par``) whose record is finished, as its entry
    recorded it: where, and whether its body was cut off (a spent budget, a deadline) with
    ``error`` as the recorded ``Failure``'s data."""

    address: str
    failed: bool
    error: Any = None


def finished_scope(entry: Entry | None) -> FinishedScope | None:
    """The outcome a scope's entry recorded, decoded once when the scope opens: None unless
    the entry completed. A ``limit``'s or ``timeout``'s outcome is recorded as canonical JSON
    writes a ``Result`` (``{"ok": value}`` or ``{"error": data}``); a ``par``'s as the list
    of its values."""
    if entry is None or entry.status != "completed":
        return None
    try:
        data = json.loads(entry.result_json or "null")
    except ValueError:
        data = None
    if isinstance(data, dict) and "error" in data and "ok" not in data:
        return FinishedScope(entry.address, failed=True, error=data["error"])
    return FinishedScope(entry.address, failed=False)


def decode_cut_off(effect: Limit[Any] | Timeout[Any], scope: FinishedScope) -> Any:
    """The error a recorded cut-off scope gave its program: a ``limit``'s
    :class:`BudgetExhausted`, a ``timeout``'s :class:`TimedOut`."""
    match effect:
        case Limit():
            return BudgetExhausted.model_validate(scope.error)
        case Timeout():
            return TimedOut.model_validate(scope.error)
        case _:
            assert_never(effect)


def nearest_checkpoint(entries: Iterable[Entry], before_seq: int) -> tuple[str, str] | None:
    """(name, address) of the last checkpoint recorded before the entry numbered ``before_seq``."""
    best: Entry | None = None
    for e in entries:
        if e.kind == Checkpoint.kind and e.seq < before_seq and (best is None or e.seq > best.seq):
            best = e
    return None if best is None else (checkpoint_name(best) or "?", best.address)


def unused_entry(log: ReplayLog) -> Entry | None:
    """The first entry of a strict record that the replayed program never asked for."""
    if not log.strict:
        return None
    unused = [a for a in log.entries if a not in log.used]
    if not unused:
        return None
    return min((log.entries[a] for a in unused), key=lambda e: e.seq)


def source_line(gen: Generator[Any, Any, Any] | None) -> str:
    """``file:line in function`` of the program code that yielded the current effect."""
    where = "an unknown place"
    g: Any = gen
    while g is not None:
        frame = getattr(g, "gi_frame", None)
        if frame is not None:
            filename = frame.f_code.co_filename
            if not filename.replace("\\", "/").endswith(("op/_effects.py", "op/_patched.py")):
                where = f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        g = getattr(g, "gi_yieldfrom", None)
    return where


def _pretty(text: str) -> list[str]:
    try:
        return json.dumps(
            json.loads(text), indent=2, sort_keys=True, ensure_ascii=False
        ).splitlines()
    except (ValueError, RecursionError):
        return [text]


def marker_name(entry: Entry) -> str | None:
    """The name of the ``patched`` marker an entry records, if it records one (None for
    another kind, or an effect that is not an object naming it: a file edited by hand)."""
    if entry.kind != Patched.kind:
        return None
    name = json_object(entry.effect_json).get("name")
    return name if isinstance(name, str) else None


def divergence(
    *,
    program: str,
    address: str,
    where: str,
    checkpoint: tuple[str, str] | None,
    recorded: str | None,
    now: str | None,
    reason: str,
) -> Divergence:
    """A :class:`Divergence` with everything a person needs to find the change."""
    lines = [f"{program} diverged from its journal at address {address} ({where}): {reason}"]
    if checkpoint is not None:
        lines.append(
            f"  nearest checkpoint before it: {checkpoint[0]!r} at address {checkpoint[1]}"
        )
    else:
        lines.append("  no checkpoint before it")
    lines.append(f"  recorded: {recorded if recorded is not None else '(nothing)'}")
    lines.append(f"  now:      {now if now is not None else '(nothing)'}")
    if recorded is not None and now is not None:
        diff = difflib.unified_diff(
            _pretty(recorded), _pretty(now), "recorded", "now", lineterm="", n=2
        )
        lines += ["  " + d for d in diff]
    found = Divergence("\n".join(lines))
    found.address, found.where, found.checkpoint = address, where, checkpoint
    found.reason, found.recorded, found.now = reason, recorded, now
    return found
