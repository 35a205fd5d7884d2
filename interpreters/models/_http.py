"""Real models for ``infer``: OpenAI-compatible chat completions, Anthropic Messages and
Ollama's native chat, over httpx.

Each provider maps the neutral :class:`~op.ModelRequest` to its wire format and its answer
back to a :class:`~op.Response`, streaming or not. What they share lives in
:class:`HttpModel`:

- retries as the official SDKs do them: connection errors, 408, 409, 429 and 5xx (529
  included) are retried with exponential backoff and jitter, honouring ``retry-after-ms`` and
  ``retry-after`` (when 0 < delay <= 60 s) and ``x-should-retry``; 400, 401, 403, 404, 413,
  422 and quota errors are not; a stream is retried only while nothing of it has reached the
  program. Waiting uses the interpreter's clock;
- errors that reach the program name the provider, the model, the status and the provider's
  message, and never the API key;
- usage (input, output, cached tokens) and its price from a table (``prices.json``, extended by
  ``$OPDSL_PRICES``); a model without a price has an unknown cost (``None``), not zero;
- cancellation (a ``timeout``, a spent budget) closes the connection at once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import functools
import json
import os
import re
import ssl
import time
from abc import abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import httpx
from pydantic import ValidationError

from interpreters._redact import Redactor
from interpreters.models._base import CallInfo, redact_spec
from interpreters.models._body import ERROR_BODY, AnswerTooLarge, Decoded, UnreadableAnswer
from interpreters.models._remote import (
    DEFAULT_MAX_TOKENS,
    Prices,
    ProviderError,
    RemoteModel,
    RetryPolicy,
    count_setting,
    default_model_spec,
    retryable,
    seconds_setting,
)
from interpreters.models._transport import (
    AiohttpTransport,
    HttpxTransport,
    ProxyRefused,
    ProxyRoutes,
    named,
    scrubbed,
    ssl_environment,
)
from op import Response
from op._values import RAW_ARGUMENTS, replaced
from op.effects import ModelRequest
from state._canonical import lone_surrogate

__all__ = [
    "OPDSL_PARAMS",
    "HttpModel",
    "Prices",
    "ProviderError",
    "RetryPolicy",
    "Stream",
    "default_model_spec",
    "parse_arguments",
    "sse_events",
    "stream_json",
]


_SHARDS = 16

_URL_CREDENTIALS = Redactor()
"""Replaces the password of a URL with credentials, and nothing else."""


def _ssl_context() -> ssl.SSLContext:
    """One TLS context for every client (building one costs tens of milliseconds), with the
    system's CAs, or those ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` name."""
    return _ssl_context_for(ssl_environment())


@functools.cache
def _ssl_context_for(where: tuple[str | None, str | None]) -> ssl.SSLContext:
    # OpenSSL reads the variables as the context is made: one context per value they have
    return ssl.create_default_context()


OPDSL_PARAMS = frozenset({"stream", "max_tokens", "prompt_cache"})
"""A call's params that opdsl reads itself (``infer(..., stream=False, max_tokens=N,
prompt_cache=False)``): never sent on to the provider as they are (OpenAI refuses a request
with an argument it does not know); every other param is the provider's."""

USER_AGENT = "opdsl"
"""What opdsl's requests say they come from."""


async def _closed_at_loop_end(
    client: httpx.AsyncClient, forget: Callable[[], None]
) -> AsyncGenerator[None, None]:
    """Suspended once; asyncio closes it (running the ``finally``) when its loop shuts down:
    ``forget`` drops what the model keeps of that loop, and the client is closed."""
    try:
        yield
    finally:
        forget()
        with contextlib.suppress(Exception):
            await client.aclose()


class _Pool:
    """One event loop's clients, their transports, and what closes them as the loop ends."""

    __slots__ = ("clients", "closers", "routes", "transports")

    def __init__(
        self,
        clients: list[httpx.AsyncClient],
        transports: list[httpx.AsyncBaseTransport],
        routes: ProxyRoutes,
    ) -> None:
        self.clients = clients
        self.transports = transports
        #: the proxies its transports go through (the environment's when it was made)
        self.routes = routes
        self.closers: list[AsyncGenerator[None, None]] = []

    def of(self, key: str) -> tuple[httpx.AsyncClient, httpx.AsyncBaseTransport]:
        """The client and transport that carry run ``key``'s calls (spread by run)."""
        shard = hash(key) % len(self.clients)
        return self.clients[shard], self.transports[shard]


