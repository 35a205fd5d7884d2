"""Real HTTP servers on 127.0.0.1 that speak the model providers' wire formats, with
scripted answers. Each answer is a function of the request, so one script serves streaming
and non-streaming clients alike (our own, and the official SDKs)."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Request = dict[str, Any]


_HELD: list[socket.socket] = []
"""The sockets that keep :func:`closed_port`'s ports from anyone else."""


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on and nothing can: a socket of this process
    holds it, bound but not listening, so a connection to it is refused. A port bound and then
    let go could be handed to a server that another test (in this process or another) starts
    next, whose requests a connection meant to be refused would then take."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    _HELD.append(held)
    return int(held.getsockname()[1])


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server on 127.0.0.1. Its listening socket never blocks: socketserver
    accepts after its poll says a connection waits, and one that is gone by then would leave a
    blocking accept (and the shutdown that waits for it) hanging for ever; a connection
    accepted is blocking. A client that hangs up mid-request (tests cut connections on
    purpose) is no error of the server's, and prints nothing."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.socket.setblocking(False)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@dataclass
class Reply:
    """What the server sends: a status, headers, and either a JSON body or a stream of raw
    chunks. ``cut`` drops the connection after that many chunks; ``hang`` never answers."""

    status: int = 200
    body: Any = None
    chunks: list[str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    cut: int | None = None
    hang: bool = False


Answer = Callable[[Request], Reply]


class ScriptedServer:
    """Answers each POST with the next scripted answer; records every request."""

    def __init__(self, answers: list[Answer] | None = None) -> None:
        self.answers: deque[Answer] = deque(answers or [])
        self.requests: list[Request] = []
        self.headers: list[dict[str, str]] = []
        #: the address each request came from (its client's port tells its connection)
        self.peers: list[tuple[str, int]] = []
        #: what GET /props answers (llama.cpp's server description); None: 404, as elsewhere
        self.props: Any = None
        self.gets: list[str] = []
        self._stop = threading.Event()
        #: the connections open to it: closed with it, so that a keep-alive connection a
        #: client pools is never served on by this server's script once a later test's
        #: server has its port (its handler threads would answer it, and outlive it)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server._open_lock:
                    server._open.add(self.connection)

            def finish(self) -> None:
                with server._open_lock:
                    server._open.discard(self.connection)
                super().finish()

            def do_GET(self) -> None:
                server.gets.append(self.path)
                if self.path == "/props" and server.props is not None:
                    self._send(Reply(body=server.props))
                else:
                    self._send(Reply(status=404, body={"error": {"message": "File Not Found"}}))

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                request = {"path": self.path, **body}
                server.requests.append(request)
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                server.peers.append(self.client_address[:2])
                if not server.answers:
                    self._send(
                        Reply(
                            status=500,
                            body={"error": {"message": "the test script has no answer left"}},
                        )
                    )
                    return
                self._send(server.answers.popleft()(request))

            def _send(self, reply: Reply) -> None:
                if reply.hang:
                    server._stop.wait(30)
                    self.close_connection = True
                    return
                if reply.chunks is None:
                    data = json.dumps(reply.body).encode()
                    self.send_response(reply.status)
                    self.send_header("content-type", reply.content_type)
                    self.send_header("content-length", str(len(data)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                self.send_header("connection", "close")
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                for i, chunk in enumerate(reply.chunks):
                    if reply.cut is not None and i >= reply.cut:
                        break
                    self.wfile.write(chunk.encode())
                    self.wfile.flush()
                self.close_connection = True

        self.httpd = LoopbackServer(Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def add(self, *answers: Answer) -> ScriptedServer:
        self.answers.extend(answers)
        return self

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        with self._open_lock:
            open_now = list(self._open)
        for conn in open_now:
            with contextlib.suppress(OSError):  # closed by its client meanwhile
                conn.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def status(
    code: int, message: str, headers: dict[str, str] | None = None, kind: str = "error"
) -> Answer:
    return lambda req: Reply(
        status=code, body={"error": {"type": kind, "message": message}}, headers=headers or {}
    )


def hang() -> Answer:
    return lambda req: Reply(hang=True)


# -- OpenAI chat completions --------------------------------------------------------------------


def openai_calls(req: dict[str, Any], tag: str, *pairs: tuple[str, dict[str, Any]]) -> Reply:
    """An OpenAI answer to ``req`` calling each (tool, arguments) of ``pairs``, the calls
    numbered ``TAG-0``, ``TAG-1``, ..."""
    return openai(tool_calls=[(f"{tag}-{i}", n, json.dumps(a)) for i, (n, a) in enumerate(pairs)])(
        req
    )


def openai(
    text: str = "",
    tool_calls: list[tuple[str, str, str]] | None = None,
    usage: tuple[int, int, int] = (10, 5, 0),
    *,
    model: str = "gpt-4.1-mini",
    cut: int | None = None,
    choices: bool = True,
    thinking: str = "",
) -> Answer:
    """An answer with ``text`` and ``tool_calls`` (id, name, arguments as a JSON *string*);
    streamed, ``thinking`` comes first, as ``reasoning_content`` (llama.cpp, vLLM)."""
    calls = tool_calls or []
    finish = "tool_calls" if calls else "stop"
    usage_obj = {
        "prompt_tokens": usage[0],
        "completion_tokens": usage[1],
        "total_tokens": usage[0] + usage[1],
        "prompt_tokens_details": {"cached_tokens": usage[2]},
    }

    def answer(req: Request) -> Reply:
        if not req.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                    for i, n, a in calls
                ]
            body = {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}]
                if choices
                else [],
                "usage": usage_obj,
            }
            return Reply(body=body)
        return Reply(
            chunks=list(_openai_chunks(text, calls, finish, usage_obj, model, choices, thinking)),
            content_type="text/event-stream",
            cut=cut,
        )

    return answer


def _openai_chunks(
    text: str,
    calls: list[tuple[str, str, str]],
    finish: str,
    usage: Any,
    model: str,
    choices: bool,
    thinking: str = "",
) -> Iterator[str]:
    def chunk(choices_: list[Any], usage_: Any = None) -> str:
        return (
            "data: "
            + json.dumps(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": model,
                    "choices": choices_,
                    "usage": usage_,
                }
            )
            + "\n\n"
        )

    if choices:
        yield chunk(
            [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
        )
        for piece in [thinking[i : i + 4] for i in range(0, len(thinking), 4)]:
            delta = {"reasoning_content": piece}
            yield chunk([{"index": 0, "delta": delta, "finish_reason": None}])
        for piece in [text[i : i + 4] for i in range(0, len(text), 4)]:
            yield chunk([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
        for n, (cid, name, args) in enumerate(calls):
            # the id and name come only in the first fragment; the arguments arrive in pieces
            yield chunk(
                [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": n,
                                    "id": cid,
                                    "type": "function",
                                    "function": {"name": name, "arguments": ""},
                                }
                            ]
                        },
                        "finish_reason": None,
                    }
                ]
            )
            for piece in [args[i : i + 5] for i in range(0, len(args), 5)]:
                yield chunk(
                    [
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [{"index": n, "function": {"arguments": piece}}]
                            },
                            "finish_reason": None,
                        }
                    ]
                )
        yield chunk([{"index": 0, "delta": {}, "finish_reason": finish}])
    yield chunk([], usage)
    yield "data: [DONE]\n\n"


