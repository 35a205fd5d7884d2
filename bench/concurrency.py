"""Many runs at once: 200 and then 1,000 runs, each making 20 ``infer`` calls to a loopback
OpenAI-compatible server that answers after 50 ms, journaled to one SQLite file.

Each figure is measured in the same process run against a bare aiohttp client making the
same requests (no interpreter, no journal: the client's own limit), and the same opdsl runs
with no journal (what the journal costs), and with every write committed on its own
(``group_commit=False``; by default the writes of concurrent runs are committed together).
opdsl's calls go over aiohttp's pool too (under httpx's API), so the ratio is what opdsl costs
over the client it is carried on. Targets: opdsl at most 1.5 times the bare client at 200 runs
and 2 times at 1,000; the time per request at 1,000 runs within 1.3 times that at 200; under
100 KB of memory per waiting run. Each figure is the best of two interleaved rounds; the CPU
time each took (this process's, the server's not counted) is printed beside, as a machine
shared with other work slows the wall clock more than it does CPU time, and so is the time
Python's garbage collector took in the fastest rounds (and its full collections, which walk
every object the process holds). Before each kind is timed, the garbage the one before it
left is collected (untimed), so that no kind pays for another's.

    python bench/concurrency.py [RUNS ...]      (default: 200 1000)
"""

from __future__ import annotations

import asyncio
import gc
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from interpreters import LiveInterpreter, SqliteJournal
from interpreters.models import OpenAIModel
from op import Op, infer

SIZES = [200, 1_000]
CALLS = 20
DELAY = 0.05
ROUNDS = 2


