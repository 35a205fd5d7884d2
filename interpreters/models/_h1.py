"""opdsl's own HTTP/1.1 transport for asyncio, under httpx's API.

A model call is one POST to a fixed URL, answered with JSON or a stream of server-sent events.
This transport does that and no more: a pool of keep-alive connections per origin (asyncio
protocols, one request at a time on each), requests written in one write, answers parsed by
llhttp (``httptools``, the parser Node.js uses). It has no cookies, redirects, proxies,
HTTP/2 or upgrades; httpx's client is for those. Measured with ``bench/concurrency.py``, a
thousand runs over it, the interpreter included, take less time than a bare aiohttp client
making the same requests: the client is not the reason they are slow.

It speaks httpx's transport interface (``handle_async_request``), so the providers, their
streaming, retries, size caps and cancellation are written against httpx as before.

- Time limits are httpx's: ``connect`` (opening a connection, TLS included), ``pool`` (waiting
  for a free connection), ``read`` (the longest wait for the next bytes of an answer). A
  request goes to the socket's buffer at once, so ``write`` has nothing to bound: a server
  that does not take it never answers, and ``read`` ends the wait.
- A connection is reused only after its answer was read to the end and neither side asked to
  close it; an answer abandoned half-way (cancelled, cut at a size cap) closes its connection.
- An answer larger than the reader takes in pauses reading from the socket until it catches up.
- Malformed answers (a bad status line, a bad chunk, a body cut short, a head over 64 KiB)
  are :class:`httpx.RemoteProtocolError`; the connection is closed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httptools
import httpx

__all__ = ["ERROR_BODY", "AnswerTooLarge", "Decoded", "H1Transport", "UnreadableAnswer"]

_HIGH_WATER = 256 * 1024
"""Bytes of an answer held unread before reading from its socket pauses."""

_MAX_HEAD = 64 * 1024
"""The most bytes an answer's status line and headers may take."""

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""What a header's name may be made of (RFC 9110's token)."""

_IDLE_EXPIRY = 30.0
"""Seconds an unused keep-alive connection is kept."""

_Origin = tuple[str, str, int]


class AnswerTooLarge(Exception):
    """An answer went past the most bytes its reader takes."""


class UnreadableAnswer(Exception):
    """An answer's body is in an encoding opdsl cannot read within its cap, or is broken."""


ERROR_BODY = 64 * 1024
"""The most bytes of an error answer read: its message is in its first bytes; the rest of it
is not read (its connection is closed)."""


class Decoded:
    """An answer's body decoded as it arrives (its ``content-encoding``: gzip, deflate, or
    several in turn), never more than ``limit`` decoded bytes in all: a piece that would
    decode past the cap raises :class:`AnswerTooLarge` having made at most one byte over it,
    however small the piece (a few KiB of gzip can hold gigabytes); with ``cut``, the answer is
    cut at the cap instead and :attr:`full` is set. An encoding that cannot be decoded so (br,
    zstd: opdsl asks for none), or a broken one, raises :class:`UnreadableAnswer`."""

    __slots__ = ("_cut", "_left", "_names", "_stages", "_unsure", "full")

    def __init__(self, encoding: bytes, limit: int, *, cut: bool = False) -> None:
        self._cut = cut
        #: the cap was reached (``cut``): what comes after it is dropped
        self.full = False
        self._stages: list[Any] = []  # zlib decompressors, in the order they are undone
        self._names: list[str] = []
        #: per stage, while a deflate stage's form (zlib's, or raw) is not yet known: the
        #: bytes fed so far, to feed again as raw deflate (some servers send it so)
        self._unsure: list[bytes | None] = []
        for coding in reversed([c.strip().lower() for c in encoding.split(b",")]):
            if coding in (b"", b"identity"):
                continue
            if coding in (b"gzip", b"x-gzip"):
                self._stages.append(zlib.decompressobj(zlib.MAX_WBITS | 16))
                self._unsure.append(None)
                self._names.append("gzip")
            elif coding == b"deflate":
                self._stages.append(zlib.decompressobj())
                self._unsure.append(b"")
                self._names.append("deflate")
            else:
                name = coding.decode("latin-1")[:40]
                raise UnreadableAnswer(
                    f"the answer is encoded as {name!r}, which opdsl did not ask for and cannot "
                    "read within its size cap"
                )
        #: the decoded bytes each stage may still make (the last one's are the answer's)
        self._left = [limit] * max(1, len(self._stages))

    def feed(self, data: bytes) -> bytes:
        """The decoded bytes of the next piece of the body."""
        if not self._stages:
            return self._count(0, data)
        for i in range(len(self._stages)):
            if not data:
                break
            data = self._inflate(i, data)
        return data

    def end(self) -> bytes:
        """What is left in the decoders once the body has ended."""
        data = b""
        for i, stage in enumerate(self._stages):
            if data:
                data = self._inflate(i, data)
            data += self._count(i, stage.flush())
        return data

    def _inflate(self, i: int, data: bytes) -> bytes:
        unsure = self._unsure[i]
        try:
            out: bytes = self._stages[i].decompress(data, self._left[i] + 1)
        except zlib.error as exc:
            if unsure is None:
                raise UnreadableAnswer(
                    f"the answer's {self._names[i]} encoding is broken ({exc})"
                ) from None
            self._stages[i] = zlib.decompressobj(-zlib.MAX_WBITS)
            self._unsure[i] = None
            return self._inflate(i, unsure + data)
        if unsure is not None:
            # a zlib header passed its check, or the bytes so far already decoded
            self._unsure[i] = None if out or len(unsure) + len(data) >= 2 else unsure + data
        return self._count(i, out)

    def _count(self, i: int, out: bytes) -> bytes:
        self._left[i] -= len(out)
        if self._left[i] < 0:
            if not self._cut:
                raise AnswerTooLarge()
            out, self._left[i], self.full = out[: len(out) + self._left[i]], 0, True
        return out


