"""`make demo` (opdsl demo): the Coder fixes the sample, is stopped, resumed, replayed, forked."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from interpreters.cli._demo import demo


def test_the_demo_runs_offline_and_shows_every_step(tmp_path: Path) -> None:
    out = io.StringIO()
    code = demo(Console(file=out, width=120, color_system=None))
    text = out.getvalue()
    assert code == 0, text
    for line in (
        "the process stopped in the middle of the work, as a crash would",
        "result: ok=True",
        "identical: the run is deterministic",
        "ok=True; the files came back from the checkpoint's snapshot",
        "opdsl show demo --db",
    ):
        assert line in text
    # the commands it prints to look further run as printed
    for shown in re.findall(r"(opdsl (?:report|diff|show|checkpoints) [^\n(]+)", text):
        argv = shown.split()
        done = subprocess.run(
            [sys.executable, "-m", "interpreters", *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode in (0, 1), (shown, done.stderr)  # diff exits 1: they differ
        assert "error" not in done.stderr, (shown, done.stderr)
    assert (tmp_path / "demo.html").exists()
    repo = re.search(r"the repository:\s+(\S+)", text)
    assert repo is not None
    tests = subprocess.run(
        ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=repo.group(1),
        capture_output=True,
        text=True,
    )
    assert tests.returncode == 0, tests.stdout


def test_the_director_demo_runs_offline_and_its_commands_run_as_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    from interpreters.cli import main
    from tests.programs.test_director_readme import Director, _env
    from tests.servers import ScriptedServer

    code = main(["demo", "director"])  # as the README says: opdsl demo director
    text = capsys.readouterr().out
    assert code == 0, text
    assert "> APPROVE  (typed by the demo)" in text and "1. greet() returns hello" in text
    assert "checkpoint implement-step-2" in text and "checkpoint done" in text
    assert "agent-implementor: step 2: greet(name) greets by name" in text
    looks = re.findall(r"(opdsl (?:show|checkpoints|report) [^\n(]+)", text)
    assert len(looks) == 3
    for shown in looks:
        done = subprocess.run(
            [sys.executable, "-m", "interpreters", *shown.split()[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (shown, done.stderr)
    assert (tmp_path / "director.html").exists()
    redo = re.search(r"redo step 2:\s+(opdsl resume [^\n]+)", text)
    assert redo is not None
    # the printed redo command, against the loopback server standing in for the real model
    with ScriptedServer([Director()] * 100) as srv:
        env = {**_env(srv, tmp_path / "unused.db"), "PATH": os.environ["PATH"]}
        env.pop("OPDSL_DB")
        done = subprocess.run(
            [sys.executable, "-m", "interpreters", *redo.group(1).split()[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert '"done":true' in done.stdout.replace(" ", "")
