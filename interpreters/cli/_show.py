"""``opdsl show RUN``: a run's header, its timeline (one line an effect), what it spent, its
state's registers and its result; ``--json`` for all of it whole; ``--follow`` to tail it."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from typing import Any

from interpreters.cli._command import JSON, RUN, Command, OnTemporal, Option
from interpreters.cli._output import (
    console,
    json_object,
    loads,
    print_json,
    run_json,
    text,
    when,
)
from interpreters.cli._reading import tail

__all__ = ["SHOW"]


def show(a: argparse.Namespace) -> int:
    from interpreters import open_journal
    from interpreters.runtime._totals import Totals

    if a.follow:
        return tail(a)
    journal = open_journal(a.db, read_only=True)
    r = journal.run(a.run)
    if a.json:
        print_json(_whole(journal, r))
        return 0
    c = console()
    _header(c, r)
    recorded = journal.entries(r.run_id)
    c.print(_timeline(_rows(journal, r.run_id, recorded)), soft_wrap=True)
    totals = Totals.of_entries(recorded)
    c.print(text(totals.line()))
    if totals.price_sources:
        c.print(text(f"priced by {'; '.join(totals.price_sources)}"))
    line = _state_line(r, recorded)
    if line:
        c.print(text(f"state: {line}"))
    if r.result_json is not None:
        c.print(text(f"result: {r.result_json}"))
    return 0


def _whole(journal: Any, r: Any) -> dict[str, Any]:
    """``show --json``: the run and its entries, each infer with the messages it added
    (``earlier`` counts the others), results whole."""
    from interpreters.journal._content import Reader

    entries = []
    reader = Reader(journal.content)
    for e in journal.entries(r.run_id):
        item = e.as_dict()
        for key in ("error_json", "usage_json"):
            item[key.removesuffix("_json")] = loads(item.pop(key))
        del item["effect_json"], item["result_json"]
        item["effect"] = reader.effect(e.kind, e.effect_json)
        item["result"] = reader.result(e.kind, e.result_json)
        item["tool_failed"] = e.tool_failure()
        entries.append(item)
    from interpreters.runtime._totals import Totals

    return {
        **run_json(r),
        "totals": Totals.of_entries(journal.entries(r.run_id)).as_json(),
        "args": loads(r.args_json),
        "foreign": _foreign(r),
        "result": loads(r.result_json),
        "error": loads(r.error_json),
        "entries": entries,
    }


def _header(c: Any, r: Any) -> None:
    done = r.status == "completed"
    c.print(
        text(
            (f"run {r.run_id}", "bold"),
            f" {r.program}  ",
            (r.status, "green" if done else "yellow"),
        )
    )
    c.print(text(f"arguments: {r.args_json}"))
    why = _foreign(r)
    if why is not None:
        c.print(text((f"this run {why}", "yellow")))
    if r.parent_run:
        c.print(text(f"forked from {r.parent_run} at checkpoint {r.fork_checkpoint}"))
    if r.error_json:
        err = json_object(r.error_json)
        said = f"{err.get('type')}: {err.get('message')}" if err else r.error_json
        c.print(text((f"error at address {err.get('address')}: {said}", "red")))


def _foreign(r: Any) -> str | None:
    """Why the run is not sealed as the user's own (``journal/_seal.py``), or None."""
    from interpreters.journal import JournalError
    from interpreters.journal._seal import foreign

    try:
        return foreign(r)
    except JournalError as exc:
        return f"cannot be told to be yours: {exc}"


