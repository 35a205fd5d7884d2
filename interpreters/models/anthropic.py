"""Anthropic Messages: the ``anthropic:`` spec."""

from __future__ import annotations

import json
import os
from typing import Any, final

import httpx

from interpreters.models._usage import anthropic_usage
from interpreters.models.kit import (
    RAW_ARGUMENTS,
    CallInfo,
    HttpModel,
    Stream,
    parse_arguments,
    register_provider,
    sse_events,
    stream_json,
)
from op import Response, ToolCall
from op.effects import ModelRequest

__all__ = ["AnthropicModel"]


@final
class AnthropicModel(HttpModel):
    """Anthropic's Messages API."""

    provider = "anthropic"

    async def complete(self, request: ModelRequest, call: CallInfo) -> Response:
        response = await super().complete(request, call)
        output = request.output
        if output is None or output.calls:
            return response
        # the answer came as the input of the forced tool: that input is what the model said
        said = [c for c in response.tool_calls if c.name == output.name]
        if not said:
            return response
        args = said[0].arguments
        raw = args[RAW_ARGUMENTS] if set(args) == {RAW_ARGUMENTS} else None
        text = str(raw) if raw is not None else json.dumps(args, ensure_ascii=False)
        rest = tuple(c for c in response.tool_calls if c is not said[0])
        stop = response.stop_reason if rest else "end_turn"
        return response.model_copy(
            update={"text": response.text + text, "tool_calls": rest, "stop_reason": stop}
        )

    def path(self) -> str:
        return "/v1/messages"

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": "2023-06-01"}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return headers

    def body(self, request: ModelRequest, stream: bool) -> dict[str, Any]:
        system = "\n\n".join(m.content for m in request.messages if m.role == "system")
        messages: list[dict[str, Any]] = []
        for m in request.messages:
            if m.role == "system":
                continue
            if m.role == "tool":
                block: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id or "",
                    "content": m.content,
                }
                if m.is_error:
                    block["is_error"] = True
                if (
                    messages
                    and messages[-1]["role"] == "user"
                    and isinstance(messages[-1]["content"], list)
                ):
                    messages[-1]["content"].append(block)
                else:
                    messages.append({"role": "user", "content": [block]})
            elif m.role == "assistant" and m.tool_calls:
                blocks: list[dict[str, Any]] = (
                    [{"type": "text", "text": m.content}] if m.content else []
                )
                blocks += [
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                    for c in m.tool_calls
                ]
                messages.append({"role": "assistant", "content": blocks})
            else:
                messages.append({"role": m.role, "content": m.content})
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "max_tokens": self.max_tokens_of(request),
            "messages": messages,
        }
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        output = request.output
        if output is not None and not output.calls:
            # Anthropic's way to a structured answer: one tool, whose input is the answer,
            # forced (its own tool calls are structured already: calls=True asks nothing)
            body["tools"] = [
                {
                    "name": output.name,
                    "description": f"Give the answer as a {output.name}.",
                    "input_schema": output.json_schema,
                }
            ]
            body["tool_choice"] = {"type": "tool", "name": output.name}
        body.update({k: v for k, v in request.params.items() if k not in ("stream", "max_tokens")})
        if stream:
            body["stream"] = True
        return body

    def parse(self, data: Any) -> Response:
        if not isinstance(data, dict) or "content" not in data:
            raise self.error("the answer has no content")
        text, calls = [], []
        for block in data.get("content") or []:
            if block.get("type") == "text":
                text.append(block.get("text", ""))
            elif block.get("type") == "tool_use":
                calls.append(
                    ToolCall(
                        id=block.get("id", ""),
                        name=block.get("name", ""),
                        arguments=parse_arguments(block.get("input")),
                    )
                )
        return Response(
            text="".join(text),
            tool_calls=tuple(calls),
            stop_reason=data.get("stop_reason") or "end_turn",
            usage=anthropic_usage(data.get("usage") or {}),
            model=data.get("model") or self.model,
        )

    async def read_stream(self, response: httpx.Response, call: CallInfo, seen: Stream) -> Response:
        blocks: dict[int, dict[str, Any]] = {}
        usage_in: dict[str, Any] = {}
        output_tokens = 0
        stop = None
        model = self.model
        finished = False
        async for event, data in sse_events(response, seen):
            msg = stream_json(data, self)
            kind = msg.get("type", event)
            if kind == "error":
                err = msg.get("error") or {}
                retry = err.get("type") in ("overloaded_error", "api_error", "rate_limit_error")
                raise self.error(
                    f"{err.get('type', 'error')}: {err.get('message', '')}", retryable=retry
                )
            if kind == "message_start":
                message = msg.get("message") or {}
                model = message.get("model") or model
                usage_in = dict(message.get("usage") or {})
                output_tokens = int(usage_in.get("output_tokens") or 0)
            elif kind == "content_block_start":
                block = dict(msg.get("content_block") or {})
                block["partial"] = ""
                blocks[int(msg.get("index", len(blocks)))] = block
            elif kind == "content_block_delta":
                block = blocks.setdefault(
                    int(msg.get("index", 0)), {"type": "text", "text": "", "partial": ""}
                )
                delta = msg.get("delta") or {}
                if delta.get("type") == "text_delta":
                    block["text"] = block.get("text", "") + delta.get("text", "")
                    seen.token(call, delta.get("text", ""))
                elif delta.get("type") == "thinking_delta":
                    seen.thinking(call, delta.get("thinking"))
                elif delta.get("type") == "input_json_delta":
                    block["partial"] += delta.get("partial_json", "")
                    seen.delivered = True
            elif kind == "message_delta":
                stop = (msg.get("delta") or {}).get("stop_reason") or stop
                usage = msg.get("usage") or {}
                output_tokens = max(output_tokens, int(usage.get("output_tokens") or 0))
                for key in (
                    "input_tokens",
                    "cache_read_input_tokens",
                    "cache_creation_input_tokens",
                ):
                    if usage.get(key):
                        usage_in[key] = max(int(usage_in.get(key) or 0), int(usage[key]))
            elif kind == "message_stop":
                finished = True
                break
        if not finished:
            raise self.error("the stream was cut before message_stop", retryable=not seen.delivered)
        text, calls = [], []
        for _i, block in sorted(blocks.items()):
            if block.get("type") == "text":
                text.append(block.get("text", ""))
            elif block.get("type") == "tool_use":
                raw = block.get("partial") or ""
                args = parse_arguments(raw) if raw else parse_arguments(block.get("input") or {})
                calls.append(
                    ToolCall(id=block.get("id", ""), name=block.get("name", ""), arguments=args)
                )
        usage_in["output_tokens"] = output_tokens
        return Response(
            text="".join(text),
            tool_calls=tuple(calls),
            stop_reason=stop or "end_turn",
            usage=anthropic_usage(usage_in),
            model=model,
        )


def _anthropic(name: str, spec: str) -> AnthropicModel:
    return AnthropicModel(
        name,
        base_url=os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com",
        api_key=os.environ.get("ANTHROPIC_API_KEY"),
    )


register_provider("anthropic", _anthropic)
