"""MCP servers that break the protocol on the wire: a listing never answered, refused or cut
short by the server's end; a line that is not UTF-8 or not JSON; two tools that become one
name; a tool named like a workspace tool; what an unconfined server started left running; and
options that cannot be recorded (``inf``, ``nan``) or name nothing (a prefix with a space)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from interpreters import MemoryJournal, run
from interpreters.cli._main import main
from interpreters.tools._mcp import MCPError, MCPServer, open_mcp, parse_mcp
from op import DuplicateTool, Op, ToolResult, tool

pytest.importorskip("mcp", reason="the mcp extra is not installed")

SERVER = r"""
import json, os, subprocess, sys

MODE, NAMES, PIDS = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
EMPTY = {"type": "object", "properties": {}}
TOOLS = [{"name": n, "description": n, "inputSchema": EMPTY} for n in NAMES]
PENDING, HELD, POKED = [], [], []


def send(message):
    sys.stdout.buffer.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    sys.stdout.buffer.flush()


def answer(mid, text):
    send({"id": mid, "result": {"content": [{"type": "text", "text": text}]}})


if MODE == "grandchild":  # in the server's process group, and left running when it ends
    child = subprocess.Popen(["sleep", "600"])
    with open(PIDS, "w") as f:
        f.write(str(child.pid))
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue
    if method == "initialize" and MODE == "startgarbage":
        sys.stdout.buffer.write(b"starting up... \x1b[2J\n")
        sys.stdout.buffer.flush()
    elif method == "initialize":
        version = msg["params"]["protocolVersion"]
        info = {"name": "wire", "version": "1"}
        send({"id": mid, "result": {"protocolVersion": version, "capabilities": {"tools": {}},
                                    "serverInfo": info}})
    elif method == "tools/list":
        if MODE == "listhang":
            continue
        if MODE == "listerr":
            send({"id": mid, "error": {"code": -32603, "message": "listing broke"}})
        elif MODE == "listdie":
            sys.stderr.write("no tools today\n")
            sys.stderr.flush()
            os._exit(5)
        elif MODE == "listgarbage":
            sys.stdout.buffer.write(b"listing... \x1b[2J\n")
            sys.stdout.buffer.flush()
        else:
            send({"id": mid, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == "badutf8":
            sys.stdout.buffer.write(
                b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"\xff"}]}}\n'
                % mid
            )
            sys.stdout.buffer.flush()
        elif name == "lone":  # a text written as half of a UTF-16 pair
            sys.stdout.buffer.write(
                b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"a\\ud800"}]}}\n'
                % mid
            )
            sys.stdout.buffer.flush()
        elif name == "garbage":
            sys.stdout.buffer.write(b"this is not json\n")
            sys.stdout.buffer.flush()
        elif name == "hang":
            continue
        elif name == "pair":  # held until a second one comes: then a stray line, both answered
            if PENDING:
                sys.stdout.buffer.write(b"pair junk\n")
                answer(PENDING.pop(), "paired")
                answer(mid, "paired")
            else:
                PENDING.append(mid)
        elif name == "poke":  # held until a "hold" waits too: then a stray line, its answer
            if HELD:
                sys.stdout.buffer.write(b"poke junk\n")
                answer(mid, "poked")
            else:
                POKED.append(mid)
        elif name == "hold":  # never answered
            HELD.append(mid)
            if POKED:
                sys.stdout.buffer.write(b"poke junk\n")
                answer(POKED.pop(), "poked")
        elif name == "slowbad":  # never answered in time
            HELD.append(mid)
        elif name == "slow":  # the held call's late answer, not JSON-RPC (its result is no object)
            sys.stdout.buffer.write(b'{"jsonrpc": "2.0", "id": %d, "result": 5}\n' % HELD.pop())
            answer(mid, "slow")
        elif name == "flood":  # answered, then stray lines without end (here, fifty)
            answer(mid, "answered")
            sys.stdout.buffer.write(b"junk\n" * 50)
            sys.stdout.buffer.flush()
        elif name == "after":  # answered, then a stray line no call waits on
            answer(mid, "answered")
            sys.stdout.buffer.write(b"a stray line\n")
            sys.stdout.buffer.flush()
        else:
            answer(mid, name)
    else:
        send({"id": mid, "error": {"code": -32601, "message": "no such method"}})
