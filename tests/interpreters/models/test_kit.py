"""The provider kit: a provider is written with ``interpreters.models.kit`` alone; a failed tool
call is told to the model from ``Message.is_error``, a real field, not read back from text."""

from __future__ import annotations

import json
from typing import Any

from interpreters import MemoryJournal, run
from interpreters.models import AnthropicModel, model_identity, resolve_model
from interpreters.models.kit import CallInfo, HttpModel, Stream, parse_arguments, stream_json
from op import Message, Op, Response, ToolCall, ToolResult, infer
from op.effects import ModelRequest
from state import canonical_json
from tests.servers import Reply, Request, ScriptedServer

CALL = ToolCall(id="toolu_1", name="run_tests")


def _tool_results(messages: list[Message]) -> list[dict[str, Any]]:
    model = AnthropicModel("claude-x", base_url="http://127.0.0.1:9")
    body = model.body(ModelRequest(messages=(Message.user("go"), *messages)), stream=False)
    return [b for m in body["messages"] for b in m["content"] if isinstance(b, dict)]


def test_anthropic_tells_a_failed_call_from_is_error_not_from_the_text() -> None:
    failed = Message.tool_result(CALL, ToolResult.failure("2 tests failed"))
    said = Message(role="tool", content="the suite did not start", tool_call_id="t2", is_error=True)
    quoted = Message(
        role="tool", content="error: is what the log says", tool_call_id="t3", is_error=False
    )
    blocks = _tool_results([failed, said, quoted])
    assert [b.get("is_error", False) for b in blocks] == [True, True, False]


def test_is_error_is_left_out_of_the_canonical_form_where_the_text_says_it() -> None:
    failed = Message.tool_result(CALL, ToolResult.failure("boom"))
    # the bytes a 0.3.0 journal holds for this message: no is_error key
    old = '{"content":"error: boom","role":"tool","tool_call_id":"toolu_1","tool_calls":[]}'
    assert failed.is_error and canonical_json(failed) == old
    assert Message.model_validate(json.loads(old)) == failed
    ok = Message.tool_result(CALL, ToolResult(output="3 passed"))
    assert not ok.is_error and "is_error" not in canonical_json(ok)
    for said in (
        Message(role="tool", content="no prefix", is_error=True),
        Message(role="tool", content="error: quoted", is_error=False),
    ):
        text = canonical_json(said)
        assert '"is_error"' in text
        assert Message.model_validate(json.loads(text)) == said


class Lines(HttpModel):
    """A provider written with the kit alone: JSON lines of ``{"text": ...}``, then
    ``{"done": true, "calls": [...]}``."""

    provider = "lines"

    def path(self) -> str:
        return "/lines"

    def headers(self) -> dict[str, str]:
        return {}

    def body(self, request: ModelRequest, stream: bool) -> dict[str, Any]:
        return {"prompt": request.messages[-1].content, "stream": stream}

    def parse(self, data: Any) -> Response:
        return Response(text=data["text"], model=self.model)

    async def read_stream(self, response: Any, call: CallInfo, seen: Stream) -> Response:
        calls: list[ToolCall] = []
        async for line in seen.lines(response):
            if not line.strip():
                continue
            data = stream_json(line, self)
            if data.get("done"):
                calls = [
                    ToolCall(id=f"c{i}", name=c["name"], arguments=parse_arguments(c["args"]))
                    for i, c in enumerate(data.get("calls") or [])
                ]
                break
            seen.token(call, data["text"])
        return Response(text="".join(seen.text), tool_calls=tuple(calls), model=self.model)


def _lines(request: Request) -> Reply:
    assert request["prompt"] == "say hello" and request["path"] == "/lines"
    last = {"done": True, "calls": [{"name": "t", "args": json.dumps({"a": 1})}]}
    chunks = [json.dumps({"text": "he"}) + "\n", json.dumps({"text": "llo"}) + "\n"]
    return Reply(chunks=[*chunks, json.dumps(last) + "\n"], content_type="application/x-ndjson")


def test_a_provider_made_with_the_kit_alone_streams_and_calls_tools() -> None:
    with ScriptedServer() as srv:
        srv.add(_lines)
        model = Lines("liner", base_url=srv.url)

        def ask() -> Op[Response]:
            return (yield from infer("say hello"))

        reply = run(ask, model=model, db=MemoryJournal()).value
    assert reply.text == "hello" and reply.tool_calls[0].arguments == {"a": 1}
    assert model_identity(model) == ("lines", "liner")


def test_a_model_names_its_provider_and_name_itself_its_spec_not_parsed_again() -> None:
    compatible = resolve_model("openai-compatible:smol@http://me:pw@127.0.0.1:9/v1?max_tokens=9")
    assert model_identity(compatible) == ("openai-compatible", "smol")
    assert model_identity(resolve_model("ollama:qwen3:8b")) == ("ollama", "qwen3:8b")
