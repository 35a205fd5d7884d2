"""`make demo` (opdsl demo): the Coder fixes the sample, is stopped, resumed, replayed, forked."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

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
