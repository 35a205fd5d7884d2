"""Tools from an MCP server over streamable HTTP that sends what no server should: answers
that never end (a JSON body, one SSE event), a compression bomb. Each is cut at
:data:`MAX_MESSAGE` bytes, as a stdio server's message is, and the call fails naming why;
the next call starts a fresh session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from interpreters.tools._mcp import MAX_MESSAGE, MAX_OUTPUT, MCPServer, open_mcp

pytest.importorskip("mcp", reason="the mcp extra is not installed")

HOSTILE_HTTP = str(Path(__file__).resolve().parents[2] / "fixtures" / "mcp_hostile_http.py")
LIMIT = 400 * 2**20
"""The most a never-ending answer sends: a client that does not cut it holds all of it."""


class Server:
    """The hostile HTTP server, run as a process of its own (its memory is not the test's)."""

    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.log = tmp_path / "server.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-I", HOSTILE_HTTP, str(self.log), "--limit", str(LIMIT), *extra],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}/mcp"

    def events(self, kind: str) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [e for e in map(json.loads, lines) if e["event"] == kind]

    def wait_for(self, kind: str, count: int = 1) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 5
        while len(found := self.events(kind)) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return found


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    s = Server(tmp_path, *getattr(request, "param", ()))
    try:
        yield s
    finally:
        s.proc.terminate()
        s.proc.wait(10)


class Peak:
    """How far this process's resident memory rose above where it was, sampled every 5 ms."""

    def __init__(self) -> None:
        self.growth = 0
        self._done = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def _sample(self, base: int) -> None:
        while not self._done.wait(0.005):
            self.growth = max(self.growth, self._rss() - base)

    def __enter__(self) -> Peak:
        self._thread = threading.Thread(target=self._sample, args=(self._rss(),), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def calls(server: Server, *asked: tuple[str, dict[str, Any]], **kwargs: Any) -> list[Any]:
    """Each tool of the server called in turn; a result, or (result, memory growth) for one
    named with a ``!`` in front."""

    async def main() -> list[Any]:
        web = MCPServer.http(server.url, timeout=20.0, **kwargs)
        async with open_mcp({"web": web}) as served:
            by = {t.name: t for t in served.tools}
            out: list[Any] = []
            for tool, arguments in asked:
                if tool.startswith("!"):
                    with Peak() as peak:
                        out.append((await by[f"web_{tool[1:]}"].call(arguments), peak.growth))
                else:
                    out.append(await by[f"web_{tool}"].call(arguments))
            return out

    return anyio.run(main)


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="memory is read from /proc")
@pytest.mark.parametrize("tool", ["endless_json", "endless_sse"])
def test_an_answer_that_never_ends_is_cut_at_the_cap_and_the_next_call_starts_afresh(
    server: Server, tool: str, capfd: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    (cut, growth), after = calls(server, (f"!{tool}", {}), ("echo", {"text": "after"}))
    seconds = time.monotonic() - started
    assert cut.error == (
        f"MCP server 'web' sent an answer to 'web_{tool}' over 32 MB, and was stopped; it is "
        "started again at the next call"
    )
    assert growth < MAX_MESSAGE + 100 * 2**20, f"memory grew {growth / 2**20:.0f} MB"
    (sent,) = server.wait_for("sent")
    assert MAX_MESSAGE <= sent["bytes"] < MAX_MESSAGE + 32 * 2**20  # cut, not fed to the end
    assert seconds < 15
    # the session that sent it was ended, and the next call came in a new one
    first, second = (e["session"] for e in server.wait_for("initialize", 2))
    assert [e["session"] for e in server.wait_for("delete", 2)][0] == first
    assert [(c["tool"], c["session"]) for c in server.events("call")] == [
        (tool, first),
        ("echo", second),
    ]
    assert after.ok and after.output == "after"
    assert "Traceback" not in capfd.readouterr().err  # the failure says it, in one line


@pytest.mark.parametrize("server", [("--endless-get",)], indirect=True)
def test_a_stream_of_the_servers_own_that_never_ends_is_cut_and_the_next_call_starts_afresh(
    server: Server, capfd: pytest.CaptureFixture[str]
) -> None:
    async def main() -> Any:
        web = MCPServer.http(server.url, timeout=20.0)
        async with open_mcp({"web": web}) as served:
            by = {t.name: t for t in served.tools}
            with anyio.fail_after(10):
                while not server.events("sent"):  # it opened the stream, and was cut
                    await anyio.sleep(0.02)
            await anyio.sleep(1.5)  # time enough for the SDK to open it again, were it let
            return await by["web_echo"].call({"text": "after"})

    after = anyio.run(main)
    assert after.ok and after.output == "after"
    assert (
        "opdsl: warning: MCP server 'web' sent a message over 32 MB, and was stopped; it is "
        "started again" in capfd.readouterr().err
    )
    first, second = (e["session"] for e in server.wait_for("initialize", 2))
    assert [c["session"] for c in server.events("call")] == [second]
    assert server.wait_for("delete", 2)[0]["session"] == first
    # the first session was ended when its stream was cut: the SDK did not open it again
    cuts = [e["bytes"] for e in server.events("sent") if e["session"] == first]
    assert len(cuts) == 1 and MAX_MESSAGE <= cuts[0] < MAX_MESSAGE + 32 * 2**20, cuts


def test_answers_under_the_cap_come_whole_as_a_json_body_or_sse_events(server: Server) -> None:
    size = 3_000_000  # over the 1 MB the MCP SDK takes in one SSE event
    as_json, as_sse, many = calls(
        server,
        ("huge_json", {"size": size}),
        ("huge_sse", {"size": size}),
        ("many_sse", {"count": 40}),
    )
    said = f"[{size - MAX_OUTPUT} more characters left out]"
    assert as_json.ok and as_json.output.endswith(said), as_json.error
    assert as_sse.ok and as_sse.output.endswith(said), as_sse.error
    # the cap is on one event: forty events of a megabyte on one stream are not one message
    assert many.ok and many.output == "after", many.error
    assert len(server.events("initialize")) == 1


def test_a_compressed_answer_that_was_not_asked_for_is_refused(server: Server) -> None:
    bomb, after = calls(server, ("gzip", {}), ("echo", {"text": "after"}))
    assert bomb.error == (
        "MCP server 'web' sent an answer to 'web_gzip' compressed (gzip), which it was not asked "
        "for, and was stopped; it is started again at the next call"
    )
    assert after.ok and after.output == "after"
    assert {c["headers"]["accept-encoding"] for c in server.events("call")} == {"identity"}


def test_headers_reach_the_server_and_its_connections_end_with_the_run(server: Server) -> None:
    (echo,) = calls(server, ("echo", {"text": "hi"}), headers={"Authorization": "Bearer t0ken"})
    assert echo.ok and echo.output == "hi"
    (call,) = server.events("call")
    assert call["headers"]["authorization"] == "Bearer t0ken"
    opened = server.events("open")
    assert opened and len(server.wait_for("closed", len(opened))) == len(opened)