# -- Anthropic Messages -------------------------------------------------------------------------


_ids = iter(range(1, 1_000_000))


def anthropic(
    text: str = "",
    tool_uses: list[tuple[str, str, dict[str, Any]]] | None = None,
    usage: tuple[int, int, int] = (10, 5, 0),
    *,
    model: str = "claude-sonnet-4-5",
    cut: int | None = None,
    error_at_end: str | None = None,
    thinking: str = "",
) -> Answer:
    """An answer with ``text`` and ``tool_uses`` (id, name, input object); streamed,
    ``thinking`` comes first, as a thinking block."""
    uses = tool_uses or []
    stop = "tool_use" if uses else "end_turn"
    msg_id = f"msg_{next(_ids)}"

    def answer(req: Request) -> Reply:
        if not req.get("stream"):
            content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            content += [
                {"type": "tool_use", "id": i, "name": n, "input": inp} for i, n, inp in uses
            ]
            body = {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": usage[0],
                    "output_tokens": usage[1],
                    "cache_read_input_tokens": usage[2],
                    "cache_creation_input_tokens": 0,
                },
            }
            return Reply(body=body)
        events = list(_anthropic_events(text, uses, stop, usage, model, msg_id, thinking))
        if error_at_end:
            events = events[:2] + [
                _event(
                    "error",
                    {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": error_at_end},
                    },
                )
            ]
        return Reply(chunks=events, content_type="text/event-stream", cut=cut)

    return answer


def _event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _anthropic_events(
    text: str,
    uses: list[tuple[str, str, dict[str, Any]]],
    stop: str,
    usage: tuple[int, int, int],
    model: str,
    msg_id: str,
    thinking: str = "",
) -> Iterator[str]:
    yield _event(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": usage[0],
                    "output_tokens": 1,
                    "cache_read_input_tokens": usage[2],
                    "cache_creation_input_tokens": 0,
                },
            },
        },
    )
    yield _event("ping", {"type": "ping"})
    index = 0
    if thinking:
        block = {"type": "thinking", "thinking": "", "signature": ""}
        yield _event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        )
        for piece in [thinking[i : i + 4] for i in range(0, len(thinking), 4)]:
            delta = {"type": "thinking_delta", "thinking": piece}
            yield _event(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        yield _event("content_block_stop", {"type": "content_block_stop", "index": 0})
        index = 1
    if text:
        yield _event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            },
        )
        for piece in [text[i : i + 4] for i in range(0, len(text), 4)]:
            yield _event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                },
            )
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    for k, (uid, name, inp) in enumerate(uses):
        i = index + k
        yield _event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": i,
                "content_block": {"type": "tool_use", "id": uid, "name": name, "input": {}},
            },
        )
        raw = json.dumps(inp)
        for piece in [raw[j : j + 6] for j in range(0, len(raw), 6)]:
            yield _event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                },
            )
        yield _event("content_block_stop", {"type": "content_block_stop", "index": i})
    yield _event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": usage[1]},
        },
    )
    yield _event("message_stop", {"type": "message_stop"})


