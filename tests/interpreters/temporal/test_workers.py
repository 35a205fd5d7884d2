"""``opdsl worker`` processes on a real Temporal server: one is killed with SIGKILL while two
serve the queue and every run still ends once, with no finished effect done again; and the
CLI reads, forks and answers runs on Temporal as it does local ones."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from interpreters.temporal import RunOutcome, connect, export, outcome, parse_export, start_run
from tests.interpreters.temporal.conftest import Server, stop_workers

ROOT = Path(__file__).resolve().parents[3]
OPDSL = [sys.executable, "-m", "interpreters"]
STEPS = "tests.interpreters.temporal.programs:steps"
ASKS = "tests.interpreters.temporal.programs:asks_name"
SLOW = "tests.interpreters.temporal.tools:slow"


def _env(marks: Path) -> dict[str, str]:
    return {**os.environ, "OPDSL_TEST_MARKS": str(marks), "PYTHONPATH": str(ROOT)}


def _worker(server: Server, queue: str, marks: Path, log: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [*OPDSL, "worker", "--temporal", server.target, "--task-queue", queue]
        + ["--program", STEPS, "--program", ASKS, "--tools", SLOW],
        cwd=ROOT,
        env=_env(marks),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while b"Ctrl-C stops it" not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the worker did not start: {log.read_text()}")
        time.sleep(0.1)
    return process


@pytest.fixture
def workers(temporal: Server, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    marks = tmp_path / "marks"
    procs = [_worker(temporal, "kill", marks, tmp_path / f"worker{i}.log") for i in range(2)]
    yield procs
    stop_workers(procs)


def test_a_worker_killed_mid_run_loses_and_repeats_nothing(
    temporal: Server, tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    marks = tmp_path / "marks"
    runs = 6

    async def main() -> tuple[list[RunOutcome], list[str], float]:
        client = await connect(temporal.target)
        handles = [
            await start_run(client, STEPS, task_queue="kill", args=(6, 0.4), run_id=f"kill-{i}")
            for i in range(runs)
        ]
        # once both workers have finished effects, kill the one that did the first
        while True:
            lines = marks.read_text().splitlines() if marks.exists() else []
            done = [line for line in lines if line.startswith("done")]
            pids = {line.split()[3] for line in done}
            if len(pids) == 2 and len(done) >= 6:
                break
            await asyncio.sleep(0.05)
        victim = next(p for p in workers if str(p.pid) == done[0].split()[3])
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        ended = [await outcome(h) for h in handles]
        took = time.monotonic() - killed
        texts = [await export(client, f"kill-{i}") for i in range(runs)]
        return ended, texts, took

    ended, texts, took = asyncio.run(asyncio.wait_for(main(), 180))
    victim_pid = str(next(p.pid for p in workers if p.poll() == -signal.SIGKILL))
    print(f"failover: every run ended {took:.1f} s after the kill")
    for i, got in enumerate(ended):
        assert got.status == "completed", got
        assert json.loads(got.result_json or "null") == [f"s{k}" for k in range(6)]
        record, entries = parse_export(texts[i])
        assert [e.address for e in entries] == [str(k) for k in range(1, 13)]
        assert all(e.status == "completed" for e in entries)

    # every effect was finished once; an effect was done again only if the killed worker
    # was doing it when it died (the activity was never reported finished)
    done_by: dict[str, list[str]] = defaultdict(list)
    for line in marks.read_text().splitlines():
        word, _label, key, pid = line.split()
        if word == "done":
            done_by[key].append(pid)
    assert len(done_by) == runs * 6
    assert any(victim_pid in pids for pids in done_by.values()), "the kill was mid-run"
    for key, pids in done_by.items():
        assert all(pid == victim_pid for pid in pids[:-1]), (key, pids)
        assert pids[-1] != victim_pid or len(pids) == 1, (key, pids)


def test_the_cli_runs_reads_forks_and_answers_on_temporal(
    temporal: Server, tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    env = _env(tmp_path / "marks")
    t = ["--temporal", temporal.target]

    def opdsl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*OPDSL, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )

    started = opdsl("run", STEPS, "--arg", "n=2", "--arg", "seconds=0", *t, "--task-queue", "kill")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[1]
    assert json.loads(started.stdout.split("\n", 1)[1]) == ["s0", "s1"]

    listed = json.loads(opdsl("runs", *t, "--json").stdout)
    assert {"run_id": run_id, "program": STEPS, "status": "completed"}.items() <= next(
        r for r in listed if r["run_id"] == run_id
    ).items()
    shown = opdsl("show", run_id, *t)
    assert shown.returncode == 0 and "step-1" in shown.stdout and "completed" in shown.stdout
    cps = json.loads(opdsl("checkpoints", run_id, *t, "--json").stdout)
    assert [c["name"] for c in cps] == ["step-0", "step-1"]
    exported = opdsl("export", run_id, *t, "-o", str(tmp_path / "run.jsonl"))
    assert exported.returncode == 0
    assert len((tmp_path / "run.jsonl").read_text().splitlines()) == 5
    # replayed here, the server's run is sealed by nothing of the user's: its program named
    refused = opdsl("replay", run_id, *t)
    assert refused.returncode == 2 and f"--program {STEPS}" in refused.stderr
    replayed = opdsl("replay", run_id, *t, "--program", STEPS)
    assert replayed.returncode == 0 and "same value and state" in replayed.stdout
    forked = opdsl("resume", run_id, "--from", "step-0", *t, "--task-queue", "kill")
    assert forked.returncode == 0, forked.stderr
    child = forked.stdout.split()[1]
    child_runs = json.loads(opdsl("runs", *t, "--json").stdout)
    assert next(r for r in child_runs if r["run_id"] == child)["parent_run"] == run_id
    diffed = json.loads(opdsl("diff", run_id, child, *t, "--json").stdout)
    # the fork replays step-0 and performs step 1 again: the same effects, then the ends differ
    assert (diffed["a"], diffed["b"]) == (run_id, child)

    # a run that waits: started detached, answered from the command line, which waits for it
    detached = opdsl("run", ASKS, *t, "--task-queue", "kill", "--detach")
    waiting = detached.stdout.split()[1]
    printed = re.search(r"see it with: (opdsl show .+)", detached.stdout)
    assert detached.returncode == 0 and printed is not None, detached.stdout
    seen = opdsl(*printed.group(1).split()[1:])  # the command it printed, as printed
    assert seen.returncode == 0 and f"run {waiting}" in seen.stdout, seen.stderr
    answered = opdsl("answer", waiting, "Ada", *t)
    for _ in range(100):
        if "not waiting for an answer" not in answered.stderr:
            break
        time.sleep(0.2)  # it has not reached its question yet
        answered = opdsl("answer", waiting, "Ada", *t)
    assert answered.returncode == 0, answered.stderr
    assert f"answered run {waiting} at address 1" in answered.stdout
    assert json.loads(answered.stdout.split("\n", 1)[1]) == "hello Ada"

    # refused, each with one line that says why
    for args, expected in [
        (("resume", run_id, *t), "goes on by itself; fork run"),
        (("answer", run_id, "yes", *t), "is not waiting for an answer: it has ended"),
        (("show", "nosuch", *t), "no run 'nosuch' on Temporal"),
        (("show", run_id, *t, "--db", "x.db"), "--temporal and --db"),
        (
            ("run", STEPS, "--arg", "n=1", "--arg", "seconds=0", "--tools", SLOW, *t),
            "the workers hold",
        ),
        (("worker", "--program", STEPS), "opdsl worker needs --temporal"),
        (("runs", "--temporal", "127.0.0.1:1"), "cannot reach Temporal at 127.0.0.1:1"),
    ]:
        refused = opdsl(*args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert expected in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr


def test_the_readme_commands_run_as_written(temporal: Server, tmp_path: Path) -> None:
    """The README's Temporal block, with this machine's server and a program of the tests in
    place of the user's: the worker serves, the run ends, show and the fork work, and answering
    a run that does not wait is refused with a reason."""
    import re
    import shlex

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "opdsl worker" in b)
    lines = [line.split("  #")[0].strip() for line in block.replace("\\\n", " ").splitlines()]
    commands = [line.removesuffix("&").strip() for line in lines if line.startswith("opdsl")]
    workspace = tmp_path / "a"
    workspace.mkdir()

    def here(command: str, run_id: str = "") -> list[str]:
        command = command.replace("127.0.0.1:7233", temporal.target)
        command = command.replace("myagent:main", "tests.interpreters.temporal.programs:asks_plan")
        command = command.replace("myagent:TOOLS", SLOW).replace("~/src/a", str(workspace))
        command = command.replace("RUN", run_id)
        return [*OPDSL, *shlex.split(command)[1:]]

    env = _env(tmp_path / "marks")
    worker = subprocess.Popen(
        here(commands[0]), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert worker.stdout is not None
        assert b"Ctrl-C stops it" in worker.stdout.readline()

        def opdsl(command: str, run_id: str = "") -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                here(command, run_id),
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )

        ran = opdsl(commands[1])
        assert ran.returncode == 0, ran.stderr
        run_id = ran.stdout.split()[1]
        assert json.loads(ran.stdout.split("\n", 1)[1]) == "planned tests"
        shown = opdsl(commands[2], run_id)
        assert shown.returncode == 0 and "plan" in shown.stdout
        answered = opdsl(commands[3], run_id)
        assert answered.returncode == 2
        assert "is not waiting for an answer: it has ended" in answered.stderr
        forked = opdsl(commands[4], run_id)
        assert forked.returncode == 0, forked.stderr
        assert json.loads(forked.stdout.split("\n", 1)[1]) == "planned tests"
    finally:
        worker.send_signal(signal.SIGINT)
        assert worker.wait(15) == 0, "Ctrl-C stops the worker"
