"""Effects per second through the driver, next to baselines measured in the same run.

    (a) a bare generator ``send`` loop: the floor of any generator-based interpreter
    (b) python-effect's ``@do`` with a trivial intent and a sync performer
    (c) opdsl's live interpreter, a trivial tool, no journal, no sinks
    (d) the same with the in-memory journal (write-ahead entries, canonical JSON)

Target: (c) at least as fast as (b). Run with ``make bench`` (installs python-effect).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Generator
from typing import Any

from interpreters import LiveInterpreter, MemoryJournal
from op import Op, tool

N = 20_000
REPEAT = 5


def best_rate(fn: Callable[[int], object]) -> float:
    best = float("inf")
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn(N)
        best = min(best, time.perf_counter() - t0)
    return N / best


def bare(n: int) -> int:
    def gen() -> Generator[object, int, int]:
        total = 0
        for _ in range(n):
            total += yield "effect"
        return total

    g = gen()
    try:
        next(g)
        while True:
            g.send(1)
    except StopIteration as stop:
        return int(stop.value)


def python_effect(n: int) -> Any:
    from effect import (
        ComposedDispatcher,
        Effect,
        TypeDispatcher,
        base_dispatcher,
        sync_perform,
        sync_performer,
    )
    from effect.do import do

    class Trivial:
        pass

    @sync_performer  # type: ignore[untyped-decorator]
    def perform(dispatcher: Any, intent: Trivial) -> int:
        return 1

    dispatcher = ComposedDispatcher([TypeDispatcher({Trivial: perform}), base_dispatcher])

    @do  # type: ignore[untyped-decorator]
    def program() -> Any:
        total = 0
        for _ in range(n):
            total += yield Effect(Trivial())
        return total

    return sync_perform(dispatcher, program())


def noop() -> str:
    return ""


def loop(n: int) -> Op[int]:
    for _ in range(n):
        yield from tool("noop")
    return n


def opdsl_live(n: int) -> Any:
    return LiveInterpreter(tools=[noop]).run_sync(loop, n).value


def opdsl_journal(n: int) -> Any:
    return LiveInterpreter(tools=[noop], journal=MemoryJournal()).run_sync(loop, n).value


def main() -> int:
    rows: list[tuple[str, float | None]] = [("(a) bare generator send loop", best_rate(bare))]
    try:
        rows.append(("(b) python-effect @do, trivial intent", best_rate(python_effect)))
    except ImportError:
        rows.append(("(b) python-effect @do (not installed: pip install effect)", None))
    rows.append(("(c) opdsl live, trivial tool, no journal", best_rate(opdsl_live)))
    rows.append(("(d) opdsl live, trivial tool, in-memory journal", best_rate(opdsl_journal)))
    print(f"driver throughput, {N:,} effects, best of {REPEAT}, Python {sys.version.split()[0]}")
    print(f"{'variant':<52} {'effects/s':>12}")
    for name, rate in rows:
        print(f"{name:<52} {'n/a' if rate is None else f'{rate:,.0f}':>12}")
    b, c = rows[1][1], rows[2][1]
    if b is not None and c is not None:
        print(f"(c) / (b) = {c / b:.2f}  (target: at least 1.00)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
