"""``opdsl demo director``: the director workflow takes an empty repository from a goal to
DONE, offline, with a recorded session: the plan is shown and approved (the demo types
APPROVE), the drafter writes the test, step 1 passes, step 2 fails once and passes, the
validator says PASS. It ends with where to look and how to redo a step."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from interpreters._api import run
from interpreters._sinks import ConsoleSink
from interpreters.cli._demo import _git, recorded
from interpreters.models._base import ScriptedModel
from op import Response, ToolCall
from op.effects import ModelRequest
from programs.director import TOOLS, director

__all__ = ["director_demo", "director_model"]


def director_model() -> ScriptedModel:
    """The recorded session as a model: each role's answer, picked by its system prompt."""
    data = recorded("director_session")
    tries: dict[str, int] = {}

    def calls(*pairs: tuple[str, dict[str, Any]]) -> Response:
        return Response(
            tool_calls=tuple(
                ToolCall(id=f"t{i}", name=n, arguments=a) for i, (n, a) in enumerate(pairs)
            )
        )

    def answer(request: ModelRequest) -> Response:
        system = request.messages[0].content
        if request.messages[-1].role == "tool" and not system.startswith("You are the implementor"):
            return Response(text="Done.")
        if system.startswith("You are the director of"):
            return Response(text=json.dumps(data["plan"]))
        if system.startswith("You are the drafter"):
            writes = [("write_file", {"path": p, "content": c}) for p, c in data["tests"].items()]
            return calls(
                *writes, ("write_file", {"path": "handoff/draft.md", "content": data["draft"]})
            )
        if system.startswith("You are the implementor"):
            step = request.messages[1].content.split(":")[0].removeprefix("Step ")
            versions = data["steps"][step]
            n = tries[step] = tries.get(step, 0) + 1
            content = versions[min(n, len(versions)) - 1]
            return calls(
                ("write_file", {"path": "greet.py", "content": content}),
                ("finish_step", {"summary": f"step {step}, attempt {n}"}),
            )
        if system.startswith("You are the validator"):
            run_k = request.messages[1].content.split("Validation run ")[1].split(".")[0]
            verdict = f"Both steps meet the goal.\nPASS run={run_k}\n"
            return calls(("write_file", {"path": "handoff/validate.md", "content": verdict}))
        return Response(text="{}")

    return ScriptedModel(answer, name="recorded-session")


def director_demo(console: Console | None = None) -> int:
    console = console or Console(highlight=False)
    workdir = Path(tempfile.mkdtemp(prefix="opdsl-director-"))
    repo = workdir / "greeter"
    repo.mkdir()
    (repo / ".gitignore").write_text("__pycache__/\n.opdsl/\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.name=You", "-c", "user.email=you@example.com", "add", "-A")
    _git(repo, "-c", "user.name=You", "-c", "user.email=you@example.com", "commit", "-qm", "start")
    db = str(workdir / "runs.db")

    def approve(question: str) -> str:
        console.print(f"\n[bold]The director asks:[/]\n{escape(question)}")
        console.print("[bold]> APPROVE[/]  (typed by the demo)")
        return "APPROVE"

    console.print(f"[bold]The director workflow, on {repo} (an empty repository)[/]")
    result = run(
        director,
        "greet people by name",
        model=director_model(),
        tools=TOOLS,
        workspace=str(repo),
        answer=approve,
        db=db,
        on_event=ConsoleSink(console, show_tokens=False),
        run_id="director",
    )
    if result.status != "completed":
        console.print(f"[red]{escape(result.describe())}[/]")
        return 1
    history = _git(repo, "log", "--format=%h %an: %s").strip().splitlines()
    console.print("\n[bold]Done.[/] The commits:")
    for line in history:
        console.print(f"   {line}")
    console.print("\n[bold]Where to look[/]")
    console.print(f"   the repository:    {repo}")
    console.print(f"   the timeline:      opdsl show director --db {db}")
    console.print(f"   the checkpoints:   opdsl checkpoints director --db {db}")
    console.print(
        f"   the report:        opdsl report director --db {db}   (then open director.html)"
    )
    console.print(
        f"   redo step 2:       opdsl resume director --from implement-step-2 --db {db} "
        f"--workspace {repo} --model openai:gpt-4.1-mini"
    )
    return 0
