"""A run on Temporal records the MCP tools of the worker that admitted it, and a worker that
offers them otherwise does not go on as if nothing had changed: a change of a tool the run
depends on makes it wait (its activity failing with the reason, retried) until a worker that
offers them as it knew them takes it; any other change is a warning, and the run goes on.

The workers are in this process, each with the hostile MCP server of ``tests/fixtures``
(``--variant 2``: its ``echo`` takes other arguments and ``huge`` is gone)."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowHistory
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.worker import Replayer

from interpreters.temporal import (
    OpdslRun,
    answer,
    connect,
    export,
    make_worker,
    outcome,
    sandbox_runner,
    start_run,
)
from interpreters.temporal import _activities as activities_module
from interpreters.temporal._activities import Activities
from interpreters.temporal._tools import RunTools
from interpreters.temporal._types import EffectCall, tools_digest
from interpreters.tools import open_mcp
from interpreters.tools._mcp import MCPServer
from tests.interpreters.temporal.conftest import Server, asked
from tests.interpreters.temporal.tools import word_count

HOSTILE = str(Path(__file__).resolve().parents[2] / "fixtures" / "mcp_hostile.py")
ECHO_THEN_ASK = "tests.fixtures.mcp_programs:echo_then_ask"
ASK_THEN_DOTTED = "tests.interpreters.temporal.asking_programs:ask_then_dotted"
COUNTED = "tests.interpreters.temporal.asking_programs:echo_ask_count_dotted"


def _server(*extra: str) -> MCPServer:
    # unconfined: what is tested is the tool list, not the sandbox (which needs bubblewrap)
    return MCPServer.stdio([sys.executable, "-I", HOSTILE, *extra], confined=False, timeout=10)


@asynccontextmanager
async def _worker(
    client: Client,
    queue: str,
    root: Path,
    *extra: str,
    accept: bool = False,
    also: tuple[str, ...] | None = None,
) -> AsyncIterator[None]:
    """A worker on ``queue`` whose MCP server ``h`` is the hostile one (``extra``: its
    options), with the quick tool ``word_count``, for as long as the block runs (``accept``:
    it accepts changed code; ``also``: a second hostile server, ``g``, with these options)."""
    servers = {"h": _server(*extra)}
    if also is not None:
        servers["g"] = _server(*also)
    async with open_mcp(servers, root=root) as served:
        worker = make_worker(
            client,
            task_queue=queue,
            programs=[ECHO_THEN_ASK, ASK_THEN_DOTTED, COUNTED],
            tools=[word_count],
            mcp=served,
            passthrough=("tests",),
            sticky_seconds=0.5,
            accept_changed_code=accept,
        )
        async with worker:
            yield


async def _pending_failure(handle: WorkflowHandle[object, object]) -> str:
    """The last failure of the run's pending activity, once it has one."""
    for _ in range(400):
        described = await handle.describe()
        for pending in described.raw_description.pending_activities:
            if pending.last_failure.message:
                return pending.last_failure.message
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {handle.id} has no failing activity")


async def _replays(client: Client, handle: WorkflowHandle[object, object]) -> str | None:
    replayer = Replayer(
        workflows=[OpdslRun],
        workflow_runner=sandbox_runner(("tests",)),
        data_converter=client.data_converter,
    )
    result = await replayer.replay_workflow(
        await handle.fetch_history(), raise_on_replay_failure=False
    )
    return None if result.replay_failure is None else str(result.replay_failure)


def test_a_run_waits_for_a_worker_with_the_tools_it_depends_on(
    temporal: Server, tmp_path: Path
) -> None:
    async def main() -> None:
        client = await connect(temporal.target)
        async with _worker(client, "mcp-changed", tmp_path):
            handle = await start_run(
                client,
                ECHO_THEN_ASK,
                task_queue="mcp-changed",
                args=["hello"],
                run_id="mcp-changed",
            )
            await asked(handle)  # h_echo called: the run depends on it
        # the worker comes back with a server whose echo takes other arguments
        async with _worker(client, "mcp-changed", tmp_path, "--variant", "2"):
            await answer(client, "mcp-changed", "yes")
            said = await _pending_failure(handle)
            assert said == (
                "run mcp-changed depends on MCP tools that changed since it started: MCP server "
                "'h' now takes other arguments for 'h_echo'; the run waits for a worker whose MCP "
                "servers offer them as it started with them (or end it: temporal workflow "
                "terminate)"
            )
            assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        # a worker that offers them as the run knew them takes the effect: the run goes on
        async with _worker(client, "mcp-changed", tmp_path):
            ended = await outcome(handle)
            assert ended.status == "completed"
            assert json.loads(ended.result_json or "null") == "hello yes dotted"
            assert await _replays(client, handle) is None
            # the run recorded the tools it started with, as a live run does
            config = _config(await export(client, "mcp-changed"))
            names = [t["name"] for t in config["mcp"]["h"]["tools"]]
            assert names[:2] == ["h_echo", "h_huge"]

    asyncio.run(main())


