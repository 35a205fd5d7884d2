"""Removing finished runs from a journal, with the workspace snapshots only they need.

The rules (``opdsl gc RUN...`` prints what they did):

1. Only runs whose status allows it are removed (:func:`~interpreters.journal._status.can_remove`:
   finished runs); every run named is checked before any is removed.
2. A removed run's snapshot refs (``refs/opdsl/RUN/...``) are dropped in its own workspace:
   the one its config names, never one a run imported from a file names (that file chose
   the folder, not this journal's opdsl). They are kept when the journal file that made the
   run (its config's ``journal``) is another file that still holds it: this one is a copy,
   and the original still names them (:func:`held_elsewhere`).
3. A snapshot whose tree a kept run's checkpoint still names is kept (a fork's checkpoints
   name its parent's trees).
4. A run whose workspace cannot be cleaned is kept, and said; the others go on.
5. Content that only removed runs referred to goes with them; a SQLite file gives its space
   back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from interpreters.journal._base import Entry, Journal, JournalError, RunRecord
from interpreters.journal._checkpoint import CheckpointSnapshot
from interpreters.journal._seal import FOREIGN, config_of
from op import Checkpoint, OpdslError

__all__ = [
    "ContentDropped",
    "NotRemovable",
    "Removed",
    "SnapshotsLeft",
    "checkpoint_trees",
    "check_removable",
    "held_elsewhere",
    "own_workspace",
    "remove_runs",
    "trees_in_use",
]


class NotRemovable(OpdslError):
    """A run named for removal has not finished."""


@dataclass(frozen=True, slots=True)
class Removed:
    """A run removed, with ``dropped`` snapshots; ``kept`` are ones other runs still need, or
    all of its own when ``held_by`` (the journal file that made the run, which still holds
    it) names them."""

    run_id: str
    dropped: int
    kept: int
    held_by: Path | None = None


@dataclass(frozen=True, slots=True)
class SnapshotsLeft:
    """A run kept because its workspace's snapshots could not be removed (``dropped`` were)."""

    run_id: str
    root: Path
    dropped: int
    error: Exception


@dataclass(frozen=True, slots=True)
class ContentDropped:
    """Pieces of content no remaining run refers to, removed."""

    pieces: int


def check_removable(journal: Journal, run_ids: Iterable[str]) -> None:
    """Every run named has finished, or a :class:`NotRemovable` naming the first that has not."""
    from interpreters.journal._status import can_remove

    for run_id in run_ids:
        record = journal.run(run_id)
        if not can_remove(record.status):
            what = (
                "is waiting for an answer"
                if record.status == "waiting"
                else "is running (or crashed)"
            )
            raise NotRemovable(
                f"run {run_id} {what}; only finished runs are removed (answer, resume or let it end first)"
            )


def checkpoint_trees(entries: Iterable[Entry]) -> set[str]:
    """The snapshot trees a run's checkpoints name (a malformed result names none)."""
    out = set()
    for e in entries:
        if e.kind != Checkpoint.kind:
            continue
        snap = CheckpointSnapshot.read(e.result_json)
        files = None if snap is None else snap.files
        if files is not None:
            out.add(files.tree)
    return out


def trees_in_use(journal: Journal, removing: set[str]) -> set[str]:
    """The trees that the runs not being removed name at their checkpoints: kept."""
    needed: set[str] = set()
    for other in journal.runs():
        if other.run_id not in removing:
            needed |= checkpoint_trees(journal.entries(other.run_id))
    return needed


def own_workspace(record: RunRecord) -> Path | None:
    """The workspace a run of this journal snapshotted, whose refs gc may remove; never one a
    foreign run names (imported, or not sealed as the user's: its file chose that folder, not
    the user's opdsl)."""
    try:
        config = config_of(record)
    except JournalError:
        return None
    if config.get(FOREIGN):
        return None
    root = config.get("workspace")
    if not isinstance(root, str) or not root or not Path(root).is_dir():
        return None
    return Path(root)


