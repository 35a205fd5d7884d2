"""The event bus: how a run's events reach its sinks (with secrets redacted on the way)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import final

from pydantic_core import PydanticSerializationError

from interpreters._shown import visible
from interpreters.runtime._redact import Redactor
from op.events import Event, TokenDelta

__all__ = ["EventBus", "Sink", "as_sinks"]

Sink = Callable[[Event], None]


def as_sinks(on_event: Sink | Iterable[Sink] | None) -> list[Sink]:
    """``on_event`` as a list: one sink, several, or none."""
    if on_event is None:
        return []
    if callable(on_event):
        return [on_event]
    return list(on_event)


@final
class EventBus:
    """Fans events out to sinks. ``active`` is False when nobody listens (skip the work).
    A sink that raises never fails the run: it is dropped, and one line on stderr says so."""

    def __init__(self, sinks: Iterable[Sink], redact: Redactor | None = None) -> None:
        self._sinks = list(sinks)
        self.active = bool(self._sinks)
        #: secrets never reach a sink (see ``_redact``)
        self.redact = Redactor.from_env() if redact is None and self.active else redact

    def emit(self, event: Event) -> None:
        if self.redact is not None and self.redact.secrets:
            event = self._clean(event)
        for sink in self._sinks:
            try:
                sink(event)
            except Exception as exc:  # a sink never fails the run: dropped, said once
                self._drop(sink, exc)

    def _drop(self, sink: Sink, exc: Exception) -> None:
        self._sinks = [s for s in self._sinks if s is not sink]
        name = getattr(sink, "__qualname__", None) or type(sink).__qualname__
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        if self.redact is not None:
            reason = self.redact(reason)
        sys.stderr.write(
            f"opdsl: the event sink {visible(name, lines=False)} failed "
            f"({visible(reason, lines=False)}); it gets no more events\n"
        )

    def _clean(self, event: Event) -> Event:
        assert self.redact is not None
        if isinstance(event, TokenDelta):
            # the one event sent per streamed token: its text is all it carries
            clean = self.redact(event.text)
            return event if clean == event.text else event.model_copy(update={"text": clean})
        try:
            text = event.model_dump_json()
        except PydanticSerializationError:
            # a text no UTF-8 holds (a lone surrogate), which pydantic writes in no JSON: the
            # journal refuses the effect itself, naming its address; the event goes out
            data = event.model_dump(mode="json")
            text = json.dumps(data, ensure_ascii=False)
            clean = self.redact(text)
            return event if clean == text else type(event).model_validate(json.loads(clean))
        clean = self.redact(text)
        return event if clean == text else type(event).model_validate_json(clean)