def test_the_tools_a_run_goes_with_are_carried_into_a_continue_as_new(
    temporal: Server, tmp_path: Path
) -> None:
    async def main() -> None:
        client = await connect(temporal.target)
        async with _worker(client, "mcp-carried", tmp_path):
            handle = await start_run(
                client,
                ECHO_THEN_ASK,
                task_queue="mcp-carried",
                args=["hello"],
                run_id="mcp-carried",
                history_limit=1,  # it continues as new before its next tool call
            )
            await asked(handle)
        # the run's next workflow is admitted by this worker, whose echo changed: the run
        # still depends on the echo it called before, and waits
        async with _worker(client, "mcp-carried", tmp_path, "--variant", "2"):
            await answer(client, "mcp-carried", "yes")
            latest = client.get_workflow_handle("mcp-carried")
            said = await _pending_failure(latest)
            assert "MCP server 'h' now takes other arguments for 'h_echo'" in said, said
            first = client.get_workflow_handle("mcp-carried", run_id=handle.result_run_id)
            assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
        async with _worker(client, "mcp-carried", tmp_path):
            ended = await outcome(handle)  # its result follows the continue-as-new
            assert json.loads(ended.result_json or "null") == "hello yes dotted"

    asyncio.run(main())


def test_a_worker_that_accepts_changed_code_takes_such_a_run_on(
    temporal: Server, tmp_path: Path
) -> None:
    async def main() -> None:
        client = await connect(temporal.target)
        async with _worker(client, "mcp-accepted", tmp_path):
            handle = await start_run(
                client,
                ECHO_THEN_ASK,
                task_queue="mcp-accepted",
                args=["hello"],
                run_id="mcp-accepted",
            )
            await asked(handle)
        async with _worker(client, "mcp-accepted", tmp_path, "--variant", "2", accept=True):
            await answer(client, "mcp-accepted", "yes")
            ended = await outcome(handle)
            assert ended.status == "completed"
            assert json.loads(ended.result_json or "null") == "hello yes dotted"
            assert await _replays(client, handle) is None
            # the changed server's h_a_b was called once: nothing was performed twice
            history = await handle.fetch_history()
            scheduled = [
                e.activity_task_scheduled_event_attributes.activity_id
                for e in history.events
                if e.HasField("activity_task_scheduled_event_attributes")
            ]
            assert [a.partition("#")[0] for a in scheduled] == ["1", "3", "3", "3"]

    asyncio.run(main())


def test_after_a_refusal_a_worker_with_more_tools_takes_the_run_on(
    temporal: Server, tmp_path: Path
) -> None:
    """A run that refused a worker's tools goes on with one that offers the tools it knew and
    more (a second server, ``g``): what is added is no change it depends on."""

    async def main() -> None:
        client = await connect(temporal.target)
        async with _worker(client, "mcp-more", tmp_path):
            handle = await start_run(
                client, ECHO_THEN_ASK, task_queue="mcp-more", args=["hello"], run_id="mcp-more"
            )
            await asked(handle)
        async with _worker(client, "mcp-more", tmp_path, "--variant", "2"):
            await answer(client, "mcp-more", "yes")
            assert "now takes other arguments for 'h_echo'" in await _pending_failure(handle)
        async with _worker(client, "mcp-more", tmp_path, also=()):
            ended = await asyncio.wait_for(outcome(handle), 40)
            assert ended.status == "completed"
            assert json.loads(ended.result_json or "null") == "hello yes dotted"
            assert await _replays(client, handle) is None
            config = _config(await export(client, "mcp-more"))
            assert sorted(config["mcp"]) == ["h"]  # recorded at the start, as a live run does

    asyncio.run(main())


