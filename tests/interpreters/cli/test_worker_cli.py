"""``opdsl worker`` as a user runs it, a process on a real Temporal server: a run admitted by a
worker whose MCP server offered one tool list waits when a worker with a changed server takes
it, unless that worker was started with ``--accept-changed-code``; and wrong input to the
command ends it with status 2 and one line that names what was wrong, no traceback, before it
serves anything."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from temporalio.client import Client

from tests.interpreters.temporal.conftest import Server, stop_workers, temporal  # noqa: F401

ROOT = Path(__file__).resolve().parents[3]
OPDSL = [sys.executable, "-m", "interpreters"]
HOSTILE = str(ROOT / "tests" / "fixtures" / "mcp_hostile.py")
ECHO_THEN_ASK = "tests.fixtures.mcp_programs:echo_then_ask"
REFUSED = (
    "depends on MCP tools that changed since it started: MCP server 'h' now takes other "
    "arguments for 'h_echo'"
)
SAID = (
    f"opdsl: warning: run worker-cli {REFUSED}; the run waits for a worker whose MCP servers "
    "offer them as it started with them (or end it: temporal workflow terminate); this worker "
    "does not take it on: one started with --accept-changed-code "
    "(make_worker(accept_changed_code=True)) goes on with the tools its servers offer now"
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _hostile(*extra: str) -> str:
    """``--mcp`` for the hostile server of ``tests/fixtures`` as ``h`` (``extra``: its options;
    ``--variant 2``: its ``echo`` takes other arguments and ``huge`` is gone). Unconfined: what
    is tested is the tool list, not the sandbox."""
    return "h[unconfined]=" + shlex.join([sys.executable, "-I", HOSTILE, *extra])


def _worker(server: Server, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``opdsl worker`` on the task queue ``worker-cli``, serving ``echo_then_ask``, once it
    says it serves (its output in ``log``)."""
    command = ["worker", "--temporal", server.target, "--task-queue", "worker-cli"]
    process = subprocess.Popen(
        [*OPDSL, *command, "--program", ECHO_THEN_ASK, *args],
        cwd=ROOT,
        env=_env(),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while b"Ctrl-C stops it" not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the worker did not start: {log.read_text()}")
        time.sleep(0.05)
    return process


def _opdsl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*OPDSL, *args], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout
    )


def _until_tried(server: Server, run_id: str, attempt: int) -> None:
    """Once the run's pending activity is at ``attempt``: the ones before it failed."""

    async def main() -> None:
        client = await Client.connect(server.target)
        for _ in range(600):
            described = await client.get_workflow_handle(run_id).describe()
            if any(p.attempt >= attempt for p in described.raw_description.pending_activities):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"run {run_id}'s activity never reached attempt {attempt}")

    asyncio.run(main())


