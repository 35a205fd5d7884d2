"""Commands that move runs in and out of a journal: ``export``, ``import`` and ``gc``."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from interpreters.cli._command import RUN, Command, OnTemporal, Option, UsageError

__all__ = ["EXPORT", "IMPORT", "GC"]


def export(a: argparse.Namespace) -> int:
    from interpreters import export_run, open_journal

    written = export_run(open_journal(a.db, read_only=True), a.run)
    if a.output:
        Path(a.output).write_text(written, encoding="utf-8")
    else:
        sys.stdout.write(written)
    return 0


def import_(a: argparse.Namespace) -> int:
    from interpreters import import_run, open_journal
    from interpreters._shown import visible

    try:
        read = Path(a.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {a.file}: {exc}") from None
    record = import_run(open_journal(a.db), read, source=a.file)
    print(
        visible(
            f"imported run {record.run_id}; nothing it names runs, gets a key or changes a "
            f"folder until you give it again to resume or replay it: {_named(record)}"
        )
    )
    return 0


def _named(record: Any) -> str:
    """What an imported run names, as the options that give it again: shell-quoted, a
    model's credentials never shown."""
    from interpreters.models import redact_spec

    config = json.loads(record.config_json or "{}")
    named = [f"--program {shlex.quote(record.program)}"]
    for option, key in (("tools", "tools"), ("model", "model"), ("workspace", "workspace")):
        value = config.get(key)
        for v in value if isinstance(value, list) else [value] if value else []:
            shown = redact_spec(str(v)) if option == "model" else str(v)
            named.append(f"--{option} {shlex.quote(shown)}")
    if record.state_json is not None:
        named.append(f"--state {shlex.quote(str(config.get('state_type')))}")
    return " ".join(named)


def gc(a: argparse.Namespace) -> int:
    from interpreters import SqliteJournal, Workspace, open_journal
    from interpreters.journal import drop_unreferenced
    from interpreters.journal._status import can_remove

    journal = open_journal(a.db, create=False)
    for run_id in a.runs:  # check them all before removing any
        record = journal.run(run_id)
        if not can_remove(record.status):
            what = (
                "is waiting for an answer"
                if record.status == "waiting"
                else "is running (or crashed)"
            )
            raise UsageError(
                f"run {run_id} {what}; only finished runs are removed (answer, resume or let it end first)"
            )
    gone = set(a.runs)
    # trees that runs kept still name at their checkpoints (a fork copies its parent's): kept
    needed: set[str] = set()
    for other in journal.runs():
        if other.run_id not in gone:
            needed |= _checkpoint_trees(journal.entries(other.run_id))
    left = 0
    for run_id in dict.fromkeys(a.runs):
        record = journal.run(run_id)
        root = _own_workspace(record.config_json)
        dropped = kept = 0
        if root is not None:
            try:
                ws = Workspace(root)
                for name, tree in ws.snapshots(f"{run_id}/").items():
                    if tree in needed:
                        kept += 1
                    else:
                        dropped += ws.drop_snapshot(name)
            except Exception as exc:  # one run's repository never stops the others
                reason = " ".join(str(exc).split())[:300]
                print(
                    f"opdsl: run {run_id}: its workspace snapshots in {root} were left "
                    f"({dropped} removed; {type(exc).__name__}: {reason}); the run is kept, "
                    f"gc it again once the repository is sound",
                    file=sys.stderr,
                )
                left += 1
                continue
        journal.delete_run(run_id)
        note = f", kept {kept} that other runs still need" if kept else ""
        print(f"removed run {run_id} and {dropped} workspace snapshot(s){note}")
    pieces = drop_unreferenced(journal)  # content only the removed runs held
    if pieces:
        print(f"removed {pieces} piece(s) of content no remaining run refers to")
    if isinstance(journal, SqliteJournal):
        journal.vacuum()  # give the space back
    return 1 if left else 0


def _checkpoint_trees(entries: Sequence[Any]) -> set[str]:
    """The snapshot trees a run's checkpoints name (a malformed result names none)."""
    out = set()
    for e in entries:
        if e.kind != "checkpoint" or not e.result_json:
            continue
        try:
            result = json.loads(e.result_json)
        except ValueError:
            continue
        world = result.get("world") if isinstance(result, dict) else None
        tree = world.get("tree") if isinstance(world, dict) else None
        if isinstance(tree, str) and tree:
            out.add(tree)
    return out


def _own_workspace(config_json: str | None) -> Path | None:
    """The workspace a run of this journal snapshotted, whose refs gc may remove; never one a
    run imported from a file names (its file chose that folder, not this journal's opdsl)."""
    try:
        config = json.loads(config_json or "{}")
    except ValueError:
        return None
    if not isinstance(config, dict) or config.get("imported_from"):
        return None
    root = config.get("workspace")
    if not isinstance(root, str) or not root or not Path(root).is_dir():
        return None
    return Path(root)


EXPORT = Command(
    name="export",
    help="write a run as JSONL",
    run=export,
    temporal=OnTemporal.READS,
    options=(RUN, Option("-o", "--output")),
)

IMPORT = Command(
    name="import",
    help="add a run from a JSONL file",
    run=import_,
    options=(Option("file"),),
)

GC = Command(
    name="gc",
    help="remove finished runs and their workspace snapshots",
    run=gc,
    options=(Option("runs", nargs="+"),),
)
