"""The benchmarks still run (``make bench``): each one's measured paths, made small. No figure
is asserted; what is checked is that each path does the work it times, so a bench that broke
is found here rather than when someone reproduces the README's figures."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from interpreters import SqliteJournal

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _bench(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_journal_bench_measures_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = _bench("journal")
    assert journal.raw_sqlite(tmp_path / "raw.db", 20) > 0
    assert journal.raw_sqlite(tmp_path / "stdlib.db", 20, stdlib=True) > 0
    for grouped in (None, True):
        rate, run_id = journal.opdsl_sqlite(tmp_path / f"ours{grouped}.db", 20, grouped=grouped)
        written = SqliteJournal(tmp_path / f"ours{grouped}.db", read_only=True)
        assert rate > 0 and len(written.entries(run_id)) == 21  # the checkpoint, 20 tools
    monkeypatch.setattr(journal, "REPLAY_N", 30)
    seconds, rate = journal.replay_speed(tmp_path / "replay.db")
    assert seconds > 0 and rate > 0


def test_the_driver_bench_runs_each_of_opdsls_variants() -> None:
    driver = _bench("driver")
    assert driver.opdsl_live(10) == 10
    assert driver.opdsl_journal(10) == 10
    assert driver.opdsl_argument(10) == 10


def test_the_concurrency_bench_runs_against_its_server(tmp_path: Path) -> None:
    concurrency = _bench("concurrency")
    port = concurrency.free_port()
    server = subprocess.Popen(
        [sys.executable, str(BENCH / "slow_openai_server.py"), str(port), "0.001"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        url = f"http://127.0.0.1:{port}/v1"
        db = tmp_path / "runs.db"
        seconds, _ = asyncio.run(concurrency.opdsl(url, 3, db))
        assert seconds > 0
        asyncio.run(concurrency.opdsl(url, 3, None))
        asyncio.run(concurrency.opdsl(url, 3, tmp_path / "single.db", grouped=False))
    finally:
        server.terminate()
        server.wait()
    runs = SqliteJournal(db, read_only=True).runs()
    assert [r.status for r in runs] == ["completed"] * 3
    calls = [e for r in runs for e in SqliteJournal(db, read_only=True).entries(r.run_id)]
    assert len(calls) == 3 * concurrency.CALLS


def test_the_concurrency_bench_times_the_collector_only_during_its_round() -> None:
    concurrency = _bench("concurrency")
    import gc

    async def garbage() -> int:
        for _ in range(3):
            ring: list[object] = []
            ring.append(ring)  # a cycle: only the collector frees it
            del ring
            gc.collect()
        return 7

    before = list(gc.callbacks)
    value, cpu, collected = concurrency.timed(garbage())
    assert value == 7 and cpu >= 0
    assert collected.full >= 3 and collected.seconds > 0
    assert gc.callbacks == before  # nothing of the round's is left counting
    full, seconds = collected.full, collected.seconds
    gc.collect()
    assert (collected.full, collected.seconds) == (full, seconds)


def test_the_growth_bench_measures_a_journal_and_its_readers(tmp_path: Path) -> None:
    growth = _bench("growth")
    size, content, whole, model = growth.journaled(6, 400, tmp_path / "kb.db")
    assert 0 < content < size and whole is not None and whole > 2 * content  # the square
    assert len(model.at) == 7  # six tool calls, then the answer
    assert growth.turn_times(model, 3, width=2) > 0
    assert 0.9 < growth.exponent([(10, 100), (100, 1000), (1000, 10_000)]) < 1.1
    peak, conversation = growth.peak_memory(4, 400, None)
    assert peak > 0 and conversation > 4 * 400
    run_id = SqliteJournal(tmp_path / "kb.db", read_only=True).runs()[0].run_id
    assert growth.timed_command("show", run_id, "--db", str(tmp_path / "kb.db")) > 0


def test_the_check_bench_checks_every_run_it_recorded(tmp_path: Path) -> None:
    check = _bench("check")
    journal = check.record(tmp_path / "runs.db", 3)
    assert [len(journal.entries(r.run_id)) for r in journal.runs()] == [100, 100, 100]
    seconds, n = check.check_api(journal)
    assert seconds > 0 and n == 3
    assert check.replay_loop(journal) > 0
