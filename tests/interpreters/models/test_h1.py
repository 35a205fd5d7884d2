"""opdsl's HTTP/1.1 transport against real sockets on 127.0.0.1 that send exactly the bytes
each test scripts: framings (length, chunked, until close), keep-alive and its end, interim
answers, and hostile or broken servers. TLS through a real handshake with a test CA."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import httpx
import pytest
import trustme

from interpreters.models._h1 import H1Transport
from tests.servers import closed_port


class Conn:
    """The server's side of one connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def request(self) -> bytes:
        """One whole request (head and body); b"" when the client closed."""
        while b"\r\n\r\n" not in self.buf:
            more = self.sock.recv(65536)
            if not more:
                return b""
            self.buf += more
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += self.sock.recv(65536)
        self.buf = rest[length:]
        return head + b"\r\n\r\n" + rest[:length]

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)


Script = Callable[[Conn, int], None]


class RawServer:
    """Runs ``script(conn, n)`` for the n-th connection it accepts, each in a thread."""

    def __init__(self, script: Script, *, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.requests: list[bytes] = []
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            n = self.accepted
            self.accepted += 1
            t = threading.Thread(target=self._one, args=(sock, n), daemon=True)
            self._threads.append(t)
            t.start()

    def _one(self, sock: socket.socket, n: int) -> None:
        try:
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_side=True)
            self.script(Conn(sock), n)
        except (OSError, ssl.SSLError):
            pass
        finally:
            sock.close()

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/v1/chat"

    def close(self) -> None:
        self.listener.close()


def ok(body: bytes = b'{"a":1}', extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n"
        + extra
        + b"\r\n"
        + body
    )


def answering(*answers: bytes, then_close: bool = False) -> Script:
    """Each request on a connection gets the next answer (the last one repeats)."""

    def script(conn: Conn, n: int) -> None:
        k = 0
        while request := conn.request():
            SEEN.append(request)
            conn.send(answers[min(k, len(answers) - 1)])
            k += 1
            if then_close:
                return

    return script


SEEN: list[bytes] = []


def go(coro: Callable[[H1Transport], Coroutine[Any, Any, Any]], **kw: Any) -> Any:
    async def main() -> Any:
        transport = H1Transport(
            ssl_context=kw.pop("ssl_context", ssl.create_default_context()), **kw
        )
        try:
            return await coro(transport)
        finally:
            await transport.aclose()

    return asyncio.run(main())


def post(url: str, body: bytes = b'{"q":1}', **timeout: float) -> httpx.Request:
    t = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0, **timeout}
    return httpx.Request(
        "POST",
        url,
        content=body,
        headers={"content-type": "application/json"},
        extensions={"timeout": t},
    )


async def body_of(transport: H1Transport, request: httpx.Request) -> tuple[int, bytes]:
    response = await transport.handle_async_request(request)
    try:
        return response.status_code, await response.aread()
    finally:
        await response.aclose()


Make = Callable[..., RawServer]


