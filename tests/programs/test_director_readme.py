"""The README's director commands, run as written in a small repository, against the loopback
OpenAI-compatible server answering as a scripted director and implementor (over HTTP, one
process per command: the run waits for APPROVE, the answer continues it, show tells where it
is, and a fork from implement-step-2 redoes step 2)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import RawJournal
from tests.programs.test_director import (
    GREET_V1,
    GREET_V2,
    GREET_WRONG,
    JOURNEY_PLAN,
    STEP_COMMITS,
    TEST_GREET,
    _repo,
    git_log,
)
from tests.servers import Reply, ScriptedServer, closed_port, openai, openai_calls

ROOT = Path(__file__).resolve().parents[2]


class Director:
    """The scripted director and implementor, answering OpenAI chat requests by role."""

    def __init__(self) -> None:
        self.step2 = 0
        self.calls = 0

    def __call__(self, req: dict[str, Any]) -> Reply:
        messages = req["messages"]
        system = messages[0]["content"]
        self.calls += 1

        def calls(*pairs: tuple[str, dict[str, Any]]) -> Reply:
            return openai_calls(req, f"c{self.calls}", *pairs)

        if messages[-1]["role"] == "tool" and not system.startswith("You are the implementor"):
            return openai(text="done")(req)
        if system.startswith("You are the director of"):
            return openai(text=json.dumps(JOURNEY_PLAN))(req)
        if system.startswith("You are the drafter"):
            return calls(
                ("write_file", {"path": "test_greet.py", "content": TEST_GREET}),
                ("write_file", {"path": "handoff/draft.md", "content": "greet.py and its test"}),
            )
        if system.startswith("You are the implementor"):
            if messages[1]["content"].startswith("Step 1"):
                return calls(
                    ("write_file", {"path": "greet.py", "content": GREET_V1}),
                    ("finish_step", {"summary": "hello"}),
                )
            self.step2 += 1
            content = GREET_WRONG if self.step2 % 3 != 0 else GREET_V2
            return calls(
                ("write_file", {"path": "greet.py", "content": content}),
                ("finish_step", {"summary": "by name"}),
            )
        if system.startswith("You are the validator"):
            k = re.search(r"Validation run (\d+)", messages[1]["content"])
            assert k is not None
            verdict = f"PASS run={k.group(1)}\n"
            return calls(("write_file", {"path": "handoff/validate.md", "content": verdict}))
        raise AssertionError(system[:60])


def _env(server: ScriptedServer, db: Path) -> dict[str, str]:
    """The commands' environment: the loopback server as OpenAI, a journal of the test's."""
    return {
        **os.environ,
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": f"{server.url}/v1",
        "OPDSL_DB": str(db),
        "PYTHONPATH": str(ROOT),
    }


def _commands(which: int = 0) -> list[str]:
    """The lines of the README's ``which``-th shell block that runs the director."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "programs.director" in b]
    return [line for line in blocks[which].replace("\\\n", " ").splitlines() if line.strip()]


