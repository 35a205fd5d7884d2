"""What carries a model call's bytes, under httpx's transport interface: aiohttp's connection
pool on asyncio (:class:`AiohttpTransport`), httpx's own under trio; and the proxy each URL
goes through (:class:`ProxyRoutes`: ``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``,
``NO_PROXY``, as curl and every HTTP library read them).

The providers are written against httpx (requests, responses, byte streams); the adapter
hands each request to an ``aiohttp.ClientSession`` made for it (no cookie jar, no redirects,
no decoding: opdsl decodes and caps an answer itself) and gives aiohttp's answer back as an
``httpx.Response``. aiohttp's errors become httpx's, each saying what went wrong in words:

- a server that cannot be reached, or a TLS handshake refused: :class:`httpx.ConnectError`
  (a proxy that cannot be reached: :class:`httpx.ProxyError`; one that refuses the tunnel,
  its credentials wrong, say: :class:`ProxyRefused`, not worth trying again);
- no connection in time: :class:`httpx.ConnectTimeout`; no bytes in time:
  :class:`httpx.ReadTimeout`;
- an answer that is not HTTP, a head too long, a body cut short, a connection closed before
  the answer: :class:`httpx.RemoteProtocolError`;
- a URL that is not http or https: :class:`httpx.UnsupportedProtocol`.

A call that does not stream may skip httpx's objects altogether (:meth:`AiohttpTransport.
exchange`): what it needs is the status, the headers and the whole body.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import ipaddress
import math
import os
import ssl
import urllib.request
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, final

import aiohttp
import httpx
from aiohttp.client_reqrep import ClientRequest
from aiohttp.helpers import TimerNoop
from yarl import URL

from interpreters._redact import REDACTED, without_passwords
from interpreters.models._body import ERROR_BODY, AnswerTooLarge, Decoded, UnreadableAnswer

__all__ = [
    "AiohttpTransport",
    "HttpxTransport",
    "Proxy",
    "ProxyRefused",
    "ProxyRoutes",
    "named",
    "scrubbed",
]


class ProxyRefused(httpx.ProxyError):
    """The proxy answered the tunnel's CONNECT with an error (407: the credentials)."""


@dataclass(frozen=True)
class Proxy:
    """A proxy as an environment variable names it."""

    #: the proxy's URL without its credentials
    url: str
    #: the variable that named it (``HTTPS_PROXY``)
    variable: str
    #: ``Proxy-Authorization`` for the credentials the URL had
    authorization: str | None = None
    #: the password the URL had, or its user name when it had none (a token; never shown)
    password: str | None = None

    @functools.cached_property
    def headers(self) -> dict[str, str] | None:
        """What a request through it adds: the credentials, if any."""
        if self.authorization is None:
            return None
        return {"proxy-authorization": self.authorization}

    @functools.cached_property
    def secrets(self) -> tuple[str, ...]:
        """What never appears in an error, longest first: ``Proxy-Authorization``'s value, its
        base64 part (a proxy may quote it back in its answer) and the password."""
        if self.authorization is None:
            return ()
        found = (self.authorization, self.authorization.partition(" ")[2], self.password or "")
        return tuple(s for s in found if len(s) >= 4)

    def scrubbed(self, text: str) -> str:
        """``text`` without the proxy's credentials (an answer of its that quotes them)."""
        return scrubbed(text, self.secrets)


