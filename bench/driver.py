"""Effects per second through the driver, next to baselines measured in the same run.

    (a) a bare generator ``send`` loop: the floor of any generator-based interpreter
    (b) python-effect's ``@do`` with a trivial intent and a sync performer
    (c) opdsl's live interpreter, a trivial tool, no journal, no sinks
    (d) the same with the in-memory journal (write-ahead entries, canonical JSON)
    (e) python-effect's fastest path: ``sync_perform(base_dispatcher, ...)`` with ``Constant``
    (f) opdsl's live interpreter, a tool with one ``int`` argument and an ``int`` result

Targets: (c) at least as fast as (b), (f) at least as fast as (e). Run with ``make bench``
(installs python-effect).
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


def python_effect_constant(n: int) -> Any:
    from effect import Constant, Effect, base_dispatcher, sync_perform
    from effect.do import do

    @do  # type: ignore[untyped-decorator]
    def program() -> Any:
        total = 0
        for i in range(n):
            total += yield Effect(Constant(i + 1))
        return total

    return sync_perform(base_dispatcher, program())


def noop() -> str:
    return ""


def add1(n: int) -> int:
    return n + 1


def loop_with_argument(n: int) -> Op[int]:
    for i in range(n):
        yield from tool("add1", {"n": i})
    return n


def loop(n: int) -> Op[int]:
    for _ in range(n):
        yield from tool("noop")
    return n


def opdsl_live(n: int) -> Any:
    return LiveInterpreter(tools=[noop]).run_sync(loop, n).value


def opdsl_journal(n: int) -> Any:
    return LiveInterpreter(tools=[noop], journal=MemoryJournal()).run_sync(loop, n).value


def opdsl_argument(n: int) -> Any:
    return LiveInterpreter(tools=[add1]).run_sync(loop_with_argument, n).value


def main() -> int:
    variants: list[tuple[str, Callable[[int], object] | None]] = [
        ("(a) bare generator send loop", bare),
        ("(b) python-effect @do, trivial intent", python_effect),
        ("(c) opdsl live, trivial tool, no journal", opdsl_live),
        ("(d) opdsl live, trivial tool, in-memory journal", opdsl_journal),
        ("(e) python-effect sync_perform + Constant", python_effect_constant),
        ("(f) opdsl live, tool with an int argument", opdsl_argument),
    ]
    try:
        import effect  # noqa: F401
    except ImportError:
        variants[1] = ("(b) python-effect @do (not installed: pip install effect)", None)
        variants[4] = ("(e) python-effect Constant (not installed: pip install effect)", None)
    # interleaved rounds, best of each: a noisy machine slows whatever runs at that moment,
    # so no variant gets all the quiet or all the noisy stretches
    best: dict[str, float] = {}
    for _ in range(REPEAT):
        for name, fn in variants:
            if fn is None:
                continue
            t0 = time.perf_counter()
            fn(N)
            rate = N / (time.perf_counter() - t0)
            best[name] = max(best.get(name, 0.0), rate)
    print(
        f"driver throughput, {N:,} effects, best of {REPEAT} interleaved rounds, Python {sys.version.split()[0]}"
    )
    print(f"{'variant':<52} {'effects/s':>12}")
    for name, _fn in variants:
        shown = best.get(name)
        print(f"{name:<52} {'n/a' if shown is None else f'{shown:,.0f}':>12}")
    b: float | None = best.get(variants[1][0])
    c: float | None = best.get(variants[2][0])
    if b is not None and c is not None:
        print(f"(c) / (b) = {c / b:.2f}  (target: at least 1.00)")
    e: float | None = best.get(variants[4][0])
    f: float | None = best.get(variants[5][0])
    if e is not None and f is not None:
        print(f"(f) / (e) = {f / e:.2f}  (target: at least 1.00)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
