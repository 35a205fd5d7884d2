"""Models: what answers ``infer``. ``Model`` is the interface, ``ScriptedModel`` answers from
a list, ``FallbackModel`` asks the next of its models when one fails, and the HTTP providers (OpenAI-compatible, Anthropic, Ollama) speak the vendors'
APIs; ``resolve_model`` turns a spec such as ``openai:gpt-4.1-mini`` into a model, and
``redact_spec`` is how a spec is written down or shown (any URL's credentials redacted).
The HTTP providers (and httpx) load when first asked for. What a provider is written with
is :mod:`interpreters.models.kit`."""

from typing import TYPE_CHECKING

from interpreters.models._base import (
    CallInfo,
    Model,
    ModelScriptExhausted,
    ProviderFactory,
    ScriptedModel,
    model_identity,
    providers,
    redact_spec,
    register_provider,
    resolve_model,
    tools_template,
)

if TYPE_CHECKING:
    from interpreters.models._fallback import FallbackModel, ModelsFailed
    from interpreters.models._http import HttpModel
    from interpreters.models._remote import (
        Prices,
        ProviderError,
        RemoteModel,
        RetryPolicy,
        default_model_spec,
    )
    from interpreters.models.anthropic import AnthropicModel
    from interpreters.models.ollama import OllamaModel
    from interpreters.models.openai import OpenAIModel

_LAZY = {
    "FallbackModel": "interpreters.models._fallback",
    "ModelsFailed": "interpreters.models._fallback",
    "HttpModel": "interpreters.models._http",
    "Prices": "interpreters.models._remote",
    "ProviderError": "interpreters.models._remote",
    "RemoteModel": "interpreters.models._remote",
    "RetryPolicy": "interpreters.models._remote",
    "default_model_spec": "interpreters.models._remote",
    "AnthropicModel": "interpreters.models.anthropic",
    "OllamaModel": "interpreters.models.ollama",
    "OpenAIModel": "interpreters.models.openai",
}

__all__ = [
    "AnthropicModel",
    "CallInfo",
    "FallbackModel",
    "HttpModel",
    "Model",
    "ModelScriptExhausted",
    "ModelsFailed",
    "OllamaModel",
    "OpenAIModel",
    "Prices",
    "ProviderError",
    "ProviderFactory",
    "RemoteModel",
    "RetryPolicy",
    "ScriptedModel",
    "default_model_spec",
    "model_identity",
    "providers",
    "redact_spec",
    "register_provider",
    "resolve_model",
    "tools_template",
]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'interpreters.models' has no attribute {name!r}")
