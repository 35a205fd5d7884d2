"""Many processes writing one journal: PROCS separate processes (each its own interpreter,
started with ``subprocess``, not forked) released at the same instant on one new journal file,
each making RUNS runs of EFFECTS effects one after the other, each run opening and closing the
journal as the ``opdsl`` command does.

Afterwards every run must be ``completed`` with all its entries, numbered without gaps, and no
process may have died. Each round is a new file; the figures printed are the rounds' wall time,
the runs and effects per second over all processes, and any failure seen.

    python bench/journal_stress.py [ROUNDS [PROCS [RUNS [EFFECTS]]]]   (default: 5 20 5 54)

The same script is each process (``--worker DB TAG RUNS EFFECTS``); the test suite runs a
small round of it (``tests/interpreters/journal/test_stress.py``).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROUNDS, PROCS, RUNS, EFFECTS = 5, 20, 5, 54


def worker(db: str, tag: str, runs: int, effects: int) -> int:
    from interpreters import run
    from op import Op, checkpoint, tool

    def step(i: int) -> str:
        return f"step {i} " + "x" * (i % 50)

    def program(n: int) -> Op[int]:
        yield from checkpoint("start")
        for i in range(n - 2):
            yield from tool("step", {"i": i})
        yield from checkpoint("end")
        return n

    print("ready", flush=True)
    sys.stdin.readline()  # every process is released at once
    for k in range(runs):
        result = run(program, effects, tools=[step], db=db, run_id=f"{tag}-{k}")
        if result.status != "completed":
            print(f"run {tag}-{k} ended {result.status}: {result.error}", file=sys.stderr)
            return 1
    return 0


@dataclass
class Round:
    seconds: float
    died: list[str] = field(default_factory=list)  # one line per process that failed
    bad_runs: list[str] = field(default_factory=list)  # one line per run not whole
    runs: int = 0


def check_journal(db: Path, expected_runs: list[str], effects: int) -> tuple[int, list[str]]:
    """The runs found whole, and one line for each that is not: missing, not ``completed``,
    entries missing or not ``completed``, ``seq`` not 0, 1, 2, ... with no gap."""
    bad: list[str] = []
    if not db.exists():
        return 0, ["the journal was never made"]
    con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        whole = 0
        status = dict(con.execute("SELECT run_id, status FROM runs").fetchall())
        for run_id in expected_runs:
            if run_id not in status:
                bad.append(f"{run_id}: not in the journal")
                continue
            rows = con.execute(
                "SELECT seq, status FROM entries WHERE run_id=? ORDER BY seq", (run_id,)
            ).fetchall()
            seqs = [r[0] for r in rows]
            problems = []
            if status[run_id] != "completed":
                problems.append(f"run {status[run_id]}")
            if seqs != list(range(effects)):
                gaps = sorted(set(range(max(seqs, default=-1) + 1)) - set(seqs))
                problems.append(f"{len(seqs)} of {effects} entries, gaps at seq {gaps[:8]}")
            if any(r[1] != "completed" for r in rows):
                problems.append("an entry not completed")
            if problems:
                bad.append(f"{run_id}: {'; '.join(problems)}")
            else:
                whole += 1
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
        if integrity != "ok":
            bad.append(f"integrity_check: {integrity}")
    except sqlite3.DatabaseError as exc:
        return whole, [*bad, f"the journal cannot be read: {exc}"]
    finally:
        con.close()
    return whole, bad


def one_round(db: Path, procs: int, runs: int, effects: int, timeout: float = 300) -> Round:
    """Start ``procs`` processes, wait until each has imported opdsl, release them together."""
    logs = [db.with_name(f"p{i}.err") for i in range(procs)]
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", str(db), f"p{i}", str(runs), str(effects)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=logs[i].open("w"),
            text=True,
        )
        for i in range(procs)
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.close()
    died = []
    for i, child in enumerate(children):
        late = ""
        try:
            child.wait(timeout=max(1.0, timeout - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            late = f"still running after {timeout:.0f} s"
        err = logs[i].read_text() + late
        if child.returncode != 0:
            last = [line for line in err.strip().splitlines() if line.strip()] or ["(no output)"]
            died.append(f"p{i} (exit {child.returncode}): {last[-1].strip()}")
    seconds = time.perf_counter() - t0
    expected = [f"p{i}-{k}" for i in range(procs) for k in range(runs)]
    whole, bad = check_journal(db, expected, effects)
    return Round(seconds, died, bad, whole)


def main() -> int:
    if sys.argv[1:2] == ["--worker"]:
        return worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    args = sys.argv[1:]
    if len(args) > 4 or not all(a.isdigit() and int(a) > 0 for a in args):
        print(
            "usage: python bench/journal_stress.py [ROUNDS [PROCS [RUNS [EFFECTS]]]]"
            f"  (counts; got {args})"
        )
        return 2
    rounds, procs, runs, effects = [int(a) for a in args] + [ROUNDS, PROCS, RUNS, EFFECTS][
        len(args) :
    ]
    if effects < 2:
        print(f"EFFECTS must be at least 2 (a run's two checkpoints); got {effects}")
        return 2
    from interpreters.journal._sqlite import sqlite_library

    print(
        f"{procs} processes at once on one new journal, {runs} runs each of {effects} effects, "
        f"{rounds} rounds; Python {sys.version.split()[0]}, journal on {sqlite_library()}"
    )
    print(
        f"{'round':>5} {'seconds':>8} {'runs/s':>8} {'effects/s':>10} {'whole runs':>11}  failures"
    )
    failed = 0
    for r in range(rounds):
        db = Path(tempfile.mkdtemp(prefix="opdsl-stress-")) / "runs.db"
        res = one_round(db, procs, runs, effects)
        total = procs * runs
        # a dead process's later runs were never written; a run written but not whole is worse
        broken = [b for b in res.bad_runs if not b.endswith(": not in the journal")]
        failed += bool(res.died or res.bad_runs)
        print(
            f"{r + 1:>5} {res.seconds:>8.2f} {total / res.seconds:>8.1f} "
            f"{total * effects / res.seconds:>10,.0f} {res.runs:>5} of {total:<4}  "
            f"{len(res.died)} processes died, {len(res.bad_runs) - len(broken)} runs never "
            f"written, {len(broken)} written but not whole"
        )
        for line in res.died[:5] + broken[:5]:
            print(f"{'':>6}{line}")
    print(f"{failed} of {rounds} rounds had a failure")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
