"""The checkpoint snapshot as a typed value reads and writes the layout runs journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interpreters import open_journal, run
from interpreters.journal._checkpoint import CheckpointSnapshot, SnapshotError, WorkspaceSnapshot
from op import Add, Inc, Op, checkpoint, update
from state import canonical_json
from tests.fixtures.durable_programs import Counted
from tests.helpers import sample_repo, sh


def _noted() -> Op[str]:
    yield from update(lines=Add("one"), n=Inc(2))
    yield from checkpoint("noted")
    return "done"


def test_a_journaled_snapshot_reads_as_its_parts_and_writes_back_the_same_bytes(
    tmp_path: Path,
) -> None:
    repo = sample_repo(tmp_path)
    db = str(tmp_path / "r.db")
    done = run(_noted, state=Counted(), db=db, workspace=repo)
    (entry,) = [e for e in open_journal(db).entries(done.run_id) if e.kind == "checkpoint"]
    snap = CheckpointSnapshot.read(entry.result_json)
    assert snap is not None and entry.result_json is not None
    assert canonical_json(snap.to_json()) == entry.result_json
    assert Counted.model_validate(snap.state) == done.state
    assert isinstance(snap.replica, str) and snap.lamport >= 1
    files = snap.files
    assert isinstance(files, WorkspaceSnapshot) and files.workspace == str(repo)
    # the tree it names is the one the workspace's snapshot ref keeps
    ref = f"refs/opdsl/{done.run_id}/{entry.address}"
    assert sh(repo, "rev-parse", f"{ref}^{{tree}}").strip() == files.tree


def test_a_snapshot_from_before_checkpoints_kept_a_world_reads_with_none() -> None:
    old = json.dumps({"state": {"n": 1}, "state_type": None, "replica": "1", "lamport": 4})
    snap = CheckpointSnapshot.read(old)
    assert snap == CheckpointSnapshot(state={"n": 1}, replica="1", lamport=4)
    assert snap is not None and snap.world is None and snap.files is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[1, 2]", "is a JSON object, not list"),
        ('{"lamport": "3"}', "lamport is a whole number, not '3'"),
        ('{"lamport": true}', "lamport is a whole number, not True"),
        ('{"replica": 7}', "replica is text, not int"),
    ],
)
def test_what_is_not_a_snapshot_is_refused_naming_why_and_read_as_none(
    text: str, said: str
) -> None:
    with pytest.raises(SnapshotError, match=said):
        CheckpointSnapshot.from_json(json.loads(text))
    assert CheckpointSnapshot.read(text) is None
    assert CheckpointSnapshot.read("not json") is None and CheckpointSnapshot.read(None) is None


@pytest.mark.parametrize("world", [None, [2], "text", {"tree": ""}, {"tree": 5}, {"other": 1}])
def test_a_world_that_is_not_a_workspace_snapshot_keeps_no_files(world: object) -> None:
    assert CheckpointSnapshot(world=world).files is None


def test_a_workspace_snapshot_without_its_root_keeps_its_tree() -> None:
    snap = CheckpointSnapshot(world={"tree": "abc"})
    assert snap.files == WorkspaceSnapshot(workspace=None, tree="abc")
