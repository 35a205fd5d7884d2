"""``opdsl whatif`` and ``opdsl cost``: a stored run under another model.

``whatif RUN --model SPEC [--from CHECKPOINT]`` forks the run at the checkpoint (default: its
first) with the model swapped, runs the fork, and prints where the two part (``opdsl diff``'s
view), how each ended, and the tokens and cost of each after the checkpoint; ``--dry-run``
prices the original's calls after the checkpoint at the model's price instead, calling
nothing. ``cost --model SPEC RUN ...`` prices the recorded token counts of runs at another
model's price. The original runs are never changed.
"""

from __future__ import annotations

import argparse
from typing import Any

from interpreters.cli._command import JSON, NAMED_CODE, Command, Option
from interpreters.cli._output import print_json

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
        print(
            f"{c.run_id}  {c.program}  {_tokens(c)}: recorded {_usd(c.recorded_usd)} ({models}); "
            f"as {a.model}: {_usd(c.priced_usd)}"
        )
    if len(costs) > 1:
        known = [c.priced_usd for c in costs if c.priced_usd is not None]
        recorded = [c.recorded_usd for c in costs if c.recorded_usd is not None]
        print(
            f"{len(costs)} runs: recorded {_usd(sum(recorded) if len(recorded) == len(costs) else None)}; "
            f"as {a.model}: {_usd(sum(known) if len(known) == len(costs) else None)}"
        )
    print(f"note: {TOKENIZER_CAVEAT}")
    return 0


def whatif(a: argparse.Namespace) -> int:
    from interpreters._whatif import TOKENIZER_CAVEAT
    from interpreters._whatif import whatif as what_if

    found = what_if(
        a.run,
        db=a.db,
        model=a.model,
        from_checkpoint=a.from_checkpoint,
        dry_run=a.dry_run,
        accept_changed_code=a.accept_changed_code,
    )
    before, after = found.cost_before, found.cost_after
    if a.json:
        print_json(
            {
                "run_id": a.run,
                "from_checkpoint": found.from_checkpoint,
                "model": a.model,
                "fork": None if found.fork is None else found.fork.run_id,
                "status": None if found.fork is None else found.fork.status,
                "diff": None if found.diff is None else found.diff.as_json(),
                "original": before.to_json(),
                "what_if": after.to_json(),
                "caveat": TOKENIZER_CAVEAT if found.fork is None else None,
            }
        )
        return 0
    cp = found.from_checkpoint
    if found.fork is None:
        print(
            f"what if run {a.run} had used {a.model} after checkpoint {cp!r} (dry run, nothing called):"
        )
        print(f"  recorded: {_tokens(before)}, {_usd(before.recorded_usd)}")
        print(f"  as {a.model}: {_usd(before.priced_usd)}")
        print(f"note: {TOKENIZER_CAVEAT}")
        return 0
    fork = found.fork
    print(f"what if run {a.run} had used {a.model} after checkpoint {cp!r}: run {fork.run_id}")
    if found.diff is not None:
        for line in found.diff.lines():
            print(line)
    print(f"ended:  {found.original.status} -> {fork.status}")
    print(f"after {cp!r}:")
    print(f"  {a.run}: {_tokens(before)}, {_usd(before.recorded_usd)}")
    print(f"  {fork.run_id}: {_tokens(after)}, {_usd(after.recorded_usd)}")
    return 0


WHATIF = Command(
    name="whatif",
    help="fork a run at a checkpoint with another model and show what differs and costs",
    run=whatif,
    code_from_journal=True,
    options=(
        Option("run"),
        Option("--model", required=True, help="the model to fork the run with (a model spec)"),
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
