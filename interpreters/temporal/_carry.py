"""A journal as it travels through Temporal: the lines of ``opdsl export`` in one text, its
pieces of content apart (``Carried``), so the payload codec can keep the pieces in the content
store (each once, by hash) and the history holds only what names them.

    carried = carry(journal, run_id)          # the run's export, its pieces apart
    text = whole(carried.text, carried.pieces)   # an ``opdsl export`` file again
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from interpreters.journal._base import Journal
from interpreters.journal._content import piece_refs
from interpreters.journal._portable import FORMAT, Exported, export_run, read_export, run_pieces
from interpreters.temporal._types import Carried

__all__ = ["carry", "read_carried", "split", "whole"]

_PIECE_LINE = '{"piece": '  # how export_run writes a piece's line


def carry(journal: Journal, run_id: str, *, redact: bool = True) -> Carried:
    """Run ``run_id`` of ``journal`` as it travels: its export, the pieces apart.

    ``redact=False``: the lines as the journal holds them, without the export's second pass
    over every text for secrets (what the driver journaled is redacted already): for the
    journal a run carries into its own continue-as-new, whose input holds its arguments
    anyway."""
    if redact:
        return split(export_run(journal, run_id))
    entries = journal.entries(run_id)
    first = json.dumps({"format": FORMAT, "run": journal.run(run_id).model_dump()}, sort_keys=True)
    lines = [first, *(json.dumps({"entry": e.as_dict()}, sort_keys=True) for e in entries)]
    return Carried(text="\n".join(lines) + "\n", pieces=run_pieces(journal, entries))


def split(text: str) -> Carried:
    """An export's text, its piece lines taken out into ``pieces``."""
    if _PIECE_LINE not in text:
        return Carried(text=text)
    kept: list[str] = []
    pieces: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith(_PIECE_LINE):
            try:
                data = json.loads(line)
            except ValueError:
                data = None  # kept as it is: reading the export says what is wrong with it
            value = data.get("piece") if isinstance(data, dict) else None
            if (
                isinstance(value, list)
                and len(value) == 2
                and all(isinstance(v, str) for v in value)
            ):
                pieces[value[0]] = value[1]
                continue
        kept.append(line)
    return Carried(text="\n".join(kept) + "\n", pieces=pieces)


def whole(text: str, pieces: Mapping[str, str]) -> str:
    """The export ``text`` with ``pieces`` written back in as its piece lines (after the run's
    line, each after the pieces it refers to: the order an import checks them in)."""
    if not pieces:
        return text
    parts = split(text)
    given = {**parts.pieces, **pieces}
    lines = parts.text.splitlines()
    out = lines[:1]
    written: set[str] = set()
    seen: set[str] = set()  # a loop of references is written once, and refused on reading
    for h in given:
        if h in written:
            continue
        # depth first: a piece's line after the lines of those it refers to
        stack: list[tuple[str, bool]] = [(h, False)]
        while stack:
            name, ready = stack.pop()
            if name in written or name not in given:
                continue
            if ready:
                written.add(name)
                out.append(json.dumps({"piece": [name, given[name]]}, ensure_ascii=False))
                continue
            if name in seen:
                continue
            seen.add(name)
            stack.append((name, True))
            stack += [(r, False) for r in sorted(piece_refs(given[name])) if r not in written]
    out += lines[1:]
    return "\n".join(out) + "\n"


def read_carried(text: str, pieces: Mapping[str, str], *, source: str) -> Exported:
    """The run, entries and pieces of a carried journal, every line and piece checked (see
    ``journal._portable.read_export``)."""
    return read_export(whole(text, pieces), source=source)