def chatty(i: int) -> Op[int]:
    for k in range(CALLS):
        yield from infer(f"run {i} call {k}")
    return i


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Collected:
    """What Python's garbage collector did during a round: its seconds, and how many full
    collections (those that walk every object the process holds) it made."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.full += info["generation"] == 2


def timed(work: Any) -> tuple[Any, float, Collected]:
    """``asyncio.run(work)``'s value, the CPU seconds it took, and the collector's share.
    The garbage the kind measured before it left is collected first, untimed: each kind
    pays for its own."""
    gc.collect()
    collected = Collected()
    gc.callbacks.append(collected)
    before = _cpu()
    try:
        value = asyncio.run(work)
    finally:
        gc.callbacks.remove(collected)
    return value, _cpu() - before, collected


async def bare_aiohttp(url: str, runs: int) -> float:
    """The same requests with aiohttp alone."""
    import aiohttp

    body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "x"}]}
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=runs)) as session:

        async def one() -> None:
            for _ in range(CALLS):
                async with session.post(f"{url}/chat/completions", json=body) as r:
                    r.raise_for_status()
                    await r.json()

        await asyncio.gather(*(one() for _ in range(runs)))
    return time.perf_counter() - t0


def _rss() -> int:
    """The process's peak resident memory so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def opdsl(
    url: str, runs: int, db: Path | None, *, grouped: bool | None = None
) -> tuple[float, int]:
    # named as a priced model is, so each call pays for its pricing as a real one does (the
    # server ignores the name)
    model = OpenAIModel("gpt-4.1-mini", base_url=url, stream=False, max_connections=runs)
    journal = None if db is None else SqliteJournal(db, group_commit=grouped)
    interp = LiveInterpreter(model=model, journal=journal)
    statuses: list[str] = []
    base = _rss()
    t0 = time.perf_counter()

    async def one(i: int) -> None:
        statuses.append((await interp.arun(chatty, i)).status)

    await asyncio.gather(*(one(i) for i in range(runs)))
    elapsed = time.perf_counter() - t0
    assert statuses.count("completed") == runs, statuses[:5]
    return elapsed, _rss() - base


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    if not all(a.isdigit() and int(a) > 0 for a in sys.argv[1:]):
        print(
            f"usage: python bench/concurrency.py [RUNS ...]  (counts of runs; got {sys.argv[1:]})"
        )
        return 2
    sizes = [int(a) for a in sys.argv[1:]] or SIZES
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
    rows = []
    cpu: list[tuple[float, float]] = []
    collected: list[dict[str, Collected]] = []
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        url = f"http://127.0.0.1:{port}/v1"
        for runs in sizes:
            # interleaved rounds, the best of each kept: the machine's noise hits them all
            best: dict[str, float] = {}
            # the collector's share in each kind's fastest round
            fastest: dict[str, Collected] = {}
            grown = 0
            for _ in range(ROUNDS):
                folder = Path(tempfile.mkdtemp(prefix="opdsl-bench-"))
                (journaled, used), journaled_cpu, gc_journaled = timed(
                    opdsl(url, runs, folder / "runs.db")
                )
                grown = max(grown, used)
                bare, bare_cpu, gc_bare = timed(bare_aiohttp(url, runs))
                (unjournaled, _), _, gc_unjournaled = timed(opdsl(url, runs, None))
                times: dict[str, float] = {
                    "journaled": journaled,
                    "bare": bare,
                    "journaled cpu": journaled_cpu,
                    "bare cpu": bare_cpu,
                    "unjournaled": unjournaled,
                    "single": timed(opdsl(url, runs, folder / "single.db", grouped=False))[0][0],
                }
                for name, collector in (
                    ("journaled", gc_journaled),
                    ("bare", gc_bare),
                    ("unjournaled", gc_unjournaled),
                ):
                    if times[name] < best.get(name, float("inf")):
                        fastest[name] = collector
                for name, t in times.items():
                    best[name] = min(t, best.get(name, t))
            cpu.append((best["bare cpu"], best["journaled cpu"]))
            collected.append(fastest)
            rows.append(
                (
                    runs,
                    best["bare"],
                    best["journaled"],
                    best["unjournaled"],
                    grown,
                    best["single"],
                )
            )
    finally:
        server.terminate()
        server.wait()
    print(
        f"runs x {CALLS} infer calls, the server answers after {DELAY * 1000:.0f} ms, one process"
    )
    print(
        f"{'runs':>6} {'bare aiohttp':>13} {'opdsl+SQLite':>13} {'ratio':>6} "
        f"{'no journal':>11} {'journal share':>14} {'ms/request':>11} {'KB/run':>7} "
        f"{'commit each':>12} {'its share':>10}"
    )
    for runs, bare, journaled, unjournaled, grown, single in rows:
        share = max(0.0, journaled - unjournaled) / journaled
        single_share = max(0.0, single - unjournaled) / single
        print(
            f"{runs:>6} {bare:>12.2f}s {journaled:>12.2f}s {journaled / bare:>6.2f} "
            f"{unjournaled:>10.2f}s {share:>13.0%} {journaled / (runs * CALLS) * 1000:>11.3f} "
            f"{grown / runs / 1e3:>7.1f} {single:>11.2f}s {single_share:>9.0%}"
        )
    for (runs, *_), (bare_cpu, journaled_cpu) in zip(rows, cpu, strict=True):
        print(
            f"{runs:>6} runs, CPU time: bare aiohttp {bare_cpu:.2f}s, opdsl+SQLite "
            f"{journaled_cpu:.2f}s, ratio {journaled_cpu / bare_cpu:.2f}"
        )
    for (runs, *_), fastest in zip(rows, collected, strict=True):
        shown = ", ".join(
            f"{label} {fastest[name].seconds:.2f}s ({fastest[name].full} full)"
            for name, label in (
                ("bare", "bare aiohttp"),
                ("journaled", "opdsl+SQLite"),
                ("unjournaled", "no journal"),
            )
        )
        print(f"{runs:>6} runs, garbage collector: {shown}")
    print("targets: ratio at most 1.5 at 200 runs, 2 at 1,000; KB/run under 100")
    if len(rows) >= 2:
        (r1, _, t1, *_), (r2, _, t2, *_) = rows[0], rows[-1]
        growth = (t2 / (r2 * CALLS)) / (t1 / (r1 * CALLS))
        print(f"time per request at {r2:,} runs / at {r1:,}: {growth:.2f}  (target: at most 1.3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