@pytest.fixture
def server() -> Iterator[Make]:
    made: list[RawServer] = []

    def make(script: Script, **kw: Any) -> RawServer:
        s = RawServer(script, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_a_request_is_sent_whole_and_connections_are_kept_alive(server: Make) -> None:
    SEEN.clear()
    srv = server(answering(ok(b'{"n":1}')))

    async def three(t: H1Transport) -> list[tuple[int, bytes]]:
        return [await body_of(t, post(srv.url(), b'{"q":%d}' % i)) for i in range(3)]

    assert go(three) == [(200, b'{"n":1}')] * 3
    assert srv.accepted == 1  # one connection, reused
    head, _, body = SEEN[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat HTTP/1.1"
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    assert headers[b"host"] == b"127.0.0.1:%d" % srv.port
    assert headers[b"content-length"] == b"7" and body == b'{"q":0}'


def test_chunked_answers_arrive_piece_by_piece(server: Make) -> None:
    def script(conn: Conn, n: int) -> None:
        conn.request()
        conn.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for piece in (b"data: 1\n\n", b"data: 2\n\n"):
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            time.sleep(0.05)
        conn.send(b"0\r\n\r\n")
        conn.request()

    srv = server(script)

    async def pieces(t: H1Transport) -> list[bytes]:
        response = await t.handle_async_request(post(srv.url()))
        try:
            return [chunk async for chunk in response.aiter_raw()]
        finally:
            await response.aclose()

    assert go(pieces) == [b"data: 1\n\n", b"data: 2\n\n"]


def test_an_answer_read_until_close_is_whole_and_its_connection_is_not_reused(
    server: Make,
) -> None:
    srv = server(
        answering(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it", then_close=True)
    )

    async def twice(t: H1Transport) -> list[tuple[int, bytes]]:
        return [await body_of(t, post(srv.url())), await body_of(t, post(srv.url()))]

    assert go(twice) == [(200, b"all of it")] * 2
    assert srv.accepted == 2


def test_connection_close_is_honoured(server: Make) -> None:
    srv = server(answering(ok(extra=b"connection: close\r\n"), then_close=True))

    async def twice(t: H1Transport) -> list[tuple[int, bytes]]:
        return [await body_of(t, post(srv.url())), await body_of(t, post(srv.url()))]

    assert go(twice) == [(200, b'{"a":1}')] * 2
    assert srv.accepted == 2


def test_a_keep_alive_connection_the_server_closed_is_not_used_again(server: Make) -> None:
    srv = server(answering(ok(), then_close=True))  # closes silently after each answer

    async def twice(t: H1Transport) -> list[tuple[int, bytes]]:
        first = await body_of(t, post(srv.url()))
        await asyncio.sleep(0.1)  # the close reaches the client
        return [first, await body_of(t, post(srv.url()))]

    assert go(twice) == [(200, b'{"a":1}')] * 2
    assert srv.accepted == 2


def test_an_interim_answer_is_skipped(server: Make) -> None:
    srv = server(answering(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"real")))
    assert go(lambda t: body_of(t, post(srv.url()))) == (200, b"real")


def test_bytes_sent_on_an_idle_connection_drop_it(server: Make) -> None:
    def script(conn: Conn, n: int) -> None:
        conn.request()
        conn.send(ok() + b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nbad")  # one too many
        conn.request()
        conn.send(ok(b"never"))

    srv = server(script)

    async def twice(t: H1Transport) -> list[tuple[int, bytes]]:
        first = await body_of(t, post(srv.url()))
        await asyncio.sleep(0.1)
        return [first, await body_of(t, post(srv.url()))]

    assert go(twice) == [(200, b'{"a":1}'), (200, b'{"a":1}')]
    assert srv.accepted == 2  # the second came on a fresh connection


@pytest.mark.parametrize(
    ("answer", "error", "words"),
    [
        (b"HTTP/1.1 abc OK\r\n\r\n", httpx.RemoteProtocolError, "malformed"),
        (b"SSH-2.0-OpenSSH_9.6\r\n", httpx.RemoteProtocolError, "malformed"),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nxx\r\n",
            httpx.RemoteProtocolError,
            "malformed",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort",
            httpx.RemoteProtocolError,
            "mid-answer",
        ),
        (b"", httpx.RemoteProtocolError, "unanswered"),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
            httpx.RemoteProtocolError,
            "malformed",
        ),
        (
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
            httpx.RemoteProtocolError,
            "upgrade",
        ),
    ],
    ids=["bad-status", "not-http", "bad-chunk", "cut-body", "closed", "two-lengths", "upgrade"],
)
def test_a_broken_answer_is_a_protocol_error(
    server: Make, answer: bytes, error: type[Exception], words: str
) -> None:
    srv = server(answering(answer, then_close=True))
    with pytest.raises(error, match=words):
        go(lambda t: body_of(t, post(srv.url())))


def test_an_endless_head_is_refused(server: Make) -> None:
    def script(conn: Conn, n: int) -> None:
        conn.request()
        conn.send(b"HTTP/1.1 200 OK\r\nx-junk: ")
        for _ in range(200):
            conn.send(b"a" * 1024)

    srv = server(script)
    with pytest.raises(httpx.RemoteProtocolError, match="head is over"):
        go(lambda t: body_of(t, post(srv.url())))


def test_no_answer_is_a_read_timeout(server: Make) -> None:
    def silent(conn: Conn, n: int) -> None:
        conn.request()
        time.sleep(2)

    srv = server(silent)
    t0 = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        go(lambda t: body_of(t, post(srv.url(), read=0.2)))
    assert time.monotonic() - t0 < 1.5


def test_a_stalled_body_is_a_read_timeout(server: Make) -> None:
    def script(conn: Conn, n: int) -> None:
        conn.request()
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        time.sleep(2)

    srv = server(script)
    with pytest.raises(httpx.ReadTimeout):
        go(lambda t: body_of(t, post(srv.url(), read=0.2)))


def test_a_closed_port_is_a_connect_error() -> None:
    port = closed_port()
    with pytest.raises(httpx.ConnectError, match=f"127.0.0.1:{port}"):
        go(lambda t: body_of(t, post(f"http://127.0.0.1:{port}/x")))


def test_other_schemes_are_refused() -> None:
    with pytest.raises(httpx.UnsupportedProtocol, match="ftp"):
        go(lambda t: body_of(t, post("ftp://127.0.0.1:1/x")))


def test_the_pool_limit_holds_and_its_wait_is_bounded(server: Make) -> None:
    srv = server(answering(ok()))

    async def held(t: H1Transport) -> tuple[int, bytes]:
        first = await t.handle_async_request(post(srv.url()))  # its answer not read: held
        with pytest.raises(httpx.PoolTimeout):
            await t.handle_async_request(post(srv.url(), pool=0.2))
        await first.aclose()  # read to the end or not, the slot is free again
        return await body_of(t, post(srv.url(), pool=0.2))

    assert go(held, max_connections=1) == (200, b'{"a":1}')


def test_an_abandoned_answer_closes_its_connection_and_frees_its_slot(server: Make) -> None:
    def script(conn: Conn, n: int) -> None:
        while conn.request():
            conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n" + b"x" * 10)

    srv = server(script)

    async def abandon(t: H1Transport) -> int:
        for _ in range(3):
            response = await t.handle_async_request(post(srv.url(), read=5))
            reading = asyncio.ensure_future(response.aread())
            await asyncio.sleep(0.05)
            reading.cancel()  # a timeout effect, a spent budget
            with pytest.raises(asyncio.CancelledError):
                await reading
            await response.aclose()
        return srv.accepted

    assert go(abandon, max_connections=1) == 3  # never reused half-read


def test_a_large_answer_pauses_the_socket_and_arrives_whole(server: Make) -> None:
    big = bytes(range(256)) * 16384  # 4 MiB
    srv = server(answering(ok(big)))
    paused: list[bool] = []

    async def slow(t: H1Transport) -> bytes:
        response = await t.handle_async_request(post(srv.url()))
        out = bytearray()
        async for chunk in response.aiter_raw():
            out += chunk
            if len(out) < len(big) // 2:
                await asyncio.sleep(0.001)
                paused.append(any(c.paused for c in t._open))
        await response.aclose()
        return bytes(out)

    assert go(slow) == big
    assert any(paused)


def test_the_client_api_works_over_it(server: Make) -> None:
    srv = server(answering(ok(b'{"props":true}')))

    async def get(t: H1Transport) -> Any:
        async with httpx.AsyncClient(transport=t) as client:
            return (await client.get(srv.url())).json()

    assert go(get) == {"props": True}


def test_tls_with_a_trusted_certificate_and_not_with_another(server: Make) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(tls)
    srv = server(answering(ok(b"secret")), tls=tls)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    assert go(lambda t: body_of(t, post(srv.url("https"))), ssl_context=trusting) == (
        200,
        b"secret",
    )
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        go(lambda t: body_of(t, post(srv.url("https"))))  # the system's CAs only


def test_a_trickling_answer_is_stopped_at_the_deadline(server: Make) -> None:
    """Each piece comes within the read timeout; the whole answer does not come by the
    deadline."""

    def script(conn: Conn, n: int) -> None:
        conn.request()
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n")
        for _ in range(100):
            conn.send(b"x")
            time.sleep(0.05)

    srv = server(script)

    async def whole(t: H1Transport) -> object:
        url = httpx.URL(srv.url())
        headers = [(b"host", b"127.0.0.1"), (b"content-length", b"2")]
        deadline = time.monotonic() + 0.5
        return await t.exchange(url, headers, b"{}", {"read": 5.0}, 1000, deadline)

    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="deadline"):
        go(whole)
    assert time.monotonic() - t0 < 2