class _Unasked(Exception):
    """The server sent more than the answer to the request it was sent."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: one request, then its answer, at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: _Origin) -> None:
        self.loop = loop
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.in_flight = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head = self.loop.create_future()
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.complete = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.keep_alive = False
        self.head_bytes = 0

    # -- the protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.in_flight:  # bytes nobody asked for: the connection cannot be trusted
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except _Unasked:  # the answer stands; the connection is not used again
            self.keep_alive = False
            self.close()
            return
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError("the server upgraded the connection"))
            return
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"a malformed answer: {exc}"))
            return
        if not self.head.done():  # every byte so far is the head's
            self.head_bytes += len(data)
            if self.head_bytes > _MAX_HEAD:
                self._fail(
                    httpx.RemoteProtocolError(f"the answer's head is over {_MAX_HEAD:,} bytes")
                )

    def eof_received(self) -> bool | None:
        self._ended()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._ended()

    def _ended(self) -> None:
        """The server closed the connection: the end of an answer read until close, or a cut."""
        if self.complete or self.error is not None:
            return
        if self.head.done() and self._until_close():
            self.on_message_complete()
        elif self.head.done():
            self._fail(httpx.RemoteProtocolError("the server closed the connection mid-answer"))
        else:
            self._fail(httpx.RemoteProtocolError("the server closed the connection unanswered"))

    def _until_close(self) -> bool:
        """Whether this answer's body ends when the connection does (no length, not chunked)."""
        names = {name.lower() for name, _ in self.headers}
        return b"content-length" not in names and b"transfer-encoding" not in names

    # -- the parser's callbacks --------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # a second answer to one request
            raise _Unasked()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        if 100 <= self.status < 200:  # an interim answer: the real one follows
            self.headers = []
            return
        if not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if 100 <= self.status < 200:
            return
        self.complete = True
        self._wake()

    # -- the request's side ------------------------------------------------------------------

    def _fail(self, error: Exception) -> None:
        if self.error is None and not self.complete:
            self.error = error
        if not self.head.done():
            self.head.set_exception(error)
            self.head.exception()  # retrieved: a request that gave up does not warn
        self._wake()
        self.close()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.in_flight = True
        self.transport.write(data)

    async def read_head(self, read_timeout: float | None, deadline: float | None) -> None:
        await _within(self.loop, self.head, read_timeout, deadline)

    async def next_chunk(
        self, read_timeout: float | None, deadline: float | None = None
    ) -> bytes | None:
        """The next piece of the body, or None at its end."""
        while True:
            if self.chunks:
                chunk = self.chunks.popleft()
                self.buffered -= len(chunk)
                if self.paused and self.buffered <= _HIGH_WATER // 4 and self.transport:
                    self.paused = False
                    self.transport.resume_reading()
                return chunk
            if self.error is not None:
                raise self.error
            if self.complete:
                return None
            self.waiter = self.loop.create_future()
            try:
                await _within(self.loop, self.waiter, read_timeout, deadline)
            finally:
                self.waiter = None

    def reusable(self) -> bool:
        return (
            self.complete
            and self.error is None
            and self.keep_alive
            and not self.closed
            and self.transport is not None
            and not self.transport.is_closing()
        )


