"""Runs as JSONL files (export, import) and the integrity check."""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from interpreters._redact import Redactor
from interpreters.journal._base import (
    Entry,
    Journal,
    JournalError,
    RunRecord,
)
from interpreters.journal._content import digest, is_digest, piece_refs, refs_of
from interpreters.journal._seal import SEAL, unsealed
from op import Checkpoint, Emit, Infer, Usage
from state import canonical_json
from state._canonical import lone_path

# -- portability and checks -------------------------------------------------------------------

FORMAT = 2
"""The export's format: 2 carries pieces of content (``journal._content``); 1 had none."""


def export_run(journal: Journal, run_id: str) -> str:
    """A run as JSONL: its record on the first line, then each piece of content its entries
    refer to, once (a piece after those it refers to), then one entry a line."""
    entries = journal.entries(run_id)
    pieces = run_pieces(journal, entries)
    # a journal written before redaction (or with other secrets about) leaves none in the
    # file; a piece whose text changes gets the hash of its new text, everywhere
    redact = Redactor.from_env()
    renamed: dict[str, str] = {}
    record = journal.run(run_id)
    # a seal holds on this user's machine alone: the file carries none
    record = record.model_copy(update={"config_json": unsealed(record.config_json)})
    first = json.dumps({"format": FORMAT, "run": record.model_dump()}, sort_keys=True)
    lines = [_keeping_refs(redact, first, renamed)]
    for h, body in pieces.items():
        text = _keeping_refs(redact, body, renamed)
        new = h if text == body else digest(text)
        if new != h:
            renamed[h] = new
        lines.append(json.dumps({"piece": [new, text]}, ensure_ascii=False))
    lines += [
        _keeping_refs(redact, json.dumps({"entry": e.as_dict()}, sort_keys=True), renamed)
        for e in entries
    ]
    return "\n".join(lines) + "\n"


_REF = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


def _keeping_refs(redact: Redactor, text: str, renamed: Mapping[str, str]) -> str:
    """``text`` with secrets replaced, except in references (a hex secret could match inside
    one); a reference to a renamed piece gets its new name."""
    refs: list[str] = []

    def keep(m: re.Match[str]) -> str:
        refs.append(m.group(0))
        return "\x01"

    held = _REF.sub(keep, text)
    cleaned = redact(held)
    if not refs:
        return cleaned
    parts = cleaned.split("\x01")
    if len(parts) != len(refs) + 1:  # cannot happen: JSON text holds no raw control character
        return redact(text)
    out = [parts[0]]
    for ref, part in zip(refs, parts[1:], strict=True):
        out += (renamed.get(ref, ref), part)
    return "".join(out)


def run_pieces(
    journal: Journal, entries: Iterable[Entry], *, missing_ok: bool = False
) -> dict[str, str]:
    """Every piece the entries refer to, with the pieces those refer to, each once and after
    the pieces it refers to (the order an import checks them in). ``missing_ok``: leave out
    a piece the journal lacks instead of refusing."""
    out: dict[str, str] = {}
    wanted: list[str] = []
    for e in entries:
        wanted += sorted(refs_of(e.kind, e.effect_json, e.result_json))
    stack: list[tuple[str, bool]] = [(h, False) for h in reversed(wanted)]
    bodies: dict[str, str] = {}
    while stack:
        h, ready = stack.pop()
        if h in out:
            continue
        if ready:
            out[h] = bodies[h]
            continue
        if h not in bodies:
            found = journal.content((h,))
            if h not in found:
                if missing_ok:
                    out[h] = ""
                    continue
                raise JournalError(f"piece {h} is missing from the journal")
            bodies[h] = found[h]
        stack.append((h, True))
        stack += [(r, False) for r in sorted(piece_refs(bodies[h])) if r not in out]
    return out


def parse_export(text: str, *, source: str = "the file") -> tuple[RunRecord, list[Entry]]:
    """A run and its entries from text :func:`export_run` wrote (see :func:`read_export`)."""
    exported = read_export(text, source=source)
    return exported.run, exported.entries


@dataclass(frozen=True)
class Exported:
    """A run read from an export: its record, its entries, the pieces they refer to."""

    run: RunRecord
    entries: list[Entry]
    pieces: dict[str, str]


