"""``opdsl check``, the replay gate, in a process of its own over a journal on disk: of 100 runs
that replay the same and 3 that diverge three ways, it prints exactly the 3 (address, source
line, nearest checkpoint, the diff) and fails; runs in flight are told where they would resume
or that they diverge before it, and are left as they were; exported runs too, and as pytest
tests with ``--opdsl-journals``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from interpreters import SqliteJournal, export_run, run
from interpreters.cli._main import main
from tests.helpers import RawJournal

ROOT = Path(__file__).resolve().parents[3]

OLD = """from op import Op, ask, checkpoint, emit, tool


def price(item: str) -> str:
    return str(len(item))


def order(item: str, n: int) -> Op[str]:
    yield from checkpoint("start")
    r = yield from tool("price", {"item": item})
    yield from checkpoint("priced")
    yield from emit("priced", {"item": item, "n": n})
    if item.startswith("gift"):
        wrap = yield from ask("Wrap it?")
        yield from emit("wrap", wrap)
    return f"{n} x {item} at {r.output}"
"""

# three kinds of change, each met by the runs of one item; the other items replay the same
NEW = (
    OLD.replace(
        'r = yield from tool("price", {"item": item})',
        'r = yield from tool("price", {"item": item.upper() if item == "pear" else item})',
    )
    .replace(
        '    yield from emit("priced", {"item": item, "n": n})\n',
        '    yield from emit("priced", {"item": item, "n": n})\n'
        '    if item in ("fig", "gift-b"):\n'
        '        yield from emit("checked", item)\n',
    )
    .replace(
        '    return f"{n} x {item} at {r.output}"',
        '    return f"{n} x {item} at {r.output}" + ("!" if item == "kiwi" else "")',
    )
)


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "shop.py").write_text(OLD)
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("shop", None)


def opdsl(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "interpreters", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def inside(capsys: pytest.CaptureFixture[str], cwd: Path, *argv: str) -> tuple[int, str, str]:
    """The command in this process, with the code as its file is now (imported afresh)."""
    sys.modules.pop("shop", None)
    here = os.getcwd()
    os.chdir(cwd)
    try:
        code = main(list(argv))
    finally:
        os.chdir(here)
    out, err = capsys.readouterr()
    return code, out, err


def _record(cwd: Path, items: list[str], answer: str | None = "yes") -> dict[str, str]:
    import shop  # type: ignore[import-not-found]

    db = str(cwd / "runs.db")
    ids = {}
    for i, item in enumerate(items):
        result = run(
            shop.order,
            item,
            i,
            tools=[shop.price],
            db=db,
            answer=(lambda q: answer) if answer else None,
        )
        ids[result.run_id] = item
    return ids


def test_check_prints_exactly_the_runs_that_diverge(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fine = [f"apple{i}" for i in range(100)]
    ids = _record(shop, ["pear", *fine[:50], "fig", *fine[50:], "kiwi"])
    code, out, err = inside(capsys, shop, "check", "--db", "runs.db")
    assert code == 0, out + err
    assert out.splitlines() == [
        "103 run(s) checked against the code as it is now: 103 same, 0 diverge"
    ]

    (shop / "shop.py").write_text(NEW)
    checked = opdsl(shop, "check", "--db", "runs.db")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    named = [line for line in lines if line.split("  ")[0] in ids]
    assert sorted(ids[line.split("  ")[0]] for line in named) == ["fig", "kiwi", "pear"]
    assert lines[-1] == "103 run(s) checked against the code as it is now: 100 same, 3 diverge"
    by_item = {ids[line.split("  ")[0]]: line for line in named}
    assert "diverges at 2 (" in by_item["pear"] and "shop.py:10 in order" in by_item["pear"]
    assert "the program asks for a different effect here" in by_item["pear"]
    assert "nearest checkpoint 'start' at 1" in by_item["pear"]
    assert '-  "args": {\n' not in checked.stdout  # the diff is shown line by line, indented:
    assert '-    "item": "pear"' in checked.stdout and '+    "item": "PEAR"' in checked.stdout
    fig, kiwi = by_item["fig"], by_item["kiwi"]
    assert "diverges at 5 (" in fig and "the record ends before this effect" in fig
    assert "nearest checkpoint 'priced' at 3" in by_item["fig"]
    assert "diverges at end (the end of the run): the program returned something else" in kiwi

    as_json = json.loads(inside(capsys, shop, "check", "--db", "runs.db", "--json")[1])
    assert as_json["summary"]["diverges"] == 3 and as_json["summary"]["same"] == 100
    # in two processes, each a share of the runs: the same verdicts, in the same order
    in_two = json.loads(
        inside(capsys, shop, "check", "--db", "runs.db", "--json", "--jobs", "2")[1]
    )
    assert in_two == as_json
    pear = next(r for r in as_json["runs"] if ids[r["run_id"]] == "pear")
    assert pear["verdict"] == "diverges" and pear["address"] == "2"
    assert pear["checkpoint"] == {"name": "start", "address": "1"}

    only = inside(capsys, shop, "check", "--db", "runs.db", "--program", "shop:order", "--all")
    listed = [line for line in only[1].splitlines() if line.split("  ")[0] in ids]
    assert len(listed) == 103 and sum("  same (completed)" in line for line in listed) == 100
    code, _, err = inside(capsys, shop, "check", "--db", "runs.db", "--program", "nowhere:prog")
    assert code == 2 and "nowhere" in err and err.count("\n") == 1


def test_runs_in_flight_are_told_where_they_would_resume_and_are_left_as_they_were(
    shop: Path,
) -> None:
    ids = _record(shop, ["gift-a", "gift-b"], answer=None)
    assert all(r.status == "waiting" for r in SqliteJournal(shop / "runs.db").runs())
    before = [
        (e.address, e.status) for e in SqliteJournal(shop / "runs.db").entries(next(iter(ids)))
    ]
    (shop / "shop.py").write_text(NEW)
    checked = opdsl(shop, "check", "--db", "runs.db")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    by_item = {ids[line.split("  ")[0]]: line for line in lines if line.split("  ")[0] in ids}
    assert by_item["gift-a"].endswith("waiting: would resume at 5 (ask 'Wrap it?')")
    assert "waiting: diverges before its resume point at 5 (" in by_item["gift-b"]
    assert checked.stdout.splitlines()[-1].endswith(
        "0 same, 0 diverge, 2 in flight (1 would resume, 1 diverge before their resume point)"
    )
    journal = SqliteJournal(shop / "runs.db")
    assert all(r.status == "waiting" for r in journal.runs()), "a check changes nothing"
    assert [(e.address, e.status) for e in journal.entries(next(iter(ids)))] == before


def test_exported_runs_are_checked_only_against_the_code_named(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = _record(shop, ["pear", "plum"])
    journal = SqliteJournal(shop / "runs.db")
    for run_id, item in ids.items():
        (shop / f"{item}.jsonl").write_text(export_run(journal, run_id))
    (shop / "shop.py").write_text(NEW)
    code, out, _ = inside(capsys, shop, "check", "pear.jsonl")
    assert code == 1
    assert "cannot be checked: the file names the program shop:order; pass --program " in out
    code, out, _ = inside(
        capsys, shop, "check", "pear.jsonl", "plum.jsonl", "--program", "shop:order"
    )
    assert code == 1 and out.splitlines()[-1].endswith(": 1 same, 1 diverge"), out
    code, _, err = inside(capsys, shop, "check", "nothing.jsonl")
    assert code == 2 and "nothing.jsonl: no such file" in err


def test_pytest_makes_each_exported_run_a_test(shop: Path, pytester: pytest.Pytester) -> None:
    ids = _record(shop, ["pear", "plum"])
    journal = SqliteJournal(shop / "runs.db")
    runs = pytester.mkdir("runs")
    for run_id, item in ids.items():
        (runs / f"{item}.jsonl").write_text(export_run(journal, run_id))
    (shop / "shop.py").write_text(NEW)
    sys.modules.pop("shop", None)
    out = pytester.runpytest_inprocess("--opdsl-journals", "runs", "-p", "no:cacheprovider", "-rf")
    out.assert_outcomes(failed=1, passed=1)
    text = "\n".join(out.outlines)
    assert "FAILED runs/pear.jsonl" in text and "diverges at 2" in text, text
    assert '+    "item": "PEAR"' in text


@pytest.mark.parametrize("version", ["v0.1.0", "v0.3.0"])
def test_journals_of_earlier_versions_check_the_same_and_are_left_as_they_were(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    shutil.copy(ROOT / "tests" / "fixtures" / "journals" / f"{version}.db", db)
    before = db.read_bytes()
    # not sealed as this user's: checked against the programs named
    programs = [r.program for r in SqliteJournal(db, read_only=True).runs()]
    code, out, err = inside(capsys, tmp_path, "check", "--db", str(db))
    assert code == 1 and "not sealed as yours" in out, out + err
    named = [arg for p in programs for arg in ("--program", p)]
    code, out, err = inside(capsys, tmp_path, "check", "--db", str(db), *named)
    assert code == 0, out + err
    assert "0 diverge" in out.splitlines()[-1] and "would resume at" in out
    assert db.read_bytes() == before


GATE_OLD = """from op import Op, ask


