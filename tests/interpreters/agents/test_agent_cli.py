"""Agent turns driven through the ``opdsl`` command as a user runs it, in a new process,
against the fake CLIs (put first on PATH): a hostile prompt given on the command line, and
what is left running when opdsl itself is ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process still running (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
@pytest.mark.parametrize("served", [False, True], ids=["plain", "with opdsl's tools"])
def test_the_cli_and_all_it_started_end_with_opdsl(
    tmp_path: Path, served: bool, signum: int
) -> None:
    """`opdsl run` is ended while Claude Code (the fake) is mid-turn, with a command of its
    own running (one that ignores SIGTERM) and, given opdsl's tools, its MCP server: none of
    them outlives opdsl, and the turn's private folder is removed."""
    pids = tmp_path / "pids.json"
    argv = _opdsl(tmp_path, "--arg", "prompt=work", "--arg", "confine=false", "--quiet")
    if served:
        (tmp_path / "work").mkdir()
        argv += ["--arg", 'tools=["read_file"]', "--workspace", str(tmp_path / "work")]
    env = _env(tmp_path, FAKE_SCENARIO="spawn", FAKE_PIDS=str(pids))
    proc = subprocess.Popen(
        argv, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not pids.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the turn never started"
            time.sleep(0.02)
        started = json.loads(pids.read_text())
        everyone = [started["cli"], *started["children"]]
        assert len(everyone) == (3 if served else 2) and all(map(_alive, everyone))
        proc.send_signal(signum)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while any(map(_alive, everyone)) and time.monotonic() < deadline:
            time.sleep(0.02)
        left = [pid for pid in everyone if _alive(pid)]
        assert left == [], f"still running after opdsl ended: {left}"
        if served:  # the turn's private folder (its home, its scratch folder, the socket)
            folder = Path(started["cwd"]).parent
            while folder.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert not folder.exists(), folder
    finally:
        if proc.poll() is None:
            proc.kill()
        if pids.exists():  # what a failure left: only this test's own processes
            started = json.loads(pids.read_text())
            for pid in [started["cli"], *started["children"]]:
                if _alive(pid) and _ours(pid, pids):
                    os.kill(pid, signal.SIGKILL)


def _ours(pid: int, mark: Path) -> bool:
    """Whether ``pid`` was started for this test (its environment names the test's file)."""
    try:
        return f"FAKE_PIDS={mark}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
