"""Many runs at once: 1,000 runs, each making 20 ``infer`` calls to a loopback
OpenAI-compatible server that answers after 50 ms, all journaled to one SQLite file.

Prints the wall time next to the ideal (20 x 50 ms: every run waiting in parallel) and the
memory held per run while the runs wait on the model (the growth of the process's peak
resident memory over the benchmark, divided by the number of runs). Targets: within 1.5 times the ideal, and
under 100 KB per run.
"""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from interpreters import LiveInterpreter, SqliteJournal
from interpreters.models import OpenAIModel
from op import Op, infer

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000
CALLS = 20
DELAY = 0.05


def chatty(i: int) -> Op[int]:
    for k in range(CALLS):
        yield from infer(f"run {i} call {k}")
    return i


async def bare_httpx(url: str) -> float:
    """The same requests with httpx alone: no interpreter, no journal (the client's limit)."""
    import httpx

    body = {"model": "bench", "messages": [{"role": "user", "content": "x"}]}
    limits = httpx.Limits(max_connections=RUNS, max_keepalive_connections=RUNS)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        async def one() -> None:
            for _ in range(CALLS):
                (await client.post(f"{url}/chat/completions", json=body)).raise_for_status()

        async with anyio.create_task_group() as tg:
            for _ in range(RUNS):
                tg.start_soon(one)
    return time.perf_counter() - t0


def _rss() -> int:
    """The process's peak resident memory so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


async def go(url: str, db: Path) -> tuple[float, int, int]:
    model = OpenAIModel("bench", base_url=url, stream=False, max_connections=RUNS)
    interp = LiveInterpreter(model=model, journal=SqliteJournal(db))
    results: list[str] = []
    base = _rss()
    t0 = time.perf_counter()

    async def one(i: int) -> None:
        r = await interp.run(chatty, i)
        results.append(r.status)

    async with anyio.create_task_group() as tg:
        for i in range(RUNS):
            tg.start_soon(one, i)
    elapsed = time.perf_counter() - t0
    peak = _rss()
    assert results.count("completed") == RUNS, results[:5]
    return elapsed, peak - base, len(results)


def main() -> int:
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("slow_openai_server.py")),
            str(port),
            str(DELAY),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        db = Path(tempfile.mkdtemp(prefix="opdsl-bench-")) / "runs.db"
        elapsed, peak, n = anyio.run(go, f"http://127.0.0.1:{port}/v1", db)
        bare = anyio.run(bare_httpx, f"http://127.0.0.1:{port}/v1")
    finally:
        server.terminate()
        server.wait()
    ideal = CALLS * DELAY
    print(
        f"{RUNS:,} concurrent runs x {CALLS} infer calls, server answers after {DELAY * 1000:.0f} ms, journaled to SQLite"
    )
    print(f"{'wall time, opdsl runs':<36} {elapsed:8.2f} s")
    print(f"{'wall time, bare httpx, same requests':<36} {bare:8.2f} s")
    print(f"{'ideal (20 x 50 ms)':<36} {ideal:8.2f} s")
    print(f"{'wall / ideal':<36} {elapsed / ideal:8.2f}    (target: at most 1.5)")
    print(f"{'peak memory added (resident)':<36} {peak / 1e6:8.1f} MB")
    print(f"{'per run':<36} {peak / n / 1e3:8.1f} KB  (target: under 100 KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