def _until_said(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while text not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the worker never said {text!r}: {log.read_text()}")
        time.sleep(0.05)


def test_accept_changed_code_lets_a_worker_with_changed_mcp_tools_take_a_run_on(
    temporal: Server,  # noqa: F811
    tmp_path: Path,
) -> None:
    t = ["--temporal", temporal.target, "--task-queue", "worker-cli"]
    workers: list[subprocess.Popen[bytes]] = []
    answering: subprocess.Popen[str] | None = None
    try:
        # admitted by a worker whose server offers its first tools; h_echo called: the run
        # depends on it
        workers.append(_worker(temporal, tmp_path / "first.log", "--mcp", _hostile()))
        ran = _opdsl("run", ECHO_THEN_ASK, "--arg", "text=hello", "--run-id", "worker-cli", *t)
        assert ran.returncode == 0, ran.stderr
        assert "run worker-cli of tests.fixtures.mcp_programs:echo_then_ask is waiting" in (
            ran.stderr
        )
        stop_workers(workers)

        # a worker whose server's echo changed, without the flag: it refuses the run's next
        # tool, and the run waits (the answer command, which waits for the end, goes on); it
        # says so in one line, not once per retry, and no traceback
        log = tmp_path / "changed.log"
        workers.append(_worker(temporal, log, "--mcp", _hostile("--variant", "2")))
        answering = subprocess.Popen(
            [*OPDSL, "answer", "worker-cli", "yes", *t],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _until_said(log, "\n" + SAID + "\n", workers[-1])
        _until_tried(temporal, "worker-cli", 3)  # refused twice, and retried
        assert answering.poll() is None, answering.communicate()
        said = log.read_text()
        assert "Traceback" not in said and "Completing activity as failed" not in said, said
        assert said.count(REFUSED) == 1, said
        stop_workers(workers)

        # the same changed server, with the flag: the run goes on there and ends
        log = tmp_path / "accepting.log"
        workers.append(
            _worker(temporal, log, "--mcp", _hostile("--variant", "2"), "--accept-changed-code")
        )
        try:
            out, err = answering.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the run never ended: {log.read_text()}") from None
        assert answering.returncode == 0, err
        assert out.splitlines()[-1] == '"hello yes dotted"', out
        assert REFUSED not in log.read_text()
    finally:
        if answering is not None and answering.poll() is None:
            answering.kill()
            answering.wait()
        stop_workers(workers)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--bogus"], "opdsl: error: unrecognized arguments: --bogus"),
        (
            ["--accept-changed-code=yes"],
            "opdsl worker: error: argument --accept-changed-code: ignored explicit argument 'yes'",
        ),
        (
            ["--mcp", "no name"],
            "opdsl: error: --mcp 'no name': give NAME=COMMAND or NAME=URL (NAME: letters, digits, "
            "'_', '-'), e.g. --mcp 'git=mcp-server-git --repository .'",
        ),
        (
            ["--mcp", "h[wat]=x"],
            "opdsl: error: --mcp h: unknown option 'wat' (options: network, env=VAR, prefix=P, "
            "timeout=SECONDS, unconfined)",
        ),
        (["--temporal", "127.0.0.1:1"], "opdsl: error: cannot reach Temporal at 127.0.0.1:1: "),
    ],
    ids=["unknown-flag", "flag-with-value", "mcp-without-name", "mcp-unknown-option", "no-server"],
)
def test_wrong_input_to_the_worker_is_one_line_and_status_2(args: list[str], said: str) -> None:
    """No server is reached for these: the first four are refused before the command connects
    (the address given, if it were, is one nothing listens on)."""
    done = _opdsl("worker", "--temporal", "127.0.0.1:1", "--program", ECHO_THEN_ASK, *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "Ctrl-C stops it" not in done.stdout
    *usage, last = done.stderr.splitlines()
    assert last.startswith(said), done.stderr
    # argparse says the usage first; every other error is its one line
    assert not usage or usage[0].startswith("usage: opdsl"), done.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--program", "nosuch_module:main"],
            "opdsl: error: cannot import program 'nosuch_module:main': No module named "
            "'nosuch_module'",
        ),
        (
            ["--program", "tests.fixtures.mcp_programs:nosuch"],
            "opdsl: error: cannot import program 'tests.fixtures.mcp_programs:nosuch': "
            "tests.fixtures.mcp_programs has no 'nosuch'",
        ),
        (
            ["--program", ECHO_THEN_ASK, "--mcp", "h[unconfined]=/nonexistent/mcp-server"],
            "opdsl: error: MCP server 'h' (/nonexistent/mcp-server) cannot start: MCPError: no "
            "program '/nonexistent/mcp-server' is found (on PATH, or at that path)",
        ),
    ],
    ids=["program-module", "program-function", "mcp-command"],
)
def test_a_worker_that_could_serve_nothing_does_not_start(
    temporal: Server,  # noqa: F811
    args: list[str],
    said: str,
) -> None:
    """With a server that answers: a program that cannot be imported (every run of it would be
    refused at its admission) or an MCP server that cannot start ends the command at once."""
    command = ["worker", "--temporal", temporal.target, "--task-queue", "worker-cli-x", *args]
    try:
        done = _opdsl(*command, timeout=20)
    except subprocess.TimeoutExpired as served:
        raise AssertionError(f"the worker started: {served.stdout!r}") from None
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr == said + "\n", done.stderr
    assert "Ctrl-C stops it" not in done.stdout