def _loop_token() -> tuple[object, bool]:
    """What names the event loop this runs in, and whether it is asyncio's: the loop itself,
    or (trio) the token of the whole of one ``trio.run``."""
    try:
        return asyncio.get_running_loop(), True
    except RuntimeError:
        return anyio.lowlevel.current_token().native_token, False


_IDLE_LOOPS_KEPT = 4
"""A model keeps the clients of this many asyncio loops left open and not running (the next
``run_until_complete`` on one of them finds its clients)."""


MODEL_TIMEOUT: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "opdsl_model_timeout", default=None
)
"""Seconds a whole model call may take, for the models made in this context (``opdsl run
--model-timeout`` sets it for its command); None: ``$OPDSL_MODEL_TIMEOUT``, else 600."""


def _timeout_from_env() -> float:
    """:data:`MODEL_TIMEOUT`, else ``$OPDSL_MODEL_TIMEOUT`` (seconds a whole model call may
    take), else 600."""
    given = MODEL_TIMEOUT.get()
    if given is not None:
        return given
    raw = os.environ.get("OPDSL_MODEL_TIMEOUT")
    return seconds_setting("OPDSL_MODEL_TIMEOUT", raw) if raw else 600.0


def _max_tokens_from_env() -> int:
    """``$OPDSL_MAX_TOKENS``, else :data:`DEFAULT_MAX_TOKENS`."""
    raw = os.environ.get("OPDSL_MAX_TOKENS")
    return count_setting("OPDSL_MAX_TOKENS", raw) if raw else DEFAULT_MAX_TOKENS


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as an object; text that is not a JSON object is kept as text under
    :data:`~op._values.RAW_ARGUMENTS` (the bound tool answers it with an error the model reads).

    Example:
        >>> parse_arguments('{"path": "a.py"}'), parse_arguments("not json")
        ({'path': 'a.py'}, {'__raw__': 'not json'})
    """
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {RAW_ARGUMENTS: raw}
        if isinstance(parsed, dict):
            # the arguments are JSON in a JSON text: their escapes were read only now
            return whole_text(parsed) if _SURROGATE_TEXT.search(raw) else parsed
    return {RAW_ARGUMENTS: raw if isinstance(raw, str) else json.dumps(raw)}


@dataclass
class Stream:
    """What a streaming answer has delivered so far: a provider's :meth:`HttpModel.read_stream`
    reads the answer's lines through it and hands it each piece of text."""

    delivered: bool = False
    text: list[str] = field(default_factory=list)
    #: the most bytes the answer may have (0: no cap), and how many came so far
    limit: int = 0
    size: int = 0

    async def lines(self, response: httpx.Response) -> AsyncIterator[str]:
        """The response's lines (ended by CRLF, LF or CR, as server-sent events and JSON lines
        are), decoded (UTF-8), every decoded byte counted against the cap: a line is never
        held past it, however long it goes on without a line break."""
        pieces, encoding = _pieces(response)
        decoder = Decoded(encoding, self.limit or _NO_CAP)
        line = bytearray()  # the line so far
        after_cr = False  # the last piece ended with CR: an LF that starts the next ends it
        while True:
            raw = await anext(pieces, None)
            data = decoder.feed(raw) if raw is not None else decoder.end()
            self.size += len(data)
            if after_cr and data[:1] == b"\n":
                data = data[1:]
            if data:
                after_cr = data[-1:] == b"\r"
                *ended, rest = _EOL.split(data)
                for part in ended:
                    line += part
                    yield line.decode("utf-8", "replace")
                    line.clear()
                line += rest
            if raw is None:
                break
        if line:
            yield line.decode("utf-8", "replace")

    def token(self, call: CallInfo, text: str) -> None:
        if text:
            self.delivered = True
            self.text.append(text)
            call.token(text)

    def thinking(self, call: CallInfo, text: Any) -> None:
        """A piece of the model's thinking: shown live, not part of the answer."""
        if text and isinstance(text, str):
            self.delivered = True
            call.token(text, thinking=True)


_CARRIED = (AnswerTooLarge, UnreadableAnswer, httpx.TransportError)
"""The failures of a transport that :meth:`HttpModel._carried_error` says as the model's
(:class:`~interpreters.models._transport.ProxyRefused` is an ``httpx.TransportError``)."""

