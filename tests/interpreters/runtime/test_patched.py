"""``patched``: a run that passed the point without the marker takes the old code on resume,
replay and fork; a new run, or one that had not reached it, the new code; the decision is an
entry of its own; ``deprecate_patched`` and every interpreter agree."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from interpreters import (
    Divergence,
    MemoryJournal,
    ScriptedInterpreter,
    SqliteJournal,
    dry_run,
    replay,
    resume,
    run,
)
from interpreters.testing import ScriptMismatch, expect
from op import (
    Budget,
    Op,
    Success,
    ask,
    checkpoint,
    deprecate_patched,
    emit,
    limit,
    patched,
)

CODE = {"version": "old"}
"""Which code ``confirm`` runs: old (no marker), patched, deprecated, removed (the new code
alone, the call gone)."""


def _body() -> Op[str]:
    yield from emit("working")
    version = CODE["version"]
    if version == "patched":
        if (yield from patched("twice")):
            yield from emit("new code")
    elif version in ("deprecated", "removed"):
        if version == "deprecated":
            yield from deprecate_patched("twice")
        yield from emit("new code")
    return "body"


def confirm() -> Op[str]:
    yield from checkpoint("start")
    version = CODE["version"]
    new = False
    if version == "patched":
        new = yield from patched("ask-twice")
    elif version in ("deprecated", "removed"):
        if version == "deprecated":
            yield from deprecate_patched("ask-twice")
        new = True
    first = yield from ask("What now?")
    if new:
        sure = yield from ask(f"Sure about {first}?")
        first = f"{first} ({sure})"
    yield from checkpoint("asked")
    done = yield from limit(Budget(tool_calls=5), _body())
    assert isinstance(done, Success)
    return f"did {first}"


@pytest.fixture(autouse=True)
def _old_code() -> Iterator[None]:
    CODE["version"] = "old"
    yield
    CODE["version"] = "old"


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


def _kinds(db: str, run_id: str) -> list[tuple[str, str]]:
    return [(e.address, e.kind) for e in SqliteJournal(db).entries(run_id)]


def test_a_waiting_run_resumed_after_the_change_takes_the_old_code_a_new_run_the_new(
    db: str,
) -> None:
    waiting = run(confirm, db=db)
    assert waiting.status == "waiting"
    CODE["version"] = "patched"
    old = resume(waiting.run_id, db=db, answer="tests")
    assert old.value == "did tests"  # one question: the old code
    kinds = _kinds(db, old.run_id)
    assert kinds[:3] == [("1", "checkpoint"), ("2", "ask"), ("3", "checkpoint")]
    # the second change, in the limit, came after its resume point: it took the new code
    assert ("4.2", "patched") in kinds and ("4.3", "emit") in kinds

    new = run(confirm, db=db)
    assert new.status == "waiting" and new.question == "What now?"
    new = resume(new.run_id, db=db, answer="docs")
    assert new.status == "waiting" and new.question == "Sure about docs?"
    new = resume(new.run_id, db=db, answer="yes")
    assert new.value == "did docs (yes)"
    entries = SqliteJournal(db).entries(new.run_id)
    markers = [(e.address, e.effect_json, e.result_json) for e in entries if e.kind == "patched"]
    assert markers == [
        ("2", '{"kind":"patched","name":"ask-twice"}', "true"),
        ("6.2", '{"kind":"patched","name":"twice"}', "true"),
    ]
    # replays take the recorded side of each: both runs end as they did
    assert replay(old.run_id, db=db).value == "did tests"
    assert replay(new.run_id, db=db).value == "did docs (yes)"


def test_a_fork_takes_the_old_code_before_its_checkpoint_and_the_new_code_after(
    db: str,
) -> None:
    done = run(confirm, db=db, answer=lambda q: "x")
    assert done.value == "did x"
    CODE["version"] = "patched"
    # forked after the point: the prefix passed it without the marker
    late = resume(done.run_id, db=db, from_checkpoint="asked")
    assert late.value == "did x"
    assert "patched" not in [k for a, k in _kinds(db, late.run_id) if a == "2"]
    # the marker inside the limit comes after "asked": the fork reached it live
    assert ("4.2", "patched") in _kinds(db, late.run_id)
    # forked before it: the fork had not reached it, so it goes on down the new code
    early = resume(done.run_id, db=db, from_checkpoint="start")
    assert early.status == "waiting" and early.question == "What now?"
    assert ("2", "patched") in _kinds(db, early.run_id)


def test_a_marker_in_a_scope_the_record_finished_takes_the_old_code(db: str) -> None:
    done = run(confirm, db=db, answer=lambda q: "x")
    CODE["version"] = "patched"
    # the limit at 4 finished with two effects; the marker now at 4.2 was passed without it
    assert replay(done.run_id, db=db).value == "did x"


def test_deprecate_patched_replays_runs_with_the_marker_and_names_those_without(
    db: str,
) -> None:
    old = run(confirm, db=db, answer=lambda q: "x")
    CODE["version"] = "patched"
    new = run(confirm, db=db, answer=lambda q: "y")
    assert new.value == "did y (y)"

    CODE["version"] = "deprecated"
    assert replay(new.run_id, db=db).value == "did y (y)"
    with pytest.raises(Divergence) as caught:
        replay(old.run_id, db=db)
    message = str(caught.value)
    assert "at address 2 " in message and "deprecate_patched('ask-twice')" in message
    assert "passed this point without the marker" in message
    assert "test_patched.py" in message.splitlines()[0], "the program's line, not opdsl's"
    # a new run under the deprecated code records the marker where patched() did
    again = run(confirm, db=db, answer=lambda q: "z")
    assert ("2", "patched") in _kinds(db, again.run_id)

    CODE["version"] = "removed"
    with pytest.raises(Divergence, match=r"the record has the patched\('ask-twice'\) marker"):
        replay(new.run_id, db=db)


def test_dry_run_takes_the_new_code_and_shows_the_marker() -> None:
    CODE["version"] = "patched"
    plan = dry_run(confirm)
    assert [(s.address, s.kind) for s in plan.steps][:4] == [
        ("1", "checkpoint"),
        ("2", "patched"),
        ("3", "ask"),
        ("4", "ask"),
    ]


def test_a_script_answers_a_marker_either_way() -> None:
    CODE["version"] = "patched"
    answers = [(expect("ask"), "a"), (expect("ask"), "b")]
    # unasked, the marker passes as the new code
    assert ScriptedInterpreter(answers).run(confirm).value == "did a (b)"
    old_side = [(expect("patched", name="ask-twice"), False), (expect("ask"), "a")]
    journal = MemoryJournal()
    old = ScriptedInterpreter(old_side, journal=journal).run(confirm)
    assert old.value == "did a"
    # the old side is a run without the marker: not journaled, and numbered as before it
    kinds = [(e.address, e.kind) for e in journal.entries(old.run_id)]
    assert kinds[:3] == [("1", "checkpoint"), ("2", "ask"), ("3", "checkpoint")]
    assert "patched" not in [k for _, k in kinds[:3]]
    with pytest.raises(ScriptMismatch, match=r"patched\('ask-twice'\) at address 2 with 'no'"):
        ScriptedInterpreter([(expect("patched"), "no")]).run(confirm)
    CODE["version"] = "deprecated"
    with pytest.raises(ScriptMismatch, match="no old code left"):
        ScriptedInterpreter([(expect("patched"), False)]).run(confirm)


def test_a_marker_needs_a_name() -> None:
    with pytest.raises(ValueError, match=r"patched\(\) needs a non-empty name"):
        next(patched(""))
    with pytest.raises(ValueError, match=r"deprecate_patched\(\) needs a non-empty name"):
        next(deprecate_patched(3))  # type: ignore[arg-type]
