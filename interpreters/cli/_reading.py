"""Commands that read runs and change nothing: ``runs``, ``tail``, ``report``, ``diff`` and
``checkpoints`` (``show`` has a module of its own, ``_show.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from interpreters.cli._command import JSON, RUN, Command, OnTemporal, Option, UsageError
from interpreters.cli._output import (
    console,
    print_json,
    run_json,
    text,
    when,
)

__all__ = ["RUNS", "TAIL", "REPORT", "DIFF", "CHECKPOINTS", "tail"]


def runs(a: argparse.Namespace) -> int:
    from rich.table import Table

    from interpreters import open_journal

    journal = open_journal(a.db, read_only=True)
    if a.json:
        print_json([run_json(r) for r in journal.runs()])
        return 0
    table = Table()
    for col in ("run", "program", "status", "started", "parent"):
        table.add_column(col)
    for r in journal.runs():
        parent = r.parent_run or ""
        if r.parent_run and r.fork_checkpoint:
            parent = f"{r.parent_run} @ {r.fork_checkpoint}"
        cells = (r.run_id, r.program, r.status, when(r.created_at), parent)
        table.add_row(*(text(cell) for cell in cells))
    console().print(table)
    return 0


def tail(a: argparse.Namespace) -> int:
    from interpreters import ConsoleSink, open_journal
    from interpreters.observe._follow import WriterGone, follow

    journal = open_journal(a.db, read_only=True)
    try:
        run = follow(journal, a.run, ConsoleSink(console()))
    except WriterGone as exc:
        print(f"opdsl: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 1 if run.status == "failed" else 0


def report(a: argparse.Namespace) -> int:
    from interpreters import open_journal
    from interpreters.observe import render_report
    from interpreters.observe._report import RUN_ID

    journal = open_journal(a.db, read_only=True)
    r = journal.run(a.run)
    if not a.output and not RUN_ID.fullmatch(r.run_id):
        raise UsageError(f"run {r.run_id!r} cannot name a file; say where with -o FILE")
    page = render_report(
        r,
        list(journal.entries(r.run_id)),
        journal.content,
        attempts=journal.attempts(r.run_id),
        resumes=journal.resumes(r.run_id),
    )
    out = Path(a.output or f"{r.run_id}.html")
    out.write_text(page, encoding="utf-8")
    print(f"wrote {out} ({len(page.encode()):,} bytes): open it in a browser")
    return 0


def diff(a: argparse.Namespace) -> int:
    from interpreters import open_journal
    from interpreters.observe._diff import diff_runs

    journal = open_journal(a.db, read_only=True)
    first, second = journal.run(a.run_a), journal.run(a.run_b)
    found = diff_runs(
        first,
        journal.entries(first.run_id),
        second,
        journal.entries(second.run_id),
        journal.content,
    )
    if a.json:
        print_json(found.as_json())
    else:
        from interpreters._shown import visible

        print("\n".join(visible(line) for line in found.lines()))
    return 0 if found.same else 1


def checkpoints(a: argparse.Namespace) -> int:
    from interpreters import open_journal
    from interpreters._durable import checkpoint_labels
    from interpreters._shown import visible
    from interpreters.journal._checkpoint import CheckpointSnapshot

    journal = open_journal(a.db, read_only=True)
    rows = []
    found: list[dict[str, Any]] = []
    for label, e in checkpoint_labels(journal.entries(a.run)):
        snap = CheckpointSnapshot.read(e.result_json)
        kept = None if snap is None else snap.files
        files = f"  files: tree {kept.tree[:12]} in {kept.workspace}" if kept else ""
        rows.append(visible(f"{e.address:>8}  {label}  {e.status}{files}", lines=False))
        found.append(
            {
                "address": e.address,
                "name": label,
                "status": e.status,
                "tree": None if kept is None else kept.tree,
                "workspace": None if kept is None else kept.workspace,
            }
        )
    if a.json:
        print_json(found)
        return 0
    print("\n".join(rows) if rows else visible(f"run {a.run} has no checkpoints", lines=False))
    return 0


RUNS = Command(
    name="runs",
    help="list runs",
    run=runs,
    temporal=OnTemporal.READS,
    options=(JSON,),
)

TAIL = Command(
    name="tail",
    help="follow a run another process is running, until it ends",
    run=tail,
    options=(RUN,),
)

REPORT = Command(
    name="report",
    help="a run as one HTML page: timeline, every effect, totals",
    run=report,
    temporal=OnTemporal.READS,
    options=(RUN, Option("-o", "--output", help="the file to write (default: RUN.html)")),
)

DIFF = Command(
    name="diff",
    help="where two runs part: the first differing effect, and end states",
    run=diff,
    temporal=OnTemporal.READS,
    options=(Option("run_a"), Option("run_b"), JSON),
)

CHECKPOINTS = Command(
    name="checkpoints",
    help="a run's checkpoints",
    run=checkpoints,
    temporal=OnTemporal.READS,
    options=(RUN, JSON),
)
