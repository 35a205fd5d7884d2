"""The transport on asyncio (aiohttp's pool under httpx's transport interface) against real
sockets on 127.0.0.1 that send exactly the bytes each test scripts: framings (length,
chunked, until close), keep-alive and its end, interim answers, and hostile or broken
servers, each failure an httpx error that says what was wrong. TLS through a real handshake
with a test CA."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import httpx
import pytest
import trustme

from interpreters.models._transport import AiohttpTransport, ProxyRoutes
from tests.interpreters.models.raw import Conn, RawServer, Script, answering, ok
from tests.servers import closed_port


def go(coro: Callable[[AiohttpTransport], Coroutine[Any, Any, Any]], **kw: Any) -> Any:
    async def main() -> Any:
        transport = AiohttpTransport(
            ssl_context=kw.pop("ssl_context", ssl.create_default_context()),
            max_connections=kw.pop("max_connections", 16),
            routes=ProxyRoutes(),
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


async def body_of(transport: AiohttpTransport, request: httpx.Request) -> tuple[int, bytes]:
    response = await transport.handle_async_request(request)
    try:
        return response.status_code, await response.aread()
    finally:
        await response.aclose()


Make = Callable[..., RawServer]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)


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
    seen: list[bytes] = []
    srv = server(answering(ok(b'{"n":1}'), seen=seen))

    async def three(t: AiohttpTransport) -> list[tuple[int, bytes]]:
        return [await body_of(t, post(srv.url(), b'{"q":%d}' % i)) for i in range(3)]

    assert go(three) == [(200, b'{"n":1}')] * 3
    assert srv.accepted == 1  # one connection, reused
    head, _, body = seen[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat HTTP/1.1"
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    assert headers[b"host"] == b"127.0.0.1:%d" % srv.port
    assert headers[b"content-length"] == b"7" and body == b'{"q":0}'
    # no encoding is asked for (opdsl reads gzip and deflate all the same)
    assert headers[b"accept-encoding"] == b"identity"


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

    async def pieces(t: AiohttpTransport) -> list[bytes]:
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

    async def twice(t: AiohttpTransport) -> list[tuple[int, bytes]]:
        return [await body_of(t, post(srv.url())), await body_of(t, post(srv.url()))]

    assert go(twice) == [(200, b"all of it")] * 2
    assert srv.accepted == 2


def test_connection_close_is_honoured(server: Make) -> None:
    srv = server(answering(ok(extra=b"connection: close\r\n"), then_close=True))

    async def twice(t: AiohttpTransport) -> list[tuple[int, bytes]]:
        return [await body_of(t, post(srv.url())), await body_of(t, post(srv.url()))]

    assert go(twice) == [(200, b'{"a":1}')] * 2
    assert srv.accepted == 2


def test_a_keep_alive_connection_the_server_closed_is_not_used_again(server: Make) -> None:
    srv = server(answering(ok(), then_close=True))  # closes silently after each answer

    async def twice(t: AiohttpTransport) -> list[tuple[int, bytes]]:
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

    async def twice(t: AiohttpTransport) -> list[tuple[int, bytes]]:
        first = await body_of(t, post(srv.url()))
        await asyncio.sleep(0.1)
        return [first, await body_of(t, post(srv.url()))]

    assert go(twice) == [(200, b'{"a":1}'), (200, b'{"a":1}')]
    assert srv.accepted == 2  # the second came on a fresh connection


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (b"HTTP/1.1 abc OK\r\n\r\n", "malformed answer"),
        (b"SSH-2.0-OpenSSH_9.6\r\n", "malformed answer"),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nxx\r\n",
            "malformed answer: Invalid character in chunk size",
        ),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort", "cut short"),
        (b"", "closed the connection unanswered"),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
            "malformed answer",
        ),
        (
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
            "upgrade",
        ),
    ],
    ids=["bad-status", "not-http", "bad-chunk", "cut-body", "closed", "two-lengths", "upgrade"],
)
def test_a_broken_answer_is_a_protocol_error(server: Make, answer: bytes, words: str) -> None:
    srv = server(answering(answer, then_close=True))
    with pytest.raises(httpx.RemoteProtocolError, match=words):
        go(lambda t: body_of(t, post(srv.url())))


def test_an_endless_head_is_refused(server: Make) -> None:
    def script(conn: Conn, n: int) -> None:
        conn.request()
        conn.send(b"HTTP/1.1 200 OK\r\nx-junk: ")
        for _ in range(200):
            conn.send(b"a" * 1024)

    srv = server(script)
    with pytest.raises(
        httpx.RemoteProtocolError, match="malformed answer: Got more than 8190 bytes"
    ):
        go(lambda t: body_of(t, post(srv.url())))


def test_no_answer_is_a_read_timeout(server: Make) -> None:
    def silent(conn: Conn, n: int) -> None:
        conn.request()
        time.sleep(2)

    srv = server(silent)
    t0 = time.monotonic()
    with pytest.raises(httpx.ReadTimeout, match="no answer from 127.0.0.1"):
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
    with pytest.raises(httpx.ConnectError, match=f"cannot connect to 127.0.0.1:{port}"):
        go(lambda t: body_of(t, post(f"http://127.0.0.1:{port}/x")))


def test_other_schemes_are_refused() -> None:
    with pytest.raises(httpx.UnsupportedProtocol, match="ftp"):
        go(lambda t: body_of(t, post("ftp://127.0.0.1:1/x")))


def held_then_answering(conn: Conn, n: int) -> None:
    """The first connection's answer never ends (its connection stays in use); the others
    answer every request."""
    if n == 0:
        conn.request()
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        time.sleep(3)
        return
    answering(ok())(conn, n)


def test_the_pool_limit_holds_and_its_wait_is_bounded(server: Make) -> None:
    srv = server(held_then_answering)

    async def held(t: AiohttpTransport) -> tuple[int, bytes]:
        first = await t.handle_async_request(post(srv.url()))  # its answer not read: held
        # aiohttp's wait for a free connection and its connect are one timeout
        with pytest.raises(httpx.ConnectTimeout, match="in time"):
            await t.handle_async_request(post(srv.url(), pool=0.2))
        await first.aclose()  # read to the end or not, the slot is free again
        return await body_of(t, post(srv.url(), pool=0.2))

    assert go(held, max_connections=1) == (200, b'{"a":1}')


def test_an_abandoned_answer_closes_its_connection_and_frees_its_slot(server: Make) -> None:
    def script(conn: Conn, n: int) -> None:
        while conn.request():
            conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n" + b"x" * 10)

    srv = server(script)

    async def abandon(t: AiohttpTransport) -> int:
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


def test_a_large_answer_is_read_as_fast_as_the_reader_takes_it(server: Make) -> None:
    """Back-pressure: while the reader waits, the server cannot send much more than the
    sockets' buffers hold; the answer still arrives whole."""
    big = bytes(range(256)) * 131072  # 32 MiB
    sent = [0]

    def script(conn: Conn, n: int) -> None:
        conn.request()
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(big))
        for i in range(0, len(big), 65536):
            conn.send(big[i : i + 65536])
            sent[0] = i + 65536

    srv = server(script)
    held: list[int] = []

    async def slow(t: AiohttpTransport) -> bytes:
        response = await t.handle_async_request(post(srv.url()))
        out = bytearray()
        async for chunk in response.aiter_raw():
            out += chunk
            if not held:
                await asyncio.sleep(0.3)  # the reader is busy: the server has to wait
                held.append(sent[0])
        await response.aclose()
        return bytes(out)

    assert go(slow) == big
    assert held[0] < len(big) // 2, held