"""


@pytest.fixture
def wire(tmp_path: Path) -> Path:
    path = tmp_path / "wire_server.py"
    path.write_text(SERVER)
    return path


def server(
    wire: Path, mode: str = "plain", names: str = "ping", pids: str = "-", **kwargs: Any
) -> MCPServer:
    kwargs.setdefault("confined", False)  # what is tested here is the wire, not the sandbox
    kwargs.setdefault("timeout", 30.0)
    return MCPServer.stdio([sys.executable, "-I", str(wire), mode, names, pids], **kwargs)


async def _listed(servers: dict[str, MCPServer], root: Path) -> tuple[list[str], list[str]]:
    async with open_mcp(servers, root=root) as served:
        return sorted(t.name for t in served.tools), served.warnings


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("listhang", "MCP server 's' did not list its tools within 3s"),
        ("listerr", "MCP server 's' cannot list its tools: it says 'listing broke' (error -32603)"),
        ("listdie", "MCP server 's' ended when asked for its tools (its stderr: no tools today)"),
        (
            "listgarbage",
            "MCP server 's' sent a message that is not JSON when asked for its tools: "
            "listing... \\x1b[2J",
        ),
    ],
)
def test_a_server_that_cannot_list_its_tools_stops_the_run_naming_it(
    wire: Path, tmp_path: Path, mode: str, said: str
) -> None:
    with pytest.raises(MCPError) as caught:
        # the start (a process, the handshake) must come within it: 3 s on a loaded machine
        anyio.run(_listed, {"s": server(wire, mode, start_timeout=3.0)}, tmp_path)
    assert str(caught.value) == said


def test_an_unreadable_answer_to_the_start_is_said_as_such(wire: Path, tmp_path: Path) -> None:
    with pytest.raises(MCPError) as caught:
        anyio.run(_listed, {"s": server(wire, "startgarbage", start_timeout=5.0)}, tmp_path)
    said = str(caught.value)
    assert said.startswith("MCP server 's' (") and "cannot start: " in said, said
    assert said.endswith(
        "cannot start: sent a message that is not JSON at start: starting up... \\x1b[2J"
    ), said


def test_stray_lines_without_end_are_said_once(
    wire: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async def main() -> list[str]:
        async with open_mcp({"s": server(wire, names="flood,ping")}, root=tmp_path) as s:
            by = {t.name: t for t in s.tools}
            outputs = []
            for _ in range(2):
                outputs.append((await by["s_flood"].call({})).output)
                # its junk read before the next call: a line that is not JSON-RPC arriving
                # while a call waits fails that call (the module's docstring, point 4)
                await anyio.sleep(1.0)
            outputs.append((await by["s_ping"].call({})).output)  # read after every junk line
            return outputs

    assert anyio.run(main) == ["answered", "answered", "ping"]
    said = [line for line in capfd.readouterr().err.splitlines() if "junk" in line]
    assert said == [
        "opdsl: warning: MCP server 's' sent a message that is not JSON between calls (ignored): "
        "junk "
        "(any more such lines are ignored unsaid)"
    ]


def test_a_stray_line_while_several_calls_wait_fails_none_and_is_quoted_by_one_that_times_out(
    wire: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async def main() -> tuple[list[str | None], list[str | None]]:
        servers = {
            "s": server(wire, names="pair"),
            "t": server(wire, names="hold,poke", timeout=1.0),
        }
        async with open_mcp(servers, root=tmp_path) as s:
            by = {t.name: t for t in s.tools}
            paired: list[str | None] = []
            poked: list[str | None] = []

            async def call(name: str, into: list[str | None]) -> None:
                result = await by[name].call({})
                into.append(result.output if result.ok else result.error)

            # the server sends its stray line once both calls of a pair wait on it
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "s_pair", paired)
                tg.start_soon(call, "s_pair", paired)
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "t_hold", poked)
                tg.start_soon(call, "t_poke", poked)
            return paired, poked

    paired, poked = anyio.run(main)
    # the line could have answered either: it fails neither, and both get their answers
    assert paired == ["paired", "paired"]
    assert sorted(poked, key=str) == [
        "MCP server 't' gave no answer to 't_hold' within 1s; it sent a message that is not "
        "JSON meanwhile: poke junk",
        "poked",
    ]
    said = [line for line in capfd.readouterr().err.splitlines() if "junk" in line]
    assert said == [
        "opdsl: warning: MCP server 's' sent a message that is not JSON while 2 calls waited "
        "(ignored: it cannot be told whose answer it is): pair junk (any more such lines are "
        "ignored unsaid)",
        "opdsl: warning: MCP server 't' sent a message that is not JSON while 2 calls waited "
        "(ignored: it cannot be told whose answer it is): poke junk (any more such lines are "
        "ignored unsaid)",
    ]


def test_a_late_answer_to_a_call_that_timed_out_fails_no_other_call(
    wire: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A line that is not JSON-RPC whose id is that of a call no longer waiting (it timed
    out) is not the answer of the one call waiting now."""

    async def main() -> list[str | None]:
        async with open_mcp(
            {"t": server(wire, names="slowbad,slow", timeout=1.0)}, root=tmp_path
        ) as s:
            by = {t.name: t for t in s.tools}
            out = []
            for name in ("t_slowbad", "t_slow"):
                result = await by[name].call({})
                out.append(result.output if result.ok else result.error)
            return out

    assert anyio.run(main) == [
        "MCP server 't' gave no answer to 't_slowbad' within 1s",
        "slow",
    ]
    said = [line for line in capfd.readouterr().err.splitlines() if "result" in line]
    assert said == [
        "opdsl: warning: MCP server 't' sent a message that is not a JSON-RPC message while a "
        'call waited (ignored: it cannot be told whose answer it is): {"jsonrpc": "2.0", "id": '
        '3, "result": 5} (any more such lines are ignored unsaid)'
    ]