def remove_runs(
    journal: Journal, run_ids: Sequence[str]
) -> Iterator[Removed | SnapshotsLeft | ContentDropped]:
    """Remove the runs by the rules above, saying what happened to each as it happens, then
    what content went (if any). Nothing is removed unless every run may be."""
    from interpreters.journal import SqliteJournal, drop_unreferenced

    check_removable(journal, run_ids)
    needed = trees_in_use(journal, set(run_ids))
    originals: dict[str, Journal | None] = {}  # the files runs were made in, opened once
    try:
        for run_id in dict.fromkeys(run_ids):
            record = journal.run(run_id)
            root = own_workspace(record)
            held_by = None if root is None else held_elsewhere(journal, record, originals)
            if root is None:
                outcome: Removed | SnapshotsLeft = Removed(run_id, 0, 0)
            elif held_by is None:
                outcome = _drop_snapshots(run_id, root, needed)
            else:
                outcome = _keep_snapshots(run_id, root, held_by)
            if isinstance(outcome, Removed):
                journal.delete_run(run_id)
            yield outcome
    finally:
        for original in originals.values():
            if original is not None:
                original.close()
    pieces = drop_unreferenced(journal)  # content only the removed runs held
    if pieces:
        yield ContentDropped(pieces)
    if isinstance(journal, SqliteJournal):
        journal.vacuum()  # give the space back


def held_elsewhere(
    journal: Journal, record: RunRecord, opened: dict[str, Journal | None] | None = None
) -> Path | None:
    """The journal file that made the run ``record`` when it is not ``journal``'s own file
    and still holds that run (the same one: made by the same program at the same time):
    ``journal`` is a copy of it, whose runs' snapshots the original still names. None when
    the run recorded no file (made before opdsl recorded it, or in no file), the file is
    this one (by a path through a link), gone, or cannot be read. ``opened``: the files
    looked at so far, each opened once for all the runs of one gc (the caller closes them)."""
    try:
        maker = config_of(record).get("journal")
    except JournalError:
        return None
    here = getattr(journal, "path", None)
    if not isinstance(maker, str) or not maker or not isinstance(here, Path):
        return None
    cache: dict[str, Journal | None] = {} if opened is None else opened
    if maker not in cache:
        cache[maker] = _other_file(Path(maker), here)
    original = cache[maker]
    if original is None:
        return None
    try:
        held = original.run(record.run_id)
    except JournalError:  # not there (removed from it too), or unreadable
        return None
    finally:
        if opened is None:
            original.close()
    same = (held.program, held.created_at) == (record.program, record.created_at)
    return Path(maker) if same else None


def _other_file(other: Path, here: Path) -> Journal | None:
    """The journal at ``other``, read-only, unless it is the file at ``here``, gone, or no
    journal."""
    from interpreters.journal import SqliteJournal

    try:
        if not other.is_file() or os.path.samefile(other, here):
            return None
        return SqliteJournal(other, read_only=True, create=False)
    except (OSError, JournalError):
        return None


def _keep_snapshots(run_id: str, root: Path, held_by: Path) -> Removed | SnapshotsLeft:
    """The run's snapshots, every one kept: the journal ``held_by`` still names them."""
    from interpreters.tools import Workspace

    try:
        kept = len(Workspace(root).snapshots(f"{run_id}/"))
    except Exception as exc:  # one run's repository never stops the others
        return SnapshotsLeft(run_id, root, 0, exc)
    return Removed(run_id, 0, kept, held_by)


def _drop_snapshots(run_id: str, root: Path, needed: set[str]) -> Removed | SnapshotsLeft:
    from interpreters.tools import Workspace

    dropped = kept = 0
    try:
        ws = Workspace(root)
        for name, tree in ws.snapshots(f"{run_id}/").items():
            if tree in needed:
                kept += 1
            else:
                dropped += ws.drop_snapshot(name)
    except Exception as exc:  # one run's repository never stops the others
        return SnapshotsLeft(run_id, root, dropped, exc)
    return Removed(run_id, dropped, kept)
