"""Codex given opdsl's tools over MCP, as Claude Code has them, against the real Codex CLI
offline (a Responses API server on 127.0.0.1 scripted as the model): its only MCP server is
opdsl's, the first request already offers exactly the served tools, a call runs the bound
tool in the workspace, and a tool of codex's own kills the turn before it can change
anything."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from interpreters import AgentError, MemoryJournal, run
from op import Op, TurnRecord, agent
from tests.interpreters.agents.test_codex_real import CODEX, _backend
from tests.servers import Reply, ScriptedServer, responses

pytestmark = pytest.mark.skipif(
    not CODEX.exists(),
    reason=f"the real Codex CLI is not installed at {CODEX} (make cli installs it)",
)


def served(prompt: str) -> Op[Any]:
    try:
        return (
            yield from agent("codex", prompt, tools=["read_file", "write_file"], model="test-model")
        )
    except AgentError as exc:
        return {"kind": exc.kind, "reason": exc.record.crash_reason, "record": exc.record}


def opdsl_call(call_id: str, tool: str, arguments: dict[str, Any]) -> Any:
    """The model calling one of opdsl's tools as codex offers them: ``tool`` in the
    ``mcp__opdsl`` namespace."""
    answer = responses(calls=[(call_id, f"mcp__opdsl__{tool}", arguments)])

    def namespaced(req: Any) -> Reply:
        reply = answer(req)
        chunks = [
            c.replace('"name": "mcp__opdsl__', '"namespace": "mcp__opdsl", "name": "')
            for c in reply.chunks or []
        ]
        return dataclasses.replace(reply, chunks=chunks)

    return namespaced


def _go(tmp_path: Path, answers: list[Any]) -> tuple[Any, Path, list[dict[str, Any]]]:
    work = tmp_path / "work"
    work.mkdir()
    with ScriptedServer([*answers, *[responses("x")] * 4]) as srv:
        result = run(
            served,
            "write hi to out.txt",
            agents={"codex": _backend(srv.url)},
            db=MemoryJournal(),
            workspace=str(work),
        )
    assert result.status == "completed", result.describe()
    return result.value, work, srv.requests


def test_codex_calls_opdsls_tools_over_mcp(tmp_path: Path) -> None:
    record, work, requests = _go(
        tmp_path,
        [opdsl_call("c1", "write_file", {"path": "out.txt", "content": "hi\n"}), responses("ok")],
    )
    assert isinstance(record, TurnRecord), record
    assert (work / "out.txt").read_text() == "hi\n"  # written by opdsl's tool, in the workspace
    assert [(t["name"], t["status"]) for t in record.tool_calls] == [("write_file", "ok")]
    assert record.tool_calls[0]["output"] == "wrote 3 characters to out.txt"
    # the first request already offers opdsl's tools, exactly those, as one namespace
    spaces = [t for t in requests[0]["tools"] if str(t.get("name")).startswith("mcp__")]
    assert [(s["name"], sorted(f["name"] for f in s["tools"])) for s in spaces] == [
        ("mcp__opdsl", ["read_file", "write_file"])
    ]


@pytest.mark.skipif(
    CODEX.resolve().is_relative_to("/tmp"),
    reason="Codex's own sandbox gives a command a /tmp of its own, which hides a Codex installed "
    "under /tmp from the sandbox's helper (bwrap: execvp codex-linux-sandbox): check out elsewhere",
)
def test_a_tool_of_codexs_own_writes_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "work" / "marker"
    out, _, requests = _go(
        tmp_path, [responses(calls=[("c1", "exec_command", {"cmd": f"touch {marker}"})])]
    )
    assert not marker.exists()  # its sandbox is read-only
    # the command ran in that sandbox and failed there; this codex does not show its unified
    # exec as an item of its stream, so the turn is not killed for it (the README says so)
    fed = [i for r in requests[1:] for i in r.get("input", []) if i.get("call_id") == "c1"]
    assert any("Read-only file system" in str(i.get("output")) for i in fed), fed
    if isinstance(out, dict):  # a codex that does show it is refused at that item
        assert out["kind"] == "refused", out
        assert "codex used a tool of its own" in out["reason"]
        assert out["record"].tool_calls == ()
    else:
        assert out.tool_calls == ()  # nothing of its own tool is kept as one of opdsl's calls