def test_a_waiter_for_a_connection_that_gives_up_passes_its_turn_on(server: Make) -> None:
    srv = server(answering(ok()))

    async def turns(t: H1Transport) -> tuple[int, bytes]:
        held = await t.handle_async_request(post(srv.url()))
        gives_up = asyncio.ensure_future(t.handle_async_request(post(srv.url())))
        waits = asyncio.ensure_future(body_of(t, post(srv.url(), pool=5)))
        await asyncio.sleep(0.05)
        gives_up.cancel()
        await held.aclose()
        with pytest.raises(asyncio.CancelledError):
            await gives_up
        return await waits

    assert go(turns, max_connections=1) == (200, b'{"a":1}')


@pytest.mark.parametrize(
    ("name", "value"),
    [(b"authorization", b"Bearer k\r\nx-evil: 1"), (b"x-a", b"v\nw"), (b"x a", b"v")],
)
def test_a_header_that_would_break_the_request_is_refused(
    server: Make, name: bytes, value: bytes
) -> None:
    srv = server(answering(ok()))

    async def send(t: H1Transport) -> object:
        headers = [(b"host", b"127.0.0.1"), (b"content-length", b"2"), (name, value)]
        return await t.exchange(httpx.URL(srv.url()), headers, b"{}", {}, 1000)

    with pytest.raises(httpx.LocalProtocolError, match="refused") as caught:
        go(send)
    assert b"Bearer" not in str(caught.value).encode()  # never the value
    assert srv.accepted == 0  # nothing was sent


