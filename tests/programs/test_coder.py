"""The Coder in real git repositories with a scripted model: the seed's test list."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import git
import pytest

from interpreters import MemoryJournal, ScriptedModel, resume, run
from interpreters.cli._main import main
from op import Budget, Response, ToolCall, Usage
from op.effects import ModelRequest
from programs.coder import CoderConfig, CodeState, coder
from tests.helpers import sample_repo, sh
from tests.servers import ScriptedServer, openai

FIX = {"path": "calc.py", "old": "return a - b", "new": "return a + b"}
WRONG = {"path": "calc.py", "old": "return a - b", "new": "return a * b"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return sample_repo(tmp_path)


def call(name: str, args: dict[str, Any], n: int = 1) -> Response:
    return Response(
        tool_calls=(ToolCall(id=f"c{n}", name=name, arguments=args),),
        usage=Usage(input_tokens=100, output_tokens=20),
    )


def say(text: str) -> Response:
    return Response(text=text, usage=Usage(input_tokens=50, output_tokens=10))


def session(
    *work: Response, message: str = "Fix add: it subtracted\n\nadd() returned a - b."
) -> ScriptedModel:
    """The work turns, then the commit message."""
    return ScriptedModel([*work, say(message)])


GOOD = [call("read_file", {"path": "calc.py"}), call("edit_file", FIX, 2), say("Fixed add().")]


def config(repo: Path, **kw: Any) -> CoderConfig:
    return CoderConfig(task="Make the tests pass.", repo=str(repo), **kw)


def test_success_commits_the_fix_with_the_generated_message(repo: Path) -> None:
    journal = MemoryJournal()
    result = run(coder, config(repo), model=session(*GOOD), state=CodeState(), db=journal)
    out = result.value
    assert out.ok and out.files == ["calc.py"] and out.tokens > 0, out
    head = git.Repo(repo).head.commit
    assert (
        head.hexsha == out.commit
        and str(head.message) == "Fix add: it subtracted\n\nadd() returned a - b."
    )
    assert "return a + b" in (repo / "calc.py").read_text()
    tests = subprocess.run(
        ["python", "-m", "pytest", "-q"], cwd=repo, capture_output=True, text=True
    )
    assert tests.returncode == 0, tests.stdout
    names = [
        json.loads(e.effect_json)["name"]
        for e in journal.entries(result.run_id)
        if e.kind == "checkpoint"
    ]
    assert names == ["before-init", "before-work", "before-verify", "before-commit"]


def test_max_tokens_goes_with_every_model_call(repo: Path) -> None:
    model = session(*GOOD)
    out = run(coder, config(repo, max_tokens=300), model=model, state=CodeState()).value
    assert out.ok, out
    assert [r.params for r in model.requests] == [{"max_tokens": 300}] * len(model.requests)


def test_a_work_answer_cut_by_max_tokens_is_not_taken_as_done(repo: Path) -> None:
    cut = Response(text="I will now", stop_reason="max_tokens", usage=Usage(output_tokens=20))
    model = session(cut, *GOOD)
    out = run(coder, config(repo), model=model, state=CodeState()).value
    assert out.ok and out.files == ["calc.py"], out  # it went on working after the cut


def test_init_detects_a_broken_repository_and_blames_no_model(repo: Path) -> None:
    (repo / "calc.py").write_text("def add(a, b:\n")
    sh(repo, "commit", "-qam", "broken")
    model = session()
    out = run(coder, config(repo), model=model, state=CodeState(), db=MemoryJournal()).value
    assert (
        not out.ok
        and out.phase == "init"
        and "does not build before any change" in (out.reason or "")
    )
    assert model.requests == []


def test_work_tracks_the_files_it_changed(repo: Path) -> None:
    model = session(call("write_file", {"path": "notes/plan.md", "content": "plan"}), *GOOD)
    result = run(coder, config(repo), model=model, state=CodeState(), db=MemoryJournal())
    assert result.value.files == ["calc.py", "notes/plan.md"]
    assert isinstance(result.state, CodeState) and result.state.branch.value == "main"


def test_verify_retries_then_gives_up_and_recovery_restores_the_repository(repo: Path) -> None:
    (repo / "scratch.txt").write_text("the user's own uncommitted work\n")
    before = (repo / "calc.py").read_text()
    wrong = [call("edit_file", WRONG), say("Done.")]
    # each retry: a read, an answer with no change, and again after it is asked for one
    still_wrong = [
        call("read_file", {"path": "calc.py"}),
        say("Looks right to me."),
        say("It needs no change."),
    ]
    model = ScriptedModel([*wrong, *still_wrong, *still_wrong])
    out = run(
        coder, config(repo, verify_retries=3), model=model, state=CodeState(), db=MemoryJournal()
    ).value
    assert (
        not out.ok
        and out.phase == "verify"
        and "test failed" in (out.reason or "")
        and "after 3 attempts" in (out.reason or "")
    )
    assert any("assert" in m.content for r in model.requests[2:] for m in r.messages), (
        "the model saw the failing output"
    )
    assert (repo / "calc.py").read_text() == before, "recovered"
    assert (repo / "scratch.txt").read_text() == "the user's own uncommitted work\n", (
        "the user's work is untouched"
    )
    assert str(git.Repo(repo).head.commit.message) == "calc, with a bug\n"


def test_the_verify_loop_stops_when_a_runner_cannot_run(repo: Path) -> None:
    out = run(
        coder,
        config(repo, test=["nosuchrunner", "-q"]),
        model=session(*GOOD),
        state=CodeState(),
        db=MemoryJournal(),
    ).value
    assert not out.ok and out.phase == "verify" and "runner cannot run" in (out.reason or "")


def test_a_timeout_in_verify(repo: Path) -> None:
    cfg = config(
        repo,
        test=["python", "-c", "import time; time.sleep(30)"],
        test_timeout=1.0,
        verify_retries=1,
    )
    out = run(coder, cfg, model=session(*GOOD), state=CodeState(), db=MemoryJournal()).value
    assert not out.ok and out.phase == "verify" and "timed out" in (out.reason or "")


def test_budgets_that_run_out_in_init_and_in_work(repo: Path) -> None:
    out = run(
        coder,
        config(repo, init_budget=Budget(tool_calls=2)),
        model=session(),
        state=CodeState(),
        db=MemoryJournal(),
    ).value
    assert (out.ok, out.phase) == (False, "init") and "init budget ran out (tool_calls)" in (
        out.reason or ""
    )
    loop = ScriptedModel(
        [call("list_files", {"path": ".", "pattern": f"*{n}"}, n) for n in range(50)]
    )
    cfg = config(repo, work_budget=Budget(model_calls=4))
    out = run(coder, cfg, model=loop, state=CodeState(), db=MemoryJournal()).value
    assert (out.ok, out.phase) == (False, "work") and "work budget ran out (model_calls)" in (
        out.reason or ""
    )


def test_a_model_that_never_stops_calling_tools(repo: Path) -> None:
    def never_stops(request: ModelRequest) -> Response:
        n = len(request.messages)
        return call("read_file", {"path": "calc.py", "start_line": 1 + n % 5}, n)

    out = run(
        coder,
        config(repo, max_work_iterations=6),
        model=ScriptedModel(never_stops),
        state=CodeState(),
        db=MemoryJournal(),
    ).value
    assert (out.ok, out.phase) == (
        False,
        "work",
    ) and "had not finished (still calling tools, or cut off) after 6 turns" in (out.reason or "")
    same = ScriptedModel([call("read_file", {"path": "calc.py"})] * 10)
    out = run(coder, config(repo), model=same, state=CodeState(), db=MemoryJournal()).value
    assert "stuck: the same tool call with the same result 3 times" in (out.reason or "")


@pytest.mark.parametrize(
    "checkpoint", ["before-init", "before-work", "before-verify", "before-commit"]
)
def test_a_fork_from_each_checkpoint_ends_with_the_same_commit_content(
    repo: Path, checkpoint: str
) -> None:
    journal = MemoryJournal()
    first = run(coder, config(repo), model=session(*GOOD), state=CodeState(), db=journal)
    tree = git.Repo(repo).head.commit.tree.hexsha
    sh(repo, "reset", "-q", "--hard", "HEAD~1")  # undo, then do it again from the checkpoint
    fork = resume(
        first.run_id, db=journal, from_checkpoint=checkpoint, program=coder, model=session(*GOOD)
    )
    assert fork.value.ok, fork.value
    assert git.Repo(repo).head.commit.tree.hexsha == tree


def test_a_crash_in_each_phase_resumes_in_place(repo: Path) -> None:
    for phase_tool in ("current_branch", "edit_file", "git_commit"):
        sh(repo, "reset", "-q", "--hard")
        sh(repo, "checkout", "-q", "main")
        journal = MemoryJournal()

        stopped = _StopAt(phase_tool)
        with pytest.raises(KeyboardInterrupt):
            run(
                coder,
                config(repo),
                model=session(*GOOD),
                state=CodeState(),
                db=journal,
                run_id=f"crash-{phase_tool}",
                on_event=stopped,
            )
        # the whole script again: the run's place in it comes back from its journal
        done = resume(f"crash-{phase_tool}", db=journal, program=coder, model=session(*GOOD))
        assert done.value.ok, (phase_tool, done.value)
        assert "return a + b" in (repo / "calc.py").read_text()
        sh(repo, "reset", "-q", "--hard", "HEAD~1")


class _StopAt:
    """A sink that stops the process (KeyboardInterrupt) when a tool starts, once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.model_calls = 0
        self.fired = False

    def __call__(self, event: Any) -> None:
        from op.events import EffectFinished, EffectStarted

        if (
            isinstance(event, EffectFinished)
            and event.kind == "infer"
            and event.status == "completed"
        ):
            self.model_calls += 1
        if (
            isinstance(event, EffectStarted)
            and not self.fired
            and isinstance(event.effect, dict)
            and event.effect.get("name") == self.name
        ):
            self.fired = True
            raise KeyboardInterrupt


