"""The same small program under opdsl and under its peers, side by side, in one run.

The program: N steps, each a call to a trivial function, durably recorded where the peer
records anything. Each peer runs in a process of its own (DBOS is a process-wide singleton),
installed for the benchmark only (``make bench``):

- opdsl: the live interpreter and its SQLite journal (write-ahead: two commits per step);
- python-effect: ``@do`` with a trivial intent (it records nothing: the floor of dispatch);
- LangGraph with its SQLite checkpointer: one node looping (a checkpoint per step);
- DBOS with SQLite: a workflow calling a step N times (a row per step);
- opdsl on Temporal: one run on a local dev server (``temporal server start-dev``), a tool
  call per step as an activity, at most 500 steps (it is two orders of magnitude slower).

Then the growth of opdsl's cost: 1k, 10k and 100k effects in one run, and 10, 100 and 1,000
concurrent runs of 100 effects each, all journaled to SQLite.

    python bench/peers.py [N]      (default 2,000 steps)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

N = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 2_000


def noop() -> str:
    return ""


def _timed(run: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    run()
    return n / (time.perf_counter() - t0)


def opdsl(folder: Path, n: int) -> float:
    from journal import opdsl_sqlite

    rate, _ = opdsl_sqlite(folder / "opdsl.db", n)  # bench/journal.py's (b): one run
    return rate


def python_effect(folder: Path, n: int) -> float:
    from driver import python_effect as dispatch  # bench/driver.py's (b)

    dispatch(100)  # its imports, outside the timing
    return _timed(lambda: dispatch(n), n)


def langgraph(folder: Path, n: int) -> float:
    from journal import langgraph as loop  # bench/journal.py's (c)

    rate = loop(folder / "langgraph.db", n)
    if rate is None:
        raise ImportError("langgraph")
    return rate


def dbos(folder: Path, n: int) -> float:
    from dbos import DBOS

    @DBOS.step()  # type: ignore[untyped-decorator, unused-ignore]
    def step() -> str:
        return noop()

    @DBOS.workflow()  # type: ignore[untyped-decorator, unused-ignore]
    def workflow(k: int) -> int:
        for _ in range(k):
            step()
        return k

    DBOS(config={"name": "opdsl-bench", "system_database_url": f"sqlite:///{folder / 'dbos.db'}"})
    DBOS.launch()
    try:
        t0 = time.perf_counter()
        assert workflow(n) == n
        return n / (time.perf_counter() - t0)
    finally:
        DBOS.destroy()


def opdsl_one_run(folder: Path, n: int) -> float:
    return opdsl(folder, n)


def opdsl_concurrent(folder: Path, runs: int) -> float:
    import anyio

    from interpreters import LiveInterpreter, SqliteJournal
    from op import Op, tool

    steps = 100

    def loop(k: int) -> Op[int]:
        for _ in range(k):
            yield from tool("noop")
        return k

    interp = LiveInterpreter(tools=[noop], journal=SqliteJournal(folder / "concurrent.db"))

    async def go() -> float:
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(runs):
                tg.start_soon(interp.arun, loop, steps)
        return runs * steps / (time.perf_counter() - t0)

    return anyio.run(go)


def temporal(folder: Path, n: int) -> float:
    from temporal import steps_per_second  # bench/temporal.py's

    return steps_per_second(min(n, 500))


PEERS: dict[str, Callable[[Path, int], float]] = {
    "opdsl (live + SQLite journal)": opdsl,
    "python-effect (@do, records nothing)": python_effect,
    "LangGraph (SqliteSaver)": langgraph,
    "DBOS (SQLite)": dbos,
    "opdsl on Temporal (local dev server)": temporal,
}
SCALING: dict[str, tuple[Callable[[Path, int], float], list[int]]] = {
    "opdsl, effects in one run": (opdsl_one_run, [1_000, 10_000, 100_000]),
    "opdsl, concurrent runs of 100 effects": (opdsl_concurrent, [10, 100, 1_000]),
}


def _child(name: str, n: int) -> None:
    """Run one measurement in this process and print its figure as JSON."""
    fn = {**PEERS, **{k: v[0] for k, v in SCALING.items()}}[name]
    folder = Path(tempfile.mkdtemp(prefix="opdsl-peers-"))
    try:
        rate: float | None = fn(folder, n)
    except ImportError as exc:
        print(json.dumps({"missing": str(exc)}))
        return
    print(json.dumps({"rate": rate}), flush=True)
    # a Temporal client's native threads can abort a finishing process
    # (temporalio/sdk-python#300): the figure is out, so end without the teardown
    os._exit(0)


def _measure(name: str, n: int) -> tuple[float | None, str]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", name, str(n)],
        capture_output=True,
        text=True,
        timeout=1_800,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        return None, f"failed: {(out.stderr.strip().splitlines() or ['?'])[-1][:60]}"
    data = json.loads(lines[-1])
    if "missing" in data:
        return None, f"not installed ({data['missing'][:40]})"
    return float(data["rate"]), ""


def main() -> int:
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
        return 0
    print(f"the same program, {N:,} steps of a trivial function, each peer in its own process")
    print(f"{'peer':<42} {'steps/s':>10} {'opdsl / peer':>13}")
    rates = {name: _measure(name, N) for name in PEERS}
    ours = rates["opdsl (live + SQLite journal)"][0]
    for name, (rate, why) in rates.items():
        if rate is None:
            print(f"{name:<42} {why}")
            continue
        ratio = "" if ours is None else f"{ours / rate:>13.2f}"
        print(f"{name:<42} {rate:>10,.0f} {ratio}")
    print()
    print("how opdsl's cost grows (SQLite journal, effects per second)")
    for name, (_, sizes) in SCALING.items():
        figures = []
        for size in sizes:
            rate, why = _measure(name, size)
            figures.append(f"{size:>7,}: {rate:>8,.0f}/s" if rate is not None else f"{size}: {why}")
        print(f"  {name:<40} " + "   ".join(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
