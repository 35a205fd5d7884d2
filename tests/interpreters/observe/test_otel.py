"""Runs exported as OpenTelemetry traces, to a real OTLP/HTTP receiver on 127.0.0.1 that
decodes what it gets with the official protobuf definitions (opentelemetry-proto)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="opdsl[otel] is not installed")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from interpreters import ScriptedModel, replay, resume, run
from interpreters.models.kit import CallInfo
from op import Budget, Op, Response, ToolResult, Usage, checkpoint, infer, limit, par, tool
from op.effects import ModelRequest
from tests.servers import LoopbackServer, closed_port


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces with a protobuf body."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                assert self.path == "/v1/traces"
                assert self.headers.get("content-type") == "application/x-protobuf"
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.requests += 1
                for rs in request.resource_spans:
                    service = {a.key: a.value.string_value for a in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        for s in ss.spans:
                            receiver.spans.append(
                                {
                                    "name": s.name,
                                    "id": s.span_id.hex(),
                                    "parent": s.parent_span_id.hex(),
                                    "trace": s.trace_id.hex(),
                                    "kind": s.kind,
                                    "status": s.status.code,
                                    "start": s.start_time_unix_nano,
                                    "end": s.end_time_unix_nano,
                                    "service": service.get("service.name"),
                                    "events": [e.name for e in s.events],
                                    "attrs": {a.key: _value(a.value) for a in s.attributes},
                                }
                            )
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.httpd = LoopbackServer(Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def by_name(self) -> dict[str, dict[str, Any]]:
        return {s["name"]: s for s in self.spans}


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    r = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "opdsl-tests")
    yield r
    r.httpd.shutdown()


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def broken() -> ToolResult:
    """Always fails."""
    return ToolResult.failure("read-only")


def traced() -> Op[str]:
    yield from checkpoint("start")
    outcome = yield from limit(Budget(tokens=500), infer("plan", max_tokens=40))
    yield from par(tool("lookup", {"topic": "a"}), tool("broken"))
    return outcome.unwrap().text


def _model() -> ScriptedModel:
    return ScriptedModel(
        [Response(text="the plan", usage=Usage(input_tokens=21, output_tokens=7), model="m")],
        name="scripted-model",
    )


def test_a_run_is_one_trace_nested_like_its_scopes(receiver: Receiver, tmp_path: Path) -> None:
    result = run(traced, model=_model(), tools=[lookup, broken], db=str(tmp_path / "r.db"))
    assert result.status == "completed"
    spans = receiver.by_name()
    root = spans["run tests.interpreters.observe.test_otel:traced"]
    assert root["parent"] == "" and root["service"] == "opdsl-tests"
    assert root["attrs"]["opdsl.run_id"] == result.run_id
    assert "checkpoint" in root["events"]
    assert len({s["trace"] for s in receiver.spans}) == 1  # one trace
    limit_span, par_span = spans["limit"], spans["par"]
    chat = next(s for s in receiver.spans if s["attrs"].get("gen_ai.operation.name") == "chat")
    assert chat["parent"] == limit_span["id"] and limit_span["parent"] == root["id"]
    assert chat["kind"] == 3  # SPAN_KIND_CLIENT
    assert chat["attrs"]["gen_ai.usage.input_tokens"] == 21
    assert chat["attrs"]["gen_ai.usage.output_tokens"] == 7
    assert chat["attrs"]["gen_ai.request.max_tokens"] == 40
    assert chat["attrs"]["opdsl.address"] == "2.1"
    tools = [s for s in receiver.spans if s["attrs"].get("gen_ai.operation.name") == "execute_tool"]
    assert {s["name"] for s in tools} == {"execute_tool lookup", "execute_tool broken"}
    assert all(s["parent"] == par_span["id"] for s in tools)
    failed = spans["execute_tool broken"]
    assert failed["status"] == 2 and failed["attrs"]["error.type"] == "tool failed"  # ERROR
    assert spans["execute_tool lookup"]["status"] != 2
    assert spans["checkpoint start"]["attrs"]["opdsl.checkpoint"] == "start"
    for s in receiver.spans:
        assert s["start"] <= s["end"]
        if s["parent"]:
            parent = next(p for p in receiver.spans if p["id"] == s["parent"])
            assert parent["start"] <= s["start"] and s["end"] <= parent["end"]


def test_the_model_spec_names_the_provider_and_model(receiver: Receiver, tmp_path: Path) -> None:
    from tests.servers import ScriptedServer, openai

    with ScriptedServer([openai("hi", usage=(5, 2, 0))]) as srv:
        spec = f"openai-compatible:smol@{srv.url}/v1?max_tokens=9"

        def ask() -> Op[str]:
            return (yield from infer("hi")).text

        assert run(ask, model=spec).value == "hi"
    chat = receiver.by_name()["chat smol"]
    assert chat["attrs"]["gen_ai.provider.name"] == "openai-compatible"
    assert chat["attrs"]["gen_ai.request.model"] == "smol"


def test_a_model_object_names_its_provider_and_model_itself(receiver: Receiver) -> None:
    class Acme:
        """A model of a provider of the program's own: no spec to read a name from."""

        provider, model = "acme", "rocket-1"

        async def complete(self, request: ModelRequest, call: CallInfo) -> Response:
            return Response(text="boom", model=self.model)

    def ask() -> Op[str]:
        return (yield from infer("hi")).text

    assert run(ask, model=Acme()).value == "boom"
    chat = receiver.by_name()["chat rocket-1"]
    assert chat["attrs"]["gen_ai.provider.name"] == "acme"