def scrubbed(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` replaced, the longest first: one that starts
    another would otherwise leave that one's tail to be read."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


class ProxyRoutes:
    """Which proxy a URL goes through, from the environment as it was when this was made:
    ``https_proxy`` for https URLs, ``http_proxy`` for http ones, ``all_proxy`` for both (the
    lower-case name first, then the upper-case one), none for a host ``no_proxy`` names (a
    name, a domain's suffix, ``*`` for every host)."""

    def __init__(self) -> None:
        found = urllib.request.getproxies_environment()
        self._bypass = [e.strip().lower() for e in found.get("no", "").split(",") if e.strip()]
        self._proxies: dict[str, Proxy] = {}
        #: why a scheme's proxy cannot be used (a socks5:// one), said when a URL would use it:
        #: a host no_proxy names is reached straight, whatever ALL_PROXY holds
        self._refused: dict[str, str] = {}
        for scheme in ("http", "https"):
            key = scheme if found.get(scheme) else "all"
            raw = found.get(key)
            if raw:
                try:
                    self._proxies[scheme] = _proxy(_variable(key, raw), raw)
                except ValueError as exc:
                    self._refused[scheme] = str(exc)
        #: each host's route, found once: its proxy, None (straight), or why it is refused
        self._routes: dict[tuple[str, str, int | None], Proxy | str | None] = {}

    @functools.cached_property
    def secrets(self) -> tuple[str, ...]:
        """The credentials of every proxy it routes through (:attr:`Proxy.secrets`)."""
        return tuple(s for proxy in self._proxies.values() for s in proxy.secrets)

    def scrubbed(self, text: str) -> str:
        """``text`` without any proxy's credentials (an answer of one that quotes them)."""
        return scrubbed(text, self.secrets)

    def _route(self, url: httpx.URL) -> Proxy | str | None:
        key = (url.scheme, url.host, url.port)
        if key not in self._routes:
            route: Proxy | str | None = self._proxies.get(url.scheme) or self._refused.get(
                url.scheme
            )
            if route is not None and any(_bypassed(url, entry) for entry in self._bypass):
                route = None
            self._routes[key] = route
        return self._routes[key]

    def refusal(self, url: httpx.URL) -> str | None:
        """Why ``url`` cannot be reached: the proxy it would go through is one opdsl cannot
        use (or its variable is malformed); None when it can be."""
        route = self._route(url)
        return route if isinstance(route, str) else None

    def __call__(self, url: httpx.URL) -> Proxy | None:
        route = self._route(url)
        if isinstance(route, str):
            raise httpx.ProxyError(route)  # never straight past the proxy the user set
        return route


def _variable(key: str, raw: str) -> str:
    """The name of the variable that gave ``raw`` for ``key`` (``https``): the lower-case one,
    read first, when it holds it, else the upper-case one."""
    lower = f"{key}_proxy"
    return lower if os.environ.get(lower) == raw else lower.upper()


def _bypassed(url: httpx.URL, entry: str) -> bool:
    """Whether ``no_proxy``'s ``entry`` names ``url``'s host: ``*``, the host itself or a
    domain above it (``example.com``, ``.example.com``), an address or a network
    (``10.0.0.0/8``), each maybe with a port (``host:8080``)."""
    if entry == "*":
        return True
    host = url.host.lower().rstrip(".")  # a fully qualified name's root: the same host
    name, _, port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
    if port and (url.port or _DEFAULT_PORTS.get(url.scheme)) != int(port):
        return False
    name = name.strip("[]").removeprefix("*").strip(".")
    if "/" in name:
        with contextlib.suppress(ValueError):
            return ipaddress.ip_address(host) in ipaddress.ip_network(name, strict=False)
        return False
    return host == name or host.endswith("." + name)


_DEFAULT_PORTS = {"http": 80, "https": 443}
"""The port of a URL that names none (httpx drops a default port it is given)."""


def _has_port(entry: str) -> bool:
    """Whether ``entry`` ends with ``:PORT`` (not an IPv6 address's last group)."""
    head, sep, tail = entry.rpartition(":")
    return (
        bool(sep) and tail.isascii() and tail.isdigit() and (head.endswith("]") or ":" not in head)
    )


def _without_token(shown: str) -> str:
    """``shown`` (a proxy's URL, its password redacted) with a user name that has no password
    redacted too: ``http://TOKEN@proxy``."""
    scheme, sep, rest = shown.partition("://")
    user, at, host = rest.rpartition("@")
    if not sep or not at or ":" in user:
        return shown
    return f"{scheme}://{REDACTED}@{host}"


def _proxy(variable: str, raw: str) -> Proxy:
    """A proxy's URL as a variable gives it (``proxy:3128`` is ``http://proxy:3128``)."""
    if "://" not in raw:
        raw = "http://" + raw
    # the password is never shown, whatever it holds (a "/", a space: a URL that does not
    # parse), nor a user name with no password (a token, as many proxies take one)
    shown = _without_token(without_passwords(raw))
    try:
        url = httpx.URL(raw)
    except httpx.InvalidURL:
        url = None
    if url is None or not url.host:
        raise ValueError(f"{variable}={shown!r} is not a proxy's URL")
    if url.scheme != "http":
        raise ValueError(
            f"{variable}={shown!r}: model calls go through http:// proxies only "
            "(the tunnel to an https server is made with CONNECT through them)"
        )
    if url.port is not None and not 0 < url.port < 65536:
        raise ValueError(f"{variable}={shown!r}: the port {url.port} is not 1 to 65535")
    authorization = password = None
    if url.username or url.password:
        pair = f"{url.username}:{url.password}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode()
        password = url.password or url.username or None  # a user name alone is a token
    if url.userinfo:
        url = url.copy_with(username=None, password=None)
    return Proxy(str(url).rstrip("/"), variable, authorization, password)


# -- asyncio: aiohttp's pool --------------------------------------------------------------------


@final
class _Due:
    """One exchange's deadline: the task it cancels when ``when`` comes, and how many
    cancels that task had been asked for before (to tell its own from the deadline's)."""

    __slots__ = ("cancelling", "ended", "fired", "task", "when")

    def __init__(self, task: asyncio.Task[Any], when: float) -> None:
        self.task = task
        self.when = when
        self.cancelling = task.cancelling()
        self.fired = False
        self.ended = False


@final
class _Deadlines:
    """The whole-call deadlines of one event loop's exchanges, on one timer of the loop's
    for all of them: set for the earliest, and on firing cancels the tasks whose deadline
    has come, then is set for the next. What ``asyncio.timeout`` does for each call, which
    makes a timer (a Python object pushed on the loop's heap) and a context manager's two
    coroutines for every call, a tenth of the transport's time for a call that takes 50 ms.

    A deadline is kept until its exchange ends (:meth:`end`); the timer is not moved back
    when the earliest one ends first, and fires for nothing then (once a deadline's length,
    at most), looking through the deadlines under way."""

    __slots__ = ("_due", "_loop", "_timer", "_timer_at")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        #: the deadlines under way (a dict as an ordered set)
        self._due: dict[_Due, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def start(self, task: asyncio.Task[Any], seconds: float) -> _Due:
        """``task`` is cancelled ``seconds`` from now unless :meth:`end` comes first."""
        due = _Due(task, self._loop.time() + seconds)
        self._due[due] = None
        if due.when < self._timer_at:
            self._set(due.when)
        return due

    def end(self, due: _Due) -> bool:
        """The exchange of ``due`` has ended: whether its deadline had come (its task's cancel
        was asked for, and is taken back here once, as ``asyncio.timeout`` does)."""
        if not due.ended:
            due.ended = True
            if due.fired:
                due.task.uncancel()
            else:
                self._due.pop(due, None)
        return due.fired

    def _set(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self._fire)
        self._timer_at = when

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        now = self._loop.time()
        come = [due for due in self._due if due.when <= now]
        for due in come:
            del self._due[due]
            due.fired = True
            due.task.cancel()
        if self._due:
            self._set(min(due.when for due in self._due))

    def close(self) -> None:
        """The transport is closed: its timer goes, unless a call is still under way (a
        connect aiohttp does not stop), whose deadline still holds."""
        if self._timer is not None and not self._due:
            self._timer.cancel()
            self._timer, self._timer_at = None, math.inf


class AiohttpTransport(httpx.AsyncBaseTransport):
    """httpx's transport interface over aiohttp's connection pool (its ``TCPConnector``): at
    most ``max_connections`` connections at once, kept alive between calls, through the
    proxies ``routes`` names. Made and used inside one running event loop.

    A request goes to the pool as ``ClientSession.request`` sends it (aiohttp's
    ``ClientRequest`` on a connection from the pool, its answer's head read), without what a
    model call never uses: cookies, redirects, auth from the URL or ``.netrc``, tracing and
    middlewares (they are a third of aiohttp's time for a call)."""

    def __init__(
        self, *, ssl_context: ssl.SSLContext, max_connections: int, routes: ProxyRoutes
    ) -> None:
        self._routes = routes
        self._ssl = ssl_context
        self._loop = asyncio.get_running_loop()
        self._connector = aiohttp.TCPConnector(limit=max_connections, ssl=ssl_context)
        # what the answers belong to (their charset, when one is asked for); never sends
        self._session = aiohttp.ClientSession(
            connector=self._connector, cookie_jar=aiohttp.DummyCookieJar()
        )
        self._urls: dict[str, URL] = {}
        self._timeouts: dict[tuple[float | None, float | None], aiohttp.ClientTimeout] = {}
        self._deadlines = _Deadlines(self._loop)

    def _url(self, url: httpx.URL) -> URL:
        text = str(url)
        parsed = self._urls.get(text)
        if parsed is None:
            parsed = URL(text, encoded=True)
            if len(self._urls) < 256:
                self._urls[text] = parsed
        return parsed

    def _connect_timeout(self, timeouts: dict[str, float | None]) -> aiohttp.ClientTimeout:
        """The wait for a free connection (httpx's ``pool``) and for a new one to open
        (``connect``), as aiohttp's timeout (one per pair of values)."""
        key = (timeouts.get("pool"), timeouts.get("connect"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            timeout = aiohttp.ClientTimeout(connect=key[0], sock_connect=key[1])
            if len(self._timeouts) < 64:
                self._timeouts[key] = timeout
        return timeout

    async def _open(
        self,
        method: str,
        url: httpx.URL,
        headers: Any,
        body: bytes,
        timeouts: dict[str, float | None],
    ) -> aiohttp.ClientResponse:
        """``body`` sent on a connection from the pool, and its answer's head read."""
        proxy = self._routes(url)
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        if proxy is not None and proxy.authorization is not None and url.scheme == "http":
            # aiohttp puts proxy_headers on a CONNECT only: a request the proxy forwards (no
            # tunnel, plain http) carries the credentials itself
            items = headers.items() if isinstance(headers, dict) else headers
            headers = [*items, ("proxy-authorization", proxy.authorization)]
        tunnelled = False  # a CONNECT's answer is the proxy's; after it, the server's
        try:
            request = ClientRequest(
                method,
                self._url(url),
                headers=headers,
                data=body or None,
                loop=self._loop,
                response_class=aiohttp.ClientResponse,
                timer=_NO_TIMER,
                session=self._session,
                ssl=self._ssl,
                traces=[],
                proxy=None if proxy is None else URL(proxy.url, encoded=True),
                proxy_headers=None if proxy is None else proxy.headers,
            )
            try:
                conn = await self._connector.connect(
                    request, traces=[], timeout=self._connect_timeout(timeouts)
                )
            except TimeoutError:  # the connector's own (the call's deadline is a cancel)
                raise aiohttp.ConnectionTimeoutError() from None
            tunnelled = url.scheme == "https"
            protocol = conn.protocol
            assert protocol is not None
            protocol.set_response_params(
                timer=_NO_TIMER,
                read_until_eof=True,
                auto_decompress=False,
                read_timeout=timeouts.get("read"),
            )
            try:
                answer = await request.send(conn)
                try:
                    await answer.start(conn)
                except BaseException:
                    answer.close()
                    raise
            except BaseException:
                conn.close()
                raise
        except aiohttp.ClientError as exc:
            failed = _translated(exc, url, proxy, at_proxy=proxy is not None and not tunnelled)
        else:
            if answer.status == 101:
                answer.close()
                raise httpx.RemoteProtocolError(
                    f"{url.host} upgraded the connection (101), which a model call never asks for"
                )
            return answer
        raise failed  # out of the except block: see _translated

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        headers = request.headers.multi_items()
        if "accept-encoding" not in request.headers:
            headers.append(_NO_ENCODING)
        answer = await self._open(
            request.method,
            request.url,
            headers,
            await request.aread(),
            request.extensions.get("timeout", {}),
        )
        return httpx.Response(
            status_code=answer.status,
            headers=answer.raw_headers,
            stream=_Answer(answer, request.url, self._routes(request.url)),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def exchange(
        self,
        url: httpx.URL,
        headers: dict[str, str],
        body: bytes,
        timeouts: dict[str, float | None],
        limit: int,
        seconds: float,
    ) -> tuple[int, Any, bytes]:
        """POST ``body`` and read the whole answer: its status, headers and body, decoded
        (:class:`~interpreters.models._body.Decoded`), all of it within ``seconds`` (else a
        ``TimeoutError``). An answer over ``limit`` decoded bytes raises
        :class:`AnswerTooLarge`; an error answer (400 and up) is read no further than
        :data:`ERROR_BODY` bytes. What a call that does not stream needs, without httpx's
        request and response objects."""
        headers.setdefault(*_NO_ENCODING)
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a model call over aiohttp must be made inside an asyncio task")
        # asyncio.timeout(seconds), on the loop's one timer for every call's deadline
        due = self._deadlines.start(task, seconds)
        try:
            answer = await self._open("POST", url, headers, body, timeouts)
            whole = False
            try:
                encoding = answer.headers.get("content-encoding", "").encode("latin-1")
                try:
                    if answer.status >= 400:
                        data = await _read(answer, encoding, min(limit, ERROR_BODY), cut=True)
                    else:
                        data = await _read(answer, encoding, limit)
                        whole = True
                except aiohttp.ClientError as exc:
                    failed = _translated(exc, url, self._routes(url), answered=True)
                else:
                    return answer.status, answer.headers, data
                raise failed  # out of the except block: see _translated
            finally:
                if whole:
                    answer.release()
                else:
                    answer.close()
        except asyncio.CancelledError as cancelled:
            if self._deadlines.end(due) and task.cancelling() <= due.cancelling:
                raise TimeoutError from cancelled  # the deadline's cancel, no other
            raise
        finally:
            self._deadlines.end(due)

    async def aclose(self) -> None:
        self._deadlines.close()
        await self._session.close()


_NO_TIMER = TimerNoop()
_NO_ENCODING = ("accept-encoding", "identity")
"""opdsl asks for no encoding (it reads gzip and deflate all the same, within its cap)."""


async def _read(
    answer: aiohttp.ClientResponse, encoding: bytes, limit: int, *, cut: bool = False
) -> bytes:
    """The answer's body, decoded, at most ``limit`` bytes: over it, :class:`AnswerTooLarge`
    (or, with ``cut``, its first ``limit`` bytes, the rest unread)."""
    content = answer.content
    if not encoding and not cut:  # as it comes: no copy of a body that came in one piece
        if answer.content_length is not None and answer.content_length <= limit:
            return await answer.read()
        chunks: list[bytes] = []
        size = 0
        while chunk := await content.readany():
            size += len(chunk)
            if size > limit:
                raise AnswerTooLarge(limit)
            chunks.append(chunk)
        return b"".join(chunks)
    out = bytearray()
    try:
        decoder = Decoded(encoding, limit, cut=cut)
        while not decoder.full:
            chunk = await content.readany()
            if not chunk:
                out += decoder.end()
                break
            out += decoder.feed(chunk)
    except UnreadableAnswer:
        if not cut:
            raise
        # an error answer: its status is what matters, whatever its body's encoding
    return bytes(out)


class _Answer(httpx.AsyncByteStream):
    """An answer's body as it arrives; closing it returns its connection to the pool (or,
    read only in part, closes it)."""

    def __init__(self, answer: aiohttp.ClientResponse, url: httpx.URL, proxy: Proxy | None) -> None:
        self._answer = answer
        self._url = url
        self._proxy = proxy
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        content = self._answer.content
        try:
            while chunk := await content.readany():
                yield chunk
        except aiohttp.ClientError as exc:
            failed = _translated(exc, self._url, self._proxy, answered=True)
        else:
            self._done = True
            return
        raise failed  # out of the except block: see _translated

    async def aclose(self) -> None:
        if self._done:
            self._answer.release()
        else:
            self._answer.close()


def _translated(
    error: aiohttp.ClientError,
    url: httpx.URL,
    proxy: Proxy | None,
    *,
    answered: bool = False,
    at_proxy: bool = False,
) -> httpx.TransportError:
    """aiohttp's ``error`` as httpx's, saying what went wrong: the proxy named (without its
    credentials) where it is what failed (``at_proxy``: its answer to a CONNECT, or to a
    request it forwards), and nothing it quoted of them.

    The error is returned, for the caller to raise outside its ``except`` block: raised in
    it, it would keep aiohttp's as its ``__context__`` (``from None`` only hides it), and
    that one's ``request_info`` holds the ``Proxy-Authorization`` header."""
    where = f"{url.host}:{url.port or _DEFAULT_PORTS.get(url.scheme, 80)}"
    via = "" if proxy is None else f" through the proxy {named(proxy)}"
    kind: type[httpx.TransportError] = httpx.RemoteProtocolError
    match error:
        case aiohttp.ClientHttpProxyError():
            kind = ProxyRefused
            said = f"the proxy {named(proxy)} refused the tunnel to {where}: {error.status}"
            said += f" {error.message}"
        case aiohttp.ClientProxyConnectionError():
            kind = httpx.ProxyError
            said = f"cannot connect to the proxy {named(proxy)}: {_os_error(error)}"
        case aiohttp.ClientConnectorError():  # a TLS handshake's failure is one too
            kind = httpx.ConnectError
            said = f"cannot connect to {where}{via}: {_os_error(error)}"
        case aiohttp.ConnectionTimeoutError():
            kind = httpx.ConnectTimeout
            said = f"cannot connect to {where}{via} in time"
        case aiohttp.ServerTimeoutError():
            kind = httpx.ReadTimeout
            said = f"no answer from {where} in time"
        case aiohttp.ServerDisconnectedError() if at_proxy and not answered:
            said = f"the proxy {named(proxy)} closed the connection unanswered"
            said += f", on the way to {where}"
        case aiohttp.ServerDisconnectedError():
            said = f"{where} closed the connection {'mid-answer' if answered else 'unanswered'}"
        case aiohttp.ClientPayloadError():
            said = (
                "the answer's body is broken or was cut short (the server closed the "
                f"connection mid-answer?): {_cause(error)}"
            )
        case aiohttp.ClientResponseError():  # the parser's: not HTTP, a head too long, ...
            told = " ".join(str(error.message).split())[:200]
            said = f"a malformed answer: {told}"
            if at_proxy and not answered:
                said = f"a malformed answer from the proxy {named(proxy)}, on the way to "
                said += f"{where}: {told}"
        case aiohttp.InvalidURL() | aiohttp.NonHttpUrlClientError():
            kind = httpx.UnsupportedProtocol
            said = f"not a URL opdsl can send to: {error}"
        case aiohttp.ClientOSError():
            kind = httpx.ReadError
            said = f"the connection to {where}{via} failed: {_os_error(error)}"
        case _:
            kind = httpx.TransportError
            said = f"{type(error).__name__}: {error}"
    return kind(said if proxy is None else proxy.scrubbed(said))


def named(proxy: Proxy | None) -> str:
    """How errors name a proxy: its URL without credentials, and the variable that named it."""
    return "" if proxy is None else f"{proxy.url} ({proxy.variable})"


def _os_error(exc: aiohttp.ClientOSError) -> str:
    error = getattr(exc, "os_error", None) or exc
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    return str(getattr(cause, "message", None) or cause)


# -- elsewhere (trio): httpx's own --------------------------------------------------------------


class HttpxTransport(httpx.AsyncBaseTransport):
    """httpx's own transport, one per proxy (and one for the URLs that go direct)."""

    def __init__(
        self, *, ssl_context: ssl.SSLContext, limits: httpx.Limits, routes: ProxyRoutes
    ) -> None:
        self._ssl = ssl_context
        self._limits = limits
        self._routes = routes
        self._direct = httpx.AsyncHTTPTransport(limits=limits, trust_env=False, verify=ssl_context)
        self._proxied: dict[str, httpx.AsyncHTTPTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        proxy = self._routes(request.url)
        if proxy is None:
            return await self._direct.handle_async_request(request)
        transport = self._proxied.get(proxy.url)
        if transport is None:
            headers = proxy.headers or {}
            transport = self._proxied[proxy.url] = httpx.AsyncHTTPTransport(
                limits=self._limits,
                trust_env=False,
                verify=self._ssl,
                proxy=httpx.Proxy(proxy.url, headers=headers),
            )
        failed: httpx.TransportError
        try:
            return await transport.handle_async_request(request)
        except httpx.ProxyError as exc:  # httpx's: the proxy answered CONNECT with an error
            said = proxy.scrubbed(str(exc))  # its answer may quote the credentials
            failed = ProxyRefused(f"the proxy {named(proxy)} refused the tunnel: {said}")
        except httpx.ConnectError as exc:
            said = proxy.scrubbed(str(exc))
            failed = httpx.ProxyError(f"cannot connect through the proxy {named(proxy)}: {said}")
        except httpx.RemoteProtocolError as exc:  # the proxy's answer, or the server's through it
            said = proxy.scrubbed(str(exc))
            failed = httpx.RemoteProtocolError(f"{said} (through the proxy {named(proxy)})")
        # raised out of the except blocks: httpx's errors stay off the chain (__context__)
        raise failed

    async def aclose(self) -> None:
        for transport in (self._direct, *self._proxied.values()):
            await transport.aclose()


def ssl_environment() -> tuple[str | None, str | None]:
    """``SSL_CERT_FILE`` and ``SSL_CERT_DIR``: where the default TLS context finds its CAs."""
    return os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
