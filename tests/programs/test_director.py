"""The director workflow's machine: every move the table does not allow is refused with the
state it is in and the one asked for, every allowed move passes its named checkpoint, random
sequences of moves never reach a state the table does not allow, and the plan and the
validator's verdict are checked as the workflow needs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interpreters import MemoryJournal, run
from op import Assign, Op, update
from programs.director import (
    STATES,
    TRANSITIONS,
    DirectorState,
    IllegalTransition,
    PlanError,
    State,
    VerdictError,
    checkpoint_name,
    enter,
    parse_plan,
    parse_verdict,
    plan_hash,
)


def _moves(start: State, targets: list[str]) -> Op[list[str]]:
    yield from update(fsm=Assign(start))
    done = []
    for target in targets:
        try:
            yield from enter(target)  # type: ignore[arg-type]
            done.append(target)
        except IllegalTransition as exc:
            done.append(f"refused: {exc}")
    return done


def _run(start: State, targets: list[str]) -> tuple[list[str], DirectorState, list[str]]:
    journal = MemoryJournal()
    result = run(_moves, start, targets, state=DirectorState(), db=journal)
    assert result.status == "completed", result.describe()
    state = result.state
    assert isinstance(state, DirectorState)
    names = [
        json.loads(e.effect_json)["name"]
        for e in journal.entries(result.run_id)
        if e.kind == "checkpoint"
    ]
    return result.value, state, names


@pytest.mark.parametrize("current", STATES)
@pytest.mark.parametrize("target", STATES)
def test_the_table_decides_every_move(current: State, target: State) -> None:
    outcome, state, names = _run(current, [target])
    if target in TRANSITIONS[current]:
        assert outcome == [target]
        assert state.fsm.value == target
        assert state.moves.items[-1] == f"{current} -> {target}"
        assert names == [checkpoint_name(target, step=1, run=1)]
    else:
        assert outcome[0].startswith("refused: ")
        assert f"is in {current} and cannot move to {target}" in outcome[0]
        assert state.fsm.value == current and names == []


def test_checkpoints_are_named_after_the_state_entered() -> None:
    outcome, state, names = _run(
        "PLAN", ["DRAFT", "BUFFER", "IMPLEMENT", "VALIDATE", "BUFFER", "IMPLEMENT", "VALIDATE"]
    )
    assert names == [
        "draft",
        "buffer",
        "implement-step-1",
        "validate-run-1",
        "buffer",
        "implement-step-1",
        "validate-run-2",
    ]
    assert state.validation_run.value == 2
    _, _, names = _run("VALIDATE", ["DONE", "PLAN"])
    assert names == ["done", "plan"]
    with pytest.raises(IllegalTransition, match="'LATER' is not a state"):
        list(enter("LATER"))  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(STATES), max_size=12))
def test_random_moves_never_leave_the_table(targets: list[State]) -> None:
    outcome, state, _ = _run("PLAN", list(targets))
    where: str = "PLAN"
    for target, said in zip(targets, outcome, strict=True):
        if target in TRANSITIONS[where]:  # type: ignore[index]
            assert said == target
            where = target
        else:
            assert said.startswith("refused: ")
    assert state.fsm.value == where
    # the log of moves is a walk through the table
    for move in state.moves.items:
        a, b = move.split(" -> ")
        assert b in TRANSITIONS[a]  # type: ignore[index]


PLAN: dict[str, Any] = {
    "goal": "add a greet() function",
    "steps": [
        {"goal": "greet returns hello", "files": ["greet.py"], "test": "python -m pytest -q"},
        {"goal": "greet takes a name", "files": ["greet.py"], "test": "python -m pytest -q"},
    ],
}


def test_a_plan_is_read_from_json_bare_or_fenced_and_hashed_canonically() -> None:
    bare = parse_plan(json.dumps(PLAN))
    fenced = parse_plan(f"Here it is:\n```json\n{json.dumps(PLAN, indent=2)}\n```\nDone.")
    assert bare == fenced and len(bare.steps) == 2
    assert plan_hash(bare) == plan_hash(fenced)
    changed = parse_plan(json.dumps({**PLAN, "goal": "add a wave() function"}))
    assert plan_hash(changed) != plan_hash(bare)
    assert "1. greet returns hello" in bare.render() and "test: python -m pytest" in bare.render()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no plan here", "the plan is not JSON"),
        (json.dumps({"goal": "x", "steps": []}), "malformed at steps"),
        (json.dumps({"goal": "x", "steps": [{"goal": "a", "files": ["f"]}]}), "steps.0.test"),
        (
            json.dumps({"goal": "x", "steps": [{"goal": "a", "files": [], "test": "t"}]}),
            "steps.0.files",
        ),
        (json.dumps({**PLAN, "extra": 1}), "malformed at extra"),
    ],
)
def test_a_bad_plan_is_refused_saying_where(text: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        parse_plan(text)


def test_verdicts_pass_and_fail() -> None:
    assert parse_verdict("Checked everything.\nPASS run=2\n", run=2, steps=3).passed
    failed = parse_verdict("step 2 leaves a bug\nFAIL step=2 run=1", run=1, steps=3)
    assert (failed.passed, failed.step, failed.run) == (False, 2, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "missing or empty"),
        ("   ", "missing or empty"),
        ("looks good to me", "no verdict line"),
        ("PASS run=1", "stale: it is for validation run 1, this is run 2"),
        ("PASS", "names no run"),
        ("FAIL step=2 run=2\nPASS run=2", "both PASS and FAIL"),
        ("FAIL run=2", "FAIL names step none"),
        ("FAIL step=9 run=2", "FAIL names step 9; the plan has steps 1 to 3"),
    ],
)
def test_a_bad_verdict_is_refused(text: str | None, message: str) -> None:
    with pytest.raises(VerdictError, match=message):
        parse_verdict(text, run=2, steps=3)


# -- the whole journey, with a scripted director and implementor --------------------------------

GREET_V1 = 'def greet(name: str = "") -> str:\n    return "hello"\n'
GREET_WRONG = 'def greet(name: str = "") -> str:\n    return "bye " + name\n'
GREET_V2 = 'def greet(name: str = "") -> str:\n    return ("hello " + name).strip()\n'
TEST_GREET = (
    'from greet import greet\n\nassert greet() == "hello"\nassert greet("Ada") == "hello Ada"\n'
)
JOURNEY_PLAN = {
    "goal": "a greet() function that greets by name",
    "steps": [
        {
            "goal": "greet() returns hello",
            "files": ["greet.py"],
            "test": "python -c 'import greet'",
        },
        {
            "goal": "greet(name) greets by name",
            "files": ["greet.py"],
            "test": "python test_greet.py",
        },
    ],
}


def implementor_calls(step2_attempt: int) -> list[tuple[str, dict[str, Any]]]:
    """What the scripted implementor calls: step 1 (``0``) right at once; step 2 first tries
    to change the locked test and is wrong, then changes nothing, then is right."""
    if step2_attempt == 0:
        return [
            ("write_file", {"path": "greet.py", "content": GREET_V1}),
            ("finish_step", {"summary": "greet returns hello"}),
        ]
    if step2_attempt == 1:
        return [
            ("write_file", {"path": "test_greet.py", "content": "pass\n"}),
            ("write_file", {"path": "greet.py", "content": GREET_WRONG}),
            ("finish_step", {"summary": "greets"}),
        ]
    if step2_attempt == 2:
        return [("finish_step", {"summary": "nothing changed"})]
    return [
        ("write_file", {"path": "greet.py", "content": GREET_V2}),
        ("finish_step", {"summary": "greets by name"}),
    ]


STEP_COMMITS = [
    "agent-implementor <agent@localhost>|step 2: greet(name) greets by name|N",
    "agent-implementor <agent@localhost>|step 1: greet() returns hello|N",
]
"""The journey's two commits, newest first, as :func:`git_log` shows them."""


