"""A program changed with ``patched`` while a run of it waits on an ``ask``, with the command
in processes of its own and a journal on disk: the waiting run, answered under the new code,
takes the old code; a run started under the new code takes the new one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import RawJournal

ROOT = Path(__file__).resolve().parents[3]

OLD = """from op import Op, ask, checkpoint


def confirm() -> Op[str]:
    yield from checkpoint("start")
    first = yield from ask("What now?")
    return f"did {first}"
"""

NEW = """from op import Op, ask, checkpoint, patched


def confirm() -> Op[str]:
    yield from checkpoint("start")
    if (yield from patched("ask-twice")):
        first = yield from ask("What now?")
        sure = yield from ask(f"Sure about {first}?")
        return f"did {first} ({sure})"
    first = yield from ask("What now?")
    return f"did {first}"
"""


def opdsl(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "interpreters", *argv, "--db", str(cwd / "runs.db")],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def _runs(cwd: Path) -> list[str]:
    with RawJournal(cwd / "runs.db") as db:
        return [r[0] for r in db.execute("SELECT run_id FROM runs ORDER BY created_at, rowid")]


def _entries(cwd: Path, run_id: str) -> list[tuple[str, str, str | None]]:
    with RawJournal(cwd / "runs.db") as db:
        rows = db.execute(
            "SELECT address, kind, result_json FROM entries WHERE run_id = ? ORDER BY seq",
            (run_id,),
        )
        return [(str(a), str(k), r) for a, k, r in rows]


def test_a_waiting_run_takes_the_old_code_and_a_new_run_the_new(tmp_path: Path) -> None:
    (tmp_path / "versioned.py").write_text(OLD)
    started = opdsl(tmp_path, "run", "versioned:confirm", "--quiet")
    assert started.returncode == 0, started.stderr
    (waiting,) = _runs(tmp_path)
    assert "waiting for an answer to: What now?" in started.stdout + started.stderr

    (tmp_path / "versioned.py").write_text(NEW)  # deployed while the run waits
    old = opdsl(tmp_path, "answer", waiting, "tests", "--accept-changed-code", "--quiet")
    assert old.returncode == 0, old.stderr
    assert old.stdout.strip().splitlines()[0] == "did tests", old.stdout
    assert [k for _, k, _ in _entries(tmp_path, waiting)] == ["checkpoint", "ask"]

    new = opdsl(tmp_path, "run", "versioned:confirm", "--quiet")
    assert new.returncode == 0, new.stderr
    fresh = next(r for r in _runs(tmp_path) if r != waiting)
    assert "What now?" in new.stdout + new.stderr
    asked = opdsl(tmp_path, "answer", fresh, "docs", "--quiet")
    assert "Sure about docs?" in asked.stdout + asked.stderr, asked.stdout + asked.stderr
    done = opdsl(tmp_path, "answer", fresh, "yes", "--quiet")
    assert done.stdout.strip().splitlines()[0] == "did docs (yes)", done.stdout + done.stderr
    assert _entries(tmp_path, fresh) == [
        ("1", "checkpoint", _entries(tmp_path, fresh)[0][2]),
        ("2", "patched", "true"),
        ("3", "ask", json.dumps("docs")),
        ("4", "ask", json.dumps("yes")),
    ]

    # both replay against the code as it is now, each down its own side
    for run_id in (waiting, fresh):
        replayed = opdsl(tmp_path, "replay", run_id, "--accept-changed-code")
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
