"""Event sinks: where a run's events go (a callback, a JSONL file, the console)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any, final

from rich.console import Console
from rich.markup import escape

from op import (
    CheckpointSaved,
    ConflictDetected,
    EffectFinished,
    EffectStarted,
    Emitted,
    Event,
    RunFinished,
    RunStarted,
    TokenDelta,
    canonical_json,
)

__all__ = ["ConsoleSink", "JsonlSink"]


@final
class JsonlSink:
    """Appends each event as one canonical JSON line to a file.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "events.jsonl")
        >>> with JsonlSink(path) as sink:
        ...     sink(RunStarted(run_id="r1", at=0.0, program="m:f"))
        >>> open(path).read().startswith('{"args":null')
        True
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[str] = self.path.open("a", encoding="utf-8")

    def __call__(self, event: Event) -> None:
        self._file.write(canonical_json(event) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@final
class ConsoleSink:
    """A live, human-readable view of a run on the terminal (rich)."""

    def __init__(self, console: Console | None = None, *, show_tokens: bool = True) -> None:
        self.console = console or Console(highlight=False)
        self.show_tokens = show_tokens
        self._streaming = False

    def _end_stream(self) -> None:
        if self._streaming:
            self.console.print()
            self._streaming = False

    def __call__(self, event: Event) -> None:
        c = self.console
        if isinstance(event, TokenDelta):
            if self.show_tokens:
                c.print(event.text, end="", style="dim")
                self._streaming = True
            return
        self._end_stream()
        match event:
            case RunStarted():
                c.print(f"[bold]▶ run {event.run_id}[/] {event.program}")
            case RunFinished():
                style = "green" if event.status == "completed" else "red"
                extra = f": {event.error}" if event.error else ""
                c.print(f"[bold {style}]■ {event.status}[/]{extra}")
            case EffectStarted():
                if event.kind in ("infer", "tool", "agent", "ask"):
                    c.print(f"  [cyan]{event.address:>8}[/] {event.kind} {_describe(event.effect)}")
            case EffectFinished():
                if event.status != "completed":
                    c.print(
                        f"  [red]{event.address:>8} {event.kind} {event.status}[/] {escape(event.error or '')}"
                    )
                elif event.error:  # a tool whose result is ok=false
                    c.print(
                        f"  [red]{event.address:>8} {event.kind} failed[/] {escape(event.error)}"
                    )
                elif event.usage is not None and event.usage.total_tokens:
                    c.print(
                        f"  [dim]{event.address:>8} {event.usage.total_tokens} tokens, {event.duration_s:.2f}s[/]"
                    )
            case CheckpointSaved():
                c.print(f"  [magenta]{event.address:>8} ◆ checkpoint {event.name}[/]")
            case Emitted():
                data = "" if event.data is None else " " + _short(event.data)
                c.print(f"  [yellow]{event.address:>8} • {event.name}[/]{data}")
            case ConflictDetected():
                c.print(f"  [red]{event.address:>8} conflict[/] {_short(event.conflicts)}")


def _describe(effect: Any) -> str:
    if not isinstance(effect, dict):
        return ""
    if "name" in effect and "args" in effect:
        return f"{effect['name']} {_short(effect['args'], 50)}"
    if "backend" in effect:
        return f"{effect['backend']} {_short(effect.get('prompt', ''), 50)}"
    if "question" in effect:
        return _short(effect["question"])
    msgs = effect.get("messages") or []
    last = msgs[-1]["content"] if msgs else ""
    return _short(last, 50)