def test_the_command_line_says_a_listing_that_failed_in_one_line(
    wire: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = f"s[unconfined]={sys.executable} -I {wire} listerr ping -"
    program = "tests.fixtures.mcp_programs:echo_twice"
    db = str(tmp_path / "runs.db")
    assert main(["run", program, "--arg", "text=hi", "--db", db, "--mcp", spec, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "opdsl: error: MCP server 's' cannot list its tools: it says 'listing broke' "
        "(error -32603)\n"
    )


def test_an_unreadable_answer_fails_the_call_at_once_saying_what_it_was(
    wire: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async def warned(line: str) -> bool:
        err, deadline = "", time.monotonic() + 5
        while line not in err and time.monotonic() < deadline:
            await anyio.sleep(0.02)
            err += capfd.readouterr().err
        return line in err

    async def main() -> tuple[list[ToolResult], float]:
        names = "badutf8,lone,garbage,after,ping,hang"
        servers = {
            "s": server(wire, names=names, timeout=30.0),
            "t": server(wire, names=names, timeout=2.0),
        }
        async with open_mcp(servers, root=tmp_path) as s:
            by = {t.name: t for t in s.tools}
            started = time.monotonic()
            out = [await by[f"s_{n}"].call({}) for n in ("badutf8", "lone", "garbage", "after")]
            took = time.monotonic() - started
            # a stray line no call waits on is said, and the server goes on
            assert await warned(
                "MCP server 's' sent a message that is not JSON between calls (ignored)"
            )
            out.append(await by["s_ping"].call({}))
            # a call that timed out waits no more: the stray line is said, not given to it
            out += [await by["t_hang"].call({}), await by["t_after"].call({})]
            assert await warned(
                "MCP server 't' sent a message that is not JSON between calls (ignored)"
            )
            return out, took

    (bad, lone, garbage, after, ping, hang, t_after), took = anyio.run(main)
    assert took < 10  # none waits out its 30 s
    assert bad.error == (
        "MCP server 's' sent a message that is not UTF-8 (byte 68) during the call to "
        '\'s_badutf8\': {"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"\\xff"}]}}'
    )
    assert lone.error == (
        "MCP server 's' sent a message that is not text (a lone surrogate at "
        "$.result.content[0].text) during the call to 's_lone': "
        '{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"a\\ud800"}]}}'
    )
    assert garbage.error == (
        "MCP server 's' sent a message that is not JSON during the call to 's_garbage': "
        "this is not json"
    )
    assert (after.output, ping.output) == ("answered", "ping")
    assert hang.error == "MCP server 't' gave no answer to 't_hang' within 2s"
    assert t_after.output == "answered"


def test_two_tools_of_one_server_that_become_one_name_are_left_out(
    wire: Path, tmp_path: Path
) -> None:
    servers = {"s": server(wire, names="a.b,a_b,ping")}
    names, warnings = anyio.run(_listed, servers, tmp_path)
    assert names == ["s_ping"]
    said = "'a.b' and 'a_b' would both be named 's_a_b'"
    assert warnings == [
        f"MCP server 's': tool 'a.b' is left out: {said}",
        f"MCP server 's': tool 'a_b' is left out: {said}",
    ]


def read_notes() -> Op[ToolResult]:
    return (yield from tool("read_file", {"path": "notes.txt"}))


def test_an_mcp_tool_named_like_a_workspace_tool_is_refused(wire: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the workspace's\n")
    clash = server(wire, names="read_file", prefix="")
    with pytest.raises(DuplicateTool) as caught:
        run(read_notes, mcp={"s": clash}, db=MemoryJournal(), workspace=tmp_path)
    assert str(caught.value) == (
        "MCP server 's' offers 'read_file', the name of a workspace tool; give the server a "
        "prefix of its own (MCPServer.stdio(..., prefix=...), --mcp 'NAME[prefix=P]=...')"
    )
    # with a prefix of its own, both are there: read_file is still the workspace's
    apart = server(wire, names="read_file", prefix="s_")
    done = run(read_notes, mcp={"s": apart}, db=MemoryJournal(), workspace=tmp_path)
    assert done.value.output == "the workspace's\n"


def test_an_mcp_tool_named_like_a_tool_given_to_the_run_is_refused_naming_its_server(
    wire: Path,
) -> None:
    def read_file(path: str) -> str:
        """The run's own."""
        return path

    clash = server(wire, names="read_file", prefix="")
    with pytest.raises(DuplicateTool) as caught:
        run(read_notes, mcp={"s": clash}, tools=[read_file], db=MemoryJournal())
    assert str(caught.value) == (
        "MCP server 's' offers 'read_file', the name of another tool of the run; give the "
        "server a prefix of its own (MCPServer.stdio(..., prefix=...), --mcp 'NAME[prefix=P]=...')"
    )


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


def test_what_an_unconfined_server_started_ends_with_it(wire: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    servers = {"s": server(wire, "grandchild", pids=str(pids))}
    assert anyio.run(_listed, servers, tmp_path)[0] == ["s_ping"]  # the server ends on its own
    pid = int(pids.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, 9)
        pytest.fail("the server's child outlived it")


def test_options_a_run_cannot_record_or_that_name_nothing_are_refused_naming_them() -> None:
    for bad, said in [
        ("s[timeout=nan]=x", "--mcp s: timeout='nan' is not a finite number of seconds above 0"),
        ("s[timeout=inf]=x", "--mcp s: timeout='inf' is not a finite number of seconds above 0"),
        ("s[timeout=0]=x", "--mcp s: timeout='0' is not a finite number of seconds above 0"),
        (
            "s[prefix=a b]=x",
            "--mcp s: an MCP server's prefix is letters, digits, '_' or '-' (63 at most), not "
            "'a b'",
        ),
        ("s=''", "--mcp s: an MCP server's command names no program: ['']"),
        ("a" * 65 + "=x", f"--mcp {'a' * 65}: a server's name is 64 characters at most"),
    ]:
        with pytest.raises(MCPError) as caught:
            parse_mcp(bad)
        assert str(caught.value) == said
    cases: list[tuple[dict[str, Any], str]] = [
        ({"timeout": float("inf")}, "timeout is a finite number of seconds above 0, not inf"),
        (
            {"start_timeout": float("nan")},
            "start_timeout is a finite number of seconds above 0, not nan",
        ),
        ({"start_timeout": 0}, "start_timeout is a finite number of seconds above 0, not 0"),
        ({"timeout": "5"}, "timeout is seconds, not '5'"),
    ]
    for kwargs, said in cases:
        with pytest.raises(MCPError) as caught:
            MCPServer.stdio(["x"], **kwargs)
        assert str(caught.value) == f"an MCP server's {said}"
    with pytest.raises(MCPError, match="an MCP server's timeout is a finite number"):
        MCPServer.http("https://x/mcp", timeout=float("nan"))
