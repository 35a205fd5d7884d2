"""OpenTelemetry traces of runs: a span per run and per effect, nested like the scopes, with
the GenAI semantic conventions on model calls.

With the ``opdsl[otel]`` extra installed and the standard settings
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, and the other
``OTEL_EXPORTER_OTLP_*`` and ``OTEL_SERVICE_NAME`` variables), every live run, resume and
fork exports its trace over OTLP/HTTP; a tracer provider the program set up itself (Logfire,
say) is used instead when there is one. A replay exports nothing unless
``OPDSL_OTEL_REPLAY=1``; then the replayed run's journal is exported as its trace.

Spans carry what the journal carries (already redacted): ids, addresses, kinds, models,
token counts, statuses and error messages, never prompts or tool outputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, final

from interpreters.journal._base import Entry, RunRecord, json_object
from interpreters.models._base import model_identity, redact_spec, resolve_model
from interpreters.tools._paths import say_once
from op import Agent, Checkpoint, Emit, Infer, Tool, Usage
from op.events import CheckpointSaved, EffectFinished, EffectStarted, Event, RunFinished, RunStarted

__all__ = ["TraceSink", "export_journal", "trace_sinks", "tracing_wanted"]


def tracing_wanted() -> bool:
    """Whether the environment asks for traces (an OTLP endpoint, and the SDK not disabled)."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def trace_sinks(model: object = None) -> list[Callable[[Event], None]]:
    """``[TraceSink(...)]`` when traces are wanted and the SDK is installed, else ``[]``."""
    if not tracing_wanted():
        return []
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        say_once(
            "opdsl: warning: an OTLP endpoint is set but opentelemetry is not installed "
            "(pip install 'opdsl[otel]'): no trace is exported"
        )
        return []
    # the model says which provider and model it is: its spec is never parsed again here
    provider, name = model_identity(resolve_model(model) if isinstance(model, str) else model)
    return [TraceSink(provider=provider, model=name)]


_OWN: dict[tuple[str, ...], Any] = {}
"""The tracer provider opdsl made for this process, by the settings it was made with."""

#: how long the end of a run waits for its spans to be sent (a collector that is down must
#: not hold a finished run up)
FLUSH_SECONDS = 2.0


def _provider() -> Any:
    """The program's own SDK tracer provider if it set one up, else opdsl's (one a process)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    env = os.environ
    key = tuple(env.get(k, "") for k in sorted(env) if k.startswith("OTEL_"))
    if key not in _OWN:
        for old in _OWN.values():  # the settings changed: the old one's spans go first
            old.shutdown()
        _OWN.clear()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        timeout: float | None = None  # the user's setting, when there is one
        if not (
            env.get("OTEL_EXPORTER_OTLP_TIMEOUT") or env.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        ):
            timeout = 3.0  # not the SDK's 10 s: a run's end waits on it
        resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or "opdsl"})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(timeout=timeout)))
        _OWN[key] = provider
    return _OWN[key]


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def _request_model(asked: object, default: str | None) -> str | None:
    """The model a call asked for (``infer(..., model=NAME)``: a name, not a spec), else the
    run's model's; never a URL's credentials."""
    return redact_spec(asked) if isinstance(asked, str) and asked else default