def read_export(text: str, *, source: str = "the file", strict: bool = False) -> Exported:
    """A run, its entries and its pieces from text :func:`export_run` wrote, every line
    checked (what :func:`import_run` adds, and what a run on another engine carries or is
    read back as): each piece's text has the hash it is named by, every reference names a
    piece of the file, and each chain holds as many messages as its entry says. ``strict``
    (a file someone hands us): no lone surrogate in any text, which a run of this machine
    may hold but every command that shows it would fail on."""
    run: RunRecord | None = None
    entries: list[Entry] = []
    pieces: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = _json_of(line, strict)
            if not isinstance(data, dict):
                raise ValueError("a line must be a JSON object")
            if n == 1:
                run = RunRecord.model_validate(data["run"])
            elif "piece" in data:
                h, body = _piece_line(data["piece"], pieces)
                pieces[h] = body
            else:
                entries.append(Entry.from_dict(data["entry"]))
        except (ValueError, KeyError, ValidationError) as exc:
            what = "a run record" if n == 1 else "an entry or a piece"
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
    problems = (
        _record_problems(run, entries, strict)
        or _entry_problems(entries, strict)
        or _reference_problems(entries, pieces)
    )
    if problems:
        raise JournalError(f"{source}: {problems[0]}")
    return Exported(run, entries, pieces)


def _json_of(text: str, strict: bool) -> Any:
    """``text`` read as JSON: a ValueError for anything else, or JSON nested past the
    parser's depth; ``strict``, also for a lone surrogate (``"\\ud800"``: no character,
    and no UTF-8 can write it) in any of its strings."""
    try:
        value = json.loads(text)
        lone = strict and lone_path(value, "$") is not None  # walked, not written again
    except RecursionError:
        raise ValueError("its JSON is nested too deeply") from None
    if lone:
        raise ValueError("it holds a lone surrogate (\\ud800-\\udfff), which is no text")
    return value


def _piece_line(value: Any, known: Mapping[str, str]) -> tuple[str, str]:
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise ValueError("a piece must be [hash, text]")
    h, body = value
    if not is_digest(h):
        raise ValueError(f"{h[:70]!r} is not a piece's hash (64 hex digits)")
    if digest(body) != h:
        raise ValueError(f"piece {h}: its text does not have that hash")
    _json_of(body, False)
    for r in sorted(piece_refs(body)):
        if r not in known:
            raise ValueError(f"piece {h} refers to piece {r}, which comes later or not at all")
    return h, body


def _reference_problems(entries: list[Entry], pieces: Mapping[str, str]) -> list[str]:
    """The first reference of an entry that the pieces cannot answer, if any."""
    lengths: dict[str, int] = {}

    def length(head: str) -> int:
        walk: list[str] = []
        h: Any = head
        while h is not None and h not in lengths:
            if h not in pieces:
                raise ValueError(f"the chain refers to piece {h}, which the file does not hold")
            node = json.loads(pieces[h])
            if not (isinstance(node, list) and len(node) == 2 and isinstance(node[1], dict)):
                raise ValueError(f"piece {h} is not a node of a message chain")
            walk.append(h)
            h = node[0]
        n = 0 if h is None else lengths[h]
        for w in reversed(walk):
            n += 1
            lengths[w] = n
        return n

    for e in entries:
        for r in sorted(refs_of(e.kind, e.effect_json, e.result_json)):
            if r not in pieces:
                return [f"entry {e.address} refers to piece {r}, which the file does not hold"]
        if e.kind != Infer.kind:
            continue
        try:
            chain = json.loads(e.effect_json).get("messages")
            if isinstance(chain, dict):
                head, n = chain.get("$chain"), chain.get("n")
                if (0 if head is None else length(head)) != n:
                    return [f"entry {e.address}: its chain does not hold {n} messages"]
        except (ValueError, AttributeError, RecursionError) as exc:
            return [f"entry {e.address}: {exc}"]
    return []


def import_run(journal: Journal, text: str, *, source: str = "the file") -> RunRecord:
    """Add a run exported by :func:`export_run`; every line is checked before anything is written."""
    exported = read_export(text, source=source, strict=True)
    run, entries = exported.run, exported.entries
    # a run from elsewhere names code; it runs only when the user names the program again
    config = json.loads(run.config_json)  # an object: read_export checked it
    config.pop(SEAL, None)  # whatever it says, an imported run is foreign
    run = run.model_copy(
        update={"config_json": canonical_json({**config, "imported_from": source})}
    )
    journal.put_content(exported.pieces)
    journal.create_run(run)
    try:
        journal.add_entries(entries)
    except BaseException:  # none left half-written: a retry finds no run of that id
        with contextlib.suppress(JournalError):
            journal.delete_run(run.run_id)
        raise
    return run


