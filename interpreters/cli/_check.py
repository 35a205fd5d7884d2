"""``opdsl check``: the replay gate. Every stored run (of the journal, of the programs named, or
of the exported files given) is replayed against the code as it is now, offline and by value
(:mod:`interpreters._checking`), before a change is deployed.

One line for each run that diverges, or is in flight (where it would resume, or that it
diverges before), or cannot be checked; ``--all`` lists the runs that replay the same too. Then
a summary, with each patch's count of runs that take its old code and of runs that hold its
marker (``deprecate_patched`` can replace a ``patched`` none takes the old code of; the call
can go once none holds the marker). The status is 1 when a run diverges or cannot be checked, else 0; nothing is
changed, not even a run that waits or runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from interpreters.cli._command import JSON, Command, Option, UsageError
from interpreters.cli._output import print_json, say_escaped

__all__ = ["CHECK"]


def check(a: argparse.Namespace) -> int:
    from interpreters._checking import (
        Checked,
        check_journal,
        check_runs,
        exported_runs,
        patches,
        summary,
    )

    files = [Path(f) for f in a.files]
    for f in files:
        if not f.is_file():
            raise UsageError(f"{f}: no such file (an exported run, as opdsl export writes it)")
    if a.jobs < 1:
        raise UsageError(f"--jobs {a.jobs}: give a number of processes from 1")

    def shown(c: Checked) -> None:
        if a.json or (c.verdict == "same" and not a.all):
            return
        say_escaped(c.line())
        sys.stdout.flush()
        if not c.ok and c.diff:
            for line in c.diff:
                say_escaped(f"    {line}")

    checked = check_runs(exported_runs(files, a.program), shown) if files else []
    if a.db or not files:
        checked += check_journal(a.db, a.program, jobs=a.jobs, on_checked=shown)
    counts, patched = summary(checked), patches(checked)
    if a.json:
        print_json({"runs": [c.to_json() for c in checked], "summary": counts, "patches": patched})
    else:
        print(_summary_line(counts, len(checked)))
        for name, n in patched.items():
            print(
                f"patched({name!r}): {n['old_code']} run(s) take the old code, "
                f"{n['marker']} hold the marker"
                + (f" (deprecate_patched({name!r}) can replace it)" if not n["old_code"] else "")
            )
    return 0 if all(c.ok for c in checked) else 1


def _summary_line(counts: dict[str, int], total: int) -> str:
    in_flight = counts["resumes"] + counts["diverges-before-resume"]
    parts = [f"{counts['same']} same", f"{counts['diverges']} diverge"]
    if in_flight:
        parts.append(
            f"{in_flight} in flight ({counts['resumes']} would resume, "
            f"{counts['diverges-before-resume']} diverge before their resume point)"
        )
    if counts["error"]:
        parts.append(f"{counts['error']} cannot be checked")
    return f"{total} run(s) checked against the code as it is now: {', '.join(parts)}"


CHECK = Command(
    name="check",
    help="replay every stored run against the code as it is now; fails if one diverges",
    run=check,
    code_from_journal=True,
    options=(
        Option(
            "files",
            nargs="*",
            metavar="EXPORTED.jsonl",
            help="exported runs to check (opdsl export); without: the journal's runs",
        ),
        Option(
            "--program",
            action="append",
            default=[],
            metavar="MODULE:FUNCTION",
            help="check the runs of this program only (again for more); an exported run is "
            "checked only against a program named here",
        ),
        Option("--all", action="store_true", help="list the runs that replay the same too"),
        Option(
            "--jobs",
            type=int,
            default=1,
            metavar="N",
            help="check a journal's runs in N processes (default: 1)",
        ),
        JSON,
    ),
)