def test_the_readme_director_commands_run_as_written(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    director = Director()
    with ScriptedServer([director] * 200) as srv:
        env = _env(srv, tmp_path / "runs.db")
        run_id = ""
        outputs = []
        for line in _commands():
            args = shlex.split(line.replace("RUN", run_id))
            assert args[0] == "opdsl"
            done = subprocess.run(
                [sys.executable, "-m", "interpreters", *args[1:]],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, (line, done.stderr)
            outputs.append(done)
            if not run_id:
                found = re.search(r"opdsl answer (\w+) TEXT", done.stderr)
                assert found is not None, done.stderr  # it waits for APPROVE
                run_id = found.group(1)
                assert "1. greet() returns hello" in done.stderr
    ran, answered, shown, forked = outputs
    assert json.loads(answered.stdout.splitlines()[-1])["done"] is True
    assert "fsm=DONE" in shown.stdout and "implementor=model:default" in shown.stdout
    assert json.loads(forked.stdout.splitlines()[-1])["done"] is True
    assert git_log(repo)[:2] == STEP_COMMITS
    assert director.step2 == 6  # wrong twice, then right: in the run and again in the fork


def test_a_crash_in_each_state_resumes_to_the_same_commits(tmp_path: Path) -> None:
    import signal
    import time

    import pytest

    for checkpoint in ("draft", "buffer", "implement-step-1", "implement-step-2", "validate-run-1"):
        case = tmp_path / checkpoint
        case.mkdir()
        repo = _repo(case)
        db = case / "runs.db"
        with ScriptedServer([Director()] * 200) as srv:
            env = _env(srv, db)
            opdsl = [sys.executable, "-m", "interpreters"]
            first = subprocess.run(
                [*opdsl, *shlex.split(_commands()[0])[1:]],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            found = re.search(r"opdsl answer (\w+) TEXT", first.stderr)
            assert found is not None, first.stderr
            run_id = found.group(1)
            answering = subprocess.Popen(
                [*opdsl, "answer", run_id, "APPROVE", "--quiet"],
                cwd=repo,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            deadline = time.monotonic() + 60
            reached = False
            while time.monotonic() < deadline and answering.poll() is None:
                with RawJournal(db) as con:
                    row = con.execute(
                        "SELECT 1 FROM entries WHERE run_id=? AND kind='checkpoint' "
                        "AND effect_json LIKE ?",
                        (run_id, f'%"name":"{checkpoint}"%'),
                    ).fetchone()
                if row:
                    reached = True
                    answering.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.005)
            answering.wait(30)
            if not reached:
                pytest.fail(f"the run never reached {checkpoint}")
            resumed = subprocess.run(
                [*opdsl, "resume", run_id, "--quiet"],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert resumed.returncode == 0, (checkpoint, resumed.stderr)
            assert json.loads(resumed.stdout.splitlines()[-1])["done"] is True
        subjects = subprocess.run(
            ["git", "log", "--format=%s"], cwd=repo, capture_output=True, text=True
        ).stdout.splitlines()
        assert subjects == [
            "step 2: greet(name) greets by name",
            "step 1: greet() returns hello",
            "start",
        ], (checkpoint, subjects)


def test_an_unreachable_model_is_refused_before_anything_changes(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    port = closed_port()
    env = {
        **os.environ,
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "OPDSL_DB": str(tmp_path / "runs.db"),
        "OPDSL_MODEL_TIMEOUT": "5",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "interpreters", *shlex.split(_commands()[0])[1:], "--quiet"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    # the planner's call (after the implementor's name is recorded) fails, naming the model
    assert "failed at address 2: ProviderError: model openai:gpt-4.1-mini" in done.stderr
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True
    ).stdout
    assert status == "", "the repository is as it was"


def test_the_readme_claude_code_command_runs_as_written(tmp_path: Path) -> None:
    """The second command: Claude Code (the real CLI, offline, found on PATH) implements the
    steps through opdsl's tools; the director's roles are the run's model over HTTP."""
    from tests.programs.test_director_claude_code import CLAUDE, Roles

    if not CLAUDE.exists():
        import pytest

        pytest.skip(f"the real Claude Code CLI is not installed at {CLAUDE} (make cli)")
    repo = _repo(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(CLAUDE)
    (line,) = _commands(1)
    assert "--arg implementor=claude-code" in line
    roles = Roles()
    with ScriptedServer([Director()] * 100) as srv, ScriptedServer([roles] * 40) as claude:
        env = {
            **_env(srv, tmp_path / "runs.db"),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "ANTHROPIC_BASE_URL": claude.url,
            "ANTHROPIC_API_KEY": "sk-test-any",
        }

        def opdsl(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "interpreters", *args],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )

        started = opdsl(*shlex.split(line)[1:])
        assert started.returncode == 0, started.stderr
        found = re.search(r"opdsl answer (\w+) TEXT", started.stderr)
        assert found is not None, started.stderr
        answered = opdsl("answer", found.group(1), "APPROVE")
        assert answered.returncode == 0, answered.stderr
        assert json.loads(answered.stdout.splitlines()[-1])["done"] is True
        shown = opdsl("show", found.group(1))
    assert "implementor=claude-code:claude-sonnet-4-5" in shown.stdout, shown.stdout
    assert roles.step2_attempts == 3 and roles.systems
    assert all("You are the implementor" in s for s in roles.systems[1:])
    assert git_log(repo)[:2] == STEP_COMMITS
