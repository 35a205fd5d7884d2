"""Event sinks: where a run's events go (a callback, a JSONL file, the console)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, final

from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from interpreters._shown import visible
from op import Agent, Ask, Infer, Limit, Timeout, Tool, Usage
from op.events import (
    CheckpointSaved,
    ConflictDetected,
    EffectFinished,
    EffectStarted,
    Emitted,
    Event,
    RunFinished,
    RunStarted,
    TokenDelta,
)
from state import NotSerializable, canonical_json, to_jsonable

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
        try:
            line = canonical_json(event)
        except NotSerializable:  # a lone surrogate (no UTF-8 holds it): JSON's escape for it
            line = json.dumps(to_jsonable(event), sort_keys=True, separators=(",", ":"))
        self._file.write(line + "\n")
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


# the effects a run waits on (shown with a spinner), and the scopes whose budget is shown
_WAITS = frozenset(t.kind for t in (Infer, Tool, Agent, Ask))
_SCOPES = frozenset(t.kind for t in (Limit, Timeout))


@dataclass
class _Waiting:
    """An effect the run waits on: its spinner and when it began."""

    kind: str
    what: str
    started: float
    spinner: Spinner
    streamed: list[str] = field(default_factory=list)
    #: the model's thinking, shown live while no answer has come yet
    thinking: list[str] = field(default_factory=list)


@dataclass
class _ScopeView:
    """An open ``limit`` or ``timeout``: its budget and what its effects spent so far."""

    kind: str
    budget: dict[str, Any]
    started: float
    tokens: int = 0
    usd: float = 0.0
    model_calls: int = 0
    tool_calls: int = 0

    def measures(self, now: float) -> list[tuple[str, float, float | None]]:
        """(name, spent, limit) for each measure the scope limits (or has spent)."""
        b = self.budget
        out: list[tuple[str, float, float | None]] = []
        for name, spent in (
            ("tokens", float(self.tokens)),
            ("usd", self.usd),
            ("model", float(self.model_calls)),
            ("tools", float(self.tool_calls)),
        ):
            key = {"model": "model_calls", "tools": "tool_calls"}.get(name, name)
            limit = b.get(key)
            if limit is not None or spent:
                out.append((name, spent, None if limit is None else float(limit)))
        seconds = b.get("seconds")
        out.append(("s", now - self.started, None if seconds is None else float(seconds)))
        return out


@final
class ConsoleSink:
    """A live, human-readable view of a run on the terminal (rich).

    Each effect is a line as it happens. On a terminal, below them, a live area shows every
    open ``limit`` and ``timeout`` with its budget as a bar (spent against the limit), and a
    spinner with the elapsed time on each effect the run waits on (a model call, a command,
    an agent turn), with the tail of what a model is streaming. Piped, only the lines.
    Run text (names, arguments, answers, errors) is never read as rich markup, and its
    control characters are shown escaped (``interpreters._shown``).
    """

    def __init__(
        self, console: Console | None = None, *, show_tokens: bool = True, live: bool | None = None
    ) -> None:
        self.console = console or Console(highlight=False)
        self.show_tokens = show_tokens
        self.live = self.console.is_terminal if live is None else live
        self._streaming = False
        self._waiting: dict[str, _Waiting] = {}
        self._scopes: dict[str, _ScopeView] = {}
        self._live: Live | None = None

    # -- the live area ------------------------------------------------------------------------

    def __rich__(self) -> RenderableType:
        now = time.monotonic()
        grid = Table.grid(padding=(0, 1))
        for address, scope in self._scopes.items():
            measures = scope.measures(now)
            fractions = [spent / limit for _, spent, limit in measures if limit]
            worst = max(fractions, default=0.0)
            text = " · ".join(
                f"{name} ${spent:.4f}" + ("" if limit is None else f"/${limit:.4f}")
                if name == "usd"
                else f"{name} {_num(spent)}" + ("" if limit is None else f"/{_num(limit)}")
                for name, spent, limit in measures
            )
            bar = ProgressBar(total=1.0, completed=min(worst, 1.0), width=20)
            grid.add_row(
                Text(f"{scope.kind} {address}", style="cyan"), bar, Text(text, style="dim")
            )
        for address, w in self._waiting.items():
            tail = "".join(w.streamed)[-60:].replace("\n", " ")
            label = Text(f"{w.kind} {address} {now - w.started:.1f}s ", style="bold")
            label.append(visible(w.what + (f"  {tail}" if tail else ""), lines=False), style="dim")
            if w.thinking and not tail:
                thought = "".join(w.thinking)[-60:].replace("\n", " ")
                label.append(visible(f"  thinking: {thought}", lines=False), style="dim italic")
            w.spinner.update(text=label)
            grid.add_row(w.spinner, "", "")
        return grid

    def _start_live(self) -> None:
        if self.live and self._live is None:
            self._live = Live(
                self,
                console=self.console,
                transient=True,
                refresh_per_second=8,
                redirect_stdout=False,
            )
            self._live.start()

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _charge(self, address: str, kind: str, usage: Usage | None) -> None:
        for scope_address, scope in self._scopes.items():
            if address.startswith(scope_address + "."):
                if kind in (Infer.kind, Agent.kind):
                    scope.model_calls += 1
                elif kind == Tool.kind:
                    scope.tool_calls += 1
                if usage is not None:
                    scope.tokens += usage.total_tokens
                    scope.usd += usage.cost_usd or 0.0

    # -- events -------------------------------------------------------------------------------

    def _end_stream(self) -> None:
        if self._streaming:
            self.console.print()
            self._streaming = False

    def _line(self, *parts: str | tuple[str, str], end: str = "\n") -> None:
        """Print one line built from ``parts`` (text, or (text, style)). Run text is never
        markup: it reaches rich as :class:`Text`, its control characters made visible."""
        text = Text(end=end)
        for part in parts:
            if isinstance(part, tuple):
                text.append(visible(part[0]), style=part[1])
            else:
                text.append(visible(part))
        self.console.print(text, end=end)

    def __call__(self, event: Event) -> None:
        if isinstance(event, TokenDelta):
            waiting = self._waiting.get(event.address)
            if self._live is not None and waiting is not None:
                # shown live; the answer is printed whole at the end
                (waiting.thinking if event.thinking else waiting.streamed).append(event.text)
            elif self.show_tokens:
                self._line((event.text, "dim italic" if event.thinking else "dim"), end="")
                self._streaming = True
            return
        self._end_stream()
        line = self._line
        match event:
            case RunStarted():
                line((f"▶ run {event.run_id}", "bold"), f" {event.program}")
                self._start_live()
            case RunFinished():
                self._stop_live()
                self._waiting.clear()
                self._scopes.clear()
                style = {"completed": "green", "waiting": "yellow"}.get(event.status, "red")
                extra = f": {event.error}" if event.error else ""
                line((f"■ {event.status}", f"bold {style}"), extra)
            case EffectStarted():
                if event.kind in _WAITS:
                    what = _describe(event.effect)
                    line((f"  {event.address:>8}", "cyan"), f" {event.kind} {what}")
                    self._waiting[event.address] = _Waiting(
                        event.kind, what, time.monotonic(), Spinner("dots")
                    )
                elif event.kind in _SCOPES:
                    effect = event.effect if isinstance(event.effect, dict) else {}
                    budget = dict(effect.get("budget") or {})
                    if event.kind == Timeout.kind:
                        budget = {"seconds": effect.get("seconds")}
                    self._scopes[event.address] = _ScopeView(event.kind, budget, time.monotonic())
            case EffectFinished():
                waited = self._waiting.pop(event.address, None)
                self._scopes.pop(event.address, None)
                self._charge(event.address, event.kind, event.usage)
                if waited is not None and waited.streamed and self.show_tokens:
                    line(("".join(waited.streamed), "dim"))
                if _waits(event):
                    # not an error: the run waits, durably, for `opdsl answer`
                    what = "for an answer" if event.kind == Ask.kind else "on a question inside"
                    line((f"  {event.address:>8} {event.kind} waiting {what}", "yellow"))
                elif event.status != "completed":
                    line(
                        (f"  {event.address:>8} {event.kind} {event.status}", "red"),
                        f" {event.error or ''}",
                    )
                elif event.error:  # a tool whose result is ok=false
                    line((f"  {event.address:>8} {event.kind} failed", "red"), f" {event.error}")
                elif event.usage is not None and event.usage.total_tokens:
                    tokens = f"{event.usage.total_tokens} tokens, {event.duration_s:.2f}s"
                    line((f"  {event.address:>8} {tokens}", "dim"))
            case CheckpointSaved():
                line((f"  {event.address:>8} ◆ checkpoint {event.name}", "magenta"))
            case Emitted() if event.name == "warning" and isinstance(event.data, str):
                # an interpreter's warning: shown whole, since it names its fix
                line((f"  {event.address:>8} warning:", "bold yellow"), f" {event.data}")
            case Emitted():
                data = "" if event.data is None else " " + _short(event.data)
                line((f"  {event.address:>8} • {event.name}", "yellow"), data)
            case ConflictDetected():
                line((f"  {event.address:>8} conflict", "red"), f" {_short(event.conflicts)}")


def _waits(event: EffectFinished) -> bool:
    """Whether the effect ended only because the run waits for an answer (an open ``ask``, or
    a scope around one)."""
    error = event.error or ""
    return event.status == "unresolved" or (
        event.status == "cancelled" and error.startswith("WaitingForAnswer:")
    )


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


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
