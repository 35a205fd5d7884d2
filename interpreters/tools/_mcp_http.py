"""The streamable HTTP transport of an MCP server, with its answers capped as a stdio
server's messages are (imported only when such a server starts: it needs the mcp extra).

The MCP SDK's ``streamable_http_client`` reads a JSON answer whole however long it is, and
caps one SSE event at 1 MB (so an answer a stdio server may send fails over HTTP, as if the
server had died). Here every response's body passes through :class:`_CappedBody`, put on it
by an httpx event hook (so the client is the SDK's own, with its timeouts, and honours proxies
as httpx does): a JSON body over ``limit`` bytes, or one SSE event over ``limit`` bytes (what
came since the last blank line), is cut there, and ``cut`` is told why. The client asks for
no compression, and a compressed answer is refused at its first byte: a few kilobytes of
gzip can inflate to gigabytes, past any count of the bytes that came.

The error raised is the kind the SDK turns into a failed answer to the request (a stream
error for a JSON body, an SSE error for an event stream), so the call ends at once; the
traceback the SDK logs for a JSON body it could not read is not printed for a cut of ours
(the call's failure says it in one line).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, final

import httpx2

__all__ = ["capped_http"]


@final
class _BodyCut(httpx2.StreamError):
    """A JSON answer cut (the SDK answers the request with a parse error)."""


@final
class _EventCut(httpx2.SSEError):
    """An SSE answer cut (the SDK answers the request: the stream failed)."""


def _not_ours(record: logging.LogRecord) -> bool:
    return not (record.exc_info and isinstance(record.exc_info[1], _BodyCut | _EventCut))


logging.getLogger("mcp.client.streamable_http").addFilter(_not_ours)

_ENDS = (b"\n\n", b"\r\r", b"\n\r")
"""Where an SSE event ends: a blank line, i.e. two line ends in a row (``\\r\\n`` is one)."""


@final
class _CappedBody(httpx2.AsyncByteStream):
    """A response's body that stops where one message passes ``limit`` bytes: the whole body,
    or (``events``) each SSE event's bytes; ``refused`` stops it before its first byte."""

    def __init__(
        self,
        inner: httpx2.AsyncByteStream,
        *,
        events: bool,
        limit: int,
        cut: Callable[[str], None],
        refused: str | None = None,
    ) -> None:
        self._inner = inner
        self._events = events
        self._limit = limit
        self._cut = cut
        self._refused = refused

    def _stop(self, why: str) -> Exception:
        self._cut(why)
        said = f"the answer was stopped: {why}"
        return _EventCut(said) if self._events else _BodyCut(said)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._refused is not None:
            raise self._stop(self._refused)
        size = 0
        last = b""
        async for chunk in self._inner:
            if self._events:
                seen = last + chunk  # an event's end may be split between two chunks
                end = max(seen.rfind(e) for e in _ENDS)
                size = len(seen) - end - 2 if end >= 0 else size + len(chunk)
                last = chunk[-1:]
            else:
                size += len(chunk)
            if size > self._limit:
                raise self._stop(f"over {self._limit // 2**20} MB")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()

    @property
    def elapsed(self) -> datetime.timedelta | None:
        return getattr(self._inner, "elapsed", None)  # what Response.elapsed reads


def _capping(limit: int, cut: Callable[[str], None]) -> Callable[[httpx2.Response], Any]:
    async def cap(response: httpx2.Response) -> None:
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        encoding = response.headers.get("content-encoding", "").strip().lower()
        refused = None
        if encoding not in ("", "identity"):
            refused = f"compressed ({encoding[:40]}), which it was not asked for"
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _CappedBody(
            response.stream,
            events=kind == "text/event-stream",
            limit=limit,
            cut=cut,
            refused=refused,
        )

    return cap


@contextlib.asynccontextmanager
async def capped_http(
    url: str, headers: Mapping[str, str], *, limit: int, cut: Callable[[str], None]
) -> AsyncIterator[tuple[Any, Any]]:
    """A streamable HTTP transport for the MCP SDK's ``Client`` at ``url``, sending
    ``headers``, whose answers stop past ``limit`` bytes (one JSON body, or one SSE event;
    ``cut`` is told why); its HTTP client is closed when it ends."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    client = create_mcp_http_client(headers={**headers, "accept-encoding": "identity"})
    client.event_hooks["response"].append(_capping(limit, cut))
    async with (
        client,
        streamable_http_client(url, http_client=client, max_sse_event_size=None) as streams,
    ):
        yield streams