_PROGRAM = re.compile(r"[A-Za-z_?][\w.]*:[\w.<>]+")
_KIND = re.compile(r"[a-z][a-z_]{0,31}")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_LATEST = 253402300799.0  # 9999-12-31 23:59:59 UTC: a time past it names no moment


def _record_problems(run: RunRecord, entries: list[Entry], strict: bool = False) -> list[str]:
    """What a file someone hands us may hold that no run writes: ids with control
    characters, a program that is not ``module:function``, times out of range, an effect
    that is not an object, a checkpoint or emit whose name is not text, a usage that is not
    one. (Every reader relies on these; a run opdsl wrote always meets them.)"""
    for field in ("run_id", "parent_run"):
        value = getattr(run, field)
        if value is not None and (not value or len(value) > 200 or _CONTROL.search(value)):
            return [f"the run's {field} {value[:60]!r} is empty, too long or holds a control code"]
    if not _PROGRAM.fullmatch(run.program):
        return [f"the run's program {run.program[:60]!r} is not module:function"]
    texts = (
        "config_json",
        "args_json",
        "state_json",
        "result_json",
        "error_json",
        "final_state_json",
    )
    for field in texts:
        value = getattr(run, field)
        try:
            read = None if value is None else _json_of(value, strict)
        except ValueError as exc:
            return [f"the run's {field.removesuffix('_json')} is not JSON text: {exc}"]
        if field == "config_json" and not isinstance(read, dict):
            return ["the run's config is not a JSON object"]
    times = [("the run's created_at", run.created_at), ("the run's finished_at", run.finished_at)]
    for e in entries:
        times += [(f"entry {e.address}'s started_at", e.started_at)]
        times += [(f"entry {e.address}'s finished_at", e.finished_at)]
    for what, t in times:
        if t is not None and not 0.0 <= t <= _LATEST:  # NaN fails this too
            return [f"{what} {t!r} is not a time between 1970 and 9999"]
    for e in entries:
        if not _KIND.fullmatch(e.kind):
            return [f"entry {e.address}'s kind {e.kind[:40]!r} is not an effect's kind"]
        try:
            effect = json.loads(e.effect_json)
            if e.usage_json is not None and json.loads(e.usage_json) is not None:
                Usage.model_validate_json(e.usage_json)
        except (ValueError, ValidationError, RecursionError):
            return [f"entry {e.address}'s effect or usage is malformed"]
        if not isinstance(effect, dict):
            return [f"entry {e.address}'s effect is not a JSON object"]
        if e.kind in (Checkpoint.kind, Emit.kind) and not isinstance(effect.get("name"), str):
            return [f"entry {e.address}: the {e.kind}'s name is not text"]
    return []


def _entry_problems(entries: list[Entry], strict: bool = False) -> list[str]:
    problems = []
    seqs = sorted(e.seq for e in entries)
    if seqs != list(range(len(seqs))):
        problems.append(f"entry numbers are not 0..{len(seqs) - 1} without gaps: {seqs[:10]}")
    addresses = {e.address for e in entries}
    if len(addresses) < len(entries):
        twice = next(a for a, n in Counter(e.address for e in entries).items() if n > 1)
        problems.append(f"address {twice[:40]!r} is given to more than one entry")
    for e in entries:
        if not all(part.isdigit() for part in e.address.split(".")):
            problems.append(f"address {e.address[:40]!r} is malformed")
        for text in (e.effect_json, e.result_json, e.error_json, e.usage_json):
            if text is not None:
                try:
                    _json_of(text, strict)
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


def drop_unreferenced(journal: Journal) -> int:
    """Remove every piece of content no run of ``journal`` refers to (``opdsl gc``, after the
    runs it removes are gone); forks share their parent's pieces, so a piece stays while any
    run needs it. Returns how many pieces went."""
    # one transaction from the scan to the delete: a run written meanwhile in another process
    # that reuses a stored piece (its insert of it does nothing) would lose it
    with journal.alone() as alone:
        stored = alone.content_hashes()
        if not stored:
            return 0
        keep: set[str] = set()
        for r in alone.runs():
            try:
                keep.update(run_pieces(alone, alone.entries(r.run_id), missing_ok=True))
            except (JournalError, ValueError):
                return 0  # a run that cannot be read may need any piece: keep them all
        return alone.delete_content(stored - keep)
