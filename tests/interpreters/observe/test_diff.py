"""``opdsl diff``: where two runs part."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interpreters import ScriptedModel, resume, run
from interpreters.cli._main import main
from op import Add, Op, checkpoint, infer, update
from state import CRDTModel, GSet


class Seen(CRDTModel):
    answers: GSet[str] = GSet()


def asks_twice() -> Op[list[str]]:
    first = (yield from infer("first?")).text
    yield from update(answers=Add(first))
    yield from checkpoint("between")
    second = (yield from infer("second?")).text
    yield from update(answers=Add(second))
    return [first, second]


@pytest.fixture
def two(tmp_path: Path) -> tuple[str, str, str]:
    db = str(tmp_path / "runs.db")
    parent = run(asks_twice, model=ScriptedModel(["one", "two"]), state=Seen(), db=db)
    # a scripted model's place is the run's: the fork's second call gets its second answer
    model = ScriptedModel(["one", "TWO"])
    fork = resume(parent.run_id, from_checkpoint="between", db=db, model=model)
    return db, parent.run_id, fork.run_id


def test_a_fork_and_its_parent_part_after_the_checkpoint(
    two: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, parent, fork = two
    assert main(["diff", parent, fork, "--db", db]) == 1
    out = capsys.readouterr().out
    # the first model call and the checkpoint (address 2 is the state update, not journaled)
    assert "the same up to address 4 (2 effects before it)" in out
    assert f"--- {parent}" in out and f"+++ {fork}" in out
    assert "they part at address 4: the same effect, a different result" in out
    assert '-  "text": "two"' in out and '+  "text": "TWO"' in out
    assert "the end states differ:" in out and "answers" in out


def test_diff_as_json(two: tuple[str, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    db, parent, fork = two
    assert main(["diff", parent, fork, "--db", db, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["parts_at"] == "4" and data["same_effects_before"] == 2
    assert data["a_entry"]["result"]["text"] == "two" and data["b_entry"]["result"]["text"] == "TWO"
    assert set(data["state"]) == {"answers"}


def test_a_run_against_itself_is_the_same(
    two: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, parent, _ = two
    assert main(["diff", parent, parent, "--db", db]) == 0
    assert "the same 3 effects, with the same results" in capsys.readouterr().out


def asks_differently() -> Op[str]:
    return (yield from infer("something else?")).text


def test_different_effects_show_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "runs.db")
    a = run(asks_twice, model=ScriptedModel(["one", "two"]), state=Seen(), db=db)
    b = run(asks_differently, model=ScriptedModel(["x"]), db=db)
    assert main(["diff", a.run_id, b.run_id, "--db", db]) == 1
    out = capsys.readouterr().out
    assert "they part at address 1: a different effect" in out
    assert '"first?"' in out and '"something else?"' in out


def test_diff_of_an_unknown_run_is_one_line(
    two: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, parent, _ = two
    assert main(["diff", parent, "nope", "--db", db]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opdsl: error:") and "nope" in err


def test_a_handed_journals_addresses_that_are_no_addresses_are_diffed_last_not_a_traceback(
    two: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``x.y``, ``1..2``, an empty one, 5,000 digits (past what ``int`` reads): a file made
    them, and diff ordered addresses by reading their parts as numbers."""
    from tests.helpers import RawJournal

    db, parent, fork = two
    raw = RawJournal(db)
    seqs = raw.execute("SELECT seq FROM entries WHERE run_id=? ORDER BY seq", (fork,)).fetchall()
    for (seq,), address in zip(seqs, ["x.y", "1..2", "", "9" * 5000], strict=False):
        raw.execute("UPDATE entries SET address=? WHERE run_id=? AND seq=?", (address, fork, seq))
    raw.close()
    code = main(["diff", parent, fork, "--db", db])
    out, err = capsys.readouterr()
    # they part where the parent's first effect is and the fork's is not: said, not a traceback
    assert (code, err) == (1, "") and "they part at address 1" in out, (code, out, err)
