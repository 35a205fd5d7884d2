"""``opdsl demo`` (``make demo``): the Coder fixes a bug in a sample repository, offline.

It copies the bundled sample repository (a failing test) to a temporary folder, runs the Coder
with a recorded model session, stops the run partway as a crash would, resumes it, replays it
to show that it is deterministic, forks it from ``before-verify``, and ends with the timeline
and where to look.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console

from interpreters._api import run
from interpreters._durable import replay, resume
from interpreters._sinks import ConsoleSink
from interpreters.models._base import ScriptedModel
from op import Response
from op.effects import ModelRequest
from op.events import EffectStarted, Event
from programs.coder import CoderConfig, CodeState, coder

__all__ = ["demo", "demo_model"]


def recorded(name: str) -> Any:
    """A recorded session shipped with the demos (``demo/NAME.json``)."""
    return json.loads(
        resources.files("interpreters.cli").joinpath(f"demo/{name}.json").read_text("utf-8")
    )


def demo_model() -> ScriptedModel:
    """The recorded session as a model: each turn is picked by how far the conversation got."""
    data = recorded("session")
    work = [Response.model_validate(r) for r in data["work"]]
    commit = Response.model_validate(data["commit"])

    def answer(request: ModelRequest) -> Response:
        if request.messages and request.messages[0].content.startswith(
            "Write a git commit message"
        ):
            return commit
        turn = sum(1 for m in request.messages if m.role == "assistant")
        return work[min(turn, len(work) - 1)]

    return ScriptedModel(answer, name="recorded-session")


class _Crash:
    """Stops the process the first time the model's edit starts, as a crash would."""

    def __init__(self) -> None:
        self.fired = False

    def __call__(self, event: Event) -> None:
        if (
            not self.fired
            and isinstance(event, EffectStarted)
            and isinstance(event.effect, dict)
            and event.effect.get("name") == "edit_file"
        ):
            self.fired = True
            raise KeyboardInterrupt


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def _sample(workdir: Path) -> Path:
    repo = workdir / "calc"
    source = resources.files("interpreters.cli").joinpath("demo/sample_repo")
    with resources.as_file(source) as path:
        shutil.copytree(path, repo, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n.ruff_cache/\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.name=You", "-c", "user.email=you@example.com", "add", "-A")
    _git(
        repo,
        "-c",
        "user.name=You",
        "-c",
        "user.email=you@example.com",
        "commit",
        "-q",
        "-m",
        "calc, with a bug",
    )
    return repo


TESTS = ["python", "-m", "unittest", "discover", "-s", "tests", "-q"]
"""The sample's tests, with what ``pip install opdsl`` brings: Python's own unittest (the
sample's tests are unittest cases, which pytest runs as well)."""

BUILD = ["python", "-m", "compileall", "-q", "calc.py", "tests"]
"""The sample's build step: every file compiles (Python's own compileall)."""


def demo(console: Console | None = None) -> int:
    console = console or Console(highlight=False)
    workdir = Path(tempfile.mkdtemp(prefix="opdsl-demo-"))
    repo = _sample(workdir)
    db = str(workdir / "runs.db")
    sink = ConsoleSink(console, show_tokens=False)
    resumed = _crash_then_resume(console, repo, db, sink)
    result: Any = resumed.value
    console.print(
        f"   result: ok={result.ok}, commit {result.commit[:12] if result.commit else None}, files {result.files}"
    )
    if not result.ok:
        console.print(f"[red]   ✗ the Coder did not finish: {result.phase}: {result.reason}[/]")
        return 1

    _step(console, "3. Replay it from the journal alone: same value, same state, nothing performed")
    again = replay("demo", db=db, program=coder)
    same = again.value == result and (again.state.canonical() if again.state else None) == (
        resumed.state.canonical() if resumed.state else None
    )
    console.print(f"   {'identical' if same else 'DIFFERENT'}: the run is deterministic")

    _step(
        console,
        "4. Fork it from the checkpoint 'before-verify' (after rewinding the repository one commit)",
    )
    _git(repo, "reset", "-q", "--hard", "HEAD~1")
    fork = resume(
        "demo",
        db=db,
        program=coder,
        model=demo_model(),
        from_checkpoint="before-verify",
        on_event=sink,
    )
    forked: Any = fork.value
    console.print(
        f"   fork {fork.run_id}: ok={forked.ok}; the files came back from the checkpoint's snapshot"
    )
    _where_to_look(console, repo, db, fork.run_id)
    return 0 if (result.ok and forked.ok and same) else 1


def _step(console: Console, text: str) -> None:
    console.print(f"\n[bold]{text}[/]")


def _crash_then_resume(console: Console, repo: Path, db: str, sink: ConsoleSink) -> Any:
    """Steps 1 and 2: the Coder works until the crash stops it, then goes on in place."""
    # the commands are named, so the demo needs no linter or test runner beyond Python's own
    config = CoderConfig(
        task="Make the failing test pass.", repo=str(repo), test=TESTS, build=BUILD, lint=None
    )
    _step(console, f"1. The Coder works on {repo} (a copy of the bundled sample; its test fails)")
    try:
        run(
            coder,
            config,
            model=demo_model(),
            state=CodeState(),
            db=db,
            on_event=[sink, _Crash()],
            run_id="demo",
        )
    except KeyboardInterrupt:
        console.print(
            "[red]   ✗ the process stopped in the middle of the work, as a crash would[/]"
        )
    _step(
        console, "2. Resume it in place: the journal replays what was done; the work goes on live"
    )
    return resume("demo", db=db, program=coder, model=demo_model(), on_event=sink)


def _where_to_look(console: Console, repo: Path, db: str, fork_id: str) -> None:
    tests = subprocess.run(
        ["git", "log", "--oneline", "-3"], cwd=repo, capture_output=True, text=True
    ).stdout
    _step(console, "Where to look")
    console.print(f"   the repository:   {repo}")
    console.print(
        "   its history:      " + "\n                     ".join(tests.strip().splitlines())
    )
    console.print(f"   the timelines:    opdsl show demo --db {db}")
    console.print(f"                     opdsl show {fork_id} --db {db}")
    console.print(f"   the checkpoints:  opdsl checkpoints demo --db {db}")
    console.print(f"   the report:       opdsl report demo --db {db}   (then open demo.html)")
    console.print(f"   the fork's part:  opdsl diff demo {fork_id} --db {db}")
    console.print(
        "   a real model:     opdsl run programs.coder:coder --arg repo=PATH --arg task='...' "
        "--model openai:gpt-4.1-mini (or anthropic:..., ollama:qwen3:8b)"
    )