def _rows(journal: Any, run_id: str, recorded: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The timeline's rows: each entry's, after the earlier attempts of its effect (which a
    resume began again), and a mark where the run was resumed."""
    tries: dict[str, list[Any]] = {}
    for attempt in journal.attempts(run_id):
        tries.setdefault(attempt.address, []).append(attempt)
    resumes = sorted(journal.resumes(run_id))
    rows: list[tuple[Any, ...]] = []
    for e in recorded:
        earlier = tries.get(e.address, [])
        n = len(earlier) + 1
        rows += [_attempt_row(e, attempt, k, n) for k, attempt in enumerate(earlier, 1)]
        while resumes and e.started_at >= resumes[0]:
            rows.append(_resume_row(resumes.pop(0)))
        rows.append(_row(e, attempt=n if earlier else None)[0])
    return rows + [_resume_row(at) for at in resumes]


def _attempt_row(e: Any, attempt: Any, k: int, n: int) -> tuple[Any, ...]:
    """An earlier attempt of ``e``'s effect, which a resume began again: cut off by a crash
    or a stop (its end unknown: at most until the resume), or cancelled."""
    cut = attempt.status == "started"
    end = attempt.finished_at if attempt.finished_at is not None else attempt.again_at
    took = end - attempt.started_at
    duration = f"{'≤' if cut else ''}{took:.2f}s" if 0 <= took < 1e9 else "?"
    how = "the run stopped during it" if cut else str(attempt.status)
    return (
        text(e.address),
        text(e.kind),
        text(("stopped" if cut else str(attempt.status), "red")),
        text(duration),
        text(""),
        text(f"{_what(e)} ", (f"(attempt {k} of {n}: {how})", "red")),
    )


def _resume_row(at: float) -> tuple[Any, ...]:
    """A mark between the rows: the run was resumed here."""
    mark = ("↻", "resumed", when(at), "", "", "")
    return tuple(text((cell, "yellow")) for cell in mark)


def _row(e: Any, *, attempt: int | None = None) -> tuple[tuple[Any, ...], Any]:
    """An entry's line of the timeline, and what it spent (None: nothing recorded);
    ``attempt``: its number, when a resume began its effect again (it is the last)."""
    from op import Checkpoint, Emit, Usage

    try:
        usage = Usage.model_validate_json(e.usage_json) if e.usage_json else None
    except ValueError:
        usage = None  # a journal someone made by hand: shown without it
    took = None if e.finished_at is None else e.finished_at - e.started_at
    duration = "" if took is None else f"{took:.2f}s" if 0 <= took < 1e9 else "?"
    what = _what(e)
    style = {Checkpoint.kind: "magenta", Emit.kind: "yellow"}.get(e.kind, "")
    status, why = text(e.status), text(what)
    failure = e.tool_failure()
    if failure is not None:
        status, why = text(("failed", "red")), text(f"{what}: ", (failure[:80], "red"))
    elif e.status == "failed":
        message = str(json_object(e.error_json).get("message", ""))[:80]
        status, why = text(("failed", "red")), text(f"{what} ", (message, "red"))
    elif _waits(e):
        status = text(("waiting", "yellow"))
    if attempt is not None:
        why.append(f" (attempt {attempt} of {attempt})")
    cells = (
        text(e.address),
        text((e.kind, style)),
        status,
        text(duration),
        text("" if usage is None else str(usage.total_tokens)),
        why,
    )
    return cells, usage


def _waits(e: Any) -> bool:
    """Whether an entry is open only because its run waits for an answer: a question not yet
    answered, or a scope around one (ended, for now, by the wait)."""
    from op import Ask

    if e.kind == Ask.kind:
        return bool(e.status == "started")
    error = json_object(e.error_json)
    return e.status == "cancelled" and str(error.get("type", "")).endswith(":WaitingForAnswer")


def _what(e: Any) -> str:
    """What an entry is about, in a few words: a tool's name, a question, a backend..."""
    from op import Emit, Infer

    effect = json_object(e.effect_json)
    what: Any = effect.get("name") or effect.get("question") or effect.get("backend") or ""
    chain = effect.get("messages")
    if e.kind == Infer.kind and isinstance(chain, dict) and isinstance(chain.get("n"), int):
        what = f"{chain['n']} messages"  # a packed conversation: its length, not its text
    if not isinstance(what, str):
        what = json.dumps(what, ensure_ascii=False, default=str)[:80]
    if e.kind == Emit.kind and effect.get("data") is not None:
        what = f"{what} {json.dumps(effect['data'], ensure_ascii=False, default=str)[:50]}"
    return str(what)


def _timeline(rows: Sequence[tuple[Any, ...]]) -> Any:
    """The timeline: one line a row, its columns padded to their widest cell. A rich
    ``Table`` measures and wraps every cell, about 1 ms a row: seconds for a long run."""
    from rich.text import Text

    head = tuple(
        text((name, "bold")) for name in ("address", "kind", "status", "duration", "tokens", "what")
    )
    widths = [max(cell.cell_len for cell in column) for column in zip(head, *rows, strict=True)]
    lines = []
    for row in (head, *rows):
        line = Text("│ ")
        for i, cell in enumerate(row):
            line.append_text(cell)
            if i < len(row) - 1:
                line.append(" " * (widths[i] - cell.cell_len) + " │ ")
        lines.append(line)
    lines.insert(1, Text("─" * (sum(widths) + 3 * len(widths) - 1)))
    return Text("\n").join([text(("timeline", "italic")), *lines])


_HEXISH = re.compile(r"[0-9a-f-]+")


def _state_line(r: Any, entries: Sequence[Any]) -> str:
    """The run's registers in one line (``fsm=IMPLEMENT pointer=2 implementor=model:qwen3``):
    its final state, or the state its last checkpoint recorded while it is not finished."""
    from interpreters.journal._checkpoint import CheckpointSnapshot
    from op import Checkpoint
    from state._registers import register_values

    raw = r.final_state_json
    if raw is not None:
        try:
            state = json.loads(raw)
        except (ValueError, RecursionError):
            return ""
    else:
        last = [e for e in entries if e.kind == Checkpoint.kind and e.status == "completed"]
        snap = CheckpointSnapshot.read(last[-1].result_json) if last else None
        state = None if snap is None else snap.state
    out = []
    for name, value in register_values(state).items():
        if isinstance(value, str) and len(value) > 24 and _HEXISH.fullmatch(value):
            value = value[:12] + "..."  # a hash, an id: enough to tell them apart
        elif isinstance(value, str) and len(value) > 80:
            value = value[:77] + "..."
        if value is not None and isinstance(value, str | int | float | bool):
            out.append(f"{name}={value}")
    return " ".join(out)


SHOW = Command(
    name="show",
    help="a run's timeline",
    run=show,
    temporal=OnTemporal.READS,
    options=(
        RUN,
        JSON,
        Option("--follow", action="store_true", help="follow the run as it goes (opdsl tail)"),
    ),
)
