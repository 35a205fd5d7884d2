"""Tools from MCP servers: a hostile server of our own (huge results, schemas that are not
schemas, calls never answered, a death mid-call, names that collide or hold markup), then the
real ones from PyPI (``mcp-server-git``, ``mcp-server-time``) and npm (``server-everything``,
when it is installed), through ``run``, ``resume``, ``replay``, the dry run and the command."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from returns.result import Failure

from interpreters import MemoryJournal, ScriptedModel, SqliteJournal, replay, resume, run
from interpreters.cli._main import main
from interpreters.tools._mcp import (
    MAX_OUTPUT,
    MCPError,
    MCPServer,
    MCPToolsChanged,
    _validator,
    listed_tools,
    mcp_servers,
    open_mcp,
    parse_mcp,
)
from interpreters.tools._sandbox import sandbox_problem
from op import DuplicateTool, OpdslError, Response, ToolCall, ToolResult
from tests.fixtures import mcp_programs

pytest.importorskip("mcp", reason="the mcp extra is not installed")

HOSTILE = str(Path(__file__).resolve().parents[2] / "fixtures" / "mcp_hostile.py")
OUTSIDE = "/var/tmp/opdsl-mcp-outside.txt"
needs_bwrap = pytest.mark.skipif(sandbox_problem() is not None, reason=str(sandbox_problem()))


def hostile(marker: Path | None = None, *extra: str, **kwargs: Any) -> MCPServer:
    argv = [sys.executable, "-I", HOSTILE, *extra]
    if marker is not None:
        argv += ["--marker", str(marker)]
    kwargs.setdefault("timeout", 10.0)
    return MCPServer.stdio(argv, **kwargs)


def starts(marker: Path) -> int:
    return len(marker.read_text().split()) if marker.exists() else 0


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def test_command_line_specs_and_the_wrong_ones() -> None:
    name, git = parse_mcp("git=uvx mcp-server-git --repository .")
    assert (name, git.argv, git.network, git.env, git.confined) == (
        "git",
        ("uvx", "mcp-server-git", "--repository", "."),
        False,
        (),
        True,
    )
    name, gh = parse_mcp("gh[network,env=GH_TOKEN,env=GH_HOST,prefix=,timeout=5]=gh-mcp 'a b'")
    assert (gh.argv, gh.network, gh.env, gh.prefix, gh.timeout) == (
        ("gh-mcp", "a b"),
        True,
        ("GH_TOKEN", "GH_HOST"),
        "",
        5.0,
    )
    name, web = parse_mcp("web=https://mcp.example.com/mcp")
    assert (name, web.url, web.argv) == ("web", "https://mcp.example.com/mcp", ())
    for bad, said in [
        ("git", "give NAME=COMMAND or NAME=URL"),
        ("g it=x", "give NAME=COMMAND or NAME=URL"),
        ("git[loud]=x", "unknown option 'loud'"),
        ("git[timeout=soon]=x", "timeout='soon' is not seconds"),
        ("web[network]=https://x/mcp", "are for a command"),
        ("git=x 'open", "cannot split the command"),
    ]:
        with pytest.raises(MCPError, match=said.replace("[", r"\[")):
            parse_mcp(bad)
    with pytest.raises(MCPError, match="as a list"):
        MCPServer.stdio("mcp-server-git")
    with pytest.raises(MCPError, match="http:// or https://"):
        MCPServer.http("ftp://x")


@needs_bwrap
def test_a_hostile_server_gives_its_usable_tools_and_every_failure_is_a_result(
    ws: Path, tmp_path: Path
) -> None:
    marker = ws / "starts"

    async def main() -> tuple[dict[str, Any], list[str], dict[str, Any]]:
        server = hostile(marker, timeout=3.0)
        async with open_mcp({"h": server}, root=ws) as served:
            by = {t.name: t for t in served.tools}
            out: dict[str, Any] = {"specs": {n: t.spec for n, t in by.items()}}
            calls: list[tuple[str, dict[str, Any]]] = [
                ("h_echo", {"text": "hi"}),
                ("h_echo", {"text": 5}),  # refused before the server sees it
                ("h_huge", {"size": MAX_OUTPUT + 5000}),
                ("h_fail", {}),
                ("h_a_b", {}),
                ("h_write", {"path": str(ws / "made.txt")}),
                ("h_write", {"path": str(tmp_path / "outside.txt")}),  # a hidden sibling
                ("h_write", {"path": OUTSIDE}),  # the read-only rest of the machine
                ("h_hang", {}),
                ("h_noisy", {}),  # its stderr drained, never blocking it
                ("h_die", {}),
                ("h_echo", {"text": "again"}),
            ]
            for name, args in calls:
                out[f"{name} {json.dumps(args)}"] = await by[name].call(args)
            out["starts"] = starts(marker)
            return out, served.warnings, served.recorded

    started = time.monotonic()
    out, warnings, recorded = anyio.run(main)
    specs = out.pop("specs")
    # markup, a listing twice and a schema that is not one are left out, each said once
    assert sorted(specs) == sorted(
        f"h_{n}"
        for n in ("echo", "huge", "hang", "die", "fail", "quit", "noisy", "env", "write")
        + ("connect", "a_b")
    )
    assert any("'<b>bold</b>' is left out: no model API takes that name" in w for w in warnings)
    assert sum("'dup' is left out: the server lists it more than once" in w for w in warnings) == 1
    assert any("'broken' is left out: its input schema is not a JSON Schema" in w for w in warnings)
    # the model is offered the server's own schema and description
    echo = specs["h_echo"]
    assert echo.parameters["properties"] == {"text": {"type": "string"}}
    assert echo.description == "Echo the text back"
    assert [t["tool"] for t in recorded["h"]["tools"]][:2] == ["echo", "huge"]
    results = list(out.values())
    assert results[0].ok and results[0].output == "hi"
    assert not results[1].ok
    assert (
        results[1].error == "invalid arguments for tool 'h_echo': text: 5 is not of type 'string'"
    )
    assert results[2].ok and len(results[2].output) < MAX_OUTPUT + 100
    assert results[2].output.endswith("[5000 more characters left out]")
    assert (results[3].ok, results[3].error) == (False, "h_fail: it went wrong on purpose")
    assert results[4].output == "dotted"  # "a.b" is called by its own name
    assert results[5].ok and (ws / "made.txt").read_text() == "written\n"
    assert not (tmp_path / "outside.txt").exists()  # written to a private tmpfs, if at all
    assert not results[7].ok and "Read-only file system" in str(results[7].error)
    assert not Path(OUTSIDE).exists()
    assert results[8].error == "MCP server 'h' gave no answer to 'h_hang' within 3s"
    assert results[9].ok and results[9].output == "said a lot"
    assert results[10].error == (
        "MCP server 'h' ended during the call to 'h_die' (its stderr: dying as asked); "
        "it is started again at the next call"
    )
    assert results[11].ok and results[11].output == "again"  # started again
    assert out["starts"] == 2
    assert starts(marker) == 2
    assert time.monotonic() - started < 30


@needs_bwrap
def test_a_huge_answer_is_read_at_once_and_one_too_long_stops_the_server(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interpreters.tools import _mcp

    monkeypatch.setattr(_mcp, "MAX_MESSAGE", 30 * 2**20)
    marker = ws / "starts"

    async def main() -> list[Any]:
        async with open_mcp({"h": hostile(marker, timeout=20.0)}, root=ws) as served:
            by = {t.name: t for t in served.tools}
            started = time.monotonic()
            big = await by["h_huge"].call({"size": 20_000_000})  # 20 MB on one line
            seconds = time.monotonic() - started
            monkeypatch.setattr(_mcp, "MAX_MESSAGE", 2**20)
            too_long = await by["h_huge"].call({"size": 2_000_000})
            after = await by["h_echo"].call({"text": "after"})
            return [big, seconds, too_long, after]

    big, seconds, too_long, after = anyio.run(main)
    assert big.ok and big.output.endswith(f"[{20_000_000 - MAX_OUTPUT} more characters left out]")
    assert seconds < 10  # the SDK's own reader takes minutes: it joins a line chunk by chunk
    assert too_long.error == (
        "MCP server 'h' sent an answer to 'h_huge' over 1 MB, and was stopped; it is started "
        "again at the next call"
    )
    assert after.ok and starts(marker) == 2


@needs_bwrap
def test_a_server_that_ended_between_calls_is_started_again_before_the_next(
    ws: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    marker = ws / "starts"

    async def main() -> list[Any]:
        async with open_mcp({"h": hostile(marker)}, root=ws) as served:
            by = {t.name: t for t in served.tools}
            bye = await by["h_quit"].call({})
            with anyio.fail_after(5):
                while starts(marker) == 1 and not served.connections["h"]._gone.is_set():
                    await anyio.sleep(0.02)
            return [bye, await by["h_echo"].call({"text": "after"})]

    bye, after = anyio.run(main)
    assert (bye.output, after.ok, after.output) == ("bye", True, "after")
    assert starts(marker) == 2
    assert "opdsl: warning: MCP server 'h' had ended; it is started again" in capfd.readouterr().err


def test_what_a_server_wrote_on_its_stderr_is_shown_escaped_and_redacted(
    ws: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tok-leaked-246810"
    monkeypatch.setenv("HOSTILE_TOKEN", secret)
    marker = ws / "starts"

    async def main() -> list[Any]:
        server = hostile(marker, "--variant", "leak", env=["HOSTILE_TOKEN"], confined=False)
        async with open_mcp({"h": server}, root=ws) as served:
            by = {t.name: t for t in served.tools}
            await by["h_quit"].call({})  # its line written, it ends between calls
            with anyio.fail_after(5):
                while not served.connections["h"]._gone.is_set():
                    await anyio.sleep(0.02)
            after = await by["h_echo"].call({"text": "after"})  # said, and started again
            return [after, await by["h_die"].call({})]

    after, died = anyio.run(main)
    assert after.ok and starts(marker) == 2
    warned = [line for line in capfd.readouterr().err.splitlines() if "had ended" in line]
    for said in (warned[0], str(died.error)):
        assert "\x1b" not in said and "\x07" not in said and secret not in said
        assert "MCP server 'h'" in said
        assert "opdsl: all is well, token [redacted])" in said
        assert "\\x1b[2J\\x1b]52;c;b3duZWQ=\\x07opdsl: all is well" in said  # seen, not obeyed
    assert warned[0].startswith("opdsl: warning: MCP server 'h' had ended (its stderr: \\x1b[2J")


@needs_bwrap
@pytest.mark.parametrize("install", ["virtualenv", "node_modules"])
def test_a_confined_server_installed_where_the_sandbox_hides_starts(
    ws: Path, tmp_path: Path, install: str
) -> None:
    # the workspace's siblings are hidden (its folder a tmpfs): an install beside it is seen
    # by its server only as what the server must read (its program, and the install it is in)
    if install == "virtualenv":
        top = tmp_path / "server-venv"
        top.mkdir()
        (top / "pyvenv.cfg").write_text("home = /usr/bin\n")
        program, code = top / "bin" / "hostile-server", top / "lib" / "server.py"
    else:
        top = tmp_path / "node_modules"
        program, code = top / ".bin" / "hostile-server", top / "hostile" / "server.py"
    for folder in (program.parent, code.parent):
        folder.mkdir(parents=True)
    shutil.copy(HOSTILE, code)
    # a launcher that runs the code beside it, as a console script or an npm bin does
    program.write_text(f'#!/bin/sh\nexec {sys.executable} -I "{code}" "$@"\n')
    program.chmod(0o755)

    async def main() -> Any:
        async with open_mcp({"h": MCPServer.stdio([str(program)], timeout=10.0)}, root=ws) as s:
            return await {t.name: t for t in s.tools}["h_echo"].call({"text": "hidden no more"})

    said = anyio.run(main)
    assert (said.ok, said.output) == (True, "hidden no more")
    # the rest of the workspace's folder stays hidden from it
    (tmp_path / "neighbour.txt").write_text("the neighbour's")

    async def write() -> Any:
        async with open_mcp({"h": MCPServer.stdio([str(program)], timeout=10.0)}, root=ws) as s:
            by = {t.name: t for t in s.tools}
            return await by["h_write"].call({"path": str(tmp_path / "neighbour.txt")})

    anyio.run(write)
    assert (tmp_path / "neighbour.txt").read_text() == "the neighbour's"


@needs_bwrap
def test_a_confined_server_has_only_the_variables_named_and_no_network(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOSTILE_GIVEN", "given-value")
    monkeypatch.setenv("HOSTILE_KEPT_BACK", "kept-back-value")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]

    async def main() -> dict[str, str]:
        servers = {
            "h": hostile(env=["HOSTILE_GIVEN"]),
            "n": hostile(network=True, prefix="net_"),
        }
        async with open_mcp(servers, root=ws) as served:
            by = {t.name: t for t in served.tools}
            env = await by["h_env"].call({})
            closed = await by["h_connect"].call({"port": port})
            opened = await by["net_connect"].call({"port": port})
            return {"env": env.output, "closed": str(closed.error), "opened": opened.output}

    try:
        out = anyio.run(main)
    finally:
        listener.close()
    env = json.loads(out["env"])
    assert env["HOSTILE_GIVEN"] == "given-value"
    assert "HOSTILE_KEPT_BACK" not in env
    # PWD is bubblewrap's, LC_CTYPE the server's own Python's (PEP 538, in a C locale)
    assert set(env) - {"PWD", "LC_CTYPE"} == {"HOSTILE_GIVEN", "PATH", "HOME"}
    assert env["HOME"] == "/tmp"
    assert out["closed"].startswith("h_connect: cannot connect")
    assert out["opened"] == "connected"


def test_servers_that_cannot_be_used_say_why_in_one_line(ws: Path) -> None:
    async def open_with(servers: dict[str, MCPServer]) -> None:
        async with open_mcp(servers, root=ws):
            pass

    cases: list[tuple[dict[str, MCPServer], type[Exception], str]] = [
        (
            {"m": hostile(None, "--mute", start_timeout=1.0, confined=False)},
            MCPError,
            "MCP server 'm' did not finish starting within 1s",
        ),
        (
            {"x": MCPServer.stdio(["/nonexistent/mcp-server"], confined=False)},
            MCPError,
            "MCP server 'x' (/nonexistent/mcp-server) cannot start: MCPError: no program "
            "'/nonexistent/mcp-server' is found (on PATH, or at that path)",
        ),
        (
            {"s": hostile(None, "--variant", "string", confined=False)},
            MCPError,
            "MCP server 's' lists tools that are not MCP tools: tools.0.inputSchema.type: Input "
            "should be 'object'",
        ),
        (
            {"a": hostile(prefix="t_", confined=False), "b": hostile(prefix="t_", confined=False)},
            DuplicateTool,
            "MCP servers 'a' and 'b' both offer 't_echo' (and 10 more); give a server a prefix",
        ),
        ({"bad name": hostile(confined=False)}, MCPError, "MCP server name 'bad name'"),
    ]
    for servers, kind, said in cases:
        with pytest.raises(kind) as caught:
            anyio.run(open_with, servers)
        assert str(caught.value).startswith(said), str(caught.value)
        assert "\n" not in str(caught.value)


def test_a_schema_that_is_slow_to_check_or_refers_nowhere_blocks_nothing(
    ws: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async def main() -> tuple[list[str], Any, float]:
        async with open_mcp(
            {"h": hostile(None, "--variant", "schemas", confined=False)}, root=ws
        ) as served:
            by = {t.name: t for t in served.tools}
            started = time.monotonic()
            said = await by["h_pattern"].call({"text": "a" * 40 + "!"})
            return sorted(by), said, time.monotonic() - started

    names, said, took = anyio.run(main)
    # the pattern is the server's to check: the call reaches it at once
    assert (said.output, took < 1) == ("the server checks its own pattern", True)
    assert "h_badref" not in names and "h_baddynref" not in names and "h_echo" in names
    err = capfd.readouterr().err
    assert (
        "MCP server 'h': tool 'badref' is left out: its input schema refers to '#/$defs/nowhere'"
        in err
    )
    # a $dynamicRef that leads nowhere would fail every call's check: left out as a $ref is
    assert (
        "MCP server 'h': tool 'baddynref' is left out: its input schema refers to '#nowhere', "
        "which is not in it"
    ) in err


_INNER = {
    "$id": "https://example.test/inner",
    "$dynamicAnchor": "n",
    "type": "object",
    "properties": {"a": {"$dynamicRef": "#n"}},
}


@pytest.mark.parametrize(
    ("properties", "problem", "errors"),
    [
        # a nested $id is a base of its own: its anchor is found from inside it
        ({"x": _INNER}, None, ["3 is not of type 'object'"]),
        # data is not a schema: a $ref in a default refers to nothing
        ({"x": {"type": "integer", "default": {"$ref": "#/nowhere"}}}, None, []),
        # but a property may be named like that keyword
        ({"default": {"$ref": "#/nowhere"}}, "refers to '#/nowhere', which is not in it", []),
        ({"x": {"$dynamicRef": "http://[::1"}}, "refers to 'http://[::1', which is not in it", []),
        ({"x": {"$ref": "http://[::1"}}, "refers to 'http://[::1', which is not in it", []),
        (
            {"x": {"$id": "http://[::1", "type": "integer"}},
            "cannot be read: ValueError: Invalid IPv6 URL",
            [],
        ),
    ],
)
def test_a_schemas_references_are_checked_from_where_they_are(
    properties: dict[str, Any], problem: str | None, errors: list[str]
) -> None:
    """A reference that leads nowhere leaves its tool out, with one line (a reference or an
    $id that is no URI too, never an error out of the listing); one that leads somewhere, from
    the resource it is in, is kept."""
    validator, said = _validator({"type": "object", "properties": properties})
    assert said == (None if problem is None else f"its input schema {problem}")
    if validator is not None:
        assert [e.message for e in validator.iter_errors({"x": 3})] == errors


def test_a_schema_that_fails_to_check_arguments_fails_the_call_not_the_run(ws: Path) -> None:
    """Whatever the listing's checks let through, a check that breaks is the call's failed
    result, naming the server and the tool, as every other failure of a call is."""

    class Broken:
        def iter_errors(self, arguments: object) -> list[object]:
            raise LookupError("no such anchor")

    async def main() -> ToolResult:
        async with open_mcp({"h": hostile(confined=False)}, root=ws) as served:
            served.connections["h"].validators["echo"] = Broken()
            return await {t.name: t for t in served.tools}["h_echo"].call({"text": "hi"})

    assert anyio.run(main).error == (
        "MCP server 'h': the input schema of tool 'h_echo' cannot check arguments: "
        "LookupError: no such anchor"
    )


def test_without_the_mcp_extra_a_server_is_one_clear_error(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if it were not installed

    async def open_one() -> None:
        async with open_mcp({"h": hostile(confined=False)}, root=ws):
            pass

    with pytest.raises(
        MCPError, match=r"MCP servers need the mcp extra: pip install 'opdsl\[mcp\]'"
    ):
        anyio.run(open_one)
    assert listed_tools({}) == [] and listed_tools(None) == []  # no server: nothing imported


def test_with_an_mcp_older_than_2_a_server_says_which_is_installed(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interpreters.agents import _bridge

    # an mcp 1.x distribution found first on the path, as where it is what pip installed
    old = tmp_path / "site" / "mcp-1.9.0.dist-info"
    old.mkdir(parents=True)
    (old / "METADATA").write_text("Metadata-Version: 2.1\nName: mcp\nVersion: 1.9.0\n")
    monkeypatch.syspath_prepend(str(old.parent))
    _bridge.mcp_problem.cache_clear()

    async def open_one() -> None:
        async with open_mcp({"h": hostile(confined=False)}, root=ws):
            pass

    try:
        with pytest.raises(MCPError) as caught:
            anyio.run(open_one)
    finally:
        _bridge.mcp_problem.cache_clear()
    said = str(caught.value)
    assert said.startswith("MCP server 'h' (") and "\n" not in said
    assert said.endswith(
        "cannot start: MCPError: MCP servers need the mcp extra: mcp 1.9.0 is installed; "
        "opdsl's MCP support needs mcp 2.x (pip install 'mcp>=2,<3')"
    )


@needs_bwrap
def test_calls_are_journaled_redacted_budgeted_and_replayed_without_the_server(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOSTILE_TOKEN", "tok-secret-98765")
    marker = ws / "starts"
    db = SqliteJournal(tmp_path / "runs.db")
    done = run(
        mcp_programs.echo_twice,
        "say tok-secret-98765",
        db=db,
        mcp={"h": hostile(marker)},
        workspace=ws,
    )
    assert done.status == "completed", done.error
    # the program sees what the server said; the journal never holds the secret
    assert done.value == ["say tok-secret-98765", "say tok-secret-98765!"]
    entries = db.entries(done.run_id)
    assert [json.loads(e.effect_json)["name"] for e in entries if e.kind == "tool"] == [
        "h_echo",
        "h_echo",
    ]
    # what the file holds (its entries are in its WAL until a checkpoint): the text around
    # the secret is kept, the secret never
    kept = SqliteJournal(tmp_path / "runs.db", read_only=True).entries(done.run_id)
    text = " ".join(
        f"{e.effect_json} {e.result_json} {e.error_json}" for e in kept if e.kind == "tool"
    )
    assert "say [redacted]" in text
    assert "tok-secret-98765" not in text
    assert "tok-secret-98765" not in (db.run(done.run_id).config_json or "")
    config = json.loads(db.run(done.run_id).config_json or "{}")
    assert config["mcp"]["h"]["server"]["argv"][-2:] == ["--marker", str(marker)]
    assert "h_echo" in [t["name"] for t in config["mcp"]["h"]["tools"]]
    assert starts(marker) == 1
    # a replay answers from the journal: the server is not started
    again = replay(done.run_id, db=db)
    assert again.status == "completed"
    assert again.value == ["say [redacted]", "say [redacted]!"]
    assert starts(marker) == 1
    # a budget of one tool call stops the second
    limited = run(
        mcp_programs.echo_within, "x", db=MemoryJournal(), mcp={"h": hostile(marker)}, workspace=ws
    )
    assert isinstance(limited.value, Failure)
    assert limited.value.failure().exceeded == "tool_calls"


@needs_bwrap
def test_a_server_cannot_write_the_journal_of_the_run_in_its_workspace(ws: Path) -> None:
    db, wal = str(ws / "runs.db"), str(ws / "runs.db-wal")
    done = run(mcp_programs.write_to, wal, db=db, mcp={"h": hostile()}, workspace=ws)
    assert done.value == f"error: h_write: cannot write {wal}: Read-only file system"
    # a resume starts the recorded server again, as confined
    waiting = run(mcp_programs.ask_then_write, wal, db=db, mcp={"h": hostile()}, workspace=ws)
    assert waiting.status == "waiting", waiting.error
    done = resume(waiting.run_id, db=db, answer="yes")
    assert done.value == f"error: h_write: cannot write {wal}: Read-only file system"
    assert b"written" not in Path(wal).read_bytes()


@needs_bwrap
def test_a_model_is_offered_the_servers_schemas_and_its_calls_are_performed(ws: Path) -> None:
    model = ScriptedModel(
        [
            Response(
                tool_calls=(
                    ToolCall(id="1", name="h_echo", arguments={"text": "from the model"}),
                    ToolCall(id="2", name="h_fail", arguments={}),
                ),
                stop_reason="tool_use",
            )
        ]
    )
    done = run(
        mcp_programs.offered,
        "go",
        model=model,
        db=MemoryJournal(),
        mcp={"h": hostile()},
        workspace=ws,
    )
    assert done.value == "from the model | error: h_fail: it went wrong on purpose"
    (request,) = model.requests
    assert [s.name for s in request.tools] == ["h_echo", "h_fail"]
    assert request.tools[0].parameters == {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }


@needs_bwrap
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_timeout_cuts_a_call_never_answered_and_calls_in_par_share_the_server(
    ws: Path, backend: str
) -> None:
    marker = ws / "starts"
    started = time.monotonic()
    done = run(
        mcp_programs.cut_then_both,
        0.5,
        db=MemoryJournal(),
        mcp={"h": hostile(marker, timeout=30.0)},
        workspace=ws,
        backend=backend,
    )
    assert done.status == "completed", done.error
    assert done.value == ["Failure", "a", "b"]
    assert starts(marker) == 1  # the cut call left the server running
    assert time.monotonic() - started < 15


@needs_bwrap
def test_a_resumed_run_says_what_its_servers_offer_now(
    ws: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "runs.db")
    waiting = run(mcp_programs.echo_then_ask, "hi", db=db, mcp={"h": hostile()}, workspace=ws)
    assert waiting.status == "waiting"
    # the server now takes other arguments for echo, which the journal called: refused
    changed = {"h": hostile(None, "--variant", "2")}
    with pytest.raises(MCPToolsChanged) as caught:
        resume(waiting.run_id, db=db, answer="yes", mcp=changed)
    assert str(caught.value) == (
        f"run {waiting.run_id} depends on MCP tools that changed since it started: MCP server "
        "'h' now takes other arguments for 'h_echo'; pass --accept-changed-code "
        "(accept_changed_code=True) to go on with what the servers offer now"
    )
    capfd.readouterr()
    # accepted: the changes are warnings, said before the program goes on, and it ends
    done = resume(waiting.run_id, db=db, answer="yes", mcp=changed, accept_changed_code=True)
    assert done.status == "completed", done.error
    assert done.value == "hi yes dotted"
    err = capfd.readouterr().err
    assert f"opdsl: warning: run {waiting.run_id}: MCP server 'h' no longer offers 'h_huge'" in err
    assert "now takes other arguments for 'h_echo' (recorded at the run's start)" in err


@needs_bwrap
def test_a_run_that_offered_a_model_every_tool_depends_on_each(ws: Path, tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    waiting = run(
        mcp_programs.offered_all_then_ask,
        "hi",
        model=ScriptedModel(["said"]),
        db=db,
        mcp={"h": hostile()},
        workspace=ws,
    )
    assert waiting.status == "waiting", waiting.error
    with pytest.raises(MCPToolsChanged, match="MCP server 'h' no longer offers 'h_huge'"):
        resume(waiting.run_id, db=db, answer="yes", mcp={"h": hostile(None, "--variant", "2")})


def test_the_tools_served_to_an_agent_are_depended_on() -> None:
    from interpreters.journal import Entry
    from interpreters.tools._mcp import _depended_on

    def entry(kind: str, effect: dict[str, Any]) -> Entry:
        return Entry(run_id="r", seq=1, address="1", kind=kind, effect_json=json.dumps(effect))

    agent = entry("agent", {"kind": "agent", "options": {"tools": ["h_echo"]}})
    depended = _depended_on([agent, entry("infer", {"kind": "infer", "tools": ["h_fail"]})])
    assert "h_echo" in depended and "h_fail" in depended and "h_huge" not in depended
    assert "h_huge" in _depended_on([entry("infer", {"kind": "infer", "tools": "all"})])


@needs_bwrap
def test_resume_starts_the_recorded_servers_again(ws: Path, tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    marker = ws / "starts"
    waiting = run(mcp_programs.echo_then_ask, "hi", db=db, mcp={"h": hostile(marker)}, workspace=ws)
    assert waiting.status == "waiting"
    done = resume(waiting.run_id, db=db, answer="yes")  # the servers as the run recorded them
    assert (done.status, done.value) == ("completed", "hi yes dotted")
    assert starts(marker) == 2


def test_a_recorded_server_unconfined_or_with_network_is_started_only_when_named_again(
    ws: Path, tmp_path: Path
) -> None:
    from interpreters.tools._mcp import servers_of

    db = str(tmp_path / "runs.db")
    marker = tmp_path / "starts"
    waiting = run(
        mcp_programs.echo_then_ask,
        "hi",
        db=db,
        mcp={"h": hostile(marker, confined=False)},
        workspace=ws,
    )
    assert waiting.status == "waiting", waiting.error
    marker.unlink()
    with pytest.raises(MCPError) as caught:
        resume(waiting.run_id, db=db, answer="yes")
    assert str(caught.value) == (
        "MCP server 'h' ran unconfined, which is started only when named again (--mcp, mcp= in "
        "the API) to resume"
    )
    assert not marker.exists()  # the command the journal names never ran
    with pytest.raises(MCPError, match="MCP server 'n' ran with the network"):
        servers_of({"mcp": {"n": {"server": {"argv": ["x"], "network": True}}}})
    # a record that is not one: an error naming the server, not a KeyError
    for bad, said in [
        ({}, "KeyError: 'argv'"),
        ({"argv": "x"}, "argv is 'x', not a list of texts"),
        ({"argv": ["x"], "timeout": "soon"}, "timeout is 'soon', not seconds"),
        ({"url": 5}, "url is 5, not a text"),
    ]:
        with pytest.raises(
            MCPError, match="MCP server 'h': the run's record of it is malformed"
        ) as c:
            servers_of({"mcp": {"h": {"server": bad}}})
        assert said in str(c.value)
    with pytest.raises(MCPError, match="MCP server 'h': the run's record of it is not an object"):
        servers_of({"mcp": {"h": {}}})
    done = resume(waiting.run_id, db=db, answer="yes", mcp={"h": hostile(marker, confined=False)})
    assert (done.status, done.value) == ("completed", "hi yes dotted")


def test_a_secret_on_a_servers_command_line_or_in_its_url_is_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A token the environment does not hold, given to an option named like a secret or in a
    query parameter so named, is not written into the run's record; the server is then
    started again only when named again, as one given a secret of the environment is."""
    from interpreters.tools._mcp import servers_of

    token = "ghp_" + "a1" * 18
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    for server in (
        MCPServer.stdio(["github-mcp-server", "--token", token, "stdio"]),
        MCPServer.stdio(["srv", f"--api-key={token}"]),
        MCPServer.http(f"https://example.com/mcp?v=1&api_key={token}#top"),
    ):
        recorded = server.to_json()
        assert token not in json.dumps(recorded), recorded
        with pytest.raises(MCPError, match="'s' was given a secret"):
            servers_of({"mcp": {"s": {"server": recorded}}})
    assert MCPServer.stdio(["github-mcp-server", "--token", token, "stdio"]).to_json()["argv"] == [
        "github-mcp-server",
        "--token",
        "[redacted]",
        "stdio",
    ]
    assert (
        MCPServer.http(f"https://example.com/mcp?v=1&api_key={token}#top").to_json()["url"]
        == "https://example.com/mcp?v=1&api_key=[redacted]#top"
    )
    # other options are kept as given, and start again from the record
    plain = MCPServer.stdio(["mcp-server-git", "--repository", ".", "--verbose=2"])
    assert servers_of({"mcp": {"s": {"server": plain.to_json()}}})["s"] == plain
    site = MCPServer.http("https://example.com/mcp?v=1&region=eu")
    assert servers_of({"mcp": {"s": {"server": site.to_json()}}})["s"] == site


