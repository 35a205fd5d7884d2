"""``opdsl gc`` on a journal holding crafted imported runs: no traceback, nothing touched in a
repository a run's file names, and one run that cannot be cleaned never stops the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import sh

OPDSL = str(Path(sys.executable).with_name("opdsl"))
STAMPED = "tests.fixtures.durable_programs:stamped"


def opdsl(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPDSL_DB", "PYTHONPATH")}
    return subprocess.run(
        [OPDSL, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _repo(path: Path) -> Path:
    path.mkdir()
    sh(path, "init", "-q")
    (path / "a.txt").write_text("a")
    sh(path, "add", "-A")
    sh(path, "-c", "user.name=Dev", "-c", "user.email=d@x", "commit", "-qm", "start")
    return path


def _own_run(here: Path, repo: Path) -> str:
    done = opdsl(here, "run", STAMPED, "--workspace", str(repo), "--quiet")
    assert done.returncode == 0, done.stderr
    return done.stderr.split("run ")[1].split()[0]


def _refs(repo: Path) -> list[str]:
    return sh(repo, "for-each-ref", "--format=%(refname)", "refs/opdsl/").split()


def _crafted(here: Path, own: str, run_id: str, workspace: object, result: object) -> Path:
    """The own run's export, made another run whose file names ``workspace`` and whose
    checkpoint's result is ``result``."""
    lines = opdsl(here, "export", own).stdout.splitlines()
    first = json.loads(lines[0])
    first["run"]["run_id"] = run_id
    config = json.loads(first["run"]["config_json"])
    first["run"]["config_json"] = json.dumps({**config, "workspace": workspace})
    out = [json.dumps(first)]
    for line in lines[1:]:
        entry = json.loads(line)
        entry["entry"]["run_id"] = run_id
        if entry["entry"]["kind"] == "checkpoint":
            entry["entry"]["result_json"] = json.dumps(result)
        out.append(json.dumps(entry))
    path = here / f"{run_id}.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


def test_gc_touches_only_the_repositories_the_journals_own_runs_used(tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    mine = _repo(tmp_path / "mine")
    theirs = _repo(tmp_path / "theirs")
    own = _own_run(here, mine)
    assert len(_refs(mine)) == 1
    # their repository holds refs under the crafted runs' ids (their own snapshots, say)
    head = sh(theirs, "rev-parse", "HEAD").strip()
    for run_id in ("c0ffee000001", "c0ffee000002"):
        sh(theirs, "update-ref", f"refs/opdsl/{run_id}/1", head)
    crafted = [
        _crafted(here, own, "c0ffee000001", str(theirs), [1]),
        _crafted(here, own, "c0ffee000002", 7, {"world": "not an object"}),
    ]
    for path in crafted:
        done = opdsl(here, "import", str(path))
        assert done.returncode == 0, done.stderr
    # removing the own run reads every other run's checkpoints, crafted ones included
    done = opdsl(here, "gc", own)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert f"removed run {own} and 1 workspace snapshot(s)" in done.stdout
    assert _refs(mine) == []
    done = opdsl(here, "gc", "c0ffee000001", "c0ffee000002")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    for run_id in ("c0ffee000001", "c0ffee000002"):
        assert f"removed run {run_id} and 0 workspace snapshot(s)" in done.stdout
    assert _refs(theirs) == ["refs/opdsl/c0ffee000001/1", "refs/opdsl/c0ffee000002/1"]
    assert "c0ffee" not in opdsl(here, "runs", "--json").stdout


def test_one_run_that_cannot_be_cleaned_never_stops_the_others(tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    first, second = _repo(tmp_path / "first"), _repo(tmp_path / "second")
    stuck, fine = _own_run(here, first), _own_run(here, second)
    # a git operation holds the lock of the stuck run's snapshot ref: it cannot be deleted
    (ref,) = _refs(first)
    lock = first / ".git" / f"{ref}.lock"
    lock.write_text("")
    done = opdsl(here, "gc", stuck, fine)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"run {stuck}: its workspace snapshots in {first} were left" in done.stderr
    assert f"removed run {fine} and 1 workspace snapshot(s)" in done.stdout
    assert _refs(second) == [] and _refs(first) == [ref]
    runs = json.loads(opdsl(here, "runs", "--json").stdout)
    assert [r["run_id"] for r in runs] == [stuck], "the stuck run stays, to be removed again"
    lock.unlink()
    done = opdsl(here, "gc", stuck)
    assert done.returncode == 0, done.stderr
    assert _refs(first) == []


def test_gc_says_what_is_wrong_with_its_arguments(tmp_path: Path) -> None:
    for args, said in [
        ((), "gc: name the runs to remove (or --temporal HOST:PORT"),
        (
            ("--temporal", "127.0.0.1:1", "r1"),
            "gc --temporal collects the content store and removes no run",
        ),
        (("r1", "--grace", "5"), "gc: --grace is for --temporal"),
        (
            ("--temporal", "127.0.0.1:1", "--grace", "-1"),
            "--grace must be 0 or more seconds, not -1",
        ),
        (
            ("--temporal", "127.0.0.1:1", "--grace", "soon"),
            "argument --grace: invalid float value: 'soon'",
        ),
    ]:
        done = opdsl(tmp_path, "gc", *args)
        assert done.returncode == 2 and said in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # no journal was made
