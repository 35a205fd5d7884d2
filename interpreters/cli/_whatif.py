"""``opdsl whatif`` and ``opdsl cost``: a stored run under another model.

``whatif RUN --model SPEC [--from CHECKPOINT] [--prompt-file FILE]`` forks the run at the
checkpoint (default: its first) with the model swapped, runs the fork, and prints where the
two part (``opdsl diff``'s view), how each ended, and the tokens and cost of each after the checkpoint; ``--dry-run``
prices the original's calls after the checkpoint at the model's price instead, calling
nothing. ``--prompt-file`` sends each model call of the fork the file's text as its system
prompt, in place of the program's. Given several runs (or ``--program M:F``: every finished
run of it, forks left out), one line each and the table's sum: how many ended the same,
where the others first parted, and the cost of each model. ``cost --model SPEC RUN ...``
prices the recorded token counts of runs at another model's price. The original runs are
never changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from interpreters.cli._command import JSON, NAMED_CODE, Command, Option, UsageError
from interpreters.cli._inputs import model_spec
from interpreters.cli._output import print_json, say_escaped

__all__ = ["COST", "WHATIF"]


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def _tokens(cost: Any) -> str:
    u = cost.usage
    cached = f", {u.cached_tokens} cached" if u.cached_tokens else ""
    return f"{cost.calls} call(s), {u.input_tokens} input + {u.output_tokens} output tokens{cached}"


def cost(a: argparse.Namespace) -> int:
    from interpreters._whatif import TOKENIZER_CAVEAT, cost_of, priced_model
    from interpreters.journal import open_journal

    model = priced_model(a.model)
    journal = open_journal(a.db, read_only=True, create=False)
    costs = [cost_of(journal.run(r), journal.entries(r), model) for r in a.runs]
    if a.json:
        print_json({"runs": [c.to_json() for c in costs], "caveat": TOKENIZER_CAVEAT})
        return 0
    for c in costs:
        models = ", ".join(c.recorded_models) or "no model"
        say_escaped(
            f"{c.run_id}  {c.program}  {_tokens(c)}: recorded {_usd(c.recorded_usd)} ({models}); "
            f"as {a.model}: {_usd(c.priced_usd)}"
        )
    if len(costs) > 1:
        known = [c.priced_usd for c in costs if c.priced_usd is not None]
        recorded = [c.recorded_usd for c in costs if c.recorded_usd is not None]
        say_escaped(
            f"{len(costs)} runs: recorded {_usd(sum(recorded) if len(recorded) == len(costs) else None)}; "
            f"as {a.model}: {_usd(sum(known) if len(known) == len(costs) else None)}"
        )
    say_escaped(f"note: {TOKENIZER_CAVEAT}")
    return 0


def _prompt(path: str | None) -> str | None:
    """The text of ``--prompt-file`` (None: none given); a file that cannot be read is the
    user's to fix."""
    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"--prompt-file {path}: cannot read it ({why})") from None


def _runs_of(a: argparse.Namespace) -> list[str]:
    """The runs named, or every finished run of ``--program`` that is not itself a fork, in
    the order they were made."""
    from interpreters.journal import open_journal

    if a.runs and a.program:
        raise UsageError("name the runs to fork or give --program, not both")
    if a.runs:
        return list(a.runs)
    if not a.program:
        raise UsageError(
            "name the runs to fork, or give --program MODULE:FUNCTION to fork every finished "
            "run of it"
        )
    journal = open_journal(a.db, read_only=True, create=False)
    return [
        r.run_id
        for r in journal.runs()
        if r.program == a.program and r.status in ("completed", "failed") and r.parent_run is None
    ]


def whatif(a: argparse.Namespace) -> int:
    from interpreters._whatif import whatif as what_if

    prompt = _prompt(a.prompt_file)
    model_spec(a.model)  # a spec no model is made of is said before a run is looked at
    runs = _runs_of(a)
    if not runs:
        print(f"opdsl: no finished run of {a.program} in the journal", file=sys.stderr)
        return 1
    found = [
        what_if(
            run_id,
            db=a.db,
            model=a.model,
            from_checkpoint=a.from_checkpoint,
            dry_run=a.dry_run,
            accept_changed_code=a.accept_changed_code,
            system_prompt=prompt,
        )
        for run_id in runs
    ]
    if a.json:
        shown = [_as_json(a, w) for w in found]
        print_json(shown[0] if len(shown) == 1 else {"runs": shown, "summary": _totals(found)})
    elif len(found) == 1:
        _one(a, found[0])
    else:
        _table(a, found)
    return 0


def _as_json(a: argparse.Namespace, found: Any) -> dict[str, Any]:
    from interpreters._whatif import TOKENIZER_CAVEAT

    return {
        "run_id": found.original.run_id,
        "from_checkpoint": found.from_checkpoint,
        "model": a.model,
        "prompt_file": a.prompt_file,
        "fork": None if found.fork is None else found.fork.run_id,
        "status": None if found.fork is None else found.fork.status,
        "ended_the_same": found.ended_the_same,
        "diff": None if found.diff is None else found.diff.as_json(),
        "original": found.cost_before.to_json(),
        "what_if": found.cost_after.to_json(),
        "caveat": TOKENIZER_CAVEAT if found.fork is None else None,
    }