def test_end_to_end_over_http_through_opdsl_run(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ScriptedServer(
        [
            openai("", [("c1", "read_file", json.dumps({"path": "calc.py"}))]),
            openai("", [("c2", "edit_file", json.dumps(FIX))]),
            openai("Fixed add()."),
            openai("Fix add() to add\\n\\nIt subtracted."),
        ]
    ) as srv:
        code = main(
            [
                "run",
                "programs.coder:coder",
                "--arg",
                f"repo={repo}",
                "--arg",
                "task=Make the tests pass.",
                "--model",
                f"openai-compatible:local@{srv.url}/v1",
                "--state",
                "programs.coder:CodeState",
            ]
        )
        out, err = capsys.readouterr()
    # what the server was asked, for a failure's message: each request's path, whether it
    # asked for a stream, how many messages it carried, and who sent it (another process
    # that took the port for a closed one would show here)
    asked = [
        (r.get("path"), r.get("stream"), len(r.get("messages") or ()), h.get("user-agent"))
        for r, h in zip(srv.requests, srv.headers, strict=True)
    ]
    assert code == 0, (err, asked, srv.gets)
    result = json.loads(out.splitlines()[-1])
    assert result["ok"] and result["commit"] == git.Repo(repo).head.commit.hexsha, result
    assert str(git.Repo(repo).head.commit.message).startswith("Fix add() to add")
    tests = subprocess.run(
        ["python", "-m", "pytest", "-q"], cwd=repo, capture_output=True, text=True
    )
    assert tests.returncode == 0


def test_commands_are_detected_or_refused(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "x.txt").write_text("x")
    sh(bare, "init", "-q")
    sh(bare, "-c", "user.name=a", "-c", "user.email=a@b", "add", "-A")
    sh(bare, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x")
    out = run(coder, config(bare), model=session(), state=CodeState(), db=MemoryJournal()).value
    assert out.phase == "init" and "no test command given and none found" in (out.reason or "")


def test_bad_config_is_refused_with_where() -> None:
    with pytest.raises(Exception, match="task"):
        run(coder, {"repo": "/tmp", "task": ""}, db=MemoryJournal()).value  # noqa: B018
