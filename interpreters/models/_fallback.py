"""A chain of models: when one fails after its own retries, the next is asked.

``--model 'openai:gpt-4.1-mini,anthropic:claude-3-5-haiku-latest'`` (a spec of specs, joined
by commas) is a :class:`FallbackModel`, as is ``FallbackModel([...])`` in the API. Each model
keeps its own retry policy (429, 5xx and overload are retried there first); what the chain
falls back on is a :class:`~op.ModelError` that is left after them (a provider down, a model
that is not there, a refused key). A cancellation, a spent token budget and a run's fatal
errors are never caught: they end the call as they would with one model.

The journal says which model answered: the recorded ``Response.model`` is that model's
``provider:name`` (a scripted model's own name), and each model that failed first is told to
the event sinks as a ``warning``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import final

from interpreters.models._base import CallInfo, Model, model_identity, redact_spec, resolve_model
from op import Fatal, ModelError, Response
from op.effects import ModelRequest
from op.events import Emitted

__all__ = ["FallbackModel", "ModelsFailed", "split_chain"]

# a comma that starts another spec (``provider:``); a comma elsewhere (in a URL) stays
_NEXT_SPEC = re.compile(r",\s*(?=[A-Za-z][A-Za-z0-9_-]*:)")


def split_chain(spec: str) -> list[str] | None:
    """The specs of a chain written as one (``a:x,b:y``), or None for a single spec.

    Example:
        >>> split_chain("openai:gpt-4.1-mini, anthropic:claude-3-5-haiku-latest")
        ['openai:gpt-4.1-mini', 'anthropic:claude-3-5-haiku-latest']
        >>> split_chain("openai:gpt-4.1-mini") is None
        True
    """
    if "," not in spec:
        return None
    parts = _NEXT_SPEC.split(spec.strip())
    if len(parts) < 2:
        return None
    return [p.strip() for p in parts]


class ModelsFailed(ModelError):
    """Every model of a :class:`FallbackModel` failed; the message has each one's error."""


def _who(model: object) -> str:
    """A model as the journal and the warnings name it: ``provider:name``, else its name."""
    provider, name = model_identity(model)
    if provider and name:
        return f"{provider}:{name}"
    own = getattr(model, "name", None) or getattr(model, "spec", None)
    return redact_spec(own) if isinstance(own, str) and own else type(model).__name__


@final
class FallbackModel:
    """Asks ``models`` in order, the next when one fails after its own retries.

    When to use: a provider that is sometimes down or rate-limited past its retries, with
    another that can do the same work. Details: only a :class:`~op.ModelError` moves on to
    the next model; the answer's ``model`` says which one gave it; a dry run estimates the
    call as the first model would answer it. Gotcha: a model that streamed part of an answer
    before it failed has told those tokens to the sinks, and a ``tokens`` budget counts them.

    Example:
        >>> from interpreters.models import ScriptedModel
        >>> chain = FallbackModel([ScriptedModel([], name="first"), ScriptedModel(["hi"], name="second")])
        >>> [_who(m) for m in chain.models]
        ['first', 'second']
    """

    def __init__(self, models: Sequence[str | Model]) -> None:
        resolved: list[Model] = []
        for i, m in enumerate(models):
            got = resolve_model(m)
            if got is None:
                raise ValueError(f"FallbackModel: model {i + 1} of the chain is None")
            resolved.append(got)
        if not resolved:
            raise ValueError("FallbackModel needs at least one model")
        self.models: tuple[Model, ...] = tuple(resolved)
        #: the chain as it is written down (each spec's credentials redacted)
        self.spec = ",".join(_who(m) if not isinstance(m, str) else redact_spec(m) for m in models)

    @property
    def model(self) -> str:
        """The first model's name: what a dry run prices the call at, as it would answer."""
        name = getattr(self.models[0], "model", None)
        return name if isinstance(name, str) else ""

    @property
    def prices(self) -> object:
        """The first model's price table, if it has one."""
        return getattr(self.models[0], "prices", None)

    def max_tokens_of(self, request: ModelRequest) -> int | None:
        """The cap the first model would send with ``request`` (None: it declares none)."""
        cap_of = getattr(self.models[0], "max_tokens_of", None)
        cap = cap_of(request) if callable(cap_of) else None
        return cap if isinstance(cap, int) else None

    async def complete(self, request: ModelRequest, call: CallInfo) -> Response:
        failures: list[str] = []
        for i, model in enumerate(self.models):
            try:
                response = await model.complete(request, call)
            except ModelError as exc:
                if isinstance(exc, Fatal):
                    raise
                failures.append(f"{_who(model)}: {exc}")
                if i + 1 < len(self.models):
                    _warn(
                        call,
                        f"model {_who(model)} failed ({exc}); asking {_who(self.models[i + 1])}",
                    )
                continue
            answered = _who(model)
            provider = model_identity(model)[0]
            named = response.model
            if provider is not None and named and not named.startswith(f"{provider}:"):
                answered = f"{provider}:{named}"
            return response.model_copy(update={"model": answered})
        raise ModelsFailed(
            f"every model of the chain failed ({len(failures)}): " + "; ".join(failures)
        )


def _warn(call: CallInfo, text: str) -> None:
    if call.bus.active:
        call.bus.emit(
            Emitted(
                run_id=call.run_id,
                at=call.clock.now(),
                address=call.address,
                name="warning",
                data=text,
            )
        )
