"""The provider kit: what a model provider is written with. Every name here is documented API;
a provider imports nothing private.

A provider is a factory registered under a name, ``register_provider("name", factory)``, where
``factory(rest, spec)`` makes a :class:`Model` from the part of a spec after ``name:`` (a
``ValueError`` of one line for a spec it cannot take). A model is anything with
``async def complete(request, call) -> Response``.

A provider behind an HTTP API subclasses :class:`HttpModel`, which owns the connection pool,
retries (honouring ``retry-after``), deadlines, the cap on an answer's size, prices and the
errors that name the model; the subclass gives only its wire format:

- ``provider``: its name, as its specs start;
- :meth:`HttpModel.path`, :meth:`HttpModel.headers`, :meth:`HttpModel.body`: the request
  (the call's params it passes on are :meth:`HttpModel.provider_params`, never opdsl's own);
- :meth:`HttpModel.parse`: a whole answer's JSON as a :class:`~op.Response`;
- :meth:`HttpModel.read_stream`: a streamed answer, read through a :class:`Stream` (its
  lines, or :func:`sse_events` over them; :func:`stream_json` for each line's JSON), each piece
  of text handed to ``Stream.token`` as it comes;
- optionally :meth:`HttpModel.preflight` (checks before the first request) and
  :meth:`HttpModel.answered` (what it makes of a whole, priced answer, once a call after its
  tries: Anthropic's forced tool reads the answer there; an error it raises is the call's,
  never tried again; a subclass with a method of that name for something else must rename
  it, as ``complete`` calls it). Overriding :meth:`HttpModel.complete` works too, at the cost
  of one more frame held for each call under way.

Tool-call arguments go through :func:`parse_arguments`; an error is made with
:meth:`HttpModel.error` (it names the provider, the model and the status, never a key).

Example:
    >>> from interpreters.models.kit import parse_arguments
    >>> parse_arguments('{"n": 1}')
    {'n': 1}
"""

from interpreters.models._base import (
    CallInfo,
    Model,
    ProviderFactory,
    ScriptedModel,
    TextCallWatch,
    calls_schema,
    redact_spec,
    register_provider,
    strict_schema,
    tools_template,
)
from interpreters.models._http import (
    HttpModel,
    Stream,
    parse_arguments,
    sse_events,
    stream_json,
)
from interpreters.models._remote import (
    Prices,
    ProviderError,
    RemoteModel,
    RetryPolicy,
    count_setting,
    seconds_setting,
)
from op._values import RAW_ARGUMENTS

__all__ = [
    "RAW_ARGUMENTS",
    "CallInfo",
    "HttpModel",
    "Model",
    "Prices",
    "ProviderError",
    "ProviderFactory",
    "RemoteModel",
    "RetryPolicy",
    "ScriptedModel",
    "Stream",
    "TextCallWatch",
    "calls_schema",
    "count_setting",
    "parse_arguments",
    "redact_spec",
    "register_provider",
    "seconds_setting",
    "sse_events",
    "stream_json",
    "strict_schema",
    "tools_template",
]