def _expire(future: asyncio.Future[Any], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)


async def _within(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    seconds: float | None,
    deadline: float | None,
    late: Callable[[], Exception] = lambda: httpx.ReadTimeout("no answer in time"),
) -> None:
    """Wait for ``future``: ``late()`` after ``seconds`` without it, a TimeoutError at
    ``deadline`` (``time.monotonic()``), whichever comes first."""
    if future.done():
        future.result()
        return
    wait, error = _bound(seconds, deadline)
    timer = None
    if wait is not None:
        timer = loop.call_later(wait, _expire, future, error or late())
    try:
        await future
    finally:
        if timer is not None:
            timer.cancel()


def _bound(seconds: float | None, deadline: float | None) -> tuple[float | None, Exception | None]:
    """How long the next wait may take, and the error its end is when the deadline ends it
    (None: the wait's own timeout ends it)."""
    if deadline is None:
        return seconds, None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the call's deadline has passed")
    if seconds is None or left < seconds:
        return left, TimeoutError("the call's deadline has passed")
    return seconds, None


def _no_free_connection() -> Exception:
    return httpx.PoolTimeout("no free connection within the pool timeout")


class _Slots:
    """At most ``n`` connections in use; the others wait in turn."""

    __slots__ = ("free", "waiting")

    def __init__(self, n: int) -> None:
        self.free = n
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    async def take(self, seconds: float | None, deadline: float | None) -> None:
        if self.free > 0 and not self.waiting:
            self.free -= 1
            return
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        self.waiting.append(turn)
        try:
            await _within(loop, turn, seconds, deadline, _no_free_connection)
        except BaseException:
            if turn.done() and not turn.cancelled() and turn.exception() is None:
                self.give()  # handed a slot just as it gave up: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self.waiting.remove(turn)
            raise

    def give(self) -> None:
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot passes to it
                return
        self.free += 1


class _Answer(httpx.AsyncByteStream):
    """An answer's body as it arrives; closing it returns its connection to the pool."""

    def __init__(self, pool: H1Transport, conn: _Connection, read_timeout: float | None) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self._read_timeout = read_timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        while (chunk := await conn.next_chunk(self._read_timeout)) is not None:
            yield chunk
        await self.aclose()

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool._release(conn)