def test_a_wait_for_a_connection_past_its_deadline_loses_no_slot(server: Make) -> None:
    srv = server(answering(ok()))

    async def late(t: H1Transport) -> tuple[int, bytes]:
        held = await t.handle_async_request(post(srv.url()))
        headers = [(b"host", b"127.0.0.1"), (b"content-length", b"2")]
        with pytest.raises(TimeoutError, match="deadline"):
            await t.exchange(httpx.URL(srv.url()), headers, b"{}", {}, 1000, time.monotonic())
        await held.aclose()
        return await body_of(t, post(srv.url(), pool=0.5))  # the one slot is free again

    assert go(late, max_connections=1) == (200, b'{"a":1}')


def test_a_connection_idle_too_long_is_not_reused(
    server: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interpreters.models import _h1

    monkeypatch.setattr(_h1, "_IDLE_EXPIRY", 0.05)
    srv = server(answering(ok()))

    async def apart(t: H1Transport) -> list[tuple[int, bytes]]:
        first = await body_of(t, post(srv.url()))
        await asyncio.sleep(0.2)
        return [first, await body_of(t, post(srv.url()))]

    assert go(apart) == [(200, b'{"a":1}')] * 2
    assert srv.accepted == 2


def test_a_compressed_whole_answer_reaches_the_model_decoded(server: Make) -> None:
    """A model call that does not stream skips httpx's response; a server that compresses
    anyway (opdsl asks for no encoding) is still read."""
    import gzip
    import json

    from interpreters import MemoryJournal, run
    from interpreters.models import OpenAIModel
    from op import Op, infer

    answer = {"choices": [{"message": {"role": "assistant", "content": "unzipped"}}]}
    body = gzip.compress(json.dumps(answer).encode())
    srv = server(answering(ok(body, extra=b"content-encoding: gzip\r\n")))

    def ask() -> Op[str]:
        return (yield from infer("hi")).text

    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{srv.port}/v1", stream=False)
    result = run(ask, model=model, db=MemoryJournal())
    assert result.value == "unzipped", result.describe()
