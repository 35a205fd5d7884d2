"""Anthropic Messages: the ``anthropic:`` spec."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
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


CACHE_BREAKPOINT: dict[str, Any] = {"type": "ephemeral"}
"""What a block of the prompt is marked with to end a cached prefix (Anthropic's
``cache_control``): the prompt up to it is cached for five minutes."""

MAX_BREAKPOINTS = 4
"""The most ``cache_control`` marks Anthropic takes in one request."""


@final
class AnthropicModel(HttpModel):
    """Anthropic's Messages API.

    Prompt caching is on by default (``prompt_cache``): each request marks the end of the
    tools, of the system prompt and of the conversation so far as cache breakpoints, and the
    end of the conversation as the previous request sent it, so the next call of a
    conversation reads from the cache what this one wrote (billed at a tenth of the input
    price; a cache write at 1.25 times). Off for one model with ``prompt_cache=False`` or
    ``?prompt_cache=false`` in its spec; for one call with ``infer(..., prompt_cache=False)``.
    """

    provider = "anthropic"
    #: mark cache breakpoints in each request (Anthropic's prompt caching)
    prompt_cache: bool = True

    def __init__(self, model: str, *, prompt_cache: bool = True, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.prompt_cache = prompt_cache

    def configure(self, options: Mapping[str, str]) -> None:
        """The options of every model's spec, and ``prompt_cache`` (true or false)."""
        rest = dict(options)
        raw = rest.pop("prompt_cache", None)
        if raw is not None:
            if raw not in ("true", "false"):
                raise ValueError(f"prompt_cache={raw!r}: expected true or false")
            self.prompt_cache = raw == "true"
        super().configure(rest)

    def answered(self, request: ModelRequest, response: Response, call: CallInfo) -> Response:
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
        body.update(self.provider_params(request))
        if bool(request.params.get("prompt_cache", self.prompt_cache)):
            _mark_breakpoints(body)
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


def _mark_breakpoints(body: dict[str, Any]) -> None:
    """Mark ``body``'s cache breakpoints (at most :data:`MAX_BREAKPOINTS`): the last tool,
    the system prompt, the conversation's last block, and the last block the previous request
    of the conversation ended with (its last user turn before the model's latest answer), so
    a call that adds many blocks still finds that request's prefix in the cache."""
    marks = 0
    tools = body.get("tools")
    if tools:
        tools[-1] = {**tools[-1], "cache_control": CACHE_BREAKPOINT}
        marks += 1
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": CACHE_BREAKPOINT}]
        marks += 1
    messages: list[dict[str, Any]] = body.get("messages") or []
    ends = [len(messages) - 1]
    answered = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if answered and answered[-1] > 0:
        ends.append(answered[-1] - 1)
    for i in ends:
        if marks >= MAX_BREAKPOINTS or i < 0:
            break
        if _mark_message(messages, i):
            marks += 1


def _mark_message(messages: list[dict[str, Any]], i: int) -> bool:
    """Mark the last block of ``messages[i]`` (its text made a block); False when it has
    no block that can be marked (an empty text)."""
    content = messages[i].get("content")
    if isinstance(content, str):
        if not content:
            return False
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        return False
    last = content[-1]
    if last.get("type") == "text" and not last.get("text"):
        return False
    messages[i] = {
        **messages[i],
        "content": [*content[:-1], {**last, "cache_control": CACHE_BREAKPOINT}],
    }
    return True


def _anthropic(name: str, spec: str) -> AnthropicModel:
    return AnthropicModel(
        name,
        base_url=os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com",
        api_key=os.environ.get("ANTHROPIC_API_KEY"),
    )


register_provider("anthropic", _anthropic)
