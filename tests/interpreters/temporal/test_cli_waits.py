"""The command line on Temporal as locally: a run that reaches ``ask`` is listed ``waiting`` and
ends the command with the answer commands (``run``, ``resume --from``, ``answer``); a fork's
parent column names its checkpoint; a program module the workflow sandbox refuses stops the
worker at start, naming the line; a workflow task that keeps failing is said by the client."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tests.interpreters.temporal.conftest import Server, stop_workers

ROOT = Path(__file__).resolve().parents[3]
OPDSL = [sys.executable, "-m", "interpreters"]
PLAN = "tests.interpreters.temporal.asking_programs:plan_then_ask"
TWO = "tests.interpreters.temporal.asking_programs:two_asks"


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}


def _worker(server: Server, tmp_path: Path, *programs: str) -> subprocess.Popen[bytes]:
    log = tmp_path / "worker.log"
    args = [a for p in programs for a in ("--program", p)]
    process = subprocess.Popen(
        [*OPDSL, "worker", "--temporal", server.target, "--task-queue", "waits", *args],
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while b"Ctrl-C stops it" not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the worker did not start: {log.read_text()}")
        time.sleep(0.1)
    return process


def test_a_module_the_sandbox_refuses_stops_the_worker_naming_the_line(
    temporal: Server, tmp_path: Path
) -> None:
    (tmp_path / "reads_env.py").write_text(
        "import os\n\nfrom op import Op, checkpoint\n\n"
        'HOME = os.environ.get("HOME")\n\n\n'
        "def main() -> Op[str]:\n    yield from checkpoint('x')\n    return 'x'\n"
    )
    refused = subprocess.run(
        [*OPDSL, "worker", "--temporal", temporal.target, "--program", "reads_env:main"],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "program reads_env:main cannot run on Temporal" in refused.stderr
    assert f"{tmp_path / 'reads_env.py'}, line 5 (HOME = os.environ.get" in refused.stderr
    assert "Cannot access os.environ.get from inside a workflow" in refused.stderr
    assert "Ctrl-C stops it" not in refused.stdout


def test_runs_that_ask_end_the_command_waiting_as_locally(temporal: Server, tmp_path: Path) -> None:
    (tmp_path / "reads_clock.py").write_text(
        "import time\n\nfrom op import Op, checkpoint\n\n\n"
        "def main() -> Op[float]:\n    yield from checkpoint('start')\n    return time.time()\n"
    )
    t = ["--temporal", temporal.target]
    q = ["--task-queue", "waits"]
    worker = _worker(temporal, tmp_path, PLAN, TWO, "reads_clock:main")

    def opdsl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*OPDSL, *args],
            cwd=ROOT,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )

    def answer_command(stderr: str) -> list[str]:
        found = re.search(r"answer it with: (opdsl answer .+ TEXT)", stderr)
        assert found is not None, stderr
        return shlex.split(found.group(1))[1:]

    try:
        # run: ends at the question, as a local run does, with the command that answers it
        ran = opdsl("run", PLAN, "--arg", "goal=tests", *t, *q)
        assert ran.returncode == 0, ran.stderr
        run_id = ran.stdout.split()[1]
        assert (
            f"run {run_id} of {PLAN} is waiting for an answer to: Go ahead with tests?"
            in ran.stderr
        )
        assert answer_command(ran.stderr) == [
            "answer",
            run_id,
            "--temporal",
            temporal.target,
            "TEXT",
        ]
        listed = {r["run_id"]: r for r in json.loads(opdsl("runs", "--json", *t).stdout)}
        assert listed[run_id]["status"] == "waiting"
        shown = opdsl("show", run_id, *t)
        assert f"run {run_id} {PLAN}  waiting" in shown.stdout, shown.stdout + shown.stderr
        assert "│ 2       │ ask        │ waiting" in shown.stdout, shown.stdout

        # resume --from: the fork ends at its question too, and names its checkpoint
        forked = opdsl("resume", run_id, "--from", "plan", *t, *q)
        assert forked.returncode == 0, forked.stderr
        child = forked.stdout.split()[1]
        assert f"run {child} of {PLAN} is waiting for an answer" in forked.stderr
        listed = {r["run_id"]: r for r in json.loads(opdsl("runs", "--json", *t).stdout)}
        assert (listed[child]["parent_run"], listed[child]["fork_checkpoint"]) == (run_id, "plan")
        table = opdsl("runs", *t).stdout
        row = next(line for line in table.splitlines() if child in line)
        assert f"{run_id} @ plan" in row and "None" not in row and "waiting" in row
        answered = opdsl(*[a.replace("TEXT", "yes") for a in answer_command(forked.stderr)])
        assert answered.returncode == 0, answered.stderr
        assert json.loads(answered.stdout.split("\n", 1)[1]) == "tests: yes"

        # two questions: one command each, with --at; after one answer, the other is said
        two = opdsl("run", TWO, *t, *q)
        assert two.returncode == 0, two.stderr
        commands = [
            line.split("#")[0].split() for line in two.stderr.splitlines() if "--at" in line
        ]
        assert [c[-3:] for c in commands] == [["--at", "1.1.1", "TEXT"], ["--at", "1.2.1", "TEXT"]]
        first = opdsl(*[a.replace("TEXT", "red") for a in commands[0][1:]])
        assert first.returncode == 0, first.stderr
        assert "waiting for an answer to: Which size?" in first.stderr

        # a workflow task that keeps failing is said while the command waits
        client = subprocess.Popen(
            [*OPDSL, "run", "reads_clock:main", *t, *q],
            cwd=ROOT,
            env=_env(tmp_path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert client.stderr is not None
            line = client.stderr.readline()
            assert re.match(
                r"opdsl: run \w+: its workflow task failed (once|\d+ times), and is retried: .*time\.time",
                line,
            ), line
        finally:
            client.kill()
            client.wait()
    finally:
        stop_workers([worker])