def test_the_client_api_works_over_it(server: Make) -> None:
    srv = server(answering(ok(b'{"props":true}')))

    async def get(t: AiohttpTransport) -> Any:
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


def _exchange(t: AiohttpTransport, url: str, seconds: float) -> Any:
    return t.exchange(httpx.URL(url), {}, b"{}", {"read": 5.0, "pool": 5.0}, 1000, seconds)


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
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        go(lambda t: _exchange(t, srv.url(), 0.5))
    assert time.monotonic() - t0 < 2


def _silent(conn: Conn, n: int) -> None:
    """Reads the request and answers nothing for 1.5 s, then closes."""
    conn.request()
    time.sleep(1.5)


def _silent_long(conn: Conn, n: int) -> None:
    """Reads the request and answers nothing for 4 s, then closes."""
    conn.request()
    time.sleep(4.0)


def test_calls_at_once_each_time_out_at_their_own_deadline(server: Make) -> None:
    """Every call's deadline is on one timer of the loop's: set for the earliest, moved
    earlier by a call that starts later with a shorter one, and on to the next as each
    comes. A call whose answer comes in time is not touched by the others' deadlines."""
    srv = server(_silent_long)
    answers = server(answering(ok()))

    async def calls(t: AiohttpTransport) -> tuple[list[tuple[float, float]], Any, int]:
        t0 = time.monotonic()
        came: list[tuple[float, float]] = []

        async def one(seconds: float) -> None:
            with pytest.raises(TimeoutError):
                await _exchange(t, srv.url(), seconds)
            came.append((seconds, time.monotonic() - t0))

        async def answered() -> Any:
            await asyncio.sleep(0.3)
            return await _exchange(t, answers.url(), 0.45)  # its own, shorter than the rest

        *_, status = await asyncio.gather(
            one(2.7), one(0.9), one(1.8), answered(), return_exceptions=False
        )
        return came, status, len(t._deadlines._due)

    came, (status, _, body), left = go(calls)
    assert [s for s, _ in came] == [0.9, 1.8, 2.7]
    for seconds, at in came:  # each at its own deadline (a loaded machine may be late)
        assert seconds <= at < seconds + 0.8, came
    assert (status, body, left) == (200, b'{"a":1}', 0)


