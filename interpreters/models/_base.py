"""Model handlers: what answers ``infer``.

A model is anything with ``async def complete(request, call) -> Response``. This module has
the scripted one used in tests and offline demos; network providers live beside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, final, runtime_checkable

from interpreters.runtime._clock import Clock
from op import ModelError, ModelRequest, Response

__all__ = ["CallInfo", "Model", "ModelScriptExhausted", "ScriptedModel", "resolve_model"]


class CallInfo(Protocol):
    """What a handler knows about the effect it performs."""

    @property
    def run_id(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def idempotency_key(self) -> str: ...
    @property
    def clock(self) -> Clock: ...
    def token(self, text: str) -> None:
        """Report streamed model text (it reaches the sinks as ``TokenDelta``)."""


@runtime_checkable
class Model(Protocol):
    """Anything that can answer a :class:`~op.ModelRequest`."""

    async def complete(self, request: ModelRequest, call: CallInfo) -> Response: ...


class ModelScriptExhausted(ModelError):
    """A ScriptedModel was asked more often than it has answers."""


Scripted = Response | str


@final
class ScriptedModel:
    """A model that answers from a list (or a function of the request).

    Every request it receives is kept in ``requests`` for assertions.

    Example:
        >>> m = ScriptedModel(["hello", Response(text="bye")])
        >>> len(m.responses)
        2
    """

    def __init__(
        self,
        responses: Sequence[Scripted] | Callable[[ModelRequest], Scripted],
        *,
        delay: float = 0.0,
        name: str = "scripted",
    ) -> None:
        self.fn = responses if callable(responses) else None
        self.responses: list[Response] = (
            [] if callable(responses) else [_as_response(r, name) for r in responses]
        )
        self.delay = delay
        self.name = name
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, call: CallInfo) -> Response:
        self.requests.append(request)
        n = len(self.requests)
        if self.delay:
            await call.clock.sleep(self.delay)
        if self.fn is not None:
            return _as_response(self.fn(request), self.name)
        if n > len(self.responses):
            raise ModelScriptExhausted(
                f"{self.name}: no response left for call {n} (the script has {len(self.responses)})"
            )
        reply = self.responses[n - 1]
        if reply.text:
            call.token(reply.text)
        return reply


def _as_response(value: Scripted, name: str) -> Response:
    if isinstance(value, Response):
        return value
    if isinstance(value, str):
        return Response(text=value, model=name)
    raise TypeError(f"a scripted response must be a Response or str, not {type(value).__name__}")


def resolve_model(spec: str | Model | None) -> Model | None:
    """A model object from a spec.

    ``scripted:PATH`` (a JSON list of responses), ``openai:MODEL``, ``anthropic:MODEL``,
    ``ollama:MODEL`` and ``openai-compatible:MODEL@BASE_URL``; a model object is returned as
    it is.
    """
    if spec is None or isinstance(spec, Model):
        return spec
    provider, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ValueError(f"model spec {spec!r} should look like provider:name")
    if provider == "scripted":
        path = Path(rest)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"model spec {spec!r}: cannot read {path}: {exc}") from exc
        if not isinstance(data, list):
            raise ValueError(f"model spec {spec!r}: {path} should hold a JSON list of responses")
        return ScriptedModel(
            [Response.model_validate(r) if isinstance(r, dict) else str(r) for r in data],
            name=spec,
        )
    from interpreters.models._http import provider_model

    model = provider_model(spec)
    if model is None:
        raise ValueError(
            f"unknown model provider {provider!r} in {spec!r} "
            "(known: openai, anthropic, ollama, openai-compatible, scripted)"
        )
    return model