@needs_bwrap
def test_an_imported_run_starts_no_server_it_names_until_named_again(
    ws: Path, tmp_path: Path
) -> None:
    from interpreters import export_run, import_run

    marker = ws / "starts"
    first = SqliteJournal(tmp_path / "first.db")
    waiting = run(
        mcp_programs.echo_then_ask, "hi", db=first, mcp={"h": hostile(marker)}, workspace=ws
    )
    other = SqliteJournal(tmp_path / "other.db")
    import_run(other, export_run(first, waiting.run_id), source="run.jsonl")
    with pytest.raises(OpdslError, match="names MCP servers; name them again"):
        resume(
            waiting.run_id,
            db=other,
            answer="yes",
            program=mcp_programs.echo_then_ask,
            tools=[],
            workspace=str(ws),
        )
    assert starts(marker) == 1  # the command the file names never ran
    done = resume(
        waiting.run_id,
        db=other,
        answer="yes",
        program=mcp_programs.echo_then_ask,
        tools=[],
        workspace=str(ws),
        mcp={"h": hostile(marker)},
    )
    assert (done.status, done.value) == ("completed", "hi yes dotted")


@needs_bwrap
def test_a_dry_run_lists_the_servers_tools_and_calls_none(ws: Path) -> None:
    from interpreters import dry_run

    marker = ws / "starts"
    tools = listed_tools({"h": hostile(marker)}, root=ws)
    plan = dry_run(mcp_programs.echo_twice, "x", tools=tools)
    assert plan.status == "completed"
    assert plan.tools == ["h_echo"]
    assert plan.would_run == ["h_echo at 1", "h_echo at 2"]
    assert starts(marker) == 1  # started to list its tools, and called never


