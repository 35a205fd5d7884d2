"""OpenAI chat completions, and the servers that speak them (vLLM, llama.cpp, LM Studio):
the ``openai:`` and ``openai-compatible:`` specs."""

from __future__ import annotations

import json
import os
from typing import Any, final

import anyio
import httpx

from interpreters.models._usage import openai_usage
from interpreters.models.kit import (
    CallInfo,
    HttpModel,
    Stream,
    TextCallWatch,
    parse_arguments,
    redact_spec,
    register_provider,
    sse_events,
    stream_json,
    strict_schema,
    tools_template,
)
from op import Message, Response, ToolCall, ToolSpec, Usage
from op.effects import ModelRequest

__all__ = ["OPENAI_STOP_REASONS", "OpenAIModel", "openai_tool"]


OPENAI_STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "function_call": "tool_use",
}
"""OpenAI's ``finish_reason`` names as a :class:`~op.Response`'s ``stop_reason`` (Ollama's
``done_reason`` uses the same names)."""


@final
class OpenAIModel(HttpModel):
    """OpenAI's chat completions API, and the servers that speak it (vLLM, llama.cpp, LM Studio,
    Ollama's ``/v1``)."""

    provider = "openai"

    #: whether the server can use tools: None until asked (``openai-compatible`` only)
    _tools_usable: bool | None = None
    #: notices a server whose chat template makes no tool calls it can return
    _watch: TextCallWatch | None = None

    def answered(self, request: ModelRequest, response: Response, call: CallInfo) -> Response:
        if request.tools and self.provider == "openai-compatible":
            if self._watch is None:
                self._watch = TextCallWatch(
                    "start llama-server with --jinja --chat-template-file "
                    f"{tools_template()} (opdsl's template: it renders the tools and asks for "
                    "calls as ```json blocks, which the server returns as tool calls), or "
                    "use tool_loop(..., constrained=True) for calls valid by construction"
                )
            self._watch.note(self.spec, request, response, call)
        return response

    def path(self) -> str:
        return "/chat/completions"

    async def preflight(self, request: ModelRequest, call: CallInfo) -> None:
        if request.tools and self.provider == "openai-compatible" and self._tools_usable is None:
            self._tools_usable = await self._server_takes_tools(call)
        if request.tools and self._tools_usable is False:
            raise self.error(
                "the server says its chat template cannot use tools (/props: "
                "chat_template_caps.supports_tools is false), so it would drop the "
                f"{len(request.tools)} tool(s) and answer as if there were none; start "
                "llama-server with --jinja and a --chat-template-file that renders tools"
            )

    async def _server_takes_tools(self, call: CallInfo) -> bool:
        """llama.cpp answers an OpenAI request with tools its chat template cannot render by
        dropping them, silently (HTTP 200, a plain answer); it says so in ``/props``. Other
        servers have no ``/props``, and are trusted."""
        root = self.base_url.removesuffix("/v1")
        try:
            with anyio.fail_after(10):
                client = await self.client(call.run_id)
                answer = await client.get(f"{root}/props", headers=self.headers())
            data = answer.json() if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError, TimeoutError):
            return True
        caps = data.get("chat_template_caps") if isinstance(data, dict) else None
        return not (isinstance(caps, dict) and caps.get("supports_tools") is False)

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def body(self, request: ModelRequest, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": [_openai_message(m) for m in request.messages],
        }
        if request.tools:
            body["tools"] = [openai_tool(t) for t in request.tools]
        output = request.output
        if output is not None and not (output.calls and self.provider == "openai"):
            # OpenAI's structured outputs; llama.cpp makes a grammar of the schema (and with
            # tools beside it, the answer is the schema's JSON: a call is read from its text);
            # OpenAI's own tool calls need no constraint of ours
            schema = output.json_schema
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": output.name,
                    # strict takes an object at the top only: a call's schema is a choice
                    "schema": schema if output.calls else strict_schema(schema),
                    "strict": not output.calls,
                },
            }
        # OpenAI's own API names the cap max_completion_tokens (its reasoning models refuse
        # max_tokens); the servers that copy the API (llama.cpp, vLLM, ...) know max_tokens
        cap = "max_completion_tokens" if self.provider == "openai" else "max_tokens"
        body[cap] = self.max_tokens_of(request)
        body.update(self.provider_params(request))
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def parse(self, data: Any) -> Response:
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices:
            raise self.error("the answer has no choices")
        choice = choices[0]
        message = choice.get("message") or {}
        text = message.get("content") or ""
        finish = choice.get("finish_reason") or "stop"
        model = data.get("model") or self.model
        if (
            not message.get("tool_calls")
            and type(text) is str
            and type(finish) is str
            and type(model) is str
        ):
            # the commonest answer, its values checked here: made without validating them
            # again (the usage is validated as it is read)
            return Response.model_construct(
                text=text,
                tool_calls=(),
                stop_reason=OPENAI_STOP_REASONS.get(finish, finish),
                usage=openai_usage(data.get("usage")),
                model=model,
            )
        calls = tuple(
            ToolCall(
                id=c.get("id") or f"call_{i}",
                name=(c.get("function") or {}).get("name", ""),
                arguments=parse_arguments((c.get("function") or {}).get("arguments")),
            )
            for i, c in enumerate(message.get("tool_calls") or [])
        )
        return Response(
            text=message.get("content") or "",
            tool_calls=calls,
            stop_reason=OPENAI_STOP_REASONS.get(
                choice.get("finish_reason") or "stop", choice.get("finish_reason") or ""
            ),
            usage=openai_usage(data.get("usage")),
            model=data.get("model") or self.model,
        )

    async def read_stream(self, response: httpx.Response, call: CallInfo, seen: Stream) -> Response:
        calls: dict[int, dict[str, Any]] = {}
        finish = None
        usage = Usage()
        model = self.model
        any_choice = False
        async for _event, data in sse_events(response, seen):
            if data.strip() == "[DONE]":
                break
            chunk = stream_json(data, self)
            if isinstance(chunk, dict) and "error" in chunk:
                raise self.error(self.message_of(json.dumps(chunk)), retryable=True)
            model = chunk.get("model") or model
            if chunk.get("usage"):
                usage = openai_usage(chunk["usage"])
            for choice in chunk.get("choices") or []:
                any_choice = True
                delta = choice.get("delta") or {}
                # servers name the thinking reasoning_content (llama.cpp, vLLM) or reasoning
                seen.thinking(call, delta.get("reasoning_content") or delta.get("reasoning"))
                seen.token(call, delta.get("content") or "")
                for frag in delta.get("tool_calls") or []:
                    slot = calls.setdefault(
                        int(frag.get("index", len(calls))),
                        {"id": None, "name": "", "arguments": ""},
                    )
                    if frag.get("id"):
                        slot["id"] = frag["id"]
                    fn = frag.get("function") or {}
                    if fn.get("name"):
                        slot["name"] = fn["name"]
                    slot["arguments"] += fn.get("arguments") or ""
                    seen.delivered = True
                finish = choice.get("finish_reason") or finish
        else:
            if not any_choice:
                raise self.error("the stream ended without an answer", retryable=not seen.delivered)
            if finish is None:
                raise self.error(
                    "the stream was cut before it finished", retryable=not seen.delivered
                )
        if not any_choice:
            raise self.error("the answer has no choices")
        tool_calls = tuple(
            ToolCall(
                id=c["id"] or f"call_{i}",
                name=c["name"],
                arguments=parse_arguments(c["arguments"]),
            )
            for i, c in sorted(calls.items())
        )
        return Response(
            text="".join(seen.text),
            tool_calls=tool_calls,
            stop_reason=OPENAI_STOP_REASONS.get(finish or "stop", finish or ""),
            usage=usage,
            model=model,
        )


