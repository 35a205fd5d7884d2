"""MCP tools on Temporal: a worker started with a server's tools performs their calls as
activities (the server started once for the worker, and ended with it); the run ends as it
does locally."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")
pytest.importorskip("mcp", reason="the mcp extra is not installed")

from interpreters.temporal import connect, make_worker, outcome, start_run
from interpreters.tools import open_mcp
from interpreters.tools._mcp import MCPServer
from interpreters.tools._sandbox import sandbox_problem
from tests.fixtures import mcp_programs
from tests.interpreters.temporal.conftest import Server, stop_workers, temporal  # noqa: F401

HOSTILE = str(Path(__file__).resolve().parents[2] / "fixtures" / "mcp_hostile.py")


@pytest.mark.skipif(sandbox_problem() is not None, reason=str(sandbox_problem()))
def test_a_worker_performs_mcp_tools_as_activities(temporal: Server, tmp_path: Path) -> None:  # noqa: F811
    marker = tmp_path / "starts"
    server = MCPServer.stdio([sys.executable, "-I", HOSTILE, "--marker", str(marker)])

    async def main() -> tuple[str, str | None, str | None]:
        client = await connect(temporal.target)
        async with open_mcp({"h": server}, root=tmp_path) as served:
            worker = make_worker(
                client,
                task_queue="mcp",
                programs=["tests.fixtures.mcp_programs:echo_twice"],
                tools=served.tools,
                passthrough=("tests",),
            )
            async with worker:
                handles = [
                    await start_run(
                        client, mcp_programs.echo_twice, task_queue="mcp", args=[f"run {i}"]
                    )
                    for i in range(2)
                ]
                ended = [await outcome(h) for h in handles]
        return ended[0].status, ended[0].result_json, ended[1].result_json

    status, first, second = asyncio.run(main())
    assert status == "completed"
    assert json.loads(first or "null") == ["run 0", "run 0!"]
    assert json.loads(second or "null") == ["run 1", "run 1!"]
    assert len(marker.read_text().split()) == 1  # once for the worker, not once a run


@pytest.mark.skipif(sandbox_problem() is not None, reason=str(sandbox_problem()))
def test_opdsl_worker_takes_mcp_servers(temporal: Server, tmp_path: Path) -> None:  # noqa: F811
    root = Path(__file__).resolve().parents[3]
    marker = tmp_path / "starts"
    log = tmp_path / "worker.log"
    spec = f"h={sys.executable} -I {HOSTILE} --marker {marker}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "interpreters", "worker", "--temporal", temporal.target]
        + ["--task-queue", "mcp-cli", "--program", "tests.fixtures.mcp_programs:echo_twice"]
        + ["--mcp", spec],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while b"Ctrl-C stops it" not in log.read_bytes():
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)

        async def main() -> str | None:
            client = await connect(temporal.target)
            handle = await start_run(
                client, mcp_programs.echo_twice, task_queue="mcp-cli", args=["by the worker"]
            )
            return (await outcome(handle)).result_json

        assert json.loads(asyncio.run(main()) or "null") == ["by the worker", "by the worker!"]
    finally:
        stop_workers([worker])
    assert "opdsl worker stopped" in log.read_text()
    assert len(marker.read_text().split()) == 1
