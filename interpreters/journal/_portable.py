"""Runs as JSONL files (export, import) and the integrity check."""

from __future__ import annotations

import json

from pydantic import ValidationError

from interpreters.journal._base import (
    Entry,
    Journal,
    JournalError,
    RunRecord,
)
from interpreters.runtime._redact import Redactor
from state import canonical_json

# -- portability and checks -------------------------------------------------------------------


def export_run(journal: Journal, run_id: str) -> str:
    """A run as JSONL: its record on the first line, then one entry a line."""
    lines = [json.dumps({"run": journal.run(run_id).model_dump()}, sort_keys=True)]
    lines += [json.dumps({"entry": e.as_dict()}, sort_keys=True) for e in journal.entries(run_id)]
    # a journal written before redaction (or with other secrets about) leaves none in the file
    return Redactor.from_env()("\n".join(lines) + "\n")


def parse_export(text: str, *, source: str = "the file") -> tuple[RunRecord, list[Entry]]:
    """A run and its entries from text :func:`export_run` wrote, every line checked (what
    :func:`import_run` adds, and what a run on another engine carries or is read back as)."""
    run: RunRecord | None = None
    entries: list[Entry] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError("a line must be a JSON object")
            if n == 1:
                run = RunRecord.model_validate(data["run"])
            else:
                entries.append(Entry.from_dict(data["entry"]))
        except (ValueError, KeyError, ValidationError) as exc:
            what = "a run record" if n == 1 else "an entry"
            raise JournalError(
                f"{source}, line {n}: expected {what}: {str(exc).splitlines()[0]}"
            ) from None
    if run is None:
        raise JournalError(f"{source} is empty: expected a run record on line 1")
    for e in entries:
        if e.run_id != run.run_id:
            raise JournalError(
                f"{source}: entry {e.address} belongs to run {e.run_id}, not {run.run_id}"
            )
    problems = _entry_problems(entries)
    if problems:
        raise JournalError(f"{source}: {problems[0]}")
    return run, entries


def import_run(journal: Journal, text: str, *, source: str = "the file") -> RunRecord:
    """Add a run exported by :func:`export_run`; every line is checked before anything is written."""
    run, entries = parse_export(text, source=source)
    # a run from elsewhere names code; it runs only when the user names the program again
    try:
        config = json.loads(run.config_json or "{}")
    except ValueError:
        raise JournalError(f"{source}, line 1: the run's config is not JSON") from None
    if not isinstance(config, dict):
        raise JournalError(f"{source}, line 1: the run's config is not a JSON object")
    run = run.model_copy(
        update={"config_json": canonical_json({**config, "imported_from": source})}
    )
    journal.create_run(run)
    journal.add_entries(entries)
    return run


def _entry_problems(entries: list[Entry]) -> list[str]:
    problems = []
    seqs = sorted(e.seq for e in entries)
    if seqs != list(range(len(seqs))):
        problems.append(f"entry numbers are not 0..{len(seqs) - 1} without gaps: {seqs[:10]}")
    addresses = {e.address for e in entries}
    for e in entries:
        if not all(part.isdigit() for part in e.address.split(".")):
            problems.append(f"address {e.address!r} is malformed")
        for text in (e.effect_json, e.result_json, e.error_json, e.usage_json):
            if text is not None:
                try:
                    json.loads(text)
                except ValueError:
                    problems.append(f"entry {e.address} holds text that is not JSON")
        if e.status == "completed" and e.result_json is None:
            problems.append(f"entry {e.address} is completed without a result")
        parent = e.address.rpartition(".")[0]
        # scope bodies live under the scope's address (a.n), par branches under a.i.n
        if parent and parent not in addresses and parent.rpartition(".")[0] not in addresses:
            problems.append(f"entry {e.address} has no enclosing scope entry")
    return problems


def check_integrity(journal: Journal, run_id: str) -> list[str]:
    """Problems with a run's record (empty when it is sound)."""
    run = journal.run(run_id)
    entries = journal.entries(run_id)
    problems = _entry_problems(entries)
    if run.status == "completed":
        problems += [
            f"entry {e.address} is still started in a completed run"
            for e in entries
            if e.status == "started"
        ]
        if run.result_json is None:
            problems.append("the run is completed but has no result")
    return problems