# -- Ollama native chat -------------------------------------------------------------------------


def ollama(
    text: str = "",
    tool_calls: list[tuple[str, Any]] | None = None,
    usage: tuple[int, int] = (11, 18),
    *,
    model: str = "qwen3:8b",
    error_after: int | None = None,
    cut: int | None = None,
    thinking: str = "",
) -> Answer:
    """An answer with ``text`` and ``tool_calls`` (name, arguments: an object or a JSON string);
    streamed, ``thinking`` comes first, in the message's ``thinking`` field."""
    calls = tool_calls or []

    def final() -> dict[str, Any]:
        return {
            "model": model,
            "created_at": "2026-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": usage[0],
            "eval_count": usage[1],
        }

    def answer(req: Request) -> Reply:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [{"function": {"name": n, "arguments": a}} for n, a in calls]
        if req.get("stream") is False:
            return Reply(body={**final(), "message": message})
        lines = [
            json.dumps(
                {
                    "model": model,
                    "message": {
                        "role": "assistant",
                        "content": "",
                        "thinking": thinking[i : i + 4],
                    },
                    "done": False,
                }
            )
            for i in range(0, len(thinking), 4)
        ]
        lines += [
            json.dumps(
                {
                    "model": model,
                    "message": {"role": "assistant", "content": text[i : i + 4]},
                    "done": False,
                }
            )
            for i in range(0, len(text), 4)
        ]
        if calls:
            lines.append(
                json.dumps(
                    {
                        "model": model,
                        "message": {
                            "role": "assistant",
                            "content": "",
                            "tool_calls": message["tool_calls"],
                        },
                        "done": False,
                    }
                )
            )
        lines.append(json.dumps(final()))
        if error_after is not None:
            lines = lines[:error_after] + [
                json.dumps({"error": "model runner has unexpectedly stopped"})
            ]
        return Reply(
            chunks=[line + "\n" for line in lines], content_type="application/x-ndjson", cut=cut
        )

    return answer


# -- OpenAI Responses (what Codex speaks) ----------------------------------------------------------


def responses(
    text: str = "",
    calls: list[tuple[str, str, dict[str, Any]]] | None = None,
    usage: tuple[int, int] = (10, 5),
) -> Answer:
    """A streamed Responses API answer: a message with ``text``, or function calls
    (call id, name, arguments)."""
    rid = f"resp_{next(_ids)}"

    def answer(req: Request) -> Reply:
        items: list[dict[str, Any]] = []
        for n, (call_id, name, args) in enumerate(calls or []):
            items.append(
                {
                    "id": f"fc_{rid}_{n}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": call_id,
                    "name": name,
                    "arguments": json.dumps(args),
                }
            )
        if text or not items:
            items.append(
                {
                    "id": f"msg_{rid}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            )
        u = {
            "input_tokens": usage[0],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage[0] + usage[1],
        }
        chunks = [
            _event(
                "response.created",
                {
                    "type": "response.created",
                    "response": {
                        "id": rid,
                        "object": "response",
                        "status": "in_progress",
                        "model": "test",
                        "output": [],
                    },
                },
            )
        ]
        for i, item in enumerate(items):
            chunks.append(
                _event(
                    "response.output_item.added",
                    {
                        "type": "response.output_item.added",
                        "output_index": i,
                        "item": {**item, "status": "in_progress"},
                    },
                )
            )
            if item["type"] == "message":
                chunks.append(
                    _event(
                        "response.output_text.delta",
                        {
                            "type": "response.output_text.delta",
                            "item_id": item["id"],
                            "output_index": i,
                            "content_index": 0,
                            "delta": text,
                        },
                    )
                )
            chunks.append(
                _event(
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": i, "item": item},
                )
            )
        chunks.append(
            _event(
                "response.completed",
                {
                    "type": "response.completed",
                    "response": {
                        "id": rid,
                        "object": "response",
                        "status": "completed",
                        "model": "test",
                        "output": items,
                        "usage": u,
                    },
                },
            )
        )
        return Reply(chunks=chunks, content_type="text/event-stream")

    return answer