_EOL = re.compile(rb"\r\n|\r|\n")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""What a header's name may be made of (RFC 9110's token)."""
_NO_CAP = 1 << 62


def _pieces(response: httpx.Response) -> tuple[AsyncIterator[bytes], bytes]:
    """The answer's body as it comes, and its content codings, as its headers list them; an
    answer its transport has already read (httpx's ``MockTransport`` answers so) is its
    content, decoded."""
    if response.is_stream_consumed:
        return _once(response.content), b""
    encoding = str(response.headers.get("content-encoding", "")).encode("latin-1")
    return response.aiter_raw(), encoding


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _body(response: httpx.Response, limit: int, *, cut: bool = False) -> bytes:
    """The answer's body, decoded, at most ``limit`` bytes of it: over that,
    :class:`AnswerTooLarge`, or with ``cut`` its first ``limit`` bytes, the rest not read."""
    out = bytearray()
    try:
        pieces, encoding = _pieces(response)
        decoder = Decoded(encoding, limit, cut=cut)
        async for raw in pieces:
            out += decoder.feed(raw)
            if decoder.full:
                return bytes(out)
        out += decoder.end()
    except UnreadableAnswer:
        if not cut:
            raise
        # an error answer: its status is what matters, whatever its body's encoding
    return bytes(out)


class HttpModel(RemoteModel):
    """A model behind an HTTP API. Subclasses give the wire format."""

    provider: str

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        stream: bool = True,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        prices: Prices | None = None,
        max_connections: int = 256,
        connect_timeout: float = 10.0,
        idle_timeout: float = 120.0,
        max_answer_bytes: int = 16 * 1024 * 1024,
        max_tokens: int | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        if not model:
            raise ValueError(f"{self.provider}: a model name is required")
        self.model = model
        #: the spec as the user wrote it (``resolve_model`` sets it): errors name the model so
        self.spec = f"{self.provider}:{model}"
        #: the most tokens one answer may have, unless a call says otherwise (``max_tokens``)
        self.max_tokens = _max_tokens_from_env() if max_tokens is None else max_tokens
        if lone_surrogate(base_url) is not None:  # a byte that is not UTF-8, read from the env
            raise ValueError(
                f"{self.provider}: the base URL {ascii(redact_spec(base_url))} is not text: it "
                "holds a byte that is not UTF-8 (where it comes from the environment, such as "
                "OPENAI_BASE_URL, ANTHROPIC_BASE_URL or OLLAMA_HOST, set it as UTF-8)"
            )
        # credentials in the URL (http://user:pw@host/v1) travel as a Basic authorization
        # header, never in the URL itself (nor in errors, nor in what is journaled)
        try:
            url = httpx.URL(base_url)
        except httpx.InvalidURL as exc:
            shown = redact_spec(base_url)
            raise ValueError(
                f"{self.provider}: the base URL {shown!r} is not a URL ({exc})"
            ) from None
        self._basic: str | None = None
        if url.username or url.password:
            pair = f"{url.username}:{url.password}".encode()
            self._basic = "Basic " + base64.b64encode(pair).decode()
            url = url.copy_with(username=None, password=None)
        self.base_url = str(url).rstrip("/")
        self.api_key = api_key
        self.stream = stream
        if timeout is None:
            timeout = _timeout_from_env()
        #: the whole call, retries included: connect, first byte, every byte of the answer
        self.deadline = timeout
        #: connecting; and the longest wait for the next bytes (the first byte, an idle stream)
        self.timeout = httpx.Timeout(
            min(idle_timeout, timeout), connect=min(connect_timeout, timeout)
        )
        #: an answer longer than this is an error, not memory and a huge journal row
        self.max_answer_bytes = max_answer_bytes
        self.retry = retry or RetryPolicy()
        self.prices = prices or Prices()
        self.max_connections = max_connections
        #: each running loop's clients (asyncio: by loop; trio: by its token)
        self._pools: dict[object, _Pool] = {}
        per_shard = max(1, -(-max_connections // _SHARDS))
        self.limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        #: the pool of the loop that asked last, and that loop
        self._clients: tuple[object, _Pool] | None = None
        self._urls: dict[str, httpx.URL] = {}
        #: the user's own client, if one was given: every call goes through it (its proxies,
        #: CAs, client certificates and event hooks), and opdsl never closes it
        self.http_client = http_client

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({self.model!r}, base_url={self.base_url!r})"

    def configure(self, options: Mapping[str, str]) -> None:
        """Apply a spec's options (``openai:gpt-4.1?max_tokens=512&stream=false``):
        ``max_tokens``, ``stream`` (true or false) and ``timeout`` (seconds a call may take)."""
        for key, raw in options.items():
            if key == "max_tokens":
                self.max_tokens = count_setting("max_tokens", raw)
            elif key == "stream" and raw in ("true", "false"):
                self.stream = raw == "true"
            elif key == "timeout":
                self.deadline = seconds_setting("timeout", raw)
                self.timeout = httpx.Timeout(
                    min(self.timeout.read or self.deadline, self.deadline),
                    connect=min(self.timeout.connect or self.deadline, self.deadline),
                )
            else:
                raise ValueError(
                    f"{key}={raw!r}: not an option of a model spec "
                    "(max_tokens=N, stream=true|false, timeout=SECONDS)"
                )

    def provider_params(
        self, request: ModelRequest, *, also: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        """The call's params for the provider's request: all of them but opdsl's own
        (:data:`OPDSL_PARAMS`) and ``also`` (those the provider's body places itself)."""
        skipped = OPDSL_PARAMS | also
        return {k: v for k, v in request.params.items() if k not in skipped}

    def max_tokens_of(self, request: ModelRequest) -> int:
        """The answer's cap: the call's ``max_tokens`` if it gives one, else the model's."""
        raw = request.params.get("max_tokens")
        return self.max_tokens if raw is None else count_setting("max_tokens", raw)

    async def client(self, key: str) -> httpx.AsyncClient:
        """The client of this loop for run ``key`` (the one the user gave, if any), for the
        odd request; answers go through :meth:`_carrier`."""
        return self.http_client or (await self._pool(key))[0]

    async def _carrier(self, key: str) -> httpx.AsyncBaseTransport | httpx.AsyncClient:
        """What sends a call of run ``key``: the user's client, else the transport under this
        loop's client (a model call is one POST with no cookies, redirects or auth flow, so
        it is sent to the transport directly)."""
        return self._carrier_here(key) or (await self._pool(key))[1]

    def _carrier_here(self, key: str) -> httpx.AsyncBaseTransport | httpx.AsyncClient | None:
        """:meth:`_carrier` without an await, when the user's client or the pool of this loop
        is at hand (every call but a loop's first); None: ask :meth:`_carrier`."""
        if self.http_client:
            return self.http_client
        here = self._pool_here()
        return None if here is None else here.of(key)[1]

    async def _pool(self, key: str) -> tuple[httpx.AsyncClient, httpx.AsyncBaseTransport]:
        # Clients belong to one event loop: connections are reused within it, never across
        # loops. On asyncio the bytes go over aiohttp's pool; elsewhere (trio) over httpx's,
        # with requests spread over a few clients by run, since httpx's pool looks at every
        # connection it holds for every request.
        pool = self._pool_here()
        if pool is None:
            token, on_asyncio = _loop_token()
            found = self._pools.get(token)
            pool = found if found is not None else await self._new_pool(token, on_asyncio)
            self._clients = (token, pool)
        return pool.of(key)

    def _pool_here(self) -> _Pool | None:
        """The pool the last call found, when it is this loop's (no await: the commonest
        case of :meth:`_pool`); None: ask :meth:`_pool`."""
        last = self._clients
        return last[1] if last is not None and last[0] is _loop_token()[0] else None

    def _routes_here(self) -> ProxyRoutes | None:
        """The proxies of the pool of the loop this runs in (None: it has none, as with the
        user's own client)."""
        pool = self._pools.get(_loop_token()[0])
        return None if pool is None else pool.routes

    async def _new_pool(self, token: object, on_asyncio: bool) -> _Pool:
        """The clients of the loop ``token`` names (an asyncio loop, or a trio run's token),
        kept until that loop ends. Each loop has its own, so a model used from two loops at
        once (two threads' runs) never closes the clients the other is using."""
        forced = os.environ.get("OPDSL_HTTP_TRANSPORT") or None
        if forced not in (None, "httpx"):
            raise self.error(
                f"OPDSL_HTTP_TRANSPORT={forced!r} is not a transport opdsl has: set it to "
                "'httpx' for httpx's own, or leave it unset for aiohttp's pool"
            )
        routes = ProxyRoutes()
        refused = routes.refusal(self._target(self.base_url))
        if refused is not None:
            raise self.error(refused)
        transports: list[httpx.AsyncBaseTransport]
        if on_asyncio and forced is None:
            transports = [
                AiohttpTransport(
                    ssl_context=_ssl_context(),
                    max_connections=self.max_connections,
                    routes=routes,
                )
            ]
        else:
            transports = [
                HttpxTransport(ssl_context=_ssl_context(), limits=self.limits, routes=routes)
                for _ in range(_SHARDS)
            ]
        clients = [
            httpx.AsyncClient(transport=t, timeout=self.timeout, trust_env=False)
            for t in transports
        ]
        pool = _Pool(clients, transports, routes)
        # closed as the loop ends (asyncio and trio both end the async generators still
        # suspended then), so no connection is left open; held with the pool, as the loop
        # keeps only a weak reference to them (one collected would close the clients in use)
        forget = functools.partial(self._forget, token, pool)
        pool.closers = [_closed_at_loop_end(c, forget) for c in clients]
        for closer in pool.closers:
            await closer.__anext__()  # runs to its yield: nothing here lets another task in
        self._prune()
        self._pools[token] = pool
        return pool

    def _prune(self) -> None:
        """Forget the pools of asyncio loops that ended unseen, as nothing will close their
        clients and a pool keeps its loop alive: every one closed without ending its async
        generators (``run_until_complete``, then ``close``), and all but the last few of those
        left open and not running (``run_until_complete`` alone)."""
        idle = []
        for token, pool in list(self._pools.items()):
            if isinstance(token, asyncio.AbstractEventLoop) and not token.is_running():
                if token.is_closed():
                    self._forget(token, pool)
                else:
                    idle.append((token, pool))
        for token, pool in idle[: max(0, len(idle) - _IDLE_LOOPS_KEPT + 1)]:
            self._forget(token, pool)

    def _forget(self, token: object, pool: _Pool) -> None:
        """Drop ``pool``, the clients of the loop ``token`` names, unless that loop has
        another pool by now (one forgotten while the loop was idle, closed when it runs)."""
        if self._pools.get(token) is pool:
            self._pools.pop(token, None)
        last = self._clients
        if last is not None and last[1] is pool:
            self._clients = None

    def _redact(self, text: str) -> str:
        # the key, and a proxy's credentials wherever an error quotes them: those of every
        # loop's pool (the environment may have named another proxy when another's was made)
        secrets = [s for pool in list(self._pools.values()) for s in pool.routes.secrets]
        if self.api_key and len(self.api_key) >= 4:
            secrets.append(self.api_key)
        text = scrubbed(text, secrets)
        # a spec's URL may carry a password (http://user:pw@host/v1): never in an error
        return _URL_CREDENTIALS(text)

    def error(
        self, message: str, status: int | None = None, *, retryable: bool = False
    ) -> ProviderError:
        where = f"model {self.spec}"
        head = f"{where}: HTTP {status}" if status is not None else where
        return ProviderError(
            self._redact(f"{head}: {message}"),
            status=status,
            retryable=retryable,
            detail=self._redact(message),
        )

    # -- what a provider gives: its wire format ------------------------------------------------

    @abstractmethod
    def path(self) -> str:
        """The path of the endpoint under ``base_url`` (``/chat/completions``)."""

    @abstractmethod
    def headers(self) -> dict[str, str]:
        """The provider's own headers (its API key's, its version's); opdsl adds the content
        type, the idempotency key, the user agent and a URL's Basic credentials."""

    @abstractmethod
    def body(self, request: ModelRequest, stream: bool) -> dict[str, Any]:
        """The JSON body of ``request`` in the provider's format (streamed or not)."""

    @abstractmethod
    def parse(self, data: Any) -> Response:
        """A whole answer's JSON as a :class:`~op.Response`. A missing or wrong field may
        raise what it raises (``KeyError``, ``TypeError``, ...): it becomes an error naming
        the model and the status; :meth:`error` says what is wrong in words."""

    @abstractmethod
    async def read_stream(self, response: httpx.Response, call: CallInfo, seen: Stream) -> Response:
        """A streamed answer, read through ``seen`` (:meth:`Stream.lines`, or
        :func:`sse_events` over it), each piece of text passed to ``seen.token`` (thinking to
        ``seen.thinking``) as it comes, ``seen.delivered`` set once anything reached the
        program (a stream is retried only before that); the whole :class:`~op.Response`."""

    @staticmethod
    def message_of(body: str) -> str:
        try:
            data = json.loads(body)
        except ValueError:
            return body.strip()[:500] or "(no body)"
        if isinstance(data, dict):
            err = data.get("error", data)
            if isinstance(err, dict):
                return str(err.get("message") or err.get("type") or err)[:500]
            return str(err)[:500]
        return str(data)[:500]

    def _priced(self, response: Response) -> Response:
        if response.usage.cost_usd is not None:
            return response
        usage = self.prices.priced(
            response.model or self.model,
            response.usage,
            asked=self.model,
            provider=self.provider,
            base_url=self.base_url,
        )
        return response if usage is response.usage else replaced(response, {"usage": usage})

    async def preflight(self, request: ModelRequest, call: CallInfo) -> None:
        """Checks a provider makes before the first request of a kind (default: none)."""

    def answered(self, request: ModelRequest, response: Response, call: CallInfo) -> Response:
        """What a provider makes of a whole, priced answer before the program sees it, once a
        call after its tries (default: the answer itself). A provider says it here rather than
        around :meth:`complete`, which would hold one more frame for each call under way."""
        return response

    async def complete(self, request: ModelRequest, call: CallInfo) -> Response:
        await self.preflight(request, call)
        stream = bool(request.params.get("stream", self.stream))
        body = self.body(request, stream)
        url = self.base_url + self.path()
        attempt = 0
        ends = time.monotonic() + self.deadline
        while True:
            seen = None  # what a stream delivered (a whole answer over aiohttp has none)
            try:
                left = ends - time.monotonic()
                if left <= 0:
                    raise self.error(f"no answer within the call's deadline of {self.deadline:g}s")
                carrier = self._carrier_here(call.run_id) or await self._carrier(call.run_id)
                if not stream and isinstance(carrier, AiohttpTransport):
                    # aiohttp keeps the deadline itself (a cancel scope costs a tenth of a call)
                    answer = self._priced(await self._exchange(carrier, url, body, call, left))
                else:
                    seen = Stream()
                    with anyio.fail_after(left):
                        answer = self._priced(
                            await self._send(carrier, url, body, stream, call, seen)
                        )
            except TimeoutError:
                raise self.error(
                    f"no whole answer within the call's deadline of {self.deadline:g}s"
                ) from None
            except ProviderError as exc:
                delivered = seen is not None and seen.delivered
                if not exc.retryable or delivered or attempt >= self.retry.max_retries:
                    raise
                delay = self.retry.delay(attempt, getattr(exc, "headers", None))
                if time.monotonic() + delay >= ends:
                    raise  # no time left for another try
            else:
                return self.answered(request, answer, call)
            attempt += 1
            await call.clock.sleep(delay)

    def _checked(self, response: Response) -> Response:
        if any(not c.name for c in response.tool_calls):
            raise self.error("the answer has a tool call without a tool name")
        return response

    def _target(self, url: str) -> httpx.URL:
        """``url`` parsed (once per URL)."""
        target = self._urls.get(url)
        if target is None:
            target = self._urls[url] = httpx.URL(url)
        return target

    def _request_headers(self, call: CallInfo) -> dict[str, str]:
        """The headers of a call, each checked: a value with a line break (an API key pasted
        with one) would end its header and start another, of the sender's choosing."""
        headers = {**self.headers(), "content-type": "application/json"}
        if self._basic is not None:
            headers.setdefault("authorization", self._basic)
        headers.setdefault("idempotency-key", call.idempotency_key)
        headers.setdefault("user-agent", USER_AGENT)
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\0" in value or not _TOKEN.fullmatch(name):
                # never the value: it may be the key
                raise self.error(
                    f"the request header {name[:40]!r} has a line break, a NUL or a character "
                    "a header cannot have (look at the API key); refused"
                )
        return headers

    async def _exchange(
        self,
        transport: AiohttpTransport,
        url: str,
        body: dict[str, Any],
        call: CallInfo,
        seconds: float,
    ) -> Response:
        """A whole answer over aiohttp, without httpx's request and response objects."""
        headers = self._request_headers(call)
        try:  # not _carried: a frame of its own held for as long as the call takes
            status, heads, raw = await transport.exchange(
                self._target(url),
                headers,
                _json_body(body),
                self.timeout.as_dict(),
                self.max_answer_bytes,
                seconds,
            )
        except _CARRIED as exc:
            raise self._carried_error(exc, None) from None
        if status >= 400:
            raise self._refusal(status, heads, raw, url)
        return self._whole(status, raw)  # decoded by the transport, within the cap

    async def _send(
        self,
        carrier: httpx.AsyncBaseTransport | httpx.AsyncClient,
        url: str,
        body: dict[str, Any],
        stream: bool,
        call: CallInfo,
        seen: Stream,
    ) -> Response:
        headers = self._request_headers(call)
        with self._carried(seen):
            if isinstance(carrier, httpx.AsyncClient):
                # the user's client: its own headers, auth and hooks apply; opdsl reads gzip
                # and deflate (within its cap), so it asks for no other encoding
                headers.setdefault("accept-encoding", "gzip, deflate")
                request = carrier.build_request(
                    "POST",
                    self._target(url),
                    headers=headers,
                    content=_json_body(body),
                    extensions={"timeout": self.timeout.as_dict()},
                )
            else:
                request = httpx.Request(
                    "POST",
                    self._target(url),
                    headers=headers,
                    content=_json_body(body),
                    extensions={"timeout": self.timeout.as_dict()},
                )
            async with _answer(carrier, request) as response:
                status = response.status_code
                if status >= 400:
                    cut = min(self.max_answer_bytes, ERROR_BODY)
                    raise self._refusal(
                        status, response.headers, await _body(response, cut, cut=True), url
                    )
                try:
                    if not stream:
                        return self._whole(status, await _body(response, self.max_answer_bytes))
                    seen.limit = self.max_answer_bytes
                    with self._shaped(status):
                        return self._checked(await self.read_stream(response, call, seen))
                except AnswerTooLarge:
                    raise self._too_large(status) from None
                except UnreadableAnswer as exc:
                    raise self.error(f"{exc}; refused", status) from None

    def _too_large(self, status: int | None) -> ProviderError:
        return self.error(f"the answer is over {self.max_answer_bytes:,} bytes; refused", status)

    @contextlib.contextmanager
    def _carried(self, seen: Stream | None = None) -> Iterator[None]:
        """The transport's failures as errors that name the model (:meth:`_carried_error`)."""
        try:
            yield
        except _CARRIED as exc:
            raise self._carried_error(exc, seen) from None

    def _carried_error(self, exc: Exception, seen: Stream | None) -> ProviderError:
        """What a failure of the transport (one of :data:`_CARRIED`) says, naming the model: a
        lost connection or a timeout may be tried again, a request that cannot be sent may
        not."""
        if isinstance(exc, AnswerTooLarge):
            return self._too_large(None)
        if isinstance(exc, UnreadableAnswer):
            return self.error(f"{exc}; refused")
        if isinstance(exc, httpx.LocalProtocolError):
            # h11's message quotes the header's value (an API key, maybe): never repeated
            return self.error(
                "a request header has a line break, a NUL or a character a header cannot "
                "have (look at the API key); refused"
            )
        if isinstance(exc, httpx.TimeoutException):
            return self.error(f"timed out ({type(exc).__name__})", retryable=True)
        if isinstance(exc, ProxyRefused):  # asking again gets the same answer
            return self.error(f"cannot reach {self.base_url}: {exc}")
        cut = seen is not None and seen.delivered
        what = "the stream was cut" if cut else f"cannot reach {self.base_url}"
        return self.error(f"{what}: {type(exc).__name__}: {exc}", retryable=True)

    def _refusal(
        self, status: int, headers: Mapping[str, str], body: bytes, url: str
    ) -> ProviderError:
        """The error for an answer with an error status (to a request for ``url``)."""
        text = body.decode("utf-8", "replace")
        message = self.message_of(text)
        proxy = None
        routes = self._routes_here() if status == 407 else None
        if routes is not None:
            proxy = routes(self._target(url))
        if proxy is not None:  # a proxy that forwards requests (plain http) wants credentials
            message = f"the proxy {named(proxy)} refused the request (its credentials?): {message}"
        err = self.error(message, status, retryable=retryable(status, headers, text))
        if proxy is not None:  # a proxy may quote the credentials back in a header
            headers = {k: proxy.scrubbed(v) for k, v in headers.items()}
        err.headers = headers  # type: ignore[attr-defined]
        return err

    def _whole(self, status: int, raw: bytes | bytearray) -> Response:
        """A whole (not streamed) answer's body, parsed."""
        with self._shaped(status):
            try:
                data = json.loads(raw)
            except ValueError:
                raise self.error(f"the answer is not JSON: {bytes(raw[:200])!r}", status) from None
            if _SURROGATE_BYTES.search(raw):
                data = whole_text(data)
            return self._checked(self.parse(data))

    @contextlib.contextmanager
    def _shaped(self, status: int) -> Iterator[None]:
        """A parser's failures as errors that name the model and the status."""
        try:
            yield
        except ProviderError as exc:
            if exc.status is not None:
                raise
            # raised by a parser, which does not know the status the answer came with
            raise self.error(exc.detail, status, retryable=exc.retryable) from None
        except (
            KeyError,
            TypeError,
            AttributeError,
            IndexError,
            ValueError,
            OverflowError,  # a count of 1e400: int() of infinity
            ValidationError,
        ) as exc:
            # an answer of the wrong shape: say whose, never a bare AttributeError
            raise self.error(
                f"a malformed answer ({type(exc).__name__}: {str(exc)[:200]})", status
            ) from None


@contextlib.asynccontextmanager
async def _answer(
    carrier: httpx.AsyncBaseTransport | httpx.AsyncClient, request: httpx.Request
) -> AsyncIterator[httpx.Response]:
    """``request`` sent, its answer's head read; the answer is closed when the block ends."""
    if isinstance(carrier, httpx.AsyncClient):
        response = await carrier.send(request, stream=True)
    else:
        response = await carrier.handle_async_request(request)
        response.request = request
    try:
        yield response
    finally:
        await response.aclose()


async def sse_events(response: httpx.Response, seen: Stream) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs of a server-sent-events stream."""
    event, data = "message", list[str]()
    async for line in seen.lines(response):
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    if data:
        yield event, "\n".join(data)


_BODY_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_write_body = (
    json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        # no markers: a body is a tree (a cycle ends in RecursionError, answered below); the
        # default and the rest are json.dumps's with the settings above, built once, not per call
        None,
        _BODY_ENCODER.default,
        json.encoder.encode_basestring,
        None,
        ":",
        ",",
        False,
        False,
        False,
    )
    if getattr(json.encoder, "c_make_encoder", None) is not None
    else None
)


def _json_body(body: dict[str, Any]) -> bytes:
    if _write_body is not None:
        try:
            return "".join(_write_body(body, 0)).encode()
        except RecursionError:
            pass  # a body that holds itself: json.dumps says so
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def stream_json(text: str, model: HttpModel) -> Any:
    """A line of a stream as JSON, or an error that names ``model`` and quotes the line."""
    try:
        data = json.loads(text)
    except ValueError:
        raise model.error(f"the stream sent a line that is not JSON: {text[:200]!r}") from None
    return whole_text(data) if _SURROGATE_TEXT.search(text) else data


_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""What in an answer's bytes JSON reads as a surrogate: the escape, or its CESU-8 bytes (which
``json.loads`` of bytes takes, as ``surrogatepass``)."""
_SURROGATE_TEXT = re.compile("\\\\u[dD][89a-fA-F]|[\ud800-\udfff]")


def whole_text(data: Any) -> Any:
    """JSON data with every text made whole, as a web browser makes a string it sends: a
    surrogate pair written as two escapes is joined into its character, and a lone surrogate
    (no character, and no UTF-8 holds it) becomes U+FFFD. A model's answer holding one is
    then text a journal keeps, not a run that ends on it.

    Example:
        >>> whole_text({"text": "\\ud83d\\ude00 and \\ud800"})
        {'text': '\U0001f600 and \ufffd'}
    """
    if isinstance(data, str):
        if lone_surrogate(data) is None:
            return data
        return data.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(data, dict):
        return {whole_text(k): whole_text(v) for k, v in data.items()}
    if isinstance(data, list):
        return [whole_text(v) for v in data]
    return data
