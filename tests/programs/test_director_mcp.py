"""``opdsl mcp director`` driven directly over MCP, as a Claude Code session drives it: the
server is a real subprocess on stdio, the implementor the run's model answering over HTTP
from the loopback OpenAI-compatible server. Every move the workflow does not take now is
refused, saying why, and changes nothing; the allowed ones take a goal from PLAN to DONE with
the steps committed; the workflow survives its server (a new one goes on where it was); and
``--abandon`` ends it with the files put back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.programs.test_director import JOURNEY_PLAN, STEP_COMMITS, TEST_GREET, _repo, git_log
from tests.programs.test_director_readme import Director
from tests.servers import ScriptedServer

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mcp")


def _env(srv: ScriptedServer) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OPDSL_") or k == "OPDSL_SEAL_KEY"
    }
    env.update(
        {
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": f"{srv.url}/v1",
            "OPDSL_MODEL": "openai:gpt-4.1-mini",
            "PYTHONPATH": str(ROOT),
        }
    )
    return env


Call = Callable[..., Any]


@asynccontextmanager
async def session(repo: Path, env: dict[str, str], *args: str) -> AsyncIterator[Call]:
    """A client of ``opdsl mcp director`` started in ``repo``; yields ``call(tool, **args)``,
    which answers the tool's text (``REFUSED: ...`` for a refused move)."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "interpreters", "mcp", "director", *args],
        env=env,
        cwd=str(repo),
    )
    async with Client(stdio_client(params), mode="legacy", cache=None) as client:
        listed = await client.list_tools()
        assert sorted(t.name for t in listed.tools) == [
            "fsm_status",
            "fsm_to",
            "handoff_draft",
            "handoff_verdict",
            "revise_step",
            "run_implementor",
        ]

        async def call(tool: str, **arguments: Any) -> str:
            result = await client.call_tool(tool, arguments)
            text = "".join(getattr(b, "text", "") for b in result.content)
            assert result.is_error == text.startswith(("REFUSED", "FAILED")), text
            return text

        yield call


def fields(status: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in status.split() if "=" in part)


def _status_of(repo: Path, env: dict[str, str], run_id: str) -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "interpreters", "show", run_id],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    return shown.stdout