def _one(a: argparse.Namespace, found: Any) -> None:
    from interpreters._whatif import TOKENIZER_CAVEAT

    before, after, cp = found.cost_before, found.cost_after, found.from_checkpoint
    run_id = found.original.run_id
    if found.fork is None:
        say_escaped(
            f"what if run {run_id} had used {a.model} after checkpoint {cp!r} (dry run, nothing called):"
        )
        say_escaped(f"  recorded: {_tokens(before)}, {_usd(before.recorded_usd)}")
        say_escaped(f"  as {a.model}: {_usd(before.priced_usd)}")
        say_escaped(f"note: {TOKENIZER_CAVEAT}")
        return
    fork = found.fork
    say_escaped(
        f"what if run {run_id} had used {a.model}{_prompted(a)} after checkpoint {cp!r}: "
        f"run {fork.run_id}"
    )
    if found.diff is not None:
        for line in found.diff.lines():
            say_escaped(line)
    say_escaped(f"ended:  {found.original.status} -> {fork.status}")
    say_escaped(f"after {cp!r}:")
    say_escaped(f"  {run_id}: {_tokens(before)}, {_usd(before.recorded_usd)}")
    say_escaped(f"  {fork.run_id}: {_tokens(after)}, {_usd(after.recorded_usd)}")


def _prompted(a: argparse.Namespace) -> str:
    return "" if a.prompt_file is None else f" and the system prompt of {a.prompt_file}"


def _sum(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _totals(found: list[Any]) -> dict[str, Any]:
    dry = found[0].fork is None
    parted: dict[str, int] = {}
    for w in found:
        if w.diff is not None and w.diff.address is not None:
            parted[w.diff.address] = parted.get(w.diff.address, 0) + 1
    return {
        "runs": len(found),
        "ended_the_same": None if dry else sum(1 for w in found if w.ended_the_same),
        "first_parted_at": parted,
        "original_usd": _sum([w.cost_before.recorded_usd for w in found]),
        "what_if_usd": _sum(
            [w.cost_before.priced_usd if dry else w.cost_after.recorded_usd for w in found]
        ),
    }


def _table(a: argparse.Namespace, found: list[Any]) -> None:
    from interpreters._whatif import TOKENIZER_CAVEAT

    dry = found[0].fork is None
    for w in found:
        run_id, before = w.original.run_id, w.cost_before
        new = before.priced_usd if dry else w.cost_after.recorded_usd
        if dry:
            what = f"{before.calls} call(s) after {w.from_checkpoint!r}"
        elif w.ended_the_same:
            what = f"run {w.fork.run_id} ended the same ({w.forked.status})"
        else:
            where = (
                "" if w.diff is None or w.diff.address is None else f", parting at {w.diff.address}"
            )
            what = f"run {w.fork.run_id} ended otherwise ({w.original.status} -> {w.forked.status}{where})"
        say_escaped(f"{run_id}  {what}; {_usd(before.recorded_usd)} -> {_usd(new)}")
    totals = _totals(found)
    parted = ", ".join(f"{at} ({n})" for at, n in sorted(totals["first_parted_at"].items()))
    same = "" if dry else f"{totals['ended_the_same']} ended the same; "
    say_escaped(
        f"{len(found)} runs with {a.model}{_prompted(a)}{' (dry run, nothing called)' if dry else ''}: {same}"
        f"first parting at: {parted or 'nowhere'}; cost after the checkpoint: "
        f"{_usd(totals['original_usd'])} as recorded, {_usd(totals['what_if_usd'])} with {a.model}"
    )
    if dry:
        say_escaped(f"note: {TOKENIZER_CAVEAT}")


WHATIF = Command(
    name="whatif",
    help="fork a run at a checkpoint with another model and show what differs and costs",
    run=whatif,
    code_from_journal=True,
    options=(
        Option("runs", nargs="*", metavar="RUN", help="the run (or runs) to fork (or --program)"),
        Option(
            "--program",
            metavar="MODULE:FUNCTION",
            help="fork every finished run of this program (runs that are forks left out)",
        ),
        Option("--model", required=True, help="the model to fork the run with (a model spec)"),
        Option(
            "--prompt-file",
            metavar="FILE",
            help="send every model call of the fork this file's text as its system prompt, in "
            "place of the program's system messages (or first, where it wrote none); the "
            "journal keeps each infer as the program asked for it",
        ),
        Option(
            "--from",
            dest="from_checkpoint",
            help="the checkpoint to fork at (NAME or NAME#k; default: the run's first)",
        ),
        Option(
            "--dry-run",
            action="store_true",
            help="call nothing: price the run's calls after the checkpoint at the model's price",
        ),
        NAMED_CODE[2],
        JSON,
    ),
)

COST = Command(
    name="cost",
    help="price stored runs' recorded tokens at another model's price (calls nothing)",
    run=cost,
    options=(
        Option("runs", nargs="+", metavar="RUN"),
        Option("--model", required=True, help="the model whose price to use (a model spec)"),
        JSON,
    ),
)
