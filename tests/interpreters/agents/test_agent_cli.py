"""Agent turns driven through the ``opdsl`` command as a user runs it, in a new process,
against the fake CLIs (put first on PATH): a hostile prompt given on the command line, and
what is left running when opdsl itself is ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interpreters.tools._sandbox import sandbox_problem

ROOT = Path(__file__).resolve().parents[3]
FAKES = ROOT / "tests" / "fixtures" / "fake_cli"
PROGRAM = "tests.fixtures.agent_programs:forward"
HOOK = '{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch MARKER"}]}]}}'


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}",
        "FAKE_ARGV_FILE": str(tmp / "argv.json"),
        "FAKE_STDIN_FILE": str(tmp / "stdin.txt"),
        **extra,
    }


def _opdsl(tmp: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "interpreters", "run", PROGRAM, "--db", str(tmp / "runs.db")] + [
        *args
    ]


@pytest.mark.parametrize("backend", ["claude-code", "codex"])
@pytest.mark.parametrize(
    "prompt", [f"--settings={HOOK}", '--config=model_provider="evil"', "--version", "-x"]
)
def test_a_hostile_prompt_given_to_opdsl_run_is_only_a_prompt(
    tmp_path: Path, backend: str, prompt: str
) -> None:
    """`opdsl run ... --arg prompt=...`, the agent confined: the fake CLI parses its arguments
    as the real one does, and none of them is the prompt."""
    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap cannot run here: {sandbox_problem()}")
    marker = tmp_path / "hook-ran"
    prompt = prompt.replace("MARKER", str(marker))
    argv = _opdsl(tmp_path, "--arg", f"prompt={prompt}", "--arg", f"backend={backend}")
    argv += ["--arg", f"cwd={tmp_path}", "--quiet"]
    done = subprocess.run(
        argv, env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), "the prompt's hook ran"
    assert (tmp_path / "stdin.txt").read_text() == prompt
    assert all(a.strip() != prompt for a in json.loads((tmp_path / "argv.json").read_text()))
