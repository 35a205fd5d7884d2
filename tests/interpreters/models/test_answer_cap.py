"""The cap on a model's answer counts decoded bytes, however the answer comes: compressed
(gzip, deflate), as an error, as a stream without line breaks. Against raw servers on
127.0.0.1 that send exactly the bytes a test scripts, through both transports (aiohttp's pool
on asyncio, httpx's when ``OPDSL_HTTP_TRANSPORT=httpx``), with the memory a call takes
measured: an answer a thousand times its compressed size never reaches memory whole."""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from interpreters import MemoryJournal, run
from interpreters.models import OpenAIModel, RetryPolicy
from interpreters.models._body import AnswerTooLarge, Decoded, UnreadableAnswer
from op import Op, infer
from tests.interpreters.models.raw import Conn, RawServer

CAP = 256 * 1024
"""The cap the tests give their model: the answers below are 32 times it, decoded."""
BIG = 8 * 1024 * 1024
PEAK = 4 * 1024 * 1024
"""The most memory a call may hold at once here: half the answer, and far less in fact."""


def ask() -> Op[str]:
    return (yield from infer("hi")).text


@pytest.fixture(params=["aiohttp", "httpx"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "httpx":
        monkeypatch.setenv("OPDSL_HTTP_TRANSPORT", "httpx")
    return str(request.param)


@pytest.fixture
def serve() -> Iterator[Any]:
    made: list[RawServer] = []

    def make(head: bytes, body: bytes, pieces: int = 1) -> RawServer:
        """Answer a connection's request with ``head`` and then ``body``, sent in ``pieces``
        writes (a pause between them, so a stream arrives as a stream), and close it: nothing
        is left to answer another test's request."""

        def script(conn: Conn, n: int) -> None:
            if conn.request():
                conn.send(head)
                step = -(-len(body) // pieces)
                for i in range(0, len(body), step):
                    conn.send(body[i : i + step])
                    if pieces > 1:
                        time.sleep(0.001)

        srv = RawServer(script)
        made.append(srv)
        return srv

    yield make
    for srv in made:
        srv.close()


def head(status: str = "200 OK", length: int | None = None, **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    lines.append(f"content-length: {length}" if length is not None else "connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def call(srv: RawServer, *, stream: bool) -> tuple[Any, int]:
    """The model's call against ``srv``, and the most memory it held at once.

    tracemalloc counts what every thread of the process allocates meanwhile (a test runner's
    own thread talking to its controller, say): a peak over :data:`PEAK` is measured again,
    up to three times, and the least is given. A call that held the answer whole is over it
    every time."""
    model = OpenAIModel(
        "m",
        base_url=f"http://127.0.0.1:{srv.port}/v1",
        stream=stream,
        max_answer_bytes=CAP,
        retry=RetryPolicy(max_retries=0),
        timeout=30,
    )
    least = None
    for _ in range(3):
        tracemalloc.start()
        try:
            result = run(ask, model=model, db=MemoryJournal())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        least = peak if least is None else min(least, peak)
        if least < PEAK:
            break
    assert least is not None
    return result, least


def whole_answer(text: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()


def sse(text: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": text}}]}
    return f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


def compress(kind: str, data: bytes) -> bytes:
    if kind == "raw-deflate":
        c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    return gzip.compress(data) if kind == "gzip" else zlib.compress(data)


@pytest.mark.parametrize("kind", ["gzip", "deflate", "raw-deflate"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_compressed_answer_is_capped_by_its_decoded_size(
    serve: Any, transport: str, kind: str, stream: bool
) -> None:
    """8 MiB of text sent as a few KiB of gzip: the call fails at the cap (a quarter of a MiB)
    and never holds the answer whole."""
    body = compress(kind, sse("a" * BIG) if stream else whole_answer("a" * BIG))
    assert len(body) < CAP // 8  # small enough to pass a cap on compressed bytes
    encoding = "deflate" if kind == "raw-deflate" else kind
    ctype = "text/event-stream" if stream else "application/json"
    srv = serve(head(length=len(body), content_encoding=encoding, content_type=ctype), body)
    result, peak = call(srv, stream=stream)
    assert result.status == "failed" and f"over {CAP:,} bytes" in str(result.error), (
        result.describe()
    )
    assert peak < PEAK, f"{peak:,} bytes held"  # not the 8 MiB answer


@pytest.mark.parametrize("kind", ["gzip", "deflate", "raw-deflate"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_compressed_answer_under_the_cap_is_read_decoded(
    serve: Any, transport: str, kind: str, stream: bool
) -> None:
    text = "fine " * 1000
    body = compress(kind, sse(text) if stream else whole_answer(text))
    encoding = "deflate" if kind == "raw-deflate" else kind
    srv = serve(head(length=len(body), content_encoding=encoding), body, pieces=7)
    result, _ = call(srv, stream=stream)
    assert result.value == text, result.describe()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("encoded", [False, True])
def test_an_error_answer_is_read_only_as_far_as_its_message(
    serve: Any, transport: str, stream: bool, encoded: bool
) -> None:
    """A 400 whose body is 8 MiB (plain, or gzip): its status and message reach the program,
    its body is not read whole."""
    error = json.dumps({"error": {"message": "no such model", "pad": "x" * BIG}}).encode()
    body = gzip.compress(error) if encoded else error
    extra = {"content_encoding": "gzip"} if encoded else {}
    srv = serve(head("400 Bad Request", length=len(body), **extra), body)
    result, peak = call(srv, stream=stream)
    assert result.status == "failed" and "HTTP 400" in str(result.error), result.describe()
    assert "no such model" in str(result.error)[:200]  # decoded, from its first bytes
    assert peak < PEAK, f"{peak:,} bytes held"


@pytest.mark.parametrize("pieces", [1, 64])
def test_a_stream_without_line_breaks_is_capped(serve: Any, transport: str, pieces: int) -> None:
    """An event stream of 8 MiB with no line break in it: stopped at the cap, never buffered
    whole as one line."""
    body = b"data: " + b"a" * BIG
    srv = serve(head(content_type="text/event-stream"), body, pieces=pieces)
    result, peak = call(srv, stream=True)
    assert result.status == "failed" and f"over {CAP:,} bytes" in str(result.error), (
        result.describe()
    )
    assert peak < PEAK, f"{peak:,} bytes held"


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_stream_lines_end_only_at_cr_or_lf(serve: Any, transport: str, eol: str) -> None:
    """Server-sent events end their lines with CRLF, LF or CR, split anywhere between pieces;
    a U+2028 or a form feed inside a JSON string is text, not a line's end."""
    texts = ["one\u2028two", "\x0cthree\x85", "four"]
    events = [
        "data: "
        + json.dumps({"choices": [{"index": 0, "delta": {"content": t}}]}, ensure_ascii=False)
        for t in texts
    ]
    body = (eol * 2).join([*events, "data: [DONE]", ""]).encode()
    srv = serve(head(content_type="text/event-stream"), body, pieces=len(body) // 3)
    result, _ = call(srv, stream=True)
    assert result.value == "".join(texts), result.describe()


@pytest.mark.parametrize("stream", [False, True])
def test_an_encoding_opdsl_cannot_read_within_its_cap_is_refused_by_name(
    serve: Any, transport: str, stream: bool
) -> None:
    body = b"\x1b\x03\x00\xf8\xa5\x82\x00"  # any bytes: never decoded
    srv = serve(head(length=len(body), content_encoding="br"), body)
    result, _ = call(srv, stream=stream)
    assert result.status == "failed", result.describe()
    assert "encoded as 'br'" in str(result.error) and "model openai:m" in str(result.error)


def test_a_broken_compressed_answer_is_an_error_that_says_so(serve: Any, transport: str) -> None:
    body = gzip.compress(whole_answer("x"))[:-30] + b"garbage-garbage-garbage-garbage"
    srv = serve(head(length=len(body), content_encoding="gzip"), body)
    result, _ = call(srv, stream=False)
    assert result.status == "failed" and "gzip" in str(result.error), result.describe()
    assert "Traceback" not in str(result.error)


# -- the decoder itself -------------------------------------------------------------------------


def test_the_decoder_counts_decoded_bytes_across_pieces_and_codings() -> None:
    data = b"z" * 100_000
    twice = gzip.compress(zlib.compress(data))  # "deflate, gzip": deflate first, then gzip
    d = Decoded(b"deflate, gzip", 100_000)
    out = b"".join(d.feed(twice[i : i + 7]) for i in range(0, len(twice), 7)) + d.end()
    assert out == data
    over = Decoded(b"gzip", 99_999)
    with pytest.raises(AnswerTooLarge):
        over.feed(gzip.compress(data))
    plain = Decoded(b"", 10)
    assert plain.feed(b"0123456789") == b"0123456789"
    with pytest.raises(AnswerTooLarge):
        plain.feed(b"!")
    with pytest.raises(UnreadableAnswer, match="encoded as 'zstd'"):
        Decoded(b"zstd", 10)
    assert Decoded(b"identity", 10).feed(b"abc") == b"abc"
