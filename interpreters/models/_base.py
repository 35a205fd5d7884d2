"""Model handlers: what answers ``infer``.

A model is anything with ``async def complete(request, call) -> Response``. This module has
the scripted one used in tests and offline demos; network providers live beside it.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, TypeAlias, final, runtime_checkable

from interpreters._redact import REDACTED
from interpreters.runtime._frame import Call
from op import ModelError, Response, ToolSpec, text_calls
from op.effects import ModelRequest
from op.events import Emitted

__all__ = [
    "TOOLS_TEMPLATE",
    "CallInfo",
    "Model",
    "TextCallWatch",
    "calls_schema",
    "ModelScriptExhausted",
    "ProviderFactory",
    "ScriptedModel",
    "example_of",
    "providers",
    "redact_spec",
    "register_provider",
    "resolve_model",
    "model_identity",
    "strict_schema",
    "tools_template",
]


CallInfo: TypeAlias = Call
"""What a handler knows about the effect it performs: the driver's :class:`Call` (run id,
address, idempotency key, clock, token reporting). A tool parameter annotated ``CallInfo``
receives it."""


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

    Its place in the list is the run's: the n-th model call of a run gets the n-th answer,
    whichever process performs it (a resumed or answered run, a Temporal worker serving many
    runs), since the driver counts the calls the run's record fed back (``Call.model_calls``).
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
        #: calls counted here, by run, for a caller that does not say the run's count
        self._counted: dict[str, int] = {}

    async def complete(self, request: ModelRequest, call: CallInfo) -> Response:
        self.requests.append(request)
        before = call.model_calls
        if before is None:
            before = self._counted.get(call.run_id, 0)
            self._counted[call.run_id] = before + 1
        n = before + 1
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


ProviderFactory = Callable[[str, str], Model]
"""Makes a model from the part of a spec after ``provider:`` and the whole spec (for errors)."""

_PROVIDERS: dict[str, ProviderFactory] = {}
# the built-in providers register themselves when their module is imported (on first use,
# so httpx loads only when an HTTP model is asked for)
_BUILTIN = {
    "openai": "interpreters.models.openai",
    "openai-compatible": "interpreters.models.openai",
    "anthropic": "interpreters.models.anthropic",
    "ollama": "interpreters.models.ollama",
}


def register_provider(name: str, factory: ProviderFactory) -> None:
    """Make ``name:...`` specs resolve through ``factory(rest, spec)``.

    Example:
        >>> register_provider("echo", lambda rest, spec: ScriptedModel([rest] * 3, name=spec))
        >>> resolve_model("echo:hello").responses[0].text
        'hello'
    """
    if not name or ":" in name:
        raise ValueError(f"a provider name is a word without ':', not {name!r}")
    _PROVIDERS[name] = factory


def providers() -> list[str]:
    """The provider names a spec may start with."""
    return sorted({"scripted", *_BUILTIN, *_PROVIDERS})


# a URL's credentials: everything between its scheme and the last @ before its path
_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#\s]*)@")


def redact_spec(spec: str) -> str:
    """A model spec as it may be written down or shown: the credentials of any URL in it
    (``http://user:password@host``, ``http://token@host``) replaced. Every place a spec
    becomes text (the journal's run config, errors, spans, the console) goes through this.

    Example:
        >>> redact_spec("openai-compatible:m@http://me:hunter2@gpu-box:8000/v1?max_tokens=9")
        'openai-compatible:m@http://[redacted]@gpu-box:8000/v1?max_tokens=9'
        >>> redact_spec("openai:gpt-4.1-mini")
        'openai:gpt-4.1-mini'
    """
    if "@" not in spec or "://" not in spec:
        return spec
    return _CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + "@", spec)


def model_identity(model: object) -> tuple[str | None, str | None]:
    """The provider and the model's name a model object declares (its ``provider`` and
    ``model`` attributes, as every :class:`~interpreters.models.HttpModel` has them), without
    any credentials: what a trace says of a model call. ``None`` for what it does not declare
    (a :class:`ScriptedModel` declares neither).

    Example:
        >>> class Acme:
        ...     provider, model = "acme", "m1"
        >>> model_identity(Acme()), model_identity(ScriptedModel(["hi"]))
        (('acme', 'm1'), (None, None))
    """
    provider, name = getattr(model, "provider", None), getattr(model, "model", None)
    return (
        provider if isinstance(provider, str) and provider else None,
        redact_spec(name) if isinstance(name, str) and name else None,
    )


def resolve_model(spec: str | Model | None) -> Model | None:
    """A model object from a spec.

    ``scripted:PATH`` (a JSON list of responses), ``openai:MODEL``, ``anthropic:MODEL``,
    ``ollama:MODEL``, ``openai-compatible:MODEL@BASE_URL`` and any registered with
    :func:`register_provider`; specs joined by commas are a
    :class:`~interpreters.models.FallbackModel`; a model object is returned as it is. Wrong specs are a
    ``ValueError`` of one line that names the spec (its credentials redacted).
    """
    if spec is None or isinstance(spec, Model):
        return spec
    shown = redact_spec(spec)
    if f"{REDACTED}@" in spec:
        raise ValueError(
            f"model spec {shown!r} was written down without its URL's credentials; give the "
            "model again as you first did (--model SPEC, model= in the API)"
        )
    from interpreters.models._fallback import FallbackModel, split_chain

    chain = split_chain(spec)
    if chain is not None:  # ``a:x,b:y``: the next model when one fails after its retries
        return FallbackModel(chain)
    base, options = _spec_options(spec)
    provider, sep, rest = base.partition(":")
    if not sep or not rest:
        raise ValueError(f"model spec {shown!r} should look like provider:name")
    if provider == "scripted":
        path = Path(rest)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"model spec {shown!r}: cannot read {path}: {exc}") from exc
        if not isinstance(data, list):
            raise ValueError(f"model spec {shown!r}: {path} should hold a JSON list of responses")
        return ScriptedModel(
            [Response.model_validate(r) if isinstance(r, dict) else str(r) for r in data],
            name=spec,
        )
    if provider not in _PROVIDERS and provider in _BUILTIN:
        importlib.import_module(_BUILTIN[provider])
    factory = _PROVIDERS.get(provider)
    if factory is None:
        raise ValueError(
            f"unknown model provider {provider!r} in {shown!r} (known: {', '.join(providers())})"
        )
    try:
        model = factory(rest, spec)
    except ValueError as exc:  # a provider's own error may quote the spec: never its password
        raise ValueError(redact_spec(" ".join(str(exc).replace(spec, shown).split()))) from None
    if options:
        configure = getattr(model, "configure", None)
        if not callable(configure):
            raise ValueError(f"model spec {shown!r}: the {provider} provider takes no options")
        try:
            configure(options)
        except ValueError as exc:
            raise ValueError(redact_spec(f"model spec {shown!r}: {exc}")) from None
    if isinstance(getattr(model, "spec", None), str):
        # errors and traces name the model as the user wrote it, without its credentials
        setattr(model, "spec", shown)  # noqa: B010
    return model


def _spec_options(spec: str) -> tuple[str, dict[str, str]]:
    """``base?k=v&k=v`` split into the base and its options (a base URL keeps its own ``?``
    only if what follows is not ``key=value`` pairs)."""
    base, sep, tail = spec.rpartition("?")
    if not sep or not tail:
        return spec, {}
    pairs = [p.partition("=") for p in tail.split("&")]
    if not all(k and eq and k.replace("_", "").isalnum() for k, eq, _ in pairs):
        return spec, {}
    return base, {k: v for k, _, v in pairs}


def calls_schema(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """The JSON Schema of an answer that is one call of ``tools``, ``{"name": ..., "arguments":
    {...}}`` with the tool's own arguments, or the final answer, ``{"answer": "..."}``: what
    ``tool_loop(..., constrained=True)`` asks a server that decodes under a schema for, so that
    a call is valid by construction. The tools' ``$defs`` are gathered at the top, where their
    references point.

    Example:
        >>> spec = ToolSpec(name="add", parameters={"type": "object", "properties": {}})
        >>> [b["properties"].get("name") for b in calls_schema([spec])["anyOf"]]
        [{'const': 'add'}, None]
    """
    defs: dict[str, Any] = {}
    branches: list[dict[str, Any]] = []
    for t in tools:
        parameters = dict(t.parameters or {"type": "object", "properties": {}})
        defs.update(parameters.pop("$defs", None) or {})
        branches.append(
            {
                "type": "object",
                "description": t.description or t.name,
                "properties": {"name": {"const": t.name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    branches.append(
        {
            "type": "object",
            "description": "the final answer, when no tool is needed any more",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
            "additionalProperties": False,
        }
    )
    schema: dict[str, Any] = {"anyOf": branches}
    if defs:
        schema["$defs"] = defs
    return schema


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic model's JSON Schema as OpenAI's strict structured outputs take it: every
    object closed (``additionalProperties: false``) with all its properties required, no
    ``default``, a ``$ref`` with other keys beside it resolved in place. What validates the
    answer is still the model class itself, so a field with a default is asked for and then
    validated as the class says.

    Example:
        >>> strict_schema({"type": "object", "properties": {"a": {"type": "integer", "default": 1}}})
        {'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'additionalProperties': False, 'required': ['a']}
    """
    defs = schema.get("$defs") or {}

    def fix(node: Any) -> Any:
        if isinstance(node, list):
            return [fix(n) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and len(node) > 1 and ref.startswith("#/$defs/"):
            target = defs.get(ref.removeprefix("#/$defs/"))
            if isinstance(target, dict):
                node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        out = {k: fix(v) for k, v in node.items() if k != "default"}
        if out.get("type") == "object" or "properties" in out:
            out.setdefault("additionalProperties", False)
            out["required"] = list(out.get("properties") or {})
        return out

    fixed: dict[str, Any] = fix(schema)
    return fixed


TOOLS_TEMPLATE = "json_tools.jinja"
"""The chat template opdsl ships for llama.cpp's ``llama-server --jinja``: it renders the
tools and asks for calls as ```` ```json {"name": ..., "arguments": ...} ``` ```` blocks, which
the server then returns as real tool calls (:func:`tools_template` gives its path)."""


def tools_template() -> Path:
    """Where the shipped chat template is (give it to ``llama-server --chat-template-file``)."""
    return Path(str(resources.files("interpreters.models") / "templates" / TOOLS_TEMPLATE))


class TextCallWatch:
    """Notices a server that never returns a tool call while its model writes calls as text:
    the server's chat template has no tool-call format it can parse (llama.cpp with a model's
    own template, an Ollama model without tool support). Says so once, as a ``warning`` event
    the console shows, naming ``fix``."""

    def __init__(self, fix: str) -> None:
        self.fix = fix
        self.returned_calls = False
        self.warned = False

    def note(self, who: str, request: ModelRequest, response: Response, call: CallInfo) -> None:
        if response.tool_calls:
            self.returned_calls = True
            return
        if self.returned_calls or self.warned or not request.tools:
            return
        if request.output is not None and request.output.calls:
            return  # asked for the call as JSON text: that is what it wrote
        found = text_calls(response.text, [t.name for t in request.tools])
        if found is None:
            return
        self.warned = True
        if call.bus.active:
            call.bus.emit(
                Emitted(
                    run_id=call.run_id,
                    at=call.clock.now(),
                    address=call.address,
                    name="warning",
                    data=(
                        f"model {who} was offered {len(request.tools)} tool(s) and wrote its "
                        "call as text: the server has returned no tool call, so its chat "
                        "template has no tool-call format it can parse (tool_loop performs "
                        f"such calls itself, strictly, but they are less reliable). Fix: {self.fix}"
                    ),
                )
            )


def example_of(schema: dict[str, Any]) -> Any:
    """The plainest value that fits ``schema`` (a pydantic model's JSON Schema): what a dry run
    answers a typed ``infer`` with, since it asks no model. Each field its default, else the
    first of its choices, else the empty value of its type.

    Example:
        >>> example_of({"type": "object", "properties": {"n": {"type": "integer"},
        ...     "tags": {"type": "array"}, "kind": {"enum": ["a", "b"]}}, "required": ["n"]})
        {'n': 0, 'tags': [], 'kind': 'a'}
    """
    defs = schema.get("$defs") or {}

    def of(node: Any, depth: int) -> Any:
        if not isinstance(node, dict) or depth > 20:
            return None
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return of(defs.get(ref.removeprefix("#/$defs/")), depth + 1)
        if "default" in node:
            return node["default"]
        if "const" in node:
            return node["const"]
        if node.get("enum"):
            return node["enum"][0]
        for key in ("anyOf", "oneOf", "allOf"):
            if node.get(key):
                return of(node[key][0], depth + 1)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = kind[0] if kind else None
        if kind == "object" or "properties" in node:
            props = node.get("properties") or {}
            return {k: of(v, depth + 1) for k, v in props.items()}
        empty: dict[Any, Any] = {
            "array": [],
            "string": "",
            "integer": 0,
            "number": 0,
            "boolean": False,
        }
        return empty.get(kind)

    return of(schema, 0)
