"""``opdsl check`` over 1,000 stored runs of 100 effects each, next to baselines measured in the
same run.

    (a) ``opdsl check --db J`` in a process of its own: every run replayed against the code
        as it is now, by value (the time includes the process's start); (a2) with ``--jobs 2``
    (b) the same check from the API (``check_runs``), in this process
    (c) a plain loop of ``replay(run_id)`` over every run, in this process (what (a) does for
        each run, without the verdicts)
    (d) a loop of ``opdsl replay RUN``, one process a run, as a script would gate a deploy
        today: timed over a sample and given for 1,000 runs

Target: (a) under 10 s on the 2-core machine (best of three; its CPU time is given too, the
wall time of an idle core, since the machine is shared). Run with ``python bench/check.py [RUNS]``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from check_programs import EFFECTS, lookup, order

from interpreters import LiveInterpreter, SqliteJournal, replay
from interpreters._checking import check_runs, journal_runs

RUNS = 1_000
SAMPLE = 10
ROUNDS = 3
ROOT = Path(__file__).resolve().parent.parent


def record(path: Path, runs: int) -> SqliteJournal:
    journal = SqliteJournal(path)
    live = LiveInterpreter(tools=[lookup], journal=journal)
    for c in range(runs):
        assert live.run(order, c).status == "completed"
    return journal


def _opdsl(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'bench'}"}
    return subprocess.run(
        [sys.executable, "-m", "interpreters", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT / "bench",
    )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def check_command(path: Path, jobs: int = 1) -> tuple[float, float, str]:
    """Wall and CPU seconds of ``opdsl check`` in a process of its own (``--jobs``), and its
    summary."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    out = _opdsl("check", "--db", str(path), "--jobs", str(jobs))
    seconds, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    assert out.returncode == 0, out.stdout + out.stderr
    return seconds, cpu, out.stdout.strip().splitlines()[-1]


def check_api(journal: SqliteJournal) -> tuple[float, int]:
    t0 = time.perf_counter()
    checked = check_runs(journal_runs(journal))
    seconds = time.perf_counter() - t0
    assert all(c.verdict == "same" for c in checked)
    return seconds, len(checked)


def replay_loop(journal: SqliteJournal) -> float:
    t0 = time.perf_counter()
    for r in journal.runs():
        replay(r.run_id, db=journal)
    return time.perf_counter() - t0


def replay_processes(path: Path, run_ids: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds a run with one ``opdsl replay`` process a run."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    for run_id in run_ids:
        out = _opdsl("replay", run_id, "--db", str(path))
        assert out.returncode == 0, out.stdout + out.stderr
    n = len(run_ids)
    return (time.perf_counter() - t0) / n, (_children_cpu() - cpu0) / n


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else RUNS
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.db"
        t0 = time.perf_counter()
        journal = record(path, runs)
        print(f"recorded {runs:,} runs of {EFFECTS} effects in {time.perf_counter() - t0:.1f} s")
        rounds = [check_command(path) for _ in range(ROUNDS)]
        seconds, cpu, said = min(rounds)
        print(
            f"(a) opdsl check, one process:   {seconds:6.2f} s   ({cpu:.2f} s of CPU; best of "
            f"{ROUNDS}; {said})"
        )
        seconds, cpu, _ = min(check_command(path, jobs=2) for _ in range(ROUNDS))
        print(
            f"(a2) the same, --jobs 2:        {seconds:6.2f} s   ({cpu:.2f} s of CPU; best of {ROUNDS})"
        )
        seconds, n = check_api(journal)
        print(f"(b) check_runs, in process:     {seconds:6.2f} s   ({n:,} runs the same)")
        seconds = replay_loop(journal)
        print(f"(c) replay() loop, in process:  {seconds:6.2f} s")
        each, cpu = replay_processes(path, [r.run_id for r in journal.runs()[:SAMPLE]])
        print(
            f"(d) opdsl replay, a process a run: {each:.2f} s a run ({cpu:.2f} s of CPU), "
            f"{each * runs:.0f} s for {runs:,} runs ({cpu * runs:.0f} s of CPU; timed over {SAMPLE})"
        )
        print(f"on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
