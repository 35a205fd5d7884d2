"""Crash tests: a run killed with SIGKILL at every journal write, before and after it, is
finished by ``resume`` with the same value and state as an uninterrupted run; no completed
effect is performed twice; the journal passes its integrity check."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import IO, Any

import pytest

from interpreters import RunResult, SqliteJournal, check_integrity, resume, run
from tests.fixtures.crash_child import LINES
from tests.fixtures.durable_programs import TOOLS, Counted, appender, lines_of

ROOT = Path(__file__).resolve().parents[3]


def _writes_in_a_full_run(tmp_path: Path, env: dict[str, str]) -> int:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.fixtures.crash_child",
            str(tmp_path / "full.db"),
            str(tmp_path / "full.txt"),
            "0",
            "never",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split("writes=")[1].split()[0])


@pytest.mark.parametrize("grouped", [False, True], ids=["commit-each", "group-commit"])
def test_sigkill_at_every_write_then_resume(tmp_path: Path, grouped: bool) -> None:
    env = {**os.environ, "OPDSL_TEST_GROUP_COMMIT": "1" if grouped else "0"}
    reference = run(
        appender,
        str(tmp_path / "ref.txt"),
        LINES,
        tools=TOOLS,
        state=Counted(),
        db=str(tmp_path / "ref.db"),
    )
    total = _writes_in_a_full_run(tmp_path, env)
    points = [(n, when) for n in range(1, total + 1) for when in ("before", "after")]
    assert len(points) >= 30
    # one process started, a process forked from it for each kill (each a real SIGKILL)
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.crash_child", "--serve"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        for n, when in points:
            _kill_at(server.stdin, server.stdout, tmp_path, n, when, reference)
    finally:
        server.stdin.close()
        server.wait(timeout=30)


def _kill_at(
    ask: IO[str], answer: IO[str], tmp_path: Path, n: int, when: str, reference: RunResult[Any]
) -> None:
    """Kill a run at write ``n`` (before or after it), then check that resume finishes it."""
    case = tmp_path / f"{n}-{when}"
    case.mkdir()
    db, out = case / "runs.db", case / "out.txt"
    ask.write(f"{db} {out} {n} {when}\n")
    ask.flush()
    ended = answer.readline().strip()
    assert ended == "-9", (n, when, ended)
    journal = SqliteJournal(db)
    try:
        before = {e.address: e.status for e in journal.entries("crash")}
    except Exception:
        before = None  # killed before the run record was written: nothing to resume
    if before is None:
        assert lines_of(out) == []
        return
    completed_tools = {a for a, s in before.items() if s == "completed" and a not in ("",)}
    status = journal.run("crash").status
    if status == "completed":
        result_value = resume_or_replay(journal, "crash")
    else:
        result = resume("crash", db=journal)
        assert result.status == "completed", (n, when, result.describe())
        result_value = result.value
        assert result.state is not None and reference.state is not None
        assert result.state.canonical() == reference.state.canonical()
    assert result_value == reference.value, (n, when)
    keys = Counter(line.split(" ")[0] for line in lines_of(out))
    assert len(keys) == LINES, (n, when, keys)
    for key, count in keys.items():
        address = key.split(":")[1]
        if address in completed_tools:
            assert count == 1, (
                f"kill {when} write {n}: completed effect {address} ran {count} times"
            )
        else:
            assert count <= 2, (n, when, key, count)
    assert check_integrity(journal, "crash") == [], (n, when)
    assert journal.run("crash").status == "completed"
    journal.close()


def resume_or_replay(journal: SqliteJournal, run_id: str) -> object:
    """A run killed after its last write is complete already: replay must agree with it."""
    from interpreters import replay

    return replay(run_id, db=journal).value


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_killed_runs_lock_does_not_block_its_resume(tmp_path: Path, when: str) -> None:
    db, out = tmp_path / "runs.db", tmp_path / "out.txt"
    subprocess.run(
        [sys.executable, "-m", "tests.fixtures.crash_child", str(db), str(out), "5", when],
        cwd=ROOT,
        check=False,
    )
    assert resume("crash", db=str(db)).status == "completed"
