"""The socket opdsl serves a Claude Code turn's tools on, over a real Unix socket: what reaches
it from anything but opdsl's own MCP shim. The token is checked before anything else is read;
a frame that is too big, nested too deep or of the wrong shape is answered with an error that
ends only its own connection, and the other connections, a call in flight among them, go on."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from interpreters.agents import _bridge
from op import ToolResult, ToolSpec

Ask = Callable[..., Awaitable[dict[str, Any]]]


@asynccontextmanager
async def served(
    perform: Callable[[str, Any], Awaitable[ToolResult]],
) -> AsyncIterator[tuple[Ask, str]]:
    """opdsl's tool socket for one tool, ``read_file``; yields a way to send it raw bytes on
    a new connection (the answer back; ``end``: the connection's sending side is then shut)
    and the turn's token."""
    folder = Path(tempfile.mkdtemp(prefix="opdsl-b", dir="/tmp"))  # short: a socket's path
    host = _bridge.ToolHost((ToolSpec(name="read_file"),), perform)
    try:
        async with _bridge.serve_tools(host, folder, timeout=5, max_output=100) as config:
            spec = json.loads((folder / "tools.json").read_text())
            assert (folder / "tools.json").stat().st_mode & 0o777 == 0o600
            assert (folder / "tools.sock").stat().st_mode & 0o777 == 0o600
            assert config["mcpServers"]["opdsl"]["args"][-1] == str(folder / "tools.json")

            async def ask(frame: bytes, *, end: bool = True) -> dict[str, Any]:
                async with await anyio.connect_unix(spec["socket"]) as stream:
                    try:
                        await stream.send(frame)
                        if end:
                            await stream.send_eof()  # all of it: the server reads no more
                    except anyio.BrokenResourceError:
                        pass  # refused before the whole frame was sent: the answer is read
                    data = b""
                    while True:
                        try:
                            data += await stream.receive()
                        except (anyio.EndOfStream, anyio.BrokenResourceError):
                            break
                return dict(json.loads(data))

            yield ask, spec["token"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def call(token: str, **fields: Any) -> bytes:
    """A call as the shim sends it: the token's line, then the request's."""
    return token.encode() + b"\n" + json.dumps(fields).encode() + b"\n"


def test_the_tool_socket_answers_only_well_formed_calls_with_the_turns_token() -> None:
    """No token or a wrong one, a malformed line, a tool that is not served, arguments that
    are not an object: each answered, and only the well-formed call runs the tool."""
    performed: list[tuple[str, Any]] = []

    async def perform(name: str, arguments: Any) -> ToolResult:
        performed.append((name, arguments))
        return ToolResult(output="ran")

    async def main() -> list[dict[str, Any]]:
        async with served(perform) as (ask, token):
            return [
                await ask(json.dumps({"token": token, "name": "read_file"}).encode() + b"\n"),
                await ask(call("0" * len(token), name="read_file", arguments={})),
                await ask(token.encode() + b"\n{not json\n"),
                await ask(token.encode() + b"\n[1, 2]\n"),
                await ask(call(token, name="delete_path", arguments={})),
                await ask(call(token, name="read_file", arguments=["a"])),
                await ask(call(token, name="read_file", arguments={"path": "a"})),
            ]

    answers = anyio.run(main)
    assert [a["ok"] for a in answers] == [False] * 6 + [True]
    assert [a["text"] for a in answers[:4]] == [
        "error: refused",
        "error: refused",
        "error: a malformed request",
        "error: a malformed request",
    ]
    assert "no tool named 'delete_path' is served here" in answers[4]["text"]
    assert answers[5]["text"] == "error: the arguments of 'read_file' are not an object"
    assert performed == [("read_file", {"path": "a"})]  # only the well-formed call ran


def _hostile(token: str) -> list[tuple[bytes, str]]:
    """Frames that once ended the whole server (the first two), and others like them, with
    what each is answered."""
    deep = b"[" * 200_000 + b"]" * 200_000
    return [
        (call(token, name=["read_file"], arguments={}), "error: the tool's name is not a string"),
        (token.encode() + b"\n" + deep + b"\n", "error: a malformed request"),
        (
            call(token, name="read_file", arguments={"a": json.loads("[" * 100 + "]" * 100)}),
            "error: the request is nested over 64 deep",
        ),
        (call(token, name={"x": 1}, arguments={}), "error: the tool's name is not a string"),
        (call(token, name=None, arguments={}), "error: the tool's name is not a string"),
        (token.encode() + b"\n" + b"x" * (3 << 20), "error: the request is over 1,048,576 bytes"),
        (token.encode() + b"\n" + b'{"a":"' + b"x" * (2 << 20) + b'"}\n', "over 1,048,576 bytes"),
        (token.encode() + b"\n\xff\xfe\x00garbage\n", "error: a malformed request"),
        (token.encode() + b"\n", "cut short"),  # the request never comes: the connection ends
        (b"", "error: refused"),
        (b"\n" * 10, "error: refused"),
        (token.encode() + b"x" * 100 + b"\n", "error: refused"),  # a longer token line
        # the token is read first: a wrong one is refused before anything after it is read
        (b"0" * len(token) + b"\n" + deep + b"\n", "error: refused"),
        (b"[" * (2 << 20), "error: refused"),
    ]


def test_a_malformed_frame_ends_only_its_own_connection() -> None:
    """Each hostile frame is answered on its own connection while a call sent before it waits
    on its tool; that call then completes, and a new call works after every frame."""
    gate = anyio.Event()
    performed: list[Any] = []

    async def perform(name: str, arguments: Any) -> ToolResult:
        if arguments.get("wait"):
            await gate.wait()
        performed.append(arguments)
        return ToolResult(output=f"ran {arguments}")

    async def main() -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any], list[Any]]:
        async with served(perform) as (ask, token):
            waiting: dict[str, Any] = {}

            async def slow() -> None:
                waiting.update(await ask(call(token, name="read_file", arguments={"wait": 1})))

            got = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(slow)
                await anyio.sleep(0.1)  # the slow call is in, waiting on its tool
                for frame, says in _hostile(token):
                    with anyio.fail_after(10):
                        got.append((says, await ask(frame)))
                        after = await ask(call(token, name="read_file", arguments={"n": 1}))
                    assert after == {"ok": True, "text": "ran {'n': 1}"}, (says, after)
                assert waiting == {}  # still waiting: its connection was never touched
                gate.set()
            return got, waiting, performed

    got, waiting, performed = anyio.run(main)
    for says, answer in got:
        assert answer["ok"] is False and says in answer["text"], (says, answer)
    assert waiting == {"ok": True, "text": "ran {'wait': 1}"}
    assert {"wait": 1} in performed and all(p in ({"n": 1}, {"wait": 1}) for p in performed)