def test_a_quick_tool_is_performed_where_the_run_is_under_a_refusal(
    temporal: Server, tmp_path: Path
) -> None:
    """A quick tool (``word_count``, a local activity) is no MCP tool, and runs on the worker
    that runs the workflow's task: a worker whose MCP tools the run refuses performs it, and
    the run's next MCP tool waits for, and is performed by, a worker with the tools it knew,
    up at the same time."""

    async def main() -> None:
        client = await connect(temporal.target)
        async with _worker(client, "mcp-quick", tmp_path):
            handle = await start_run(
                client, COUNTED, task_queue="mcp-quick", args=["hello"], run_id="mcp-quick"
            )
            await asked(handle)
        async with _worker(client, "mcp-quick", tmp_path, "--variant", "2"):
            await answer(client, "mcp-quick", "yes")
            assert "now takes other arguments for 'h_echo'" in await _pending_failure(handle)
            # a second worker on the queue in this process needs a runtime of its own
            beside = await Client.connect(
                temporal.target,
                data_converter=client.data_converter,
                runtime=Runtime(telemetry=TelemetryConfig()),
            )
            async with _worker(beside, "mcp-quick", tmp_path):
                # each retry of the refused tool goes to either worker, at random, up to 10 s
                # apart: 90 s leaves a loaded machine room for a run of unlucky draws
                ended = await asyncio.wait_for(outcome(handle), 90)
            assert ended.status == "completed"
            assert json.loads(ended.result_json or "null") == "hello yes 2 dotted"
            assert await _replays(client, handle) is None
            history = await handle.fetch_history()
            markers = sum(e.HasField("marker_recorded_event_attributes") for e in history.events)
            assert markers == 2  # the admission, and the quick tool once

    asyncio.run(main())


def test_a_change_the_run_does_not_depend_on_is_a_warning(
    temporal: Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        client = await connect(temporal.target)
        async with _worker(client, "mcp-warned", tmp_path):
            handle = await start_run(
                client, ASK_THEN_DOTTED, task_queue="mcp-warned", run_id="mcp-warned"
            )
            await asked(handle)  # nothing of the server's called yet
        async with _worker(client, "mcp-warned", tmp_path, "--variant", "2"):
            await answer(client, "mcp-warned", "yes")
            ended = await outcome(handle)
            assert ended.status == "completed"
            assert json.loads(ended.result_json or "null") == "yes dotted"
            assert await _replays(client, handle) is None

    with caplog.at_level(logging.WARNING, logger="temporalio.workflow"):
        asyncio.run(main())
    said = [r.getMessage() for r in caplog.records if r.name == "temporalio.workflow"]
    assert any(
        "run mcp-warned: MCP server 'h' now takes other arguments for 'h_echo' (recorded at the "
        "run's start)" in line
        for line in said
    ), said
    assert any("MCP server 'h' no longer offers 'h_huge'" in line for line in said), said


def _config(text: str) -> dict[str, Any]:
    """The run's config, from the first line of its export."""
    first = json.loads(text.splitlines()[0])
    config: dict[str, Any] = json.loads(first["run"]["config_json"])
    return config


BEFORE = Path(__file__).resolve().parent / "histories" / "mcp_tools_before.json"


def test_a_history_from_before_runs_recorded_their_tools_replays() -> None:
    """A history made by opdsl before runs recorded their MCP tools (its admission says
    nothing of them; the worker was given the hostile server's tools as plain tools, and the
    run of ``echo_then_ask`` called ``h_echo``, was answered, and called ``h_a_b``, with
    content inline) replays under this code: its activities are the same commands."""
    history = WorkflowHistory.from_json("before-mcp-tools", BEFORE.read_text())
    # imported here first, as a worker's admission imports it: pytest rewrites the modules of
    # tests as it imports them, which the sandbox would refuse
    importlib.import_module(ECHO_THEN_ASK.partition(":")[0])
    assert sum(e.HasField("activity_task_scheduled_event_attributes") for e in history.events) == 2
    replayer = Replayer(workflows=[OpdslRun], workflow_runner=sandbox_runner(("tests",)))
    result = asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=False))
    assert result.replay_failure is None, result.replay_failure


