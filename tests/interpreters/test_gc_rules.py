"""The rules of removing runs (interpreters/_gc.py), on real journals and git workspaces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from interpreters import MemoryJournal, open_journal, resume, run
from interpreters._gc import (
    NotRemovable,
    Removed,
    check_removable,
    checkpoint_trees,
    own_workspace,
    remove_runs,
)
from interpreters.journal._base import Entry, RunRecord
from interpreters.journal._seal import seal_record
from op import Op, OpdslError, ask, checkpoint
from tests.helpers import sample_repo, sh


def _marked() -> Op[str]:
    yield from checkpoint("a")
    yield from checkpoint("b")
    return "done"


def _asks() -> Op[str]:
    return (yield from ask("which?"))


def _checkpoint(address: str, result: object) -> Entry:
    text = result if isinstance(result, str) else json.dumps(result)
    return Entry(
        run_id="r",
        seq=1,
        address=address,
        kind="checkpoint",
        effect_json='{"name": "x"}',
        status="completed",
        result_json=text,
    )


def test_the_trees_a_run_names_are_those_of_its_checkpoints_whose_world_keeps_one() -> None:
    entries = [
        _checkpoint("1", {"state": None, "world": {"workspace": "/w", "tree": "t1"}}),
        _checkpoint("2", {"world": {"tree": ""}}),
        _checkpoint("3", {"world": "not an object"}),
        _checkpoint("4", "not json"),
        _checkpoint("5", [1]),
        Entry(run_id="r", seq=6, address="6", kind="emit", effect_json="{}", result_json="{}"),
    ]
    assert checkpoint_trees(entries) == {"t1"}


def test_a_runs_own_workspace_is_the_folder_its_sealed_config_names_unless_a_file_named_it(
    tmp_path: Path,
) -> None:
    def record(config: str, seal: bool = True) -> RunRecord:
        run = RunRecord(run_id="r", program="m:p", config_json=config)
        return seal_record(run) if seal else run

    here = json.dumps({"workspace": str(tmp_path)})
    assert own_workspace(record(here)) == tmp_path
    assert own_workspace(record(here, seal=False)) is None  # a handed journal's
    imported = json.dumps({"workspace": str(tmp_path), "imported_from": "run.jsonl"})
    assert own_workspace(record(imported).model_copy(update={"config_json": imported})) is None
    for config in (json.dumps({"workspace": str(tmp_path / "gone")}), "[", "{"):
        assert own_workspace(record(config, seal=False)) is None, config


def test_only_finished_runs_may_be_removed_and_none_is_unless_all_may_be() -> None:
    journal = MemoryJournal()
    done = run(_marked, db=journal)
    waiting = run(_asks, db=journal)
    journal.create_run(RunRecord(run_id="going", program="m:f"))
    for run_id, said in ((waiting.run_id, "is waiting for an answer"), ("going", "is running")):
        with pytest.raises(NotRemovable, match=f"run {run_id} {said}") as refused:
            check_removable(journal, [done.run_id, run_id])
        assert isinstance(refused.value, OpdslError)  # the command says it as bad input
        with pytest.raises(NotRemovable):
            list(remove_runs(journal, [done.run_id, run_id]))
    assert {r.run_id for r in journal.runs()} == {done.run_id, waiting.run_id, "going"}
    assert list(remove_runs(journal, [done.run_id])) == [Removed(done.run_id, 0, 0)]


def test_removing_a_parent_keeps_the_trees_its_fork_still_names(tmp_path: Path) -> None:
    repo = sample_repo(tmp_path)
    db = str(tmp_path / "r.db")
    parent = run(_marked, db=db, workspace=repo)
    fork = resume(parent.run_id, from_checkpoint="a", db=db)
    journal = open_journal(db)
    named = checkpoint_trees(journal.entries(fork.run_id))
    assert named and named <= checkpoint_trees(journal.entries(parent.run_id))
    (removed,) = list(remove_runs(journal, [parent.run_id]))
    assert isinstance(removed, Removed) and removed.run_id == parent.run_id
    assert removed.kept >= 1 and removed.dropped + removed.kept == 2
    assert [r.run_id for r in journal.runs()] == [fork.run_id]
    kept = sh(repo, "for-each-ref", "--format=%(objectname)^{tree}", "refs/opdsl/").split()
    trees = {sh(repo, "rev-parse", ref).strip() for ref in kept}
    assert named <= trees  # what the fork would restore is still there


def _copy_journal(db: Path, to: Path) -> None:
    """``cp runs.db* ``: the file and its write-ahead log, as a user copies one."""
    import shutil

    for suffix in ("", "-wal"):
        if Path(f"{db}{suffix}").exists():
            shutil.copy(f"{db}{suffix}", f"{to}{suffix}")


def test_gc_on_a_copy_of_a_journal_keeps_the_snapshots_the_original_still_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy's runs are the user's own (sealed), but their snapshots are named by the file
    that made them too: removing a run from the copy leaves them, saying which file holds the
    run; removing it from the original (or through a link to it) drops them."""
    from interpreters.cli._main import main

    repo = sample_repo(tmp_path)
    db = tmp_path / "runs.db"
    done = run(_marked, db=str(db), workspace=repo)
    made = open_journal(str(db))
    assert json.loads(made.run(done.run_id).config_json)["journal"] == str(db.resolve())
    made.close()
    copy = tmp_path / "backup.db"
    _copy_journal(db, copy)

    def refs() -> list[str]:
        return sh(repo, "for-each-ref", "--format=%(refname)", "refs/opdsl/").split()

    assert len(refs()) == 2
    assert main(["gc", done.run_id, "--db", str(copy)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"removed run {done.run_id}; kept its 2 workspace snapshot(s): the journal that made "
        f"it, {db.resolve()}, still holds it"
    )
    assert len(refs()) == 2 and open_journal(str(copy)).runs() == []
    # a path through a link is the same file: removing through it is removing from the
    # original
    linked = tmp_path / "linked.db"
    linked.symlink_to(db)
    (removed,) = list(remove_runs(open_journal(str(linked)), [done.run_id]))
    assert removed == Removed(done.run_id, 2, 0)
    assert refs() == []


def test_gc_drops_the_snapshots_when_the_file_that_made_the_run_no_longer_holds_it(
    tmp_path: Path,
) -> None:
    """Moved away, or removed from it: the copy is what is left of the run, and its
    snapshots go with it."""
    repo = sample_repo(tmp_path)
    db = tmp_path / "runs.db"
    first = run(_marked, db=str(db), workspace=repo)
    second = run(_marked, db=str(db), workspace=repo)
    copy = tmp_path / "copy.db"
    _copy_journal(db, copy)
    # the first run removed from the original (its trees kept: the second names the same)
    assert list(remove_runs(open_journal(str(db)), [first.run_id])) == [Removed(first.run_id, 0, 2)]
    # the original moved away: no file holds the second where it was made, and none the first
    db.rename(tmp_path / "moved.db")
    assert list(remove_runs(open_journal(str(copy)), [first.run_id, second.run_id])) == [
        Removed(first.run_id, 2, 0),
        Removed(second.run_id, 2, 0),
    ]
    assert sh(repo, "for-each-ref", "refs/opdsl/") == ""


def test_a_run_written_while_gc_sweeps_keeps_the_pieces_it_reuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gc's sweep of content reads what every run refers to, then deletes the rest: a run
    written in between through another connection (another process, as here another journal
    object) that reuses a stored piece (its insert of it does nothing) lost it. The sweep is
    one write transaction now: the other writer waits for it, then stores the piece anew."""
    import threading
    import time

    from interpreters import SqliteJournal
    from interpreters.journal._portable import run_pieces
    from tests.fixtures.durable_programs import TOOLS, long_output

    db = tmp_path / "runs.db"
    old = run(long_output, tools=TOOLS, db=SqliteJournal(db))
    written: list[str] = []

    def write() -> None:
        written.append(run(long_output, tools=TOOLS, db=SqliteJournal(db)).run_id)

    real = SqliteJournal.delete_content

    def between_scan_and_delete(self: SqliteJournal, hashes: Any) -> int:
        other = threading.Thread(target=write)
        other.start()
        other.join(timeout=2)  # done by now unless the sweep keeps it waiting
        monkeypatch.setattr(SqliteJournal, "delete_content", real)
        threads.append(other)
        return real(self, hashes)

    threads: list[threading.Thread] = []
    monkeypatch.setattr(SqliteJournal, "delete_content", between_scan_and_delete)
    started = time.monotonic()
    list(remove_runs(open_journal(str(db)), [old.run_id]))
    threads[0].join(timeout=60)
    assert time.monotonic() - started >= 2  # the writer waited for the sweep to end
    journal = open_journal(str(db))
    (new,) = journal.runs()
    assert written == [new.run_id] and new.status == "completed"
    # every piece its entries name is there (a missing one raises)
    assert len(run_pieces(journal, journal.entries(new.run_id))) == 1


def test_a_run_removed_while_it_is_being_resumed_is_not_made_again_without_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume read the run, then another process removed it before the resume took the
    run's lock: the resume created it anew from what it had read, completed and without its
    first entries. Now it is refused, and nothing is written."""
    from interpreters import SqliteJournal
    from interpreters.journal import JournalError

    db = tmp_path / "runs.db"
    waiting = run(_asks, db=str(db))
    assert waiting.status == "waiting"
    real = SqliteJournal.entries

    def removed_once_read(self: SqliteJournal, run_id: str) -> list[Entry]:
        monkeypatch.setattr(SqliteJournal, "entries", real)
        read = real(self, run_id)
        SqliteJournal(db).delete_run(run_id)  # another process's gc, say
        return read

    monkeypatch.setattr(SqliteJournal, "entries", removed_once_read)
    with pytest.raises(JournalError) as caught:
        resume(waiting.run_id, answer="this one", db=str(db), program=_asks)
    assert str(caught.value) == (
        f"run {waiting.run_id} is no longer in the journal: it was removed while it was being "
        "resumed (opdsl gc?); nothing was done"
    )
    journal = open_journal(str(db))
    assert journal.runs() == []
