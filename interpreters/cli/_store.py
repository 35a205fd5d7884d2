"""Commands that move runs in and out of a journal and vouch for them: ``export``,
``import``, ``trust`` and ``gc``."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from interpreters.cli._command import RUN, Command, OnTemporal, Option, UsageError

__all__ = ["EXPORT", "GC", "IMPORT", "TRUST"]


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
            f"folder until you give it again to resume or replay it: {_named(record)}",
            lines=False,
        )
    )
    return 0


def trust(a: argparse.Namespace) -> int:
    """Seal runs of a journal as the user's own, saying what each names."""
    from interpreters import open_journal
    from interpreters._shown import visible
    from interpreters.journal._seal import foreign, vouch_for

    journal = open_journal(a.db, create=False)
    if a.all and a.runs:
        raise UsageError("trust: name runs or give --all, not both")
    if not a.all and not a.runs:  # what would be vouched for, and nothing sealed
        left = [r for r in journal.runs() if foreign(r)]
        for record in left:
            print(visible(f"run {record.run_id} names {_named(record, mcp=True)}", lines=False))
        print(
            f"{len(left)} run(s) of this journal are not sealed as yours; vouch for those you "
            "know with opdsl trust RUN... (or --all)"
        )
        return 0
    runs = [r.run_id for r in journal.runs() if foreign(r)] if a.all else a.runs
    sealed = {r.run_id: r for r in vouch_for(journal, runs)}
    for run_id in dict.fromkeys(runs):
        now = sealed.get(run_id)
        if now is None:
            print(visible(f"run {run_id} is sealed as yours already", lines=False))
        else:
            said = f"sealed run {run_id} as yours; it runs with {_named(now, mcp=True)}"
            print(visible(said, lines=False))
    if not runs:
        print("every run of this journal is sealed as yours already")
    return 0


def _named(record: Any, *, mcp: bool = False) -> str:
    """What a run names, as the options that give it again: shell-quoted, a model's
    credentials never shown (``mcp``: its MCP servers' commands and URLs too)."""
    from interpreters.models import redact_spec

    config = json.loads(record.config_json or "{}")
    named = [f"--program {shlex.quote(record.program)}"]
    for option, key in (("tools", "tools"), ("model", "model"), ("workspace", "workspace")):
        value = config.get(key)
        for v in value if isinstance(value, list) else [value] if value else []:
            shown = redact_spec(str(v)) if option == "model" else str(v)
            named.append(f"--{option} {shlex.quote(shown)}")
    if record.state_json is not None and isinstance(config.get("state_type"), str):
        named.append(f"--state {shlex.quote(config['state_type'])}")
    servers = config.get("mcp") if mcp else None
    for name, entry in servers.items() if isinstance(servers, dict) else ():
        named.append(_mcp_named(str(name), entry))
    return " ".join(named)


def _mcp_named(name: str, entry: object) -> str:
    """The ``--mcp`` option that gives a recorded server again: the server a resume would
    start from the record (its URL where it has one, the variables it is handed), or why it
    starts none."""
    from interpreters.tools._mcp import MCPError, MCPServer

    try:
        server = MCPServer.from_json(name, entry.get("server") if isinstance(entry, dict) else None)
    except MCPError as exc:
        return f"(no MCP server is started from the record: {exc})"
    opts = [f"env={v}" for v in server.env]
    if server.prefix is not None:
        opts.append(f"prefix={server.prefix}")
    if server.timeout != 60.0:
        opts.append(f"timeout={server.timeout:g}")
    where = server.url if server.url is not None else shlex.join(server.argv)
    said = f"{name}[{','.join(opts)}]={where}" if opts else f"{name}={where}"
    return f"--mcp {shlex.quote(said)}"


def gc(a: argparse.Namespace) -> int:
    """Remove the runs by the rules of :mod:`interpreters._gc`, a line for each; with
    ``--temporal``, the content store's pieces no history on the server names."""
    from typing import assert_never

    if a.temporal:
        return _gc_on_temporal(a)
    if not a.runs:
        raise UsageError(
            "gc: name the runs to remove (or --temporal HOST:PORT to collect the content "
            "store of the runs there)"
        )
    if a.grace is not None:
        raise UsageError("gc: --grace is for --temporal (a journal's gc removes at once)")

    from interpreters import open_journal
    from interpreters._gc import ContentDropped, Removed, SnapshotsLeft, remove_runs

    left = 0
    for outcome in remove_runs(open_journal(a.db, create=False), a.runs):
        match outcome:
            case Removed(run_id, dropped, kept, held_by) if held_by is not None:
                print(
                    f"removed run {run_id}; kept its {kept} workspace snapshot(s): the journal "
                    f"that made it, {held_by}, still holds it"
                )
            case Removed(run_id, dropped, kept):
                note = f", kept {kept} that other runs still need" if kept else ""
                print(f"removed run {run_id} and {dropped} workspace snapshot(s){note}")
            case SnapshotsLeft(run_id, root, dropped, exc):
                reason = " ".join(str(exc).split())[:300]
                print(
                    f"opdsl: run {run_id}: its workspace snapshots in {root} were left "
                    f"({dropped} removed; {type(exc).__name__}: {reason}); the run is kept, "
                    f"gc it again once the repository is sound",
                    file=sys.stderr,
                )
                left += 1
            case ContentDropped(pieces):
                print(f"removed {pieces} piece(s) of content no remaining run refers to")
            case _:
                assert_never(outcome)
    return 1 if left else 0


def _gc_on_temporal(a: argparse.Namespace) -> int:
    """Collect the content store that ``OPDSL_TEMPORAL_CONTENT`` names: the runs on Temporal
    are removed by the namespace's retention, never by opdsl."""
    import asyncio

    from interpreters.temporal import collect_garbage, connect

    if a.runs:
        raise UsageError(
            "gc --temporal collects the content store and removes no run (Temporal removes "
            "a closed run's history when its retention passes); name no run"
        )
    grace = 3600.0 if a.grace is None else a.grace
    if grace < 0:
        raise UsageError(f"gc: --grace must be 0 or more seconds, not {grace:g}")

    async def go() -> tuple[int, int]:
        return await collect_garbage(await connect(a.temporal), grace_seconds=grace)

    kept, removed = asyncio.run(go())
    print(
        f"removed {removed} piece(s) of content no run on {a.temporal} names; kept {kept} "
        f"(those stored in the last {grace:g} s among them)"
    )
    return 0


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

TRUST = Command(
    name="trust",
    help="vouch for runs of a journal you know (yours from an earlier opdsl, or your other "
    "machine): they resume and replay with the code, model and folders they name",
    run=trust,
    options=(
        Option("runs", nargs="*"),
        Option("--all", action="store_true", help="every run not sealed as yours"),
    ),
)

GC = Command(
    name="gc",
    help="remove finished runs and their workspace snapshots",
    run=gc,
    temporal=OnTemporal.READS,
    options=(
        Option("runs", nargs="*"),
        Option(
            "--grace",
            type=float,
            metavar="SECONDS",
            help="with --temporal: keep what was stored this recently (default: 3600)",
        ),
    ),
)