OLD_DIGEST = Path(__file__).resolve().parent / "histories" / "mcp_tools_old_digest.json"


def test_a_history_whose_activities_carry_digests_replays() -> None:
    """A history made by opdsl before a digest was the same for tools listed in another order,
    and before quick tools were left out of the comparison: ``echo_ask_count_dotted`` admitted
    by a worker with the hostile server, answered on one with ``--variant 2`` that accepts
    changed code, whose quick ``word_count`` (a local activity, sent the run's digest) said
    what it offers, was refused, then accepted, and ran there. It replays under this code: the
    digests an activity was sent are not compared, and an outcome that says what a worker
    offers is met as it was, so the same commands follow."""
    history = WorkflowHistory.from_json("mcp-tools-old-digest", OLD_DIGEST.read_text())
    importlib.import_module(COUNTED.partition(":")[0])
    markers = [e for e in history.events if e.HasField("marker_recorded_event_attributes")]
    assert len(markers) == 4  # the admission, and the quick tool three times
    replayer = Replayer(workflows=[OpdslRun], workflow_runner=sandbox_runner(("tests",)))
    result = asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=False))
    assert result.replay_failure is None, result.replay_failure


def _listing(*names: str) -> dict[str, Any]:
    return {
        "h": {
            "server": {"argv": ["h"]},
            "tools": [
                {"name": n, "tool": n, "description": f"the {n} tool", "parameters": {}}
                for n in names
            ],
        }
    }


def test_a_worker_listing_the_same_tools_in_another_order_offers_what_the_run_goes_with() -> None:
    """The workflow compares listings by tool name; a worker's digest does too, so a worker
    whose server lists the same tools in another order performs the run's effects."""
    run = _listing("h_echo", "h_a_b")
    other = Activities(programs=[], mcp=_listing("h_a_b", "h_echo"))
    assert tools_digest(run) == other.mcp_digest != tools_digest(_listing("h_echo"))
    call = EffectCall("r", "1", "{}", tools={"digest": tools_digest(run)})
    assert other._other_tools(call) is None


def test_a_run_between_two_workers_says_each_change_once() -> None:
    """Effects taken in turn by two workers whose tools differ in a way the run does not
    depend on: each switch is met (an effect sent again), but what changed is said once for
    each listing, not at every switch."""
    tools = RunTools(_listing("h_echo", "h_a_b"))
    said: list[str] = []
    for now in [("h_echo", "h_a_b", "h_more"), ("h_echo", "h_a_b")] * 3:
        tools.meet("r", _listing(*now), [], said.append)
        assert tools.digest == tools_digest(_listing(*now)) and tools.refused is None
    assert said == [
        "run r: MCP server 'h' now offers 'h_more' as well",
        "run r: MCP server 'h' no longer offers 'h_more' (recorded at the run's start)",
    ]


def test_a_worker_says_a_refusal_once_in_a_while_and_it_is_retried(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose tools a run refused fails the effect with the reason, a benign error
    (temporalio logs it at DEBUG, with no traceback) that Temporal retries; the worker says it
    in one line, once per run, then again only after ``REFUSAL_SAID_AGAIN_SECONDS``."""
    worker = Activities(programs=[], mcp=_listing("h_echo"))
    why = "run r depends on MCP tools that changed since it started: ..."
    sent = {"digest": "theirs", "refused": why, "refusals": {worker.mcp_digest: why}}

    def refused(run_id: str) -> ApplicationError:
        with pytest.raises(ApplicationError) as caught:
            worker._other_tools(EffectCall(run_id, "1", "{}", tools=sent))
        return caught.value

    error = refused("r")
    assert error.message == why and error.type == "MCPToolsChanged" and not error.non_retryable
    assert error.category == ApplicationErrorCategory.BENIGN
    refused("r")
    refused("s")  # another run is said too
    line = (
        f"opdsl: warning: {why}; this worker does not take it on: one started with "
        "--accept-changed-code (make_worker(accept_changed_code=True)) goes on with the tools "
        "its servers offer now\n"
    )
    assert capsys.readouterr().err == line * 2
    monkeypatch.setattr(activities_module, "REFUSAL_SAID_AGAIN_SECONDS", 0.0)
    refused("r")
    assert capsys.readouterr().err == line
