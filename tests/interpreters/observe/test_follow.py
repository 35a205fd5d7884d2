"""``opdsl tail RUN`` (and ``show --follow``) on a run another process is executing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from interpreters import SqliteJournal
from interpreters.cli._main import main
from tests.helpers import RawJournal

ROOT = Path(__file__).resolve().parents[3]


def _start(db: Path, run_id: str, steps: int) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.slow_programs", str(db), run_id, str(steps)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for _ in range(200):  # until the run is in the journal
        if db.exists():
            try:
                with RawJournal(db) as c:
                    if c.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone():
                        return child
            except apsw.Error:
                pass
        time.sleep(0.05)
    child.kill()
    raise AssertionError(f"the run never appeared: {child.communicate()}")


def _tail(db: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "interpreters", *extra, run_id, "--db", str(db)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_tail_follows_a_live_run_effect_by_effect_until_it_ends(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    child = _start(db, "followed", 4)
    out = _tail(db, "followed", "tail")
    assert child.wait(30) == 0
    # it returned only once the run had ended, and saw every effect of it, in order
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("▶ run followed")
    assert lines[-1].startswith("■ completed")
    tools = [line.split()[0] for line in lines if " tool step " in line]
    assert tools == ["2.1", "4.1", "6.1", "8.1"]
    assert sum("• progress" in line for line in lines) == 4
    assert any("◆ checkpoint start" in line for line in lines)


def test_show_follow_is_the_same_and_a_finished_run_is_told_at_once(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    child = _start(db, "done", 1)
    assert child.wait(30) == 0
    t0 = time.monotonic()
    out = _tail(db, "done", "show", "--follow")
    assert out.returncode == 0 and time.monotonic() - t0 < 15
    assert out.stdout.splitlines()[-1].startswith("■ completed")
    assert " tool step " in out.stdout


def test_tail_says_when_the_process_running_it_is_gone(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    child = _start(db, "killed", 50)
    tail = subprocess.Popen(
        [sys.executable, "-m", "interpreters", "tail", "killed", "--db", str(db)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30  # until a tool step is done (a loaded machine is slow)
    while not any(
        e.kind == "tool" and e.status == "completed"
        for e in SqliteJournal(db, read_only=True).entries("killed")
    ):
        assert time.monotonic() < deadline, "no tool step finished"
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    out, err = tail.communicate(timeout=30)
    assert tail.returncode == 1
    assert "the process running killed is gone" in err and "opdsl resume killed" in err
    assert " tool step " in out
    # the command it gives continues the run, as printed
    command = err.split("continue it with: ", 1)[1].split()
    assert command == ["opdsl", "resume", "killed"]
    done = subprocess.run(
        [sys.executable, "-m", "interpreters", *command[1:], "--db", str(db), "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SLOW_STEP": "0"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "50"


def test_tail_of_an_unknown_run_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    child = _start(db, "known", 1)
    child.wait(30)
    assert main(["tail", "unknown", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opdsl: error:") and "unknown" in err and len(err.splitlines()) == 1