def test_a_connection_that_never_sends_its_request_is_answered_and_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_bridge, "READ_TIMEOUT", 0.5)

    async def perform(name: str, arguments: Any) -> ToolResult:
        return ToolResult(output="ran")

    async def main() -> list[dict[str, Any]]:
        async with served(perform) as (ask, token):
            with anyio.fail_after(5):
                return [
                    await ask(token.encode()[:5], end=False),  # half a token, then nothing
                    await ask(token.encode() + b"\n" + b'{"name": "read_f', end=False),
                ]

    for answer in anyio.run(main):
        assert answer == {"ok": False, "text": "error: no whole request within 0.5s"}


def test_a_tool_that_raises_is_an_error_answer_not_the_servers_end() -> None:
    async def perform(name: str, arguments: Any) -> ToolResult:
        if arguments.get("boom"):
            raise RuntimeError("a bug in a tool")
        return ToolResult(output="ran")

    async def main() -> list[dict[str, Any]]:
        async with served(perform) as (ask, token):
            return [
                await ask(call(token, name="read_file", arguments={"boom": 1})),
                await ask(call(token, name="read_file", arguments={})),
            ]

    boom, fine = anyio.run(main)
    assert boom == {"ok": False, "text": "error: the call failed (RuntimeError)"}
    assert fine == {"ok": True, "text": "ran"}
