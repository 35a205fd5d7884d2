"""The director workflow's machine: every move the table does not allow is refused with the
state it is in and the one asked for, every allowed move passes its named checkpoint, random
sequences of moves never reach a state the table does not allow, and the plan and the
validator's verdict are checked as the workflow needs them."""

from __future__ import annotations

import json
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