class H1Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio with a keep-alive pool; at most ``max_connections`` at once."""

    def __init__(self, *, ssl_context: ssl.SSLContext, max_connections: int = 256) -> None:
        self._ssl = ssl_context
        self._slots = _Slots(max_connections)
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        data = _wire(request.method, request.url, request.headers.raw, await request.aread())
        conn = await self._start(request.url, data, timeouts)
        return httpx.Response(
            status_code=conn.status,
            headers=conn.headers,
            stream=_Answer(self, conn, timeouts.get("read")),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def exchange(
        self,
        url: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        timeouts: dict[str, float | None],
        limit: int,
        deadline: float | None = None,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """POST ``body`` and read the whole answer: its status, headers and body, decoded
        (:class:`Decoded`). An answer over ``limit`` decoded bytes raises
        :class:`AnswerTooLarge`; an error answer (status 400 and up) is read no further than
        :data:`ERROR_BODY` bytes (or ``limit``); one not read whole by ``deadline``
        (``time.monotonic()``) raises :class:`TimeoutError`.

        What a model call that does not stream needs, without building httpx's request and
        response objects (a fifth of a call's time at a thousand runs)."""
        data = _wire(b"POST", url, headers, body)
        conn = await self._start(url, data, timeouts, deadline)
        read_timeout = timeouts.get("read")
        try:
            encoding = b",".join(v for k, v in conn.headers if k.lower() == b"content-encoding")
            if conn.status >= 400:
                cut = min(limit, ERROR_BODY)
                return (
                    conn.status,
                    conn.headers,
                    await _read(conn, encoding, cut, read_timeout, deadline, cut=True),
                )
            return (
                conn.status,
                conn.headers,
                await _read(conn, encoding, limit, read_timeout, deadline),
            )
        finally:
            self._release(conn)

    async def _start(
        self,
        url: httpx.URL,
        data: bytes,
        timeouts: dict[str, float | None],
        deadline: float | None = None,
    ) -> _Connection:
        """A connection from the pool with ``data`` sent on it and its answer's head read."""
        if self._closed:
            raise httpx.ConnectError("the transport is closed")
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}")
        origin = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        await self._slots.take(timeouts.get("pool"), deadline)
        conn: _Connection | None = None
        try:
            conn = await self._connection(origin, timeouts.get("connect"), deadline)
            conn.send(data)
            await conn.read_head(timeouts.get("read"), deadline)
        except BaseException:
            if conn is not None:
                conn.close()
                self._open.discard(conn)
            self._slots.give()
            raise
        return conn

    async def _connection(
        self, origin: _Origin, connect_timeout: float | None, deadline: float | None
    ) -> _Connection:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < _IDLE_EXPIRY:
                conn._reset()
                return conn
            conn.close()
            self._open.discard(conn)
        loop = asyncio.get_running_loop()
        scheme, host, port = origin
        tls = self._ssl if scheme == "https" else None
        wait, error = _bound(connect_timeout, deadline)
        try:
            async with asyncio.timeout(wait):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop, origin),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls else None,
                )
        except TimeoutError:
            if error is not None:
                raise error from None
            raise httpx.ConnectTimeout(f"cannot connect to {host}:{port} in time") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from None
        self._open.add(conn)
        return conn

    def _release(self, conn: _Connection) -> None:
        conn.in_flight = False
        if conn.reusable() and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            conn.close()
            self._open.discard(conn)
        self._slots.give()

    async def aclose(self) -> None:
        self._closed = True
        for conn in self._open:
            conn.close()
        self._open.clear()
        self._idle.clear()


async def _read(
    conn: _Connection,
    encoding: bytes,
    limit: int,
    read_timeout: float | None,
    deadline: float | None,
    *,
    cut: bool = False,
) -> bytes:
    """The body on ``conn``, decoded, at most ``limit`` bytes: over it, :class:`AnswerTooLarge`
    (or, with ``cut``, the first ``limit`` bytes, the rest unread)."""
    if not encoding and not cut:  # as it comes: no copy of a body that came in one piece
        chunks: list[bytes] = []
        size = 0
        while (chunk := await conn.next_chunk(read_timeout, deadline)) is not None:
            size += len(chunk)
            if size > limit:
                raise AnswerTooLarge(limit)
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    out = bytearray()
    try:
        decoder = Decoded(encoding, limit, cut=cut)
        while not decoder.full:
            chunk = await conn.next_chunk(read_timeout, deadline)
            if chunk is None:
                out += decoder.end()
                break
            out += decoder.feed(chunk)
    except UnreadableAnswer:
        if not cut:
            raise
        # an error answer: its status is what matters, whatever its body's encoding
    return bytes(out)


def _wire(
    method: str | bytes, url: httpx.URL, headers: list[tuple[bytes, bytes]], body: bytes
) -> bytes:
    """A request as bytes: its line, its headers, its body. ``headers`` must hold Host (httpx's
    requests set it, and Content-Length)."""
    verb = method if isinstance(method, bytes) else method.encode()
    head = [verb, b" ", url.raw_path, b" HTTP/1.1\r\n"]
    for name, value in headers:
        if b"\r" in value or b"\n" in value or b"\0" in value or not _TOKEN.fullmatch(name):
            # a line break would end the header and start another (of the sender's choosing)
            raise httpx.LocalProtocolError(
                f"the request header {name.decode('latin-1')[:40]!r} has a line break, a NUL "
                "or a character a header name cannot have; refused"
            )
        head += (name, b": ", value, b"\r\n")
    head.append(b"\r\n")
    return b"".join(head) + body