def git_log(repo: Path) -> list[str]:
    """``author <email>|subject|signature status`` of each commit, newest first."""
    import subprocess

    out = subprocess.run(
        ["git", "log", "--format=%an <%ae>|%s|%G?"], cwd=repo, capture_output=True, text=True
    )
    return out.stdout.splitlines()


class Scripted:
    """Answers by the role in the system prompt; step 2's implementor is wrong twice (and once
    tries to change the locked test) before it gets it right."""

    def __init__(self) -> None:
        self.step2_attempts = 0

    def __call__(self, request: Any) -> Any:
        from op import Response, ToolCall, Usage

        system = request.messages[0].content
        last = request.messages[-1]
        usage = Usage(input_tokens=10, output_tokens=5)

        def calls(*pairs: tuple[str, dict[str, Any]]) -> Response:
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
                ("write_file", {"path": "test_greet.py", "content": TEST_GREET}),
                (
                    "write_file",
                    {"path": "handoff/draft.md", "content": "greet.py, tested by test_greet.py"},
                ),
            )
        if system.startswith("You are the implementor"):
            if request.messages[1].content.startswith("Step 1"):
                return calls(*implementor_calls(0))
            self.step2_attempts += 1
            return calls(*implementor_calls(self.step2_attempts))
        if system.startswith("You are the validator"):
            run = request.messages[1].content.split("Validation run ")[1].split(".")[0]
            return calls(
                ("write_file", {"path": "handoff/validate.md", "content": f"PASS run={run}\n"})
            )
        raise AssertionError(f"unexpected request: {system[:40]}")


