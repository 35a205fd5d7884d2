"""`make demo` (opdsl demo): the Coder fixes the sample, is stopped, resumed, replayed, forked."""

from __future__ import annotations

import io
import re
import subprocess

from rich.console import Console

from interpreters.cli._demo import demo


def test_the_demo_runs_offline_and_shows_every_step() -> None:
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
    repo = re.search(r"the repository:\s+(\S+)", text)
    assert repo is not None
    tests = subprocess.run(
        ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=repo.group(1),
        capture_output=True,
        text=True,
    )
    assert tests.returncode == 0, tests.stdout
