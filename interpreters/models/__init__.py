"""Models: what answers ``infer``. ``Model`` is the interface, ``ScriptedModel`` answers from
a list, and the HTTP providers (OpenAI-compatible, Anthropic, Ollama) speak the vendors'
APIs; ``resolve_model`` turns a spec such as ``openai:gpt-4.1-mini`` into a model. The HTTP
providers (and httpx) load when first asked for."""

from typing import TYPE_CHECKING

from interpreters.models._base import (
    CallInfo,
    Model,
    ModelScriptExhausted,
    ScriptedModel,
    resolve_model,
)

if TYPE_CHECKING:
    from interpreters.models._http import (
        AnthropicModel,
        HttpModel,
        OllamaModel,
        OpenAIModel,
        Prices,
        ProviderError,
        RetryPolicy,
        default_model_spec,
    )

_HTTP = ("AnthropicModel", "HttpModel", "OllamaModel", "OpenAIModel", "Prices", "ProviderError", "RetryPolicy",
         "default_model_spec")  # fmt: skip

__all__ = [
    "AnthropicModel",
    "CallInfo",
    "HttpModel",
    "Model",
    "ModelScriptExhausted",
    "OllamaModel",
    "OpenAIModel",
    "Prices",
    "ProviderError",
    "RetryPolicy",
    "ScriptedModel",
    "default_model_spec",
    "resolve_model",
]


def __getattr__(name: str) -> object:
    if name in _HTTP:
        from interpreters.models import _http

        return getattr(_http, name)
    raise AttributeError(f"module 'interpreters.models' has no attribute {name!r}")