def test_a_cancel_from_elsewhere_stays_a_cancel_and_an_outer_timeout_stays_its_own(
    server: Make,
) -> None:
    """The deadline's TimeoutError is said only for its own cancel: a task cancelled by
    another, or an ``asyncio.timeout`` around the call that comes first, is as it would be
    without the call's deadline, and leaves no deadline behind."""
    srv = server(_silent)

    async def cancelled(t: AiohttpTransport) -> tuple[int, int, int]:
        task = asyncio.ensure_future(_exchange(t, srv.url(), 5))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1) as outer:
                await _exchange(t, srv.url(), 5)
        assert outer.expired()
        here = asyncio.current_task()
        assert here is not None
        return task.cancelling(), here.cancelling(), len(t._deadlines._due)

    assert go(cancelled) == (1, 0, 0)


def test_a_call_under_way_as_its_transport_closes_keeps_its_deadline(server: Make) -> None:
    """Closing the transport leaves the deadlines' timer while a call is under way (a
    connect aiohttp does not stop would otherwise run on with no limit); with none, it goes."""
    srv = server(_silent)

    async def closing(t: AiohttpTransport) -> tuple[float, bool]:
        call = asyncio.ensure_future(_exchange(t, srv.url(), 0.4))
        await asyncio.sleep(0.1)
        t._deadlines.close()  # what aclose does first
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await call
        t._deadlines.close()
        return time.monotonic() - t0, t._deadlines._timer is None

    waited, gone = go(closing)
    assert waited < 3 and gone  # its deadline came (0.3 s on); without it, never


def test_a_deadline_that_fires_as_its_call_ends_takes_its_cancel_back(server: Make) -> None:
    """A deadline that comes while its call is ending asks for the task's cancel; the end
    takes it back once, as ``asyncio.timeout`` does, whichever way the call ended."""
    srv = server(answering(ok()))

    async def ended(t: AiohttpTransport) -> tuple[int, int]:
        here = asyncio.current_task()
        assert here is not None
        due = t._deadlines.start(here, 0)
        t._deadlines._fire()  # it came: the task's cancel is asked for
        assert due.fired and here.cancelling() == 1
        assert t._deadlines.end(due) and t._deadlines.end(due)  # taken back once
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)  # the cancel asked for reaches the task here (3.11)
        status, _, _ = await _exchange(t, srv.url(), 5)
        return here.cancelling(), status

    assert go(ended) == (0, 200)


def test_a_waiter_for_a_connection_that_gives_up_passes_its_turn_on(server: Make) -> None:
    srv = server(held_then_answering)

    async def turns(t: AiohttpTransport) -> tuple[int, bytes]:
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


def test_a_wait_for_a_connection_past_its_deadline_loses_no_slot(server: Make) -> None:
    srv = server(held_then_answering)

    async def late(t: AiohttpTransport) -> tuple[int, bytes]:
        held = await t.handle_async_request(post(srv.url()))
        with pytest.raises((TimeoutError, httpx.ConnectTimeout)):
            await _exchange(t, srv.url(), 0.05)
        await held.aclose()
        return await body_of(t, post(srv.url(), pool=0.5))  # the one slot is free again

    assert go(late, max_connections=1) == (200, b'{"a":1}')


def test_an_error_answer_is_read_only_as_far_as_its_message(server: Make) -> None:
    error = b'{"error":{"message":"no"}}' + b" " * 1_000_000
    srv = server(
        answering(b"HTTP/1.1 400 Bad\r\ncontent-length: %d\r\n\r\n%s" % (len(error), error))
    )

    async def refused(t: AiohttpTransport) -> tuple[int, int]:
        status, _, body = await _exchange(t, srv.url(), 5)
        return status, len(body)

    assert go(refused) == (400, 1000)  # the cap given, never the whole megabyte


def test_a_compressed_whole_answer_reaches_the_model_decoded(server: Make) -> None:
    """A server that compresses anyway (opdsl asks for no encoding) is still read."""
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


def test_the_pool_is_used_from_many_tasks_at_once(server: Make) -> None:
    """Fifty calls at once over at most eight connections: every one answered."""
    lock = threading.Lock()
    count = [0]

    def script(conn: Conn, n: int) -> None:
        while conn.request():
            with lock:
                count[0] += 1
            time.sleep(0.01)
            conn.send(ok())

    srv = server(script)

    async def many(t: AiohttpTransport) -> list[tuple[int, bytes]]:
        return list(await asyncio.gather(*(body_of(t, post(srv.url())) for _ in range(50))))

    assert go(many, max_connections=8) == [(200, b'{"a":1}')] * 50
    assert count[0] == 50 and srv.accepted <= 8