@needs_bwrap
def test_the_command_line_names_servers(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ws)
    spec = f"h[timeout=10]={sys.executable} -I {HOSTILE}"
    db = str(tmp_path / "runs.db")
    argv = ["run", "tests.fixtures.mcp_programs:echo_twice", "--arg", "text=hi", "--db", db]
    assert main([*argv, "--mcp", spec, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "hi!" in out
    assert main([*argv, "--mcp", spec, "--dry-run"]) == 0
    assert "would run (side effects, skipped): h_echo at 1, h_echo at 2" in capsys.readouterr().out
    assert main([*argv, "--mcp", "h[loud]=x"]) == 2
    assert "unknown option 'loud'" in capsys.readouterr().err


def test_every_command_that_takes_mcp_says_it_in_the_same_words(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    said = {}
    for command in ("run", "resume", "answer", "worker"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        lines = capsys.readouterr().out.splitlines()
        start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("--mcp"))
        end = next(i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("-"))
        said[command] = " ".join(" ".join(lines[start:end]).split())
    assert len(set(said.values())) == 1, said
    assert "NAME[network,env=VAR,prefix=P,timeout=S,unconfined]" in said["resume"]
    assert "in place of those" in said["run"]  # what it means for a run gone on with


README = Path(__file__).resolve().parents[3] / "README.md"
FETCHERS = ("uvx", "npx", "bunx", "pipx")
"""Programs that fetch the server they run: without the network (and a cache) they cannot."""


def readme_mcp_commands() -> list[list[str]]:
    """The ``--mcp`` values of each command the README shows: a fenced block's command (its
    backslashed line ends joined) as the shell splits it, and each inline ``--mcp '...'``."""
    text = README.read_text(encoding="utf-8")
    fenced = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.S | re.M)
    found = []
    for m in fenced.finditer(text):
        for command in m.group(3).replace("\\\n", " ").splitlines():
            if m.group(2) != "python" and "--mcp" in command:
                words = shlex.split(command)
                found.append([words[i + 1] for i, w in enumerate(words[:-1]) if w == "--mcp"])
    found += [[spec] for spec in re.findall(r"--mcp '([^']*)'", fenced.sub("", text))]
    return found


def test_every_mcp_server_the_readme_shows_is_one_the_command_line_takes() -> None:
    commands = readme_mcp_commands()
    assert sum(map(len, commands)) >= 2
    for specs in commands:
        for name, server in mcp_servers(specs).items():  # what the CLI does with them
            fetcher = server.argv[0] if server.argv else None
            assert not (server.confined and not server.network and fetcher in FETCHERS), (
                f"README: --mcp {name}: {fetcher} fetches its server, which a server confined "
                "without the network cannot"
            )


@needs_bwrap
def test_the_mcp_servers_the_readme_shows_start_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers import sample_repo

    monkeypatch.chdir(sample_repo(tmp_path))  # the reader's repository, the current folder
    # installed beside opdsl (the test extra), as the README says to
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    servers = [s for specs in readme_mcp_commands() for s in mcp_servers(specs).items()]
    here = [(n, s) for n, s in servers if s.argv and shutil.which(s.argv[0])]
    if not here:
        pytest.skip("none of the README's MCP servers is installed here")
    for name, server in here:
        listed = listed_tools({name: server})
        assert listed, f"--mcp {name} lists no tools"


@needs_bwrap
def test_the_command_line_answers_and_resumes_with_the_servers_a_run_recorded(
    ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ws)
    db = str(tmp_path / "runs.db")
    spec = f"h={sys.executable} -I {HOSTILE}"
    program = "tests.fixtures.mcp_programs:echo_then_ask"
    assert main(["run", program, "--arg", "text=hi", "--db", db, "--mcp", spec, "--quiet"]) == 0
    capsys.readouterr()
    (run_id,) = [r.run_id for r in SqliteJournal(db).runs()]
    # named again, changed: refused in one line, the run left waiting
    changed = f"{spec} --variant 2"
    assert main(["answer", run_id, "yes", "--db", db, "--mcp", changed, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(
        "MCP server 'h' now takes other arguments for 'h_echo'; pass --accept-changed-code "
        "(accept_changed_code=True) to go on with what the servers offer now"
    )
    # as the run recorded them: it ends
    assert main(["answer", run_id, "yes", "--db", db, "--quiet"]) == 0
    assert "hi yes dotted" in capsys.readouterr().out


# --- real servers ------------------------------------------------------------------------


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@needs_bwrap
@pytest.mark.skipif(
    not (_has("mcp_server_git") and _has("mcp_server_time")),
    reason="mcp-server-git and mcp-server-time (the test extra) are not installed",
)
def test_mcp_server_git_and_mcp_server_time(tmp_path: Path) -> None:
    from tests.helpers import sample_repo

    repo = sample_repo(tmp_path)
    (repo / "new.txt").write_text("new\n")
    servers = {
        "git": MCPServer.stdio([sys.executable, "-m", "mcp_server_git", "--repository", str(repo)]),
        "time": MCPServer.stdio([sys.executable, "-m", "mcp_server_time"]),
    }
    done = run(
        mcp_programs.git_and_time, str(repo), db=MemoryJournal(), mcp=servers, workspace=repo
    )
    assert done.status == "completed", done.error
    status, log, now, wrong = done.value
    assert "new.txt" in status
    assert "Author: " in log or "Commit" in log
    assert json.loads(now)["timezone"] == "UTC"
    assert "Invalid timezone" in wrong


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


EVERYTHING = shutil.which("mcp-server-everything") or shutil.which(
    "mcp-server-everything",
    path=str(Path(__file__).resolve().parents[3] / ".cli/node_modules/.bin"),
)
"""npm's reference server: ``make cli`` installs it in ``.cli/``; a global install will do."""


@pytest.fixture
def everything_http() -> Iterator[str]:
    assert EVERYTHING is not None
    port = _free_port()
    proc = subprocess.Popen(
        [EVERYTHING, "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.skipif(
    EVERYTHING is None,
    reason="npm's @modelcontextprotocol/server-everything is not installed (make cli)",
)
@needs_bwrap
def test_server_everything_over_stdio_and_streamable_http(ws: Path, everything_http: str) -> None:
    exe = EVERYTHING
    assert exe is not None

    async def main() -> dict[str, Any]:
        servers = {
            "ev": MCPServer.stdio([exe], timeout=2.0),
            "web": MCPServer.http(everything_http, timeout=10.0),
        }
        async with open_mcp(servers, root=ws) as served:
            by = {t.name: t for t in served.tools}
            return {
                "echo": await by["ev_echo"].call({"message": "over stdio"}),
                "sum": await by["web_get-sum"].call({"a": 2, "b": 3}),
                "bad": await by["ev_get-sum"].call({"a": "two"}),
                "image": await by["ev_get-tiny-image"].call({}),
                "slow": await by["ev_trigger-long-running-operation"].call(
                    {"duration": 5, "steps": 5}
                ),
                "after": await by["ev_echo"].call({"message": "still there"}),
                "names": sorted(by),
            }

    out = anyio.run(main)
    assert out["echo"].ok and "over stdio" in out["echo"].output
    assert out["sum"].ok and "5" in out["sum"].output
    assert not out["bad"].ok and "invalid arguments for tool 'ev_get-sum'" in str(out["bad"].error)
    assert "[image: image/png," in out["image"].output
    assert (
        out["slow"].error
        == "MCP server 'ev' gave no answer to 'ev_trigger-long-running-operation' within 2s"
    )
    assert out["after"].ok
    assert "web_echo" in out["names"] and "ev_echo" in out["names"]