def test_every_move_over_mcp_refused_or_taken_from_plan_to_done(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    model = Director()
    with ScriptedServer([model] * 40) as srv:
        env = _env(srv)

        async def drive() -> str:
            async with session(repo, env) as call:
                first = fields(await call("fsm_status"))
                assert (
                    first["state"] == "PLAN" and first["implementor"] == "model:openai:gpt-4.1-mini"
                )
                assert first["next"] == "DRAFT"
                refused = {
                    "fsm_to BUFFER": await call("fsm_to", state="BUFFER"),
                    "fsm_to IMPLEMENT": await call("fsm_to", state="IMPLEMENT"),
                    "fsm_to LATER": await call("fsm_to", state="LATER"),
                    "fsm_to DRAFT, no plan": await call("fsm_to", state="DRAFT"),
                    "fsm_to DRAFT, a bad plan": await call(
                        "fsm_to", state="DRAFT", plan={"goal": "x", "steps": []}
                    ),
                    "run_implementor in PLAN": await call("run_implementor"),
                    "handoff_draft in PLAN": await call(
                        "handoff_draft", summary="s", tests=["test_greet.py"]
                    ),
                    "handoff_verdict in PLAN": await call("handoff_verdict", verdict="PASS run=0"),
                    "revise_step in PLAN": await call("revise_step", step={}),
                }
                expected = {
                    "fsm_to BUFFER": "the workflow is in PLAN and cannot move to BUFFER; from "
                    "PLAN it may move to DRAFT",
                    "fsm_to IMPLEMENT": "cannot move to IMPLEMENT",
                    "fsm_to LATER": "'LATER' is not a state of the workflow",
                    "fsm_to DRAFT, no plan": "PLAN -> DRAFT takes the plan the user approved",
                    "fsm_to DRAFT, a bad plan": "the plan is malformed at steps",
                    "run_implementor in PLAN": "run_implementor() starts from BUFFER; the "
                    "workflow is in PLAN",
                    "handoff_draft in PLAN": "the drafter hands over in DRAFT",
                    "handoff_verdict in PLAN": "the validator hands over in VALIDATE",
                    "revise_step in PLAN": "a step is revised in BUFFER after it failed",
                }
                for what, said in refused.items():
                    assert said.startswith("REFUSED: ") and expected[what] in said, (what, said)
                # none of them changed anything
                assert fields(await call("fsm_status")) == first
                assert not (repo / "handoff").exists()

                assert fields(await call("fsm_to", state="DRAFT", plan=JOURNEY_PLAN))["state"] == (
                    "DRAFT"
                )
                said = await call("fsm_to", state="BUFFER")
                assert "the drafter handed over no summary" in said, said
                said = await call("handoff_draft", summary="greet.py", tests=["test_greet.py"])
                assert "the drafter's test test_greet.py cannot be read" in said, said
                (repo / "test_greet.py").write_text(TEST_GREET)  # the drafter subagent's
                said = await call("handoff_draft", summary="greet.py", tests=["test_greet.py"])
                assert said.startswith("OK handoff/draft.md written"), said
                assert fields(await call("fsm_to", state="BUFFER"))["state"] == "BUFFER"
                said = await call("fsm_to", state="PLAN")
                assert "BUFFER -> PLAN is for a plan defect: say it" in said, said
                assert "revised in BUFFER after it failed" in await call(
                    "revise_step", step=JOURNEY_PLAN["steps"][0]
                )

                handoff = await call("run_implementor")
                assert handoff.startswith("HANDOFF state=VALIDATE run=1 step=2"), handoff
                assert "commits=2" in handoff
                stale = await call("handoff_verdict", verdict="PASS run=2")
                assert "the verdict is stale" in stale, stale
                both = await call("handoff_verdict", verdict="PASS run=1\nFAIL step=1 run=1")
                assert "both PASS and FAIL" in both, both
                assert "handoff/validate.md is missing" in await call("fsm_to", state="DONE")
                said = await call("handoff_verdict", verdict="PASS run=1")
                assert said == "OK handoff/validate.md: PASS run=1", said
                said = await call("fsm_to", state="BUFFER")
                assert "the verdict is PASS and every step is done" in said, said
                done = fields(await call("fsm_to", state="DONE"))
                assert done["state"] == "DONE" and done["next"] == "PLAN"
                return done["run"]

        run_id = anyio.run(drive)
        shown = _status_of(repo, env, run_id)
    assert "fsm=DONE" in shown and "validation_run=1" in shown, shown
    assert git_log(repo)[:2] == STEP_COMMITS
    assert json.loads((repo / "handoff" / "plan.json").read_text()) == JOURNEY_PLAN
    assert model.step2 == 3  # step 2's implementor was wrong twice, then right


def test_the_workflow_outlives_its_server_and_abandon_puts_the_files_back(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    with ScriptedServer([Director()] * 40) as srv:
        env = _env(srv)

        async def first() -> str:
            async with session(repo, env) as call:
                await call("fsm_to", state="DRAFT", plan=JOURNEY_PLAN)
                (repo / "test_greet.py").write_text(TEST_GREET)
                await call("handoff_draft", summary="greet.py", tests=["test_greet.py"])
                return fields(await call("fsm_to", state="BUFFER"))["run"]

        async def second() -> dict[str, str]:
            async with session(repo, env) as call:
                return fields(await call("fsm_status"))

        run_id = anyio.run(first)
        again = anyio.run(second)  # a new server, a new session
        assert again["run"] == run_id and again["state"] == "BUFFER"
        # the backend is the run's: a server started with another one says the run's
        env_other = {**env, "OPDSL_IMPLEMENTOR": "claude-code"}
        status = subprocess.run(
            [sys.executable, "-m", "interpreters", "mcp", "status"],
            cwd=repo,
            env=env_other,
            capture_output=True,
            text=True,
        )
        assert f"run {run_id}, implementor model:openai:gpt-4.1-mini" in status.stdout, status
        abandoned = subprocess.run(
            [sys.executable, "-m", "interpreters", "mcp", "director", "--abandon"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
        )
    assert abandoned.returncode == 0, abandoned.stderr
    assert "ABANDONED" in abandoned.stdout
    assert not (repo / "test_greet.py").exists() and not (repo / "handoff").exists()
    assert not (repo / ".opdsl" / "director.json").exists()
    assert git_log(repo) == [git_log(repo)[0]] and git_log(repo)[0].endswith("|start|N")


MOVE = """
import json, sys
from pathlib import Path
from interpreters.cli._mcp import Director
print(Director(Path.cwd(), None).move(json.loads(sys.argv[1])), flush=True)
"""


def test_a_move_cut_off_with_its_server_is_taken_up_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ends (SIGKILL) while the implementor works: the next server's first move
    takes the cut-off run_implementor() up where the journal has it, then answers."""
    import time

    from interpreters.cli._mcp import Director as Server

    repo = _repo(tmp_path)
    honest = Director()
    first = [True]

    def answers(req: dict[str, Any]) -> Any:
        from tests.servers import Reply

        if first[0]:  # the first implementor call never answers: the server is killed in it
            first[0] = False
            return Reply(hang=True)
        return honest(req)

    with ScriptedServer([answers] * 40) as srv:
        env = _env(srv)
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
            monkeypatch.setenv(name, env[name])
        server = Server(repo, None, "model", "openai:gpt-4.1-mini")
        server.move({"move": "to", "state": "DRAFT", "plan": JOURNEY_PLAN})
        (repo / "test_greet.py").write_text(TEST_GREET)
        server.move({"move": "handoff_draft", "summary": "greet.py", "tests": ["test_greet.py"]})
        assert server.move({"move": "to", "state": "BUFFER"}).startswith("state=BUFFER")
        cut = subprocess.Popen(
            [sys.executable, "-c", MOVE, json.dumps({"move": "run_implementor"})],
            cwd=repo,
            env=env,
        )
        deadline = time.monotonic() + 60
        while not srv.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.requests, "the implementor was never asked"
        cut.kill()
        cut.wait()
        status = fields(server.move({"move": "status"}))
    assert status["state"] == "VALIDATE" and status["validation_run"] == "1", status
    assert git_log(repo)[:2] == STEP_COMMITS


def test_a_tool_names_no_other_move_and_takes_only_the_arguments_it_declares(
    tmp_path: Path,
) -> None:
    """A session cannot reach a move through another tool's arguments (``abandon`` is the
    command line's alone): an argument a tool's input schema does not declare is refused,
    naming it, and nothing changes."""
    repo = _repo(tmp_path)
    with ScriptedServer([Director()] * 4) as srv:
        env = _env(srv)

        async def drive() -> tuple[str, dict[str, str], list[str], dict[str, str]]:
            async with session(repo, env) as call:
                before = fields(await call("fsm_status"))
                refused = [
                    await call("fsm_status", move="abandon"),
                    await call("fsm_to", state="DRAFT", move="abandon"),
                    await call("run_implementor", guidance="go", extra=1),
                ]
                after = fields(await call("fsm_status"))
                return before["run"], before, refused, after

        run_id, before, refused, after = anyio.run(drive)
    assert refused == [
        "REFUSED: fsm_status takes no argument 'move'; nothing was changed",
        "REFUSED: fsm_to takes no argument 'move'; nothing was changed",
        "REFUSED: run_implementor takes no argument 'extra'; nothing was changed",
    ]
    assert after == before and after["state"] == "PLAN"
    assert json.loads((repo / ".opdsl" / "director.json").read_text())["run_id"] == run_id
    assert not (repo / "handoff").exists()


def test_a_workflow_that_could_not_be_sealed_as_yours_is_not_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each move resumes the run by the names it holds, which only a run sealed as yours
    may: without a seal key, the first move says why, and no run is begun."""
    from interpreters.cli._command import UsageError
    from interpreters.cli._mcp import Director as Server

    repo = _repo(tmp_path)
    monkeypatch.setenv("OPDSL_SEAL_KEY", "relative/seal.key")
    server = Server(repo, None, "model", "openai:gpt-4.1-mini")
    with pytest.raises(UsageError, match="the workflow cannot start: OPDSL_SEAL_KEY is a relative"):
        server.move({"move": "status"})
    assert not (repo / ".opdsl" / "director.json").exists()