def _repo(tmp_path: Path) -> Path:
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["config", "user.name", "Dev"], ["config", "user.email", "d@x"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    (repo / ".gitignore").write_text(".opdsl/\n__pycache__/\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "start"], cwd=repo, check=True)
    return repo


def test_a_goal_goes_from_plan_to_done_with_a_step_that_fails_twice(tmp_path: Path) -> None:

    from programs.director import DirectorResult

    model = Scripted()
    result, journal, repo = _journey(tmp_path, model, ["APPROVE"])
    questions = [
        json.loads(e.effect_json)["question"]
        for e in journal.entries(result.run_id)
        if e.kind == "ask"
    ]
    assert result.status == "completed", result.describe()
    value = result.value
    assert isinstance(value, DirectorResult) and value.done and len(value.commits) == 2
    assert questions and "1. greet() returns hello" in questions[0]
    assert model.step2_attempts == 3  # failed twice, then passed
    assert git_log(repo)[:2] == STEP_COMMITS
    assert (repo / "test_greet.py").read_text() == TEST_GREET  # locked: the attempt was refused
    refusals = [
        e.result_json
        for e in journal.entries(result.run_id)
        if e.kind == "tool" and "test_greet.py is locked" in (e.result_json or "")
    ]
    assert len(refusals) == 1
    names = [
        json.loads(e.effect_json)["name"]
        for e in journal.entries(result.run_id)
        if e.kind == "checkpoint"
    ]
    assert names == [
        "draft",
        "buffer",
        "implement-step-1",
        "implement-step-2",
        "validate-run-1",
        "done",
    ]
    state = result.state
    assert isinstance(state, DirectorState)
    assert state.fsm.value == "DONE" and state.implementor.value == "model:default"
    assert state.plan_hash.value == plan_hash(parse_plan(json.dumps(JOURNEY_PLAN)))


def test_each_role_is_told_exactly_the_tools_the_code_offers() -> None:
    import re

    from programs import director as d

    for prompt, offered in (
        (d.IMPLEMENTOR, d.IMPLEMENTOR_TOOLS),
        (d.DRAFTER, d.DRAFTER_TOOLS),
        (d.VALIDATOR, d.VALIDATOR_TOOLS),
    ):
        told = re.search(r"You have exactly these tools: (.*)\.", prompt)
        assert told is not None and tuple(told.group(1).split(", ")) == offered
    # the roles that get no tools are told of none
    for prompt in (d.PLANNER, d.UNBLOCKER):
        assert "tools" not in prompt
    # the two tools of the module are what the implementor's list names beside the workspace's
    assert {t.__name__ for t in d.TOOLS} == {"finish_step", "blocked"} <= set(d.IMPLEMENTOR_TOOLS)


def _journey(tmp_path: Path, model: Any, answers: list[str]) -> tuple[Any, MemoryJournal, Path]:
    from interpreters import ScriptedModel, Workspace
    from programs.director import TOOLS, director

    repo = _repo(tmp_path)
    journal = MemoryJournal()
    replies = iter(answers)
    result = run(
        director,
        "greet people by name",
        model=ScriptedModel(model),
        tools=TOOLS,
        workspace=Workspace(repo),
        answer=lambda question: next(replies),
        db=journal,
    )
    return result, journal, repo


def test_the_plan_is_not_left_without_approve(tmp_path: Path) -> None:
    model = Scripted()
    result, journal, _ = _journey(tmp_path, model, ["make it shorter", "approve", "APPROVE"])
    assert result.status == "completed", result.describe()
    asks = [e for e in journal.entries(result.run_id) if e.kind == "ask"]
    assert len(asks) == 3  # feedback, a lower-case "approve" (not APPROVE), then APPROVE
    planner_calls = [
        e
        for e in map(journal.whole, journal.entries(result.run_id))
        if e.kind == "infer" and "You are the director of" in e.effect_json
    ]
    assert len(planner_calls) == 3
    assert "Change the plan: make it shorter" in planner_calls[1].effect_json


def test_draft_must_leave_a_summary(tmp_path: Path) -> None:
    class NoSummary(Scripted):
        def __call__(self, request: Any) -> Any:
            from op import Response

            if request.messages[0].content.startswith("You are the drafter"):
                return Response(text="I wrote nothing")
            return super().__call__(request)

    result, journal, repo = _journey(tmp_path, NoSummary(), ["APPROVE"])
    assert result.status == "failed"
    assert "the drafter wrote no summary in handoff/draft.md; DRAFT cannot end" in str(result.error)
    assert isinstance(result.state, DirectorState) and result.state.fsm.value == "DRAFT"


def test_a_fork_from_implement_step_2_redoes_step_2_onwards(tmp_path: Path) -> None:
    from interpreters import ScriptedModel, Workspace, resume
    from programs.director import TOOLS

    result, journal, repo = _journey(tmp_path, Scripted(), ["APPROVE"])
    assert result.status == "completed"
    fork = resume(
        result.run_id,
        db=journal,
        from_checkpoint="implement-step-2",
        model=ScriptedModel(Scripted()),
        tools=TOOLS,
        workspace=Workspace(repo),
    )
    assert fork.status == "completed", fork.describe()
    entries = journal.entries(fork.run_id)
    cp = next(e for e in entries if e.kind == "checkpoint" and "implement-step-2" in e.effect_json)
    after = [e for e in entries if e.seq > cp.seq and e.kind == "tool"]
    names = [json.loads(e.effect_json)["name"] for e in after]
    # step 2 done again by fresh implementors (wrong twice, then right), nothing of step 1
    assert names.count("finish_step") == 3 and names.count("git_commit") == 1
    commit = next(e for e in after if json.loads(e.effect_json)["name"] == "git_commit")
    assert json.loads(commit.effect_json)["args"]["message"] == "step 2: greet(name) greets by name"
    # the files were put back as they were at the checkpoint, so step 2 made the same change
    # again: git has nothing new to commit, which is reported and does not block
    assert "nothing to commit" in (commit.result_json or "")
    emitted = [json.loads(e.effect_json) for e in entries if e.kind == "emit"]
    assert any(e["name"] == "commit_failed" and e["data"]["step"] == 2 for e in emitted)
    assert (repo / "greet.py").read_text() == GREET_V2


def test_show_tells_where_the_workflow_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from interpreters import ScriptedModel, SqliteJournal, Workspace
    from interpreters.cli import main
    from programs.director import TOOLS, director

    repo = _repo(tmp_path)
    db = str(tmp_path / "runs.db")
    answers = iter(["APPROVE"])
    result = run(
        director,
        "greet people by name",
        model=ScriptedModel(Scripted()),
        tools=TOOLS,
        workspace=Workspace(repo),
        answer=lambda q: next(answers, None),
        db=SqliteJournal(db),
    )
    assert result.status == "completed"
    assert main(["show", result.run_id, "--db", db]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("state: "))
    for part in ("fsm=DONE", "pointer=3", "validation_run=1", "implementor=model:default"):
        assert part in line.split(), line
    assert "plan_hash=" in line and len(line) < 200


def test_done_goes_back_to_plan_for_the_next_goal_until_end(tmp_path: Path) -> None:
    from interpreters import ScriptedModel, Workspace
    from programs.director import TOOLS, DirectorResult, director

    repo = _repo(tmp_path)
    journal = MemoryJournal()
    replies = iter(["APPROVE", "greet in French too", "APPROVE", "END"])
    result = run(
        director,
        "greet people by name",
        kwargs={"ask_next": True},
        model=ScriptedModel(Scripted()),
        tools=TOOLS,
        workspace=Workspace(repo),
        answer=lambda question: next(replies),
        db=journal,
    )
    assert result.status == "completed", result.describe()
    value = result.value
    assert isinstance(value, DirectorResult) and value.done and value.validation_runs == 2
    entries = [journal.whole(e) for e in journal.entries(result.run_id)]  # texts unpacked
    names = [json.loads(e.effect_json)["name"] for e in entries if e.kind == "checkpoint"]
    assert names[names.index("done") :] == [
        "done",
        "plan",
        "draft",
        "buffer",
        "implement-step-1",
        "implement-step-2",
        "validate-run-2",
        "done",
    ]
    questions = [json.loads(e.effect_json)["question"] for e in entries if e.kind == "ask"]
    assert questions[1].startswith("Done: a greet() function") and "END" in questions[1]
    planner = [
        e for e in entries if e.kind == "infer" and "You are the director of" in e.effect_json
    ]
    assert "Goal: greet in French too" in planner[1].effect_json
    state = result.state
    assert isinstance(state, DirectorState) and "DONE -> PLAN" in state.moves.items
    # the one refused write is the first goal's implementor's; the second goal's drafter
    # rewrote the files the first goal had locked
    refused = [e for e in entries if e.kind == "tool" and "is locked" in (e.result_json or "")]
    assert len(refused) == 1
    drafts = [
        e
        for e in entries
        if e.kind == "tool"
        and json.loads(e.effect_json)["name"] == "write_file"
        and json.loads(e.effect_json)["args"]["path"] == "handoff/draft.md"
    ]
    assert len(drafts) == 2 and all(json.loads(e.result_json or "{}")["ok"] for e in drafts)
