"""The director's own rules, each shown on a real repository with a scripted director and
implementor: more than ``max_attempts`` failed attempts go to BUFFER; after ``max_fixes``
director fixes of one step the workflow halts for the user (``user_guided=true``); direct
mode validates after every step; a plan edited after it was locked goes BUFFER -> PLAN;
``blocked()`` goes to BUFFER at once; a FAIL verdict goes to BUFFER; and the commits carry the
implementor's identity, unsigned, hooks off."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interpreters import MemoryJournal, ScriptedModel, Workspace, run
from op import Response, ToolCall, Usage
from programs.director import TOOLS, DirectorResult, DirectorState, director
from tests.programs.test_director import GREET_V1, GREET_V2, GREET_WRONG, JOURNEY_PLAN, TEST_GREET
from tests.programs.test_director import _repo as make_repo

Calls = list[tuple[str, dict[str, Any]]]

RIGHT: dict[int, Calls] = {
    1: [("write_file", {"path": "greet.py", "content": GREET_V1})],
    2: [("write_file", {"path": "greet.py", "content": GREET_V2})],
}
WRONG: Calls = [("write_file", {"path": "greet.py", "content": GREET_WRONG})]


class Roles:
    """The director's roles, scripted. ``implementor(step, attempt)`` gives the calls of one
    implementor turn (attempt counts from 1 per step, over the whole run) before it calls
    ``finish_step``, or ``None`` to call ``blocked``; ``verdicts`` the validator's verdict
    lines in order (``{run}`` filled in), PASS once they run out."""

    def __init__(
        self,
        implementor: Callable[[int, int], Calls | None],
        verdicts: tuple[str, ...] = (),
    ) -> None:
        self.implementor = implementor
        self.verdicts = list(verdicts)
        self.attempts: dict[int, int] = {}
        #: each implementor brief, each unblocker request, in order
        self.briefs: list[str] = []
        self.revisions: list[str] = []

    def __call__(self, request: Any) -> Response:
        system = request.messages[0].content
        last = request.messages[-1]
        usage = Usage(input_tokens=10, output_tokens=5)

        def calls(pairs: Calls) -> Response:
            return Response(
                tool_calls=tuple(
                    ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(pairs)
                ),
                usage=usage,
            )

        if last.role == "tool" and not system.startswith("You are the implementor"):
            return Response(text="done", usage=usage)
        if system.startswith("You are the director of"):
            return Response(text=json.dumps(JOURNEY_PLAN), usage=usage)
        if system.startswith("You are the drafter"):
            return calls(
                [
                    ("write_file", {"path": "test_greet.py", "content": TEST_GREET}),
                    ("write_file", {"path": "handoff/draft.md", "content": "greet.py, tested"}),
                ]
            )
        if system.startswith("You are the implementor"):
            brief = request.messages[1].content
            self.briefs.append(brief)
            step = int(re.match(r"Step (\d+)", brief)[1])  # type: ignore[index]
            self.attempts[step] = self.attempts.get(step, 0) + 1
            made = self.implementor(step, self.attempts[step])
            if made is None:
                return calls([("blocked", {"reason": f"step {step} cannot be done"})])
            return calls([*made, ("finish_step", {"summary": f"step {step}"})])
        if system.startswith("You are the validator"):
            k = re.search(r"Validation run (\d+)", request.messages[1].content)
            assert k is not None
            line = self.verdicts.pop(0) if self.verdicts else "PASS run={run}"
            verdict = line.format(run=k[1]) + "\n"
            return calls([("write_file", {"path": "handoff/validate.md", "content": verdict})])
        if system.startswith("You are the director. A step"):
            self.revisions.append(request.messages[1].content)
            step = json.loads(request.messages[1].content.split("\n\n", 1)[0])
            return Response(text=json.dumps({**step, "goal": step["goal"] + " (revised)"}))
        raise AssertionError(f"unexpected request: {system[:40]}")


def journey(
    tmp_path: Path,
    roles: Roles,
    answers: Callable[[str], str | None] = lambda q: "APPROVE",
    repo: Path | None = None,
    **kwargs: Any,
) -> tuple[Any, MemoryJournal, Path]:
    """The director on ``repo`` (a fresh one by default); ``answers`` answers every question."""
    if repo is None:
        tmp_path.mkdir(exist_ok=True)
        repo = make_repo(tmp_path)
    journal = MemoryJournal()
    result = run(
        director,
        "greet people by name",
        kwargs=kwargs,
        model=ScriptedModel(roles),
        tools=TOOLS,
        workspace=Workspace(repo),
        answer=answers,
        db=journal,
    )
    return result, journal, repo


def checkpoints(journal: MemoryJournal, run_id: str) -> list[str]:
    return [
        json.loads(e.effect_json)["name"] for e in journal.entries(run_id) if e.kind == "checkpoint"
    ]


def state_of(result: Any) -> DirectorState:
    assert isinstance(result.state, DirectorState)
    return result.state


def test_more_than_max_attempts_failed_go_to_buffer(tmp_path: Path) -> None:
    # step 2 is wrong in its first 4 attempts (the default max_attempts), right in its 5th
    roles = Roles(lambda step, n: RIGHT[step] if step == 1 or n > 4 else WRONG)
    result, journal, _ = journey(tmp_path, roles)
    assert result.status == "completed", result.describe()
    assert roles.attempts == {1: 1, 2: 5}
    assert checkpoints(journal, result.run_id) == [
        "draft",
        "buffer",
        "implement-step-1",
        "implement-step-2",
        "buffer",  # after the 4th failed attempt, not before
        "implement-step-2",
        "validate-run-1",
        "done",
    ]
    # the 4 attempts each brief the next with the last failure; the director revised once
    assert ["The last attempt failed" in b for b in roles.briefs[1:5]] == [False, True, True, True]
    assert len(roles.revisions) == 1 and "the step's test failed" in roles.revisions[0]
    assert "(revised)" in roles.briefs[5]
    state = state_of(result)
    assert (state.attempts.value, state.fixes.value, state.user_guided.value) == (0, 0, False)
    # max_attempts is the program's: 2 failed attempts go to BUFFER when it says 2
    roles = Roles(lambda step, n: RIGHT[step] if step == 1 or n > 2 else WRONG)
    result, journal, _ = journey(tmp_path / "two", roles, max_attempts=2)
    assert result.status == "completed", result.describe()
    assert checkpoints(journal, result.run_id)[3:6] == [
        "implement-step-2",
        "buffer",
        "implement-step-2",
    ]


def test_after_max_fixes_of_one_step_it_halts_for_the_user(tmp_path: Path) -> None:
    # step 2 fails every attempt: two rounds end in a director fix each, the third halts
    roles = Roles(lambda step, n: RIGHT[step] if step == 1 else WRONG)
    asked: list[str] = []

    def answers(question: str) -> str | None:
        asked.append(question)
        return "APPROVE" if len(asked) == 1 else None  # the user is away at the halt

    result, journal, repo = journey(tmp_path, roles, answers, max_attempts=1)
    assert result.status == "waiting", result.describe()
    assert result.question is not None
    assert result.question.startswith("Step 2 (greet(name) greets by name (revised) (revised))")
    assert "still fails after 2 revisions" in result.question
    assert len(roles.revisions) == 2 and roles.attempts[2] == 3
    state = state_of(result)
    assert state.fsm.value == "BUFFER" and state.user_guided.value is True
    assert state.fixes.value == 3
    assert checkpoints(journal, result.run_id)[-6:] == [
        "implement-step-2",
        "buffer",
        "implement-step-2",
        "buffer",
        "implement-step-2",
        "buffer",
    ]

    # the user's guidance reaches the next implementor, which then gets it right
    guided = Roles(lambda step, n: RIGHT[step] if step == 1 or n > 3 else WRONG)
    result, _, _ = journey(
        tmp_path / "guided",
        guided,
        lambda q: "use a default argument" if q.startswith("Step 2") else "APPROVE",
        max_attempts=1,
    )
    assert result.status == "completed", result.describe()
    assert "Guidance from the user:\nuse a default argument" in guided.briefs[-1]
    assert state_of(result).user_guided.value is True  # the run says the user had to step in


def test_direct_mode_validates_after_every_step(tmp_path: Path) -> None:
    roles = Roles(lambda step, n: RIGHT[step])
    result, journal, _ = journey(tmp_path, roles, mode="direct")
    assert result.status == "completed", result.describe()
    assert checkpoints(journal, result.run_id) == [
        "draft",
        "buffer",
        "implement-step-1",
        "validate-run-1",
        "buffer",
        "implement-step-2",
        "validate-run-2",
        "done",
    ]
    value = result.value
    assert isinstance(value, DirectorResult) and value.validation_runs == 2
    assert len(value.commits) == 2


def test_a_fail_verdict_goes_to_buffer_and_the_step_is_done_again(tmp_path: Path) -> None:
    roles = Roles(lambda step, n: RIGHT[step], verdicts=("FAIL step=1 run={run}",))
    result, journal, _ = journey(tmp_path, roles, mode="direct")
    assert result.status == "completed", result.describe()
    assert checkpoints(journal, result.run_id) == [
        "draft",
        "buffer",
        "implement-step-1",
        "validate-run-1",
        "buffer",  # FAIL step=1: back to BUFFER, the director revises step 1
        "implement-step-1",
        "validate-run-2",
        "buffer",
        "implement-step-2",
        "validate-run-3",
        "done",
    ]
    assert "The validator failed this step (validation run 1)" in roles.revisions[0]
    assert roles.attempts == {1: 2, 2: 1}
    assert "VALIDATE -> BUFFER" in state_of(result).moves.items


def test_blocked_goes_to_buffer_without_more_attempts(tmp_path: Path) -> None:
    roles = Roles(lambda step, n: None if (step, n) == (2, 1) else RIGHT[step])
    result, journal, _ = journey(tmp_path, roles)
    assert result.status == "completed", result.describe()
    assert roles.attempts == {1: 1, 2: 2}  # one blocked attempt, not max_attempts of them
    assert checkpoints(journal, result.run_id)[3:6] == [
        "implement-step-2",
        "buffer",
        "implement-step-2",
    ]
    assert "step 2 cannot be done" in roles.revisions[0]


def test_a_plan_edited_after_it_was_locked_goes_back_to_plan(tmp_path: Path) -> None:
    # step 2 fails; while the workflow waits for the user's guidance, the plan on disk is
    # edited: the next IMPLEMENT finds it changed and the workflow goes BUFFER -> PLAN
    roles = Roles(lambda step, n: RIGHT[step] if step == 1 or n > 1 else WRONG)
    repo = make_repo(tmp_path)
    questions: list[str] = []

    def answers(question: str) -> str:
        questions.append(question)
        if question.startswith("Step 2"):
            plan = repo / "handoff" / "plan.json"
            plan.write_text(plan.read_text().replace("greets by name", "waves"))
            return "try again"
        return "APPROVE"

    result, journal, _ = journey(tmp_path, roles, answers, repo, max_attempts=1, max_fixes=0)
    assert result.status == "completed", result.describe()
    names = checkpoints(journal, result.run_id)
    assert names[:7] == [
        "draft",
        "buffer",
        "implement-step-1",
        "implement-step-2",
        "buffer",  # the step failed; the user was asked; the plan was edited meanwhile
        "plan",  # found before the implementor started again: BUFFER -> PLAN
        "draft",
    ]
    moves = state_of(result).moves.items
    assert list(moves[3:6]) == ["IMPLEMENT -> IMPLEMENT", "IMPLEMENT -> BUFFER", "BUFFER -> PLAN"]
    assert roles.attempts[2] == 2  # the edited plan's step never went to an implementor
    defect = [
        json.loads(e.effect_json)["data"]["error"]
        for e in journal.entries(result.run_id)
        if e.kind == "emit" and json.loads(e.effect_json)["name"] == "plan_defect"
    ]
    assert defect == [
        "handoff/plan.json changed after it was locked (its hash is no longer "
        f"{state_of(result).plan_hash.value[:12]})"  # type: ignore[index]
    ]
    # the new plan was asked for again, and the workflow ended DONE on it
    assert (
        sum(q.endswith("Answer APPROVE to start, or say what to change.") for q in questions) == 2
    )
    assert json.loads((repo / "handoff" / "plan.json").read_text()) == JOURNEY_PLAN


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return out.stdout


@pytest.mark.parametrize(
    ("author", "identity"),
    [
        (None, "agent-implementor <agent@localhost>"),
        ("Robo Coder <robo@example.org>", "Robo Coder <robo@example.org>"),
    ],
)
def test_the_commits_carry_the_implementors_identity_unsigned_hooks_off(
    tmp_path: Path, author: str | None, identity: str
) -> None:
    roles = Roles(lambda step, n: RIGHT[step])
    repo = make_repo(tmp_path)
    # a repository that signs every commit and whose hook refuses every commit
    _git(repo, "config", "commit.gpgsign", "true")
    _git(repo, "config", "user.signingkey", "NOSUCHKEY")
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho refused by the hook >&2\nexit 1\n")
    hook.chmod(0o755)
    result = run(
        director,
        "greet people by name",
        kwargs={} if author is None else {"author": author},
        model=ScriptedModel(roles),
        tools=TOOLS,
        workspace=Workspace(repo),
        answer=lambda q: "APPROVE",
        db=MemoryJournal(),
    )
    assert result.status == "completed", result.describe()
    log = _git(repo, "log", "--format=%an <%ae>|%cn <%ce>|%G?|%s").splitlines()
    assert log[:2] == [
        f"{identity}|{identity}|N|step 2: greet(name) greets by name",
        f"{identity}|{identity}|N|step 1: greet() returns hello",
    ]
    assert log[2].startswith("Dev <d@x>|")  # the user's own commit, untouched


def test_an_author_that_is_not_name_and_email_is_refused_before_anything_changes(
    tmp_path: Path,
) -> None:
    roles = Roles(lambda step, n: RIGHT[step])
    result, journal, repo = journey(tmp_path, roles, author="robo")
    assert result.status == "failed"
    assert "author='robo' should look like Name <email@host>" in str(result.error)
    kinds = {e.kind for e in journal.entries(result.run_id)}
    assert not kinds & {"ask", "infer", "tool"}
    assert not (repo / "handoff").exists()


# -- the same rules, the workflow directed from outside (each move a resume of one run) -------


class Moves:
    """:func:`programs.director.directed` on a fresh repository, moved as ``opdsl mcp
    director`` moves it: each move answers the question the run waits on, and the next
    question is the move's reply."""

    def __init__(
        self, tmp_path: Path, roles: Roles, agents: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        from programs.director import directed

        tmp_path.mkdir(exist_ok=True)
        self.repo = make_repo(tmp_path)
        self.roles = roles
        self.agents = agents
        self.journal = MemoryJournal()
        result = run(
            directed,
            kwargs=kwargs,
            model=ScriptedModel(roles),
            tools=TOOLS,
            workspace=Workspace(self.repo),
            db=self.journal,
            agents=agents,
        )
        self.started = result
        self.run_id = result.run_id

    def __call__(self, move: str, **arguments: Any) -> str:
        from interpreters import resume

        result = resume(
            self.run_id,
            db=self.journal,
            answer=json.dumps({"move": move, **arguments}),
            model=ScriptedModel(self.roles),
            workspace=Workspace(self.repo),
            agents=self.agents,
        )
        assert result.status == "waiting", result.describe()
        return result.question or ""

    def to_buffer(self) -> None:
        assert self.started.status == "waiting", self.started.describe()
        """PLAN -> DRAFT (the plan), the drafter's test and hand-over, DRAFT -> BUFFER."""
        assert self("to", state="DRAFT", plan=JOURNEY_PLAN).startswith("state=DRAFT")
        (self.repo / "test_greet.py").write_text(TEST_GREET)
        self("handoff_draft", summary="greet.py, tested", tests=["test_greet.py"])
        assert self("to", state="BUFFER").startswith("state=BUFFER")

    def state(self) -> DirectorState:
        from interpreters import resume

        result = resume(self.run_id, db=self.journal, answer=json.dumps({"move": "status"}))
        return state_of(result)

    def checkpoints(self) -> list[str]:
        return checkpoints(self.journal, self.run_id)


def said(reply: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in reply.split() if "=" in p)


def test_directed_more_than_max_attempts_failed_go_to_buffer(tmp_path: Path) -> None:
    moves = Moves(tmp_path, Roles(lambda step, n: RIGHT[step] if step == 1 or n > 4 else WRONG))
    moves.to_buffer()
    handoff = moves("run_implementor")
    assert handoff.startswith("HANDOFF state=BUFFER step=2 outcome=failed user_guided=false")
    assert "the step's test failed" in handoff
    assert moves.roles.attempts == {1: 1, 2: 4}
    assert moves.checkpoints()[-3:] == ["implement-step-1", "implement-step-2", "buffer"]
    # the director must fix the step before the implementor goes again
    assert "revise it first (revise_step)" in moves("run_implementor")
    step = {
        "goal": "greet(name) greets by name, with a default",
        "files": ["greet.py"],
        "test": "python test_greet.py",
    }
    assert said(moves("status"))["needs"] == "fix"
    assert "needs" not in said(moves("revise_step", step=step))
    assert moves("run_implementor").startswith("HANDOFF state=VALIDATE run=1 step=2")
    assert "greets by name, with a default" in moves.roles.briefs[-1]


def test_directed_after_max_fixes_it_halts_for_the_user(tmp_path: Path) -> None:
    moves = Moves(
        tmp_path, Roles(lambda step, n: RIGHT[step] if step == 1 else WRONG), max_attempts=1
    )
    moves.to_buffer()
    step = JOURNEY_PLAN["steps"][1]
    for _ in (1, 2):
        handoff = moves("run_implementor")
        assert "state=BUFFER step=2" in handoff and "user_guided=false" in handoff, handoff
        moves("revise_step", step=step)  # a director fix
    handoff = moves("run_implementor")
    assert "state=BUFFER step=2" in handoff and "user_guided=true" in handoff, handoff
    state = moves.state()
    assert state.user_guided.value is True and state.fixes.value == 3
    assert "halted for the user (user_guided=true)" in moves("run_implementor")
    assert "revised in BUFFER after it failed" in moves("revise_step", step=step)
    moves.roles.implementor = lambda step, n: RIGHT[step]
    handoff = moves("run_implementor", guidance="use a default argument")
    assert handoff.startswith("HANDOFF state=VALIDATE"), handoff
    assert "Guidance from the user:\nuse a default argument" in moves.roles.briefs[-1]


def test_directed_direct_mode_validates_after_every_step(tmp_path: Path) -> None:
    moves = Moves(tmp_path, Roles(lambda step, n: RIGHT[step]), mode="direct")
    moves.to_buffer()
    assert moves("run_implementor").startswith("HANDOFF state=VALIDATE run=1 step=1")
    moves("handoff_verdict", verdict="PASS run=1")
    assert "steps are left" in moves("to", state="DONE")
    assert moves("to", state="BUFFER").startswith("state=BUFFER step=2/2")
    assert moves("run_implementor").startswith("HANDOFF state=VALIDATE run=2 step=2")
    moves("handoff_verdict", verdict="PASS run=2")
    assert moves("to", state="DONE").startswith("state=DONE")
    assert moves.checkpoints() == [
        "draft",
        "buffer",
        "implement-step-1",
        "validate-run-1",
        "buffer",
        "implement-step-2",
        "validate-run-2",
        "done",
    ]


def test_directed_a_fail_verdict_goes_to_buffer(tmp_path: Path) -> None:
    moves = Moves(tmp_path, Roles(lambda step, n: RIGHT[step]), mode="direct")
    moves.to_buffer()
    moves("run_implementor")
    moves("handoff_verdict", verdict="FAIL step=1 run=1")
    assert "the verdict is FAIL step=1: VALIDATE goes to BUFFER" in moves("to", state="DONE")
    back = said(moves("to", state="BUFFER"))
    assert (back["state"], back["step"], back["needs"]) == ("BUFFER", "1/2", "fix")
    moves("revise_step", step=JOURNEY_PLAN["steps"][0])
    assert moves("run_implementor").startswith("HANDOFF state=VALIDATE run=2 step=1")
    assert moves.roles.attempts == {1: 2}


def test_directed_blocked_goes_to_buffer(tmp_path: Path) -> None:
    moves = Moves(tmp_path, Roles(lambda step, n: None if (step, n) == (2, 1) else RIGHT[step]))
    moves.to_buffer()
    handoff = moves("run_implementor")
    assert handoff.startswith("HANDOFF state=BUFFER step=2 outcome=blocked"), handoff
    assert "step 2 cannot be done" in handoff and moves.roles.attempts == {1: 1, 2: 1}


def test_directed_a_plan_edited_after_it_was_locked_goes_back_to_plan(tmp_path: Path) -> None:
    moves = Moves(tmp_path, Roles(lambda step, n: RIGHT[step]))
    moves.to_buffer()
    plan = moves.repo / "handoff" / "plan.json"
    plan.write_text(plan.read_text().replace("greets by name", "waves"))
    handoff = moves("run_implementor")
    assert handoff.startswith("HANDOFF state=PLAN reason=handoff/plan.json changed after it")
    assert moves.roles.attempts == {}  # no implementor started on the edited plan
    assert list(moves.state().moves.items)[-1] == "BUFFER -> PLAN"


def test_directed_commits_carry_the_identity_given(tmp_path: Path) -> None:
    moves = Moves(tmp_path, Roles(lambda step, n: RIGHT[step]), author="Robo <robo@example.org>")
    moves.to_buffer()
    moves("run_implementor")
    log = _git(moves.repo, "log", "--format=%an <%ae>|%G?|%s").splitlines()
    assert log[:2] == [
        "Robo <robo@example.org>|N|step 2: greet(name) greets by name",
        "Robo <robo@example.org>|N|step 1: greet() returns hello",
    ]


def test_directed_a_backend_that_cannot_run_is_refused_changing_nothing(tmp_path: Path) -> None:
    import shutil

    from interpreters import ClaudeCodeBackend

    gone = Moves(
        tmp_path / "gone",
        Roles(lambda step, n: RIGHT[step]),
        agents={"claude-code": ClaudeCodeBackend(executable=str(tmp_path / "no" / "claude"))},
        implementor="claude-code",
    )
    # at the start: the run fails before it asks anything or touches the repository
    assert gone.started.status == "failed"
    assert "needs the `claude` executable" in str(gone.started.error)
    assert not (gone.repo / "handoff").exists()
    # at the hand-over: its CLI gone since the start, run_implementor() is refused
    cli = tmp_path / "bin" / "claude"
    cli.parent.mkdir()
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "fake_cli" / "claude", cli)
    moves = Moves(
        tmp_path / "later",
        Roles(lambda step, n: RIGHT[step]),
        agents={"claude-code": ClaudeCodeBackend(executable=str(cli))},
        implementor="claude-code",
    )
    moves.to_buffer()
    before = moves("status")
    cli.unlink()
    refused = moves("run_implementor")
    assert refused.startswith("REFUSED: the implementor backend cannot run"), refused
    assert "needs the `claude` executable" in refused
    assert moves("status") == before and moves.checkpoints()[-1] == "buffer"