def _openai_message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["content"] = m.content or None
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in m.tool_calls
        ]
    return out


def openai_tool(t: ToolSpec) -> dict[str, Any]:
    """A tool as OpenAI's chat completions offer it (Ollama's native API takes the same)."""
    return {
        "type": "function",
        "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
    }


def _openai(name: str, spec: str) -> OpenAIModel:
    return OpenAIModel(
        name,
        base_url=os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1",
        api_key=os.environ.get("OPENAI_API_KEY"),
    )


def compatible_parts(rest: str) -> tuple[str, str]:
    """The model's name and the server's URL in an ``openai-compatible:MODEL@URL`` spec (its
    part after the provider): the name ends where the URL starts, and the URL may hold
    ``user:password@`` itself. ``("", rest)`` when there is no URL.

    Example:
        >>> compatible_parts("qwen@3@http://me:pw@gpu-box:8000/v1")
        ('qwen@3', 'http://me:pw@gpu-box:8000/v1')
    """
    cut = min((i for i in (rest.find("@http://"), rest.find("@https://")) if i >= 0), default=-1)
    return (rest[:cut], rest[cut + 1 :]) if cut >= 0 else ("", rest)


def _compatible(rest: str, spec: str) -> OpenAIModel:
    name, url = compatible_parts(rest)
    shown = redact_spec(spec)
    if not name or "://" not in url:
        raise ValueError(
            f"model spec {shown!r} should look like openai-compatible:MODEL@http://host:port/v1"
        )
    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"model spec {shown!r}: its URL is not a URL ({exc})") from None
    # its own variable only: OpenAI's key is never sent to another server
    model = OpenAIModel(name, base_url=url, api_key=os.environ.get("OPENAI_COMPATIBLE_API_KEY"))
    model.provider = "openai-compatible"
    return model


register_provider("openai", _openai)
register_provider("openai-compatible", _compatible)
