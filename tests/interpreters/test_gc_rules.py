"""The rules of removing runs (interpreters/_gc.py), on real journals and git workspaces."""

from __future__ import annotations

import json
from pathlib import Path

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