def test_a_model_urls_credentials_never_reach_a_span(receiver: Receiver, tmp_path: Path) -> None:
    from tests.servers import ScriptedServer, openai

    secret = "hunter2-sekrit"
    with ScriptedServer([openai("hi"), openai("ho")]) as srv:
        spec = f"openai-compatible:smol@http://me:{secret}@127.0.0.1:{srv.port}/v1?stream=false"

        def ask() -> Op[str]:
            first = yield from infer("hi")
            second = yield from infer("ho", model="other-model")
            return first.text + second.text

        assert run(ask, model=spec, db=str(tmp_path / "r.db")).value == "hiho"
    chats = [s for s in receiver.spans if s["attrs"].get("gen_ai.operation.name") == "chat"]
    assert [s["name"] for s in chats] == ["chat smol", "chat other-model"]
    assert [s["attrs"]["gen_ai.request.model"] for s in chats] == ["smol", "other-model"]
    assert {s["attrs"]["gen_ai.provider.name"] for s in chats} == {"openai-compatible"}
    assert secret not in repr(receiver.spans)


def test_a_replay_exports_nothing_unless_asked(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "r.db")
    result = run(traced, model=_model(), tools=[lookup, broken], db=db)
    exported = len(receiver.spans)
    replay(result.run_id, db=db)
    assert len(receiver.spans) == exported
    monkeypatch.setenv("OPDSL_OTEL_REPLAY", "1")
    replay(result.run_id, db=db)
    again = receiver.spans[exported:]
    assert sorted(s["name"] for s in again) == sorted(s["name"] for s in receiver.spans[:exported])


def test_a_fork_exports_its_own_trace_naming_its_parent(receiver: Receiver, tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    first = run(traced, model=_model(), tools=[lookup, broken], db=db)
    before = len(receiver.spans)
    fork = resume(
        first.run_id, from_checkpoint="start", db=db, model=_model(), tools=[lookup, broken]
    )
    roots = [s for s in receiver.spans[before:] if s["parent"] == ""]
    assert len(roots) == 1 and roots[0]["attrs"]["opdsl.parent_run"] == first.run_id
    assert roots[0]["attrs"]["opdsl.run_id"] == fork.run_id


def test_without_an_endpoint_nothing_is_exported(tmp_path: Path) -> None:
    from interpreters.observe._otel import trace_sinks

    assert trace_sinks("openai:m") == []


def test_a_collector_that_is_down_does_not_hold_the_run_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import time

    # a port nobody listens on, held so that no other test's server is handed it meanwhile
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    t0 = time.monotonic()
    result = run(traced, model=_model(), tools=[lookup, broken], db=str(tmp_path / "r.db"))
    assert result.status == "completed"
    assert time.monotonic() - t0 < 6  # the run's end waits at most a bounded flush


def test_an_endpoint_without_the_extra_says_so_once_and_runs_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import sys

    from interpreters.observe._otel import trace_sinks

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    assert trace_sinks("openai:m") == [] and trace_sinks("openai:m") == []
    err = capsys.readouterr().err
    assert err.count("pip install 'opdsl[otel]'") == 1, err
    result = run(traced, model=_model(), tools=[lookup, broken], db=str(tmp_path / "r.db"))
    assert result.status == "completed"