@final
class _Spans:
    """Builds one run's spans from what happened, whether told live or read from a journal."""

    def __init__(
        self, run_id: str, program: str, provider: str | None = None, model: str | None = None
    ) -> None:
        self.provider = _provider()
        self.tracer = self.provider.get_tracer("opdsl")
        self.run_id = run_id
        self.program = program
        #: the run's model, as it declares itself (:func:`model_identity`)
        self.model_provider = provider
        self.default_model = model
        self.run_span: Any = None
        self.open: dict[str, Any] = {}

    def run_started(self, at: float, parent_run: str | None) -> None:
        attributes = {"opdsl.run_id": self.run_id, "opdsl.program": self.program}
        if parent_run:
            attributes["opdsl.parent_run"] = parent_run
        self.run_span = self.tracer.start_span(
            f"run {self.program}", start_time=_ns(at), attributes=attributes
        )

    def _parent(self, address: str) -> Any:
        parts = address.split(".")
        for n in range(len(parts) - 1, 0, -1):
            span = self.open.get(".".join(parts[:n]))
            if span is not None:
                return span
        return self.run_span

    def effect_started(self, address: str, kind: str, effect: Any, at: float) -> None:
        from opentelemetry import trace

        effect = effect if isinstance(effect, dict) else {}
        attributes: dict[str, Any] = {
            "opdsl.run_id": self.run_id,
            "opdsl.address": address,
            "opdsl.kind": kind,
        }
        name = kind
        span_kind = trace.SpanKind.INTERNAL
        if kind == Infer.kind:
            provider = self.model_provider
            model = _request_model(effect.get("model"), self.default_model)
            attributes["gen_ai.operation.name"] = "chat"
            if provider:
                attributes["gen_ai.provider.name"] = provider
            if model:
                attributes["gen_ai.request.model"] = model
            params = effect.get("params") or {}
            if isinstance(params.get("max_tokens"), int):
                attributes["gen_ai.request.max_tokens"] = params["max_tokens"]
            name = f"chat {model}" if model else "chat"
            span_kind = trace.SpanKind.CLIENT
        elif kind == Tool.kind:
            attributes["gen_ai.operation.name"] = "execute_tool"
            attributes["gen_ai.tool.name"] = str(effect.get("name"))
            name = f"execute_tool {effect.get('name')}"
        elif kind == Agent.kind:
            attributes["gen_ai.operation.name"] = "invoke_agent"
            attributes["gen_ai.agent.name"] = str(effect.get("backend"))
            name = f"invoke_agent {effect.get('backend')}"
        elif kind in (Checkpoint.kind, Emit.kind):
            attributes[f"opdsl.{kind}"] = str(effect.get("name"))
            name = f"{kind} {effect.get('name')}"
        parent = trace.set_span_in_context(self._parent(address))
        self.open[address] = self.tracer.start_span(
            name, context=parent, kind=span_kind, start_time=_ns(at), attributes=attributes
        )

    def effect_finished(
        self, address: str, status: str, usage: Usage | None, error: str | None, at: float
    ) -> None:
        from opentelemetry.trace import Status, StatusCode

        span = self.open.pop(address, None)
        if span is None:
            return
        if usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            if usage.cost_usd is not None:
                span.set_attribute("opdsl.cost_usd", usage.cost_usd)
        span.set_attribute("opdsl.status", status)
        if error is not None or status not in ("completed", "unresolved"):
            span.set_status(Status(StatusCode.ERROR, error or status))
            span.set_attribute("error.type", (error or status).split(":", 1)[0])
        span.end(end_time=_ns(at))

    def run_finished(self, status: str, error: str | None, at: float) -> None:
        from opentelemetry.trace import Status, StatusCode

        for address in sorted(self.open, key=len, reverse=True):
            self.open.pop(address).end(end_time=_ns(at))
        if self.run_span is not None:
            self.run_span.set_attribute("opdsl.status", status)
            if status == "failed":
                self.run_span.set_status(Status(StatusCode.ERROR, error or "failed"))
            self.run_span.end(end_time=_ns(at))
        self.provider.force_flush(timeout_millis=int(FLUSH_SECONDS * 1000))


@final
class TraceSink:
    """An event sink that exports each run it hears of as a trace."""

    def __init__(self, provider: str | None = None, model: str | None = None) -> None:
        #: the provider and the model's name of the run's model, as it declares them
        self.model_provider = provider
        self.model = model
        self._runs: dict[str, _Spans] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            started = _Spans(event.run_id, event.program, self.model_provider, self.model)
            self._runs[event.run_id] = started
            started.run_started(event.at, event.parent_run)
            return
        found = self._runs.get(event.run_id)
        if found is None:
            return
        spans = found
        match event:
            case EffectStarted():
                spans.effect_started(event.address, event.kind, event.effect, event.at)
            case EffectFinished():
                spans.effect_finished(
                    event.address, event.status, event.usage, event.error, event.at
                )
            case CheckpointSaved():
                if spans.run_span is not None:
                    spans.run_span.add_event(
                        "checkpoint",
                        {"opdsl.checkpoint": event.name, "opdsl.address": event.address},
                        timestamp=_ns(event.at),
                    )
            case RunFinished():
                self._runs.pop(event.run_id)
                spans.run_finished(event.status, event.error, event.at)


def export_journal(run: RunRecord, entries: Sequence[Entry]) -> None:
    """Export a recorded run as its trace, with the times the journal recorded."""

    spans = _Spans(run.run_id, run.program)
    spans.run_started(run.created_at, run.parent_run)
    for e in sorted(entries, key=lambda e: e.seq):
        spans.effect_started(e.address, e.kind, json_object(e.effect_json), e.started_at)
    for e in sorted(entries, key=lambda e: len(e.address), reverse=True):
        usage = Usage.model_validate_json(e.usage_json) if e.usage_json else None
        spans.effect_finished(
            e.address,
            e.status,
            usage,
            e.error_line(),
            e.finished_at or run.finished_at or e.started_at,
        )
    spans.run_finished(run.status, None, run.finished_at or run.created_at)
