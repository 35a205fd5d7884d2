"""How the journal grows with a conversation, next to baselines measured in the same run.

The program is ``tests.fixtures.conversation_programs.reader``: ``programs.loop.tool_loop``
with a model that asks for one tool result a turn (1 KB or 10 KB), so turn ``k``'s ``infer``
carries ``2k`` messages.

    (a) journal bytes (the SQLite file after a WAL checkpoint) for 50 to 1,000 turns, next to
        the conversation's unique content (its messages' canonical JSON, each once) and to what
        the whole-text format of 0.3.0 writes for the same run (each entry's whole text: the
        size of the same journal with every entry unpacked); the exponent of bytes against
        turns, fitted
    (b) time of one turn at turn 10, 100 and 1,000 (the SQLite journal)
    (c) peak memory of a 1,000-turn run with the in-memory journal, next to the
        conversation's own size
    (d) ``opdsl replay``, ``show`` and ``report`` of a 1,000-turn run, wall time

Targets (issue: linear journal): (a) at most 2x the unique content, exponent about 1;
(b) turn 1,000 within 1.5x of turn 10; (c) within 2x; (d) each under 2 s.
Run with ``make bench``.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from interpreters import LiveInterpreter, MemoryJournal, SqliteJournal, run  # noqa: E402
from interpreters.journal._content import unpack_effect, unpack_result  # noqa: E402
from op import Message, Response  # noqa: E402
from op.effects import ModelRequest  # noqa: E402
from state import canonical_json  # noqa: E402
from tests.fixtures.conversation_programs import TOOLS, answer, reader  # noqa: E402


class TimedModel:
    """The fixture's model, noting when each turn's call came."""

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.at: list[float] = []
        self.last: tuple[Message, ...] = ()

    async def complete(self, request: ModelRequest, call: object) -> Response:
        self.at.append(time.perf_counter())
        self.last = request.messages
        return answer(request.messages, self.turns)


def conversation_bytes(messages: Sequence[Message]) -> int:
    return sum(len(canonical_json(m).encode()) for m in messages)


def journaled(
    turns: int, chunk: int, path: Path, text: str = "source"
) -> tuple[int, int, int | None, TimedModel]:
    """(journal file bytes, unique content bytes, whole-text bytes or None, the model)."""
    os.environ["OPDSL_TEST_CHUNK"] = str(chunk)
    os.environ["OPDSL_TEST_TEXT"] = text
    model = TimedModel(turns)
    result = run(reader, turns, model=model, tools=TOOLS, db=str(path))
    assert result.status == "completed", result.error
    journal = SqliteJournal(path)
    journal._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = path.stat().st_size
    whole = None
    if turns <= 400:  # the whole texts of 0.3.0: their size, counted (not written)
        get = journal.content
        whole = 0
        for e in journal.entries(result.run_id):
            one = lambda h: get((h,))[h]  # noqa: E731
            whole += len(unpack_effect(e.effect_json, one).encode())
            whole += len((unpack_result(e.kind, e.result_json, one) or "").encode())
            whole += len((e.usage_json or "").encode())
    journal.close()
    return size, conversation_bytes(model.last), whole, model


TEXTS = (
    ("source", "Python source (compresses about 3x)"),
    ("random", "random base64 (does not compress)"),
    ("lorem", "one phrase repeated (compresses 50x)"),
)
"""The kinds of tool result measured (``OPDSL_TEST_TEXT`` of the fixture's tool)."""


def exponent(points: Sequence[tuple[int, int]]) -> float:
    xs = [math.log(t) for t, _ in points]
    ys = [math.log(b) for _, b in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def turn_times(model: TimedModel, around: int, width: int = 5) -> float:
    gaps = [b - a for a, b in zip(model.at, model.at[1:], strict=False)]
    window = gaps[max(0, around - width) : around + width]
    return sorted(window)[len(window) // 2]


def peak_memory(
    turns: int, chunk: int, journal: MemoryJournal | None, text: str = "source"
) -> tuple[int, int]:
    """Peak traced memory of a run (with ``journal``, or none), and its conversation's bytes."""
    os.environ["OPDSL_TEST_CHUNK"] = str(chunk)
    os.environ["OPDSL_TEST_TEXT"] = text
    LiveInterpreter(model=TimedModel(2), tools=TOOLS).run_sync(reader, 2)  # imports done
    model = TimedModel(turns)
    interpreter = LiveInterpreter(model=model, tools=TOOLS, journal=journal)
    tracemalloc.start()
    result = interpreter.run_sync(reader, turns)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.status == "completed"
    return peak, conversation_bytes(model.last)


def timed_command(*args: str) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "interpreters", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"opdsl {' '.join(args)} failed: {done.stderr[-400:]}")
    return elapsed


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="opdsl-growth-"))
    print("(a) journal bytes, 1 KB a turn of Python source (what a coding agent reads)")
    print(f"{'turns':>6} {'journal':>11} {'content':>11} {'ratio':>6} {'0.3.0 format':>13}")
    points: list[tuple[int, int]] = []
    models: dict[int, TimedModel] = {}
    for turns in (50, 100, 200, 400, 1000):
        size, content, whole, model = journaled(turns, 1000, tmp / f"kb{turns}.db")
        points.append((turns, size))
        models[turns] = model
        shown = "-" if whole is None else f"{whole:,}"
        print(f"{turns:>6} {size:>11,} {content:>11,} {size / content:>6.2f} {shown:>13}")
    print(f"fitted exponent of journal bytes against turns: {exponent(points):.2f}")
    print("the same at 400 turns x 1 KB and 200 turns x 10 KB, by the kind of text:")
    for turns, chunk in ((400, 1000), (200, 10_000)):
        for text, what in TEXTS:
            path = tmp / f"{text}{turns}x{chunk}.db"
            size, content, whole, _ = journaled(turns, chunk, path, text)
            print(
                f"  {turns} x {chunk // 1000} KB, {what:<44} journal {size:>10,}  "
                f"content {content:>10,}  ratio {size / content:.2f}  0.3.0 format {whole:,}"
            )

    print("\n(b) one turn, median of 10 around the turn (SQLite journal, 1 KB a turn)")
    big = models[1000]
    t10, t100, t1000 = (turn_times(big, k) for k in (10, 100, 995))
    print(
        f"turn 10: {t10 * 1e3:.3f} ms, turn 100: {t100 * 1e3:.3f} ms, "
        f"turn 1,000: {t1000 * 1e3:.3f} ms ({t1000 / t10:.2f}x turn 10)"
    )

    print("\n(c) peak memory, 1,000 turns: the in-memory journal next to no journal at all")
    for chunk in (1000, 10_000):
        for text, what in TEXTS[:2]:
            bare, conv = peak_memory(1000, chunk, None, text)
            peak, _ = peak_memory(1000, chunk, MemoryJournal(), text)
            print(
                f"{chunk // 1000} KB a turn of {what.split(' (')[0]}: conversation {conv:,} B; "
                f"no journal: peak {bare:,} B; in-memory journal: peak {peak:,} B "
                f"({peak / bare:.2f}x; the journal adds {(peak - bare) / conv:.2f}x the "
                "conversation)"
            )

    print("\n(d) reading a 1,000-turn run (1 KB a turn), wall time with the process start")
    db = str(tmp / "kb1000.db")
    run_id = SqliteJournal(db, read_only=True).runs()[0].run_id
    start = timed_command("--help")
    print(f"  (a bare `opdsl --help`: {start:.2f} s)")
    for verb in (
        ["replay", run_id, "--db", db],
        ["show", run_id, "--db", db],
        ["show", run_id, "--json", "--db", db],
        ["report", run_id, "--db", db, "-o", str(tmp / "report.html")],
    ):
        name = " ".join([verb[0], *(["--json"] if "--json" in verb else [])])
        print(f"  opdsl {name}: {timed_command(*verb):.2f} s")
    print(f"  report page: {(tmp / 'report.html').stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
