"""Reading a journal back: decoding recorded results and errors, and reporting divergence.

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
from typing import Any, assert_never

from interpreters.journal._base import Entry
from op import (
    Agent,
    Ask,
    Checkpoint,
    Emit,
    Fatal,
    Infer,
    LeafEffect,
    Now,
    OpdslError,
    Random,
    Response,
    Sleep,
    Tool,
    ToolResult,
    TurnRecord,
    Uuid,
)

__all__ = [
    "Divergence",
    "ReplayLog",
    "ReplayedError",
    "decode_error",
    "decode_result",
    "error_json",
    "source_line",
]


class Divergence(OpdslError, Fatal):
    """The program no longer does what its journal recorded."""


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


_DECODED: dict[tuple[str, str], Any] = {}


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
            return Response.model_validate_json(text)
        case Tool():
            return ToolResult.model_validate_json(text)
        case Agent():
            return TurnRecord.model_validate_json(text)
        case Emit() | Checkpoint() | Sleep():
            return None
        case Now() | Random():
            return float(json.loads(text))
        case Uuid() | Ask():
            return str(json.loads(text))
        case _:
            assert_never(effect)


def error_json(exc: BaseException) -> str:
    cls = type(exc)
    return json.dumps(
        {"type": f"{cls.__module__}:{cls.__qualname__}", "message": str(exc)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


def decode_error(text: str | None) -> Exception:
    """Rebuild a recorded exception: its own class when its module is loaded and it can be
    built from its message, else a :class:`ReplayedError` naming it."""
    data = json.loads(text or "{}")
    type_name = str(data.get("type", "Exception"))
    message = str(data.get("message", ""))
    module, _, qual = type_name.partition(":")
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


def source_line(gen: Generator[Any, Any, Any] | None) -> str:
    """``file:line in function`` of the program code that yielded the current effect."""
    where = "an unknown place"
    g: Any = gen
    while g is not None:
        frame = getattr(g, "gi_frame", None)
        if frame is not None:
            filename = frame.f_code.co_filename
            if not filename.replace("\\", "/").endswith("op/_effects.py"):
                where = f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        g = getattr(g, "gi_yieldfrom", None)
    return where


def _pretty(text: str) -> list[str]:
    try:
        return json.dumps(
            json.loads(text), indent=2, sort_keys=True, ensure_ascii=False
        ).splitlines()
    except ValueError:
        return [text]


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
    return Divergence("\n".join(lines))
