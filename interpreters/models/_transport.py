"""What carries a model call's bytes, under httpx's transport interface: aiohttp's connection
pool on asyncio (:class:`AiohttpTransport`), httpx's own under trio; and the proxy each URL
goes through (:class:`ProxyRoutes`: ``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``,
``NO_PROXY``, as curl and every HTTP library read them).

The providers are written against httpx (requests, responses, byte streams); the adapter
hands each request to an ``aiohttp.ClientSession`` made for it (no cookie jar, no redirects,
no decoding: opdsl decodes and caps an answer itself) and gives aiohttp's answer back as an
``httpx.Response``. aiohttp's errors become httpx's, each saying what went wrong in words:

- a server that cannot be reached, or a TLS handshake refused: :class:`httpx.ConnectError`
  (a proxy that cannot be reached or that refuses the tunnel: :class:`httpx.ProxyError`);
- no connection in time: :class:`httpx.ConnectTimeout`; no bytes in time:
  :class:`httpx.ReadTimeout`;
- an answer that is not HTTP, a head too long, a body cut short, a connection closed before
  the answer: :class:`httpx.RemoteProtocolError`;
- a URL that is not http or https: :class:`httpx.UnsupportedProtocol`.

A call that does not stream may skip httpx's objects altogether (:meth:`AiohttpTransport.
exchange`): what it needs is the status, the headers and the whole body.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import ssl
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
from yarl import URL

from interpreters._redact import Redactor
from interpreters.models._body import ERROR_BODY, AnswerTooLarge, Decoded, UnreadableAnswer

__all__ = ["AiohttpTransport", "HttpxTransport", "Proxy", "ProxyRoutes"]

_SCRUB = Redactor()


@dataclass(frozen=True)
class Proxy:
    """A proxy as an environment variable names it."""

    #: the proxy's URL without its credentials
    url: str
    #: the variable that named it (``HTTPS_PROXY``)
    variable: str
    #: ``Proxy-Authorization`` for the credentials the URL had
    authorization: str | None = None
    #: the password the URL had (never shown)
    password: str | None = None

    @property
    def shown(self) -> str:
        """How errors name it: its URL, without credentials."""
        return self.url


class ProxyRoutes:
    """Which proxy a URL goes through, from the environment as it was when this was made:
    ``https_proxy`` for https URLs, ``http_proxy`` for http ones, ``all_proxy`` for both (the
    lower-case name first, then the upper-case one), none for a host ``no_proxy`` names (a
    name, a domain's suffix, ``*`` for every host)."""

    def __init__(self) -> None:
        found = urllib.request.getproxies_environment()
        self._bypass = [e.strip().lower() for e in found.get("no", "").split(",") if e.strip()]
        self._proxies: dict[str, Proxy] = {}
        for scheme in ("http", "https"):
            raw = found.get(scheme) or found.get("all")
            if raw:
                name = f"{scheme if found.get(scheme) else 'all'}_proxy".upper()
                self._proxies[scheme] = _proxy(name, raw)
        self._routes: dict[tuple[str, str, int | None], Proxy | None] = {}

    @property
    def secrets(self) -> list[str]:
        """The proxies' passwords: never in an error."""
        return [p.password for p in self._proxies.values() if p.password]

    def __call__(self, url: httpx.URL) -> Proxy | None:
        key = (url.scheme, url.host, url.port)
        if key not in self._routes:
            proxy = self._proxies.get(url.scheme)
            if proxy is not None and any(_bypassed(url, entry) for entry in self._bypass):
                proxy = None
            self._routes[key] = proxy
        return self._routes[key]


def _bypassed(url: httpx.URL, entry: str) -> bool:
    """Whether ``no_proxy``'s ``entry`` names ``url``'s host: ``*``, the host itself or a
    domain above it (``example.com``, ``.example.com``), an address or a network
    (``10.0.0.0/8``), each maybe with a port (``host:8080``)."""
    if entry == "*":
        return True
    host = url.host.lower()
    name, _, port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
    if port and url.port != int(port):
        return False
    name = name.strip("[]").removeprefix("*").lstrip(".")
    if "/" in name:
        with contextlib.suppress(ValueError):
            return ipaddress.ip_address(host) in ipaddress.ip_network(name, strict=False)
        return False
    return host == name or host.endswith("." + name)


def _has_port(entry: str) -> bool:
    """Whether ``entry`` ends with ``:PORT`` (not an IPv6 address's last group)."""
    head, sep, tail = entry.rpartition(":")
    return bool(sep) and tail.isdigit() and (head.endswith("]") or ":" not in head)


def _proxy(variable: str, raw: str) -> Proxy:
    """A proxy's URL as a variable gives it (``proxy:3128`` is ``http://proxy:3128``)."""
    if "://" not in raw:
        raw = "http://" + raw
    try:
        url = httpx.URL(raw)
    except httpx.InvalidURL:
        url = None
    if url is None or not url.host:
        raise ValueError(f"{variable}={_SCRUB(raw)!r} is not a proxy's URL")
    if url.scheme != "http":
        raise ValueError(
            f"{variable}={_SCRUB(raw)!r}: model calls go through http:// proxies only "
            "(the tunnel to an https server is made with CONNECT through them)"
        )
    authorization = password = None
    if url.username or url.password:
        pair = f"{url.username}:{url.password}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode()
        password = url.password or None
        url = url.copy_with(username=None, password=None)
    return Proxy(str(url).rstrip("/"), variable, authorization, password)


# -- asyncio: aiohttp's pool --------------------------------------------------------------------


class AiohttpTransport(httpx.AsyncBaseTransport):
    """httpx's transport interface over an ``aiohttp.ClientSession``: at most
    ``max_connections`` connections at once, kept alive between calls, through the proxies
    ``routes`` names. Made and used inside one running event loop."""

    def __init__(
        self, *, ssl_context: ssl.SSLContext, max_connections: int, routes: ProxyRoutes
    ) -> None:
        self._routes = routes
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections, ssl=ssl_context),
            cookie_jar=aiohttp.DummyCookieJar(),
            # opdsl sends its own user agent, and asks for no encoding (it reads gzip and
            # deflate all the same, within its cap)
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
            auto_decompress=False,
            trust_env=False,  # the routes read the environment, once
            timeout=aiohttp.ClientTimeout(total=None),
        )
        self._urls: dict[str, URL] = {}

    def _url(self, url: httpx.URL | str) -> URL:
        text = str(url)
        parsed = self._urls.get(text)
        if parsed is None:
            parsed = URL(text, encoded=True)
            if len(self._urls) < 256:
                self._urls[text] = parsed
        return parsed

    async def _request(
        self,
        method: str,
        url: httpx.URL,
        headers: Any,
        body: bytes,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        proxy = self._routes(url)
        with _errors(url, proxy):
            if url.scheme not in ("http", "https"):
                raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
            answer = await self._session.request(
                method,
                self._url(url),
                headers=headers,
                data=body or None,
                allow_redirects=False,
                timeout=timeout,
                proxy=None if proxy is None else proxy.url,
                proxy_headers=(
                    None
                    if proxy is None or proxy.authorization is None
                    else {"proxy-authorization": proxy.authorization}
                ),
            )
        if answer.status == 101:
            answer.close()
            raise httpx.RemoteProtocolError(
                f"{url.host} upgraded the connection (101), which a model call never asks for"
            )
        return answer

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        answer = await self._request(
            request.method,
            request.url,
            request.headers.multi_items(),
            await request.aread(),
            _timeout(timeouts),
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
        answer = await self._request("POST", url, headers, body, _timeout(timeouts, seconds))
        whole = False
        try:
            encoding = answer.headers.get("content-encoding", "").encode("latin-1")
            with _errors(url, self._routes(url), answered=True):
                if answer.status >= 400:
                    data = await _read(answer, encoding, min(limit, ERROR_BODY), cut=True)
                else:
                    data = await _read(answer, encoding, limit)
                    whole = True
            return answer.status, answer.headers, data
        finally:
            if whole:
                answer.release()
            else:
                answer.close()

    async def aclose(self) -> None:
        await self._session.close()


def _timeout(timeouts: dict[str, float | None], total: float | None = None) -> Any:
    return aiohttp.ClientTimeout(
        total=total,
        connect=timeouts.get("pool"),
        sock_connect=timeouts.get("connect"),
        sock_read=timeouts.get("read"),
    )


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
        with _errors(self._url, self._proxy, answered=True):
            while chunk := await content.readany():
                yield chunk
        self._done = True

    async def aclose(self) -> None:
        if self._done:
            self._answer.release()
        else:
            self._answer.close()


@contextlib.contextmanager
def _errors(url: httpx.URL, proxy: Proxy | None, *, answered: bool = False) -> Iterator[None]:
    """aiohttp's errors as httpx's, saying what went wrong (a proxy named without its
    credentials)."""
    where = f"{url.host}:{url.port or (443 if url.scheme == 'https' else 80)}"
    via = "" if proxy is None else f" through the proxy {proxy.shown} ({proxy.variable})"
    try:
        yield
    except aiohttp.ClientHttpProxyError as exc:
        raise httpx.ProxyError(
            f"the proxy {proxy.shown if proxy else ''} refused the tunnel to {where}: "
            f"{exc.status} {exc.message}"
        ) from None
    except aiohttp.ClientProxyConnectionError as exc:
        raise httpx.ProxyError(
            f"cannot connect to the proxy {proxy.shown if proxy else ''}: {_os_error(exc)}"
        ) from None
    except aiohttp.ClientSSLError as exc:
        raise httpx.ConnectError(f"cannot connect to {where}{via}: {_os_error(exc)}") from None
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(f"cannot connect to {where}{via}: {_os_error(exc)}") from None
    except aiohttp.ConnectionTimeoutError:
        raise httpx.ConnectTimeout(f"cannot connect to {where}{via} in time") from None
    except aiohttp.ServerTimeoutError:
        raise httpx.ReadTimeout(f"no answer from {where} in time") from None
    except aiohttp.ServerDisconnectedError:
        what = "mid-answer" if answered else "unanswered"
        raise httpx.RemoteProtocolError(f"{where} closed the connection {what}") from None
    except aiohttp.ClientPayloadError as exc:
        raise httpx.RemoteProtocolError(
            f"the answer's body is broken or was cut short (the server closed the connection "
            f"mid-answer?): {_cause(exc)}"
        ) from None
    except aiohttp.ClientResponseError as exc:  # the parser's: not HTTP, a head too long, ...
        said = " ".join(str(exc.message).split())
        raise httpx.RemoteProtocolError(f"a malformed answer: {said[:200]}") from None
    except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as exc:
        raise httpx.UnsupportedProtocol(f"not a URL opdsl can send to: {exc}") from None
    except aiohttp.ClientOSError as exc:
        raise httpx.ReadError(f"the connection to {where}{via} failed: {_os_error(exc)}") from None
    except aiohttp.ClientError as exc:
        raise httpx.TransportError(f"{type(exc).__name__}: {exc}") from None


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
            headers = (
                {} if proxy.authorization is None else {"proxy-authorization": proxy.authorization}
            )
            transport = self._proxied[proxy.url] = httpx.AsyncHTTPTransport(
                limits=self._limits,
                trust_env=False,
                verify=self._ssl,
                proxy=httpx.Proxy(proxy.url, headers=headers),
            )
        try:
            return await transport.handle_async_request(request)
        except httpx.ProxyError as exc:
            raise httpx.ProxyError(f"the proxy {proxy.shown} ({proxy.variable}): {exc}") from None
        except httpx.ConnectError as exc:
            raise httpx.ProxyError(
                f"cannot connect through the proxy {proxy.shown} ({proxy.variable}): {exc}"
            ) from None

    async def aclose(self) -> None:
        for transport in (self._direct, *self._proxied.values()):
            await transport.aclose()


def ssl_environment() -> tuple[str | None, str | None]:
    """``SSL_CERT_FILE`` and ``SSL_CERT_DIR``: where the default TLS context finds its CAs."""
    return os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