def gate() -> Op[str]:
    return (yield from ask("Go?"))
"""

GATE_NEW = """from op import Op, ask, patched


def gate() -> Op[str]:
    if (yield from patched("twice")):
        yield from ask("Sure?")
    return (yield from ask("Go?"))
"""


def test_check_counts_the_runs_that_take_a_patch_s_old_code(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (shop / "gate.py").write_text(GATE_OLD)
    import gate  # type: ignore[import-not-found]

    db = str(shop / "runs.db")
    old = [run(gate.gate, db=db, answer=lambda q: "yes").run_id for _ in range(2)]
    (shop / "gate.py").write_text(GATE_NEW)
    sys.modules.pop("gate", None)
    import gate as new_gate  # pyright: ignore[reportMissingImports]

    new = run(new_gate.gate, db=db, answer=lambda q: "yes").run_id
    sys.modules.pop("gate", None)
    code, out, err = inside(capsys, shop, "check", "--db", db)
    assert code == 0, out + err
    assert out.splitlines()[-1] == "patched('twice'): 2 run(s) take the old code, 1 hold the marker"
    as_json = json.loads(inside(capsys, shop, "check", "--db", db, "--json")[1])
    assert as_json["patches"] == {"twice": {"old_code": 2, "marker": 1}}
    taking = {r["run_id"] for r in as_json["runs"] if r["old_code"] == ["twice"]}
    assert taking == set(old) and new not in taking

    journal = SqliteJournal(db)
    for run_id in old:
        journal.delete_run(run_id)
    journal.close()
    code, out, _ = inside(capsys, shop, "check", "--db", db)
    assert out.splitlines()[-1] == (
        "patched('twice'): 0 run(s) take the old code, 1 hold the marker "
        "(deprecate_patched('twice') can replace it)"
    )


def test_a_patched_marker_tampered_in_the_file_is_one_run_s_verdict_not_a_crash(
    shop: Path,
) -> None:

    (shop / "gate.py").write_text(GATE_NEW)
    import gate  # pyright: ignore[reportMissingImports]

    db = str(shop / "runs.db")
    try:
        ids = [run(gate.gate, db=db, answer=lambda q: "yes").run_id for _ in range(4)]
    finally:
        sys.modules.pop("gate", None)
    tampered = dict(zip(ids, ["[1]", "{", '"x"'], strict=False))
    with RawJournal(db) as conn:
        for run_id, effect in tampered.items():
            conn.execute(
                "UPDATE entries SET effect_json = ? WHERE run_id = ? AND kind = 'patched'",
                (effect, run_id),
            )
            assert conn.changes() == 1
    conn.close()
    checked = opdsl(shop, "check", "--db", "runs.db", "--all")
    assert checked.returncode in (0, 1), checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    for run_id in ids:  # every run has its line, the untouched one too
        assert sum(line.split("  ")[0] == run_id for line in lines) == 1, checked.stdout
    untouched = next(line for line in lines if line.startswith(ids[3]))
    assert "  same (completed)" in untouched
    for run_id in tampered:  # a marker that names nothing is no marker: the run diverges
        assert any(line.startswith(f"{run_id}  gate:gate  diverges at 1 (") for line in lines)
    assert "4 run(s) checked against the code as it is now: 1 same, 3 diverge" in lines
