"""Ollama's native chat API: the ``ollama:`` spec (``$OLLAMA_HOST``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, final

import httpx

from interpreters.models.kit import (
    CallInfo,
    HttpModel,
    Stream,
    TextCallWatch,
    parse_arguments,
    register_provider,
    stream_json,
)
from interpreters.models.openai import OPENAI_STOP_REASONS, openai_tool
from op import Response, ToolCall, Usage
from op.effects import ModelRequest

__all__ = ["OllamaModel"]


@final
class OllamaModel(HttpModel):
    """Ollama's native ``/api/chat`` (NDJSON stream; tool calls without ids; errors that can
    arrive after status 200)."""

    provider = "ollama"
    #: notices a model whose template makes no tool calls Ollama can return
    _watch: TextCallWatch | None = None

    def answered(self, request: ModelRequest, response: Response, call: CallInfo) -> Response:
        if request.tools:
            if self._watch is None:
                self._watch = TextCallWatch(
                    "use a model whose Ollama template supports tools (`ollama show MODEL` "
                    "lists 'tools' among its capabilities), or tool_loop(..., constrained=True) "
                    "for calls valid by construction"
                )
            self._watch.note(self.spec, request, response, call)
        return response

    def path(self) -> str:
        return "/api/chat"

    def headers(self) -> dict[str, str]:
        return {}

    def body(self, request: ModelRequest, stream: bool) -> dict[str, Any]:
        names = {c.id: c.name for m in request.messages for c in m.tool_calls}
        messages = []
        for m in request.messages:
            out: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.tool_calls:
                out["tool_calls"] = [
                    {"function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls
                ]
            if m.role == "tool" and m.tool_call_id in names:
                out["tool_name"] = names[m.tool_call_id]
            messages.append(out)
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": messages,
            "stream": stream,
        }
        if request.tools:
            body["tools"] = [openai_tool(t) for t in request.tools]
        if request.output is not None:
            body["format"] = request.output.json_schema  # decoded under the schema's grammar
        options = self.provider_params(request, also=frozenset({"think", "keep_alive"}))
        # Ollama's name for the answer's cap
        options.setdefault("num_predict", self.max_tokens_of(request))
        body["options"] = options
        for key in ("think", "keep_alive"):
            if key in request.params:
                body[key] = request.params[key]
        return body

    def _calls(self, message: Mapping[str, Any], start: int) -> list[ToolCall]:
        out = []
        for i, c in enumerate(message.get("tool_calls") or []):
            fn = c.get("function") or {}
            out.append(
                ToolCall(
                    id=c.get("id") or f"call_{start + i}",
                    name=fn.get("name", ""),
                    arguments=parse_arguments(fn.get("arguments")),
                )
            )
        return out

    def _final(self, text: str, calls: list[ToolCall], last: Mapping[str, Any]) -> Response:
        reason = last.get("done_reason") or "stop"
        return Response(
            text=text,
            tool_calls=tuple(calls),
            stop_reason="tool_use" if calls else OPENAI_STOP_REASONS.get(reason, reason),
            usage=Usage(
                input_tokens=int(last.get("prompt_eval_count") or 0),
                output_tokens=int(last.get("eval_count") or 0),
            ),
            model=last.get("model") or self.model,
        )

    def parse(self, data: Any) -> Response:
        if not isinstance(data, dict):
            raise self.error("the answer is not an object")
        if "error" in data:
            raise self.error(str(data["error"]))
        message = data.get("message") or {}
        return self._final(message.get("content") or "", self._calls(message, 0), data)

    async def read_stream(self, response: httpx.Response, call: CallInfo, seen: Stream) -> Response:
        calls: list[ToolCall] = []
        async for line in seen.lines(response):
            if not line.strip():
                continue
            data = stream_json(line, self)
            if "error" in data:
                raise self.error(
                    str(data["error"]), response.status_code, retryable=not seen.delivered
                )
            message = data.get("message") or {}
            seen.thinking(call, message.get("thinking"))
            seen.token(call, message.get("content") or "")
            new = self._calls(message, len(calls))
            if new:
                seen.delivered = True
                calls += new
            if data.get("done"):
                return self._final("".join(seen.text), calls, data)
        raise self.error("the stream was cut before done", retryable=not seen.delivered)


def _ollama(name: str, spec: str) -> OllamaModel:
    host = os.environ.get("OLLAMA_HOST") or "http://localhost:11434"
    if "://" not in host:
        host = f"http://{host}"
    return OllamaModel(name, base_url=host)


register_provider("ollama", _ollama)
