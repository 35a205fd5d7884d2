"""The ``opdsl`` command (also ``python -m interpreters``).

Wrong input (an unknown run, checkpoint or program, a malformed ``--arg``, a missing or
corrupt database) prints one line, ``opdsl: error: ...``, and exits with status 2. A run that
fails exits with 1; a replay that diverges prints its report and exits with 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["main"]


class UsageError(Exception):
    """Bad command-line input."""


_STARTED: list[tuple[str, str | None]] = []
"""(run id, journal) of the runs this command started or continued, for a Ctrl-C message."""


def _sinks(a: argparse.Namespace) -> list[Any]:
    """The live console (unless --quiet), and a note of which run is going."""
    from interpreters import ConsoleSink
    from op import RunStarted

    def note(event: Any) -> None:
        if isinstance(event, RunStarted):
            _STARTED.append((event.run_id, a.db))

    return [note] if a.quiet else [note, ConsoleSink(_console())]


def _parse_args(pairs: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"--arg {pair!r}: expected NAME=VALUE, NAME a Python identifier")
        if name in out:
            raise UsageError(f"--arg {name} is given twice")
        try:
            out[name] = json.loads(raw)
        except RecursionError:
            raise UsageError(f"--arg {name}: the JSON value is nested too deeply") from None
        except ValueError:
            out[name] = raw  # not JSON: the text itself
    return out


def _load_tools(refs: Sequence[str]) -> list[Any]:
    from interpreters._durable import ProgramNotFound, load_tools

    try:
        return load_tools(refs)
    except ProgramNotFound as exc:
        raise UsageError(f"--tools: {exc}") from None


def _workspace(path: str | None) -> str | None:
    if path is not None and not Path(path).is_dir():
        what = "is not a folder" if Path(path).exists() else "does not exist"
        raise UsageError(f"--workspace {path}: {what}")
    return path


def _console() -> Any:
    from rich.console import Console

    # piped into another program: no wrapping, no colour codes
    piped = not sys.stdout.isatty()
    return Console(highlight=False, width=100_000 if piped else None, no_color=piped or None)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _when(t: float | None) -> str:
    if t is None:
        return ""
    try:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):  # a journal someone made by hand
        return f"(time {t!r} is out of range)"


def _text(*parts: object) -> Any:
    """A line for rich built from run text: each part is text, or a (text, style) pair. Run
    text is never read as markup, and its control characters are shown escaped."""
    from rich.text import Text

    from interpreters._shown import visible

    out = Text()
    for part in parts:
        if isinstance(part, tuple):
            out.append(visible(part[0], lines=False), style=str(part[1]))
        else:
            out.append(visible(part, lines=False))
    return out


def _timeline(rows: Sequence[tuple[Any, ...]]) -> Any:
    """``show``'s timeline: one line a row, its columns padded to their widest cell. A rich
    ``Table`` measures and wraps every cell, about 1 ms a row: seconds for a long run."""
    from rich.text import Text

    head = tuple(
        _text((name, "bold"))
        for name in ("address", "kind", "status", "duration", "tokens", "what")
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
    return Text("\n").join([_text(("timeline", "italic")), *lines])


def _object(text: str | None) -> dict[str, Any]:
    """Recorded JSON text as an object (anything else, or text that is not JSON: empty)."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def cmd_run(a: argparse.Namespace) -> int:
    from interpreters import dry_run, load_program, run
    from interpreters._durable import load_object
    from state import CRDTModel

    program = load_program(a.program)
    kwargs = _parse_args(a.arg)
    tools = _load_tools(a.tools)
    state = None
    if a.state:
        cls = load_object(a.state, "state type")
        if not (isinstance(cls, type) and issubclass(cls, CRDTModel)):
            raise UsageError(f"--state {a.state!r} is not a CRDTModel class")
        state = cls()
    _check_call(program, a.program, kwargs)
    if a.temporal:
        if a.tools or a.model or a.workspace or a.dry_run:
            raise UsageError(
                "with --temporal the workers hold the tools, model and workspace "
                "(opdsl worker --tools/--model/--workspace); --dry-run runs locally"
            )
        from interpreters.temporal import start_run

        return _on_temporal(
            a,
            lambda client: start_run(
                client,
                a.program,
                task_queue=a.task_queue,
                kwargs=kwargs,
                state=state,
                seed=a.seed,
            ),
        )
    workspace = _workspace(a.workspace)
    if a.dry_run:
        plan = dry_run(
            program, model=a.model, tools=tools, state=state, kwargs=kwargs, workspace=workspace
        )
        print(plan.render())
        return 0 if plan.status == "completed" else 1
    sinks = _sinks(a)
    result = run(
        program,
        model=a.model,
        tools=tools,
        state=state,
        db=a.db,
        on_event=sinks,
        kwargs=kwargs,
        seed=a.seed,
        tool_refs=a.tools or None,
        workspace=workspace,
    )
    return _report(result)


def _on_temporal(a: argparse.Namespace, start: Callable[[Any], Any]) -> int:
    """Start a run on Temporal (``start(client)`` gives its handle), say its id, and wait for it
    unless ``--detach``."""
    import asyncio

    from interpreters.temporal import connect, outcome

    async def go() -> int:
        client = await connect(a.temporal)
        handle = await start(client)
        print(f"run {handle.id} started on Temporal at {a.temporal} (task queue {a.task_queue})")
        if a.detach:
            print(f"see it with: opdsl show {handle.id} --temporal {a.temporal}")
            return 0
        ended = await outcome(handle)
        return _report_outcome(ended)

    return asyncio.run(go())


def _report_outcome(ended: Any) -> int:
    """How a run on Temporal ended, as :func:`_report` says it for a local run."""
    if ended.status == "completed":
        print(json.dumps(json.loads(ended.result_json or "null"), indent=2, ensure_ascii=False))
        return 0
    from interpreters._shown import visible

    where = f" at address {ended.address}" if ended.address else ""
    print(visible(f"run {ended.run_id} {ended.status}{where}: {ended.error}"), file=sys.stderr)
    return 1


def cmd_worker(a: argparse.Namespace) -> int:
    import asyncio
    import contextlib
    import signal

    from interpreters import resolve_model
    from interpreters._live import as_workspace
    from interpreters.temporal import connect, make_worker

    tools = _load_tools(a.tools)
    workspace = as_workspace(_workspace(a.workspace))
    model = resolve_model(a.model) if a.model else None

    async def serve() -> int:
        client = await connect(a.temporal)
        worker = make_worker(
            client,
            task_queue=a.task_queue,
            programs=a.program,
            tools=tools,
            model=model,
            workspace=workspace,
        )
        print(
            f"opdsl worker on task queue {a.task_queue} at {a.temporal}: runs "
            f"{', '.join(a.program)}; Ctrl-C stops it",
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        serving = asyncio.create_task(worker.run())
        await asyncio.wait(
            {serving, asyncio.create_task(stop.wait())}, return_when="FIRST_COMPLETED"
        )
        if serving.done():
            serving.result()  # it failed: say why
            return 1
        # a stopped worker's activities are retried on another after the heartbeat timeout;
        # the shutdown waits for a long poll to return, so it is bounded
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(worker.shutdown(), 5)
        print("opdsl worker stopped", flush=True)
        return 0

    return asyncio.run(serve())


def _check_call(program: Callable[..., Any], ref: str, kwargs: dict[str, Any]) -> None:
    import inspect

    try:
        inspect.signature(program).bind(**kwargs)
    except TypeError as exc:
        raise UsageError(f"{ref}: {exc} (pass program arguments as --arg NAME=VALUE)") from None


def _report(result: Any) -> int:
    if result.status == "completed":
        value = result.value
        from state import NotSerializable, canonical_json

        try:
            shown = value if isinstance(value, str) else canonical_json(value)
        except NotSerializable:
            shown = repr(value)
        from interpreters._shown import visible

        # piped, the value as it is; on a terminal, no control code of it reaches the terminal
        print(visible(shown) if sys.stdout.isatty() else shown)
        print(f"run {result.run_id} completed; see `opdsl show {result.run_id}`", file=sys.stderr)
        return 0
    from interpreters._shown import visible
    from interpreters.runtime._redact import Redactor

    print(visible(Redactor.from_env()(result.describe())), file=sys.stderr)
    if result.status == "waiting":
        print(f"answer it with: opdsl answer {result.run_id} TEXT", file=sys.stderr)
        return 0
    return 1


def cmd_runs(a: argparse.Namespace) -> int:
    from rich.table import Table

    from interpreters import open_journal

    journal = open_journal(a.db, read_only=True)
    if a.json:
        _print_json([_run_json(r) for r in journal.runs()])
        return 0
    table = Table()
    for col in ("run", "program", "status", "started", "parent"):
        table.add_column(col)
    for r in journal.runs():
        parent = f"{r.parent_run} @ {r.fork_checkpoint}" if r.parent_run else ""
        cells = (r.run_id, r.program, r.status, _when(r.created_at), parent)
        table.add_row(*(_text(cell) for cell in cells))
    _console().print(table)
    return 0


def _run_json(r: Any) -> dict[str, Any]:
    return {
        "run": r.run_id,
        "program": r.program,
        "status": r.status,
        "created_at": r.created_at,
        "finished_at": r.finished_at,
        "parent": r.parent_run,
        "fork_checkpoint": r.fork_checkpoint,
    }


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def cmd_tail(a: argparse.Namespace) -> int:
    from interpreters import ConsoleSink, open_journal
    from interpreters.observe._follow import WriterGone, follow

    journal = open_journal(a.db, read_only=True)
    try:
        run = follow(journal, a.run, ConsoleSink(_console()))
    except WriterGone as exc:
        print(f"opdsl: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 1 if run.status == "failed" else 0


def cmd_show(a: argparse.Namespace) -> int:

    from interpreters import open_journal
    from op import Usage

    if a.follow:
        return cmd_tail(a)
    journal = open_journal(a.db, read_only=True)
    r = journal.run(a.run)
    if a.json:
        from interpreters.journal._content import Reader

        entries = []
        # each infer with the messages it added (``earlier`` counts the others), results whole
        reader = Reader(journal.content)
        for e in journal.entries(r.run_id):
            item = e.as_dict()
            for key in ("error_json", "usage_json"):
                item[key.removesuffix("_json")] = _loads(item.pop(key))
            del item["effect_json"], item["result_json"]
            item["effect"] = reader.effect(e.kind, e.effect_json)
            item["result"] = reader.result(e.kind, e.result_json)
            item["tool_failed"] = e.tool_failure()
            entries.append(item)
        _print_json(
            {
                **_run_json(r),
                "args": _loads(r.args_json),
                "result": _loads(r.result_json),
                "error": _loads(r.error_json),
                "entries": entries,
            }
        )
        return 0
    c = _console()
    done = r.status == "completed"
    c.print(
        _text(
            (f"run {r.run_id}", "bold"),
            f" {r.program}  ",
            (r.status, "green" if done else "yellow"),
        )
    )
    c.print(_text(f"arguments: {r.args_json}"))
    if r.parent_run:
        c.print(_text(f"forked from {r.parent_run} at checkpoint {r.fork_checkpoint}"))
    if r.error_json:
        err = _object(r.error_json)
        said = f"{err.get('type')}: {err.get('message')}" if err else r.error_json
        c.print(_text((f"error at address {err.get('address')}: {said}", "red")))
    rows: list[tuple[Any, ...]] = []
    total = Usage()
    recorded = journal.entries(r.run_id)
    for e in recorded:
        effect = _object(e.effect_json)
        try:
            usage = Usage.model_validate_json(e.usage_json) if e.usage_json else None
        except ValueError:
            usage = None  # a journal someone made by hand: shown without it
        if usage is not None:
            total = total + usage
        took = None if e.finished_at is None else e.finished_at - e.started_at
        duration = "" if took is None else f"{took:.2f}s" if 0 <= took < 1e9 else "?"
        what: Any = effect.get("name") or effect.get("question") or effect.get("backend") or ""
        chain = effect.get("messages")
        if e.kind == "infer" and isinstance(chain, dict) and isinstance(chain.get("n"), int):
            what = f"{chain['n']} messages"  # a packed conversation: its length, not its text
        if not isinstance(what, str):
            what = json.dumps(what, ensure_ascii=False, default=str)[:80]
        if e.kind == "emit" and effect.get("data") is not None:
            what = f"{what} {json.dumps(effect['data'], ensure_ascii=False, default=str)[:50]}"
        style = {"checkpoint": "magenta", "emit": "yellow"}.get(e.kind, "")
        status, why = _text(e.status), _text(what)
        failure = e.tool_failure()
        if failure is not None:
            status, why = _text(("failed", "red")), _text(f"{what}: ", (failure[:80], "red"))
        elif e.status == "failed":
            message = str(_object(e.error_json).get("message", ""))[:80]
            status, why = _text(("failed", "red")), _text(f"{what} ", (message, "red"))
        rows.append(
            (
                _text(e.address),
                _text((e.kind, style)),
                status,
                _text(duration),
                _text("" if usage is None else str(usage.total_tokens)),
                why,
            )
        )
    c.print(_timeline(rows), soft_wrap=True)
    cost = "unknown" if total.cost_usd is None else f"${total.cost_usd:.4f}"
    c.print(f"usage: {total.input_tokens} input, {total.output_tokens} output tokens; cost {cost}")
    line = _state_line(r, recorded)
    if line:
        c.print(_text(f"state: {line}"))
    if r.result_json is not None:
        c.print(_text(f"result: {r.result_json}"))
    return 0


_HEXISH = re.compile(r"[0-9a-f-]+")


def _state_line(r: Any, entries: Sequence[Any]) -> str:
    """The run's registers in one line (``fsm=IMPLEMENT pointer=2 implementor=model:qwen3``):
    its final state, or the state its last checkpoint recorded while it is not finished."""
    text = r.final_state_json
    if text is None:
        for e in reversed(entries):
            if e.kind == "checkpoint" and e.status == "completed":
                snapshot = json.loads(e.result_json or "{}").get("state")
                text = None if snapshot is None else json.dumps(snapshot)
                break
    if text is None:
        return ""
    try:
        state = json.loads(text)
    except ValueError:
        return ""
    if not isinstance(state, dict):
        return ""
    out = []
    for name, field in state.items():
        # registers (a value with a Lamport time) whose value is plain
        if isinstance(field, dict) and "lamport" in field and "value" in field:
            value = field["value"]
            if isinstance(value, str) and len(value) > 24 and _HEXISH.fullmatch(value):
                value = value[:12] + "..."  # a hash, an id: enough to tell them apart
            elif isinstance(value, str) and len(value) > 80:
                value = value[:77] + "..."
            if value is not None and isinstance(value, str | int | float | bool):
                out.append(f"{name}={value}")
    return " ".join(out)


def cmd_report(a: argparse.Namespace) -> int:
    from interpreters import open_journal
    from interpreters.observe import render_report
    from interpreters.observe._report import RUN_ID

    journal = open_journal(a.db, read_only=True)
    r = journal.run(a.run)
    if not a.output and not RUN_ID.fullmatch(r.run_id):
        raise UsageError(f"run {r.run_id!r} cannot name a file; say where with -o FILE")
    page = render_report(r, list(journal.entries(r.run_id)), journal.content)
    out = Path(a.output or f"{r.run_id}.html")
    out.write_text(page, encoding="utf-8")
    print(f"wrote {out} ({len(page.encode()):,} bytes): open it in a browser")
    return 0


def cmd_diff(a: argparse.Namespace) -> int:
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
        _print_json(found.as_json())
    else:
        from interpreters._shown import visible

        print("\n".join(visible(line) for line in found.lines()))
    return 0 if found.same else 1


def cmd_checkpoints(a: argparse.Namespace) -> int:
    from interpreters import open_journal
    from interpreters._durable import checkpoint_labels
    from interpreters._shown import visible

    journal = open_journal(a.db, read_only=True)
    rows = []
    found: list[dict[str, Any]] = []
    for label, e in checkpoint_labels(journal.entries(a.run)):
        world = _object(e.result_json).get("world")
        world = world if isinstance(world, dict) else {}
        files = (
            f"  files: tree {str(world['tree'])[:12]} in {world.get('workspace')}"
            if world.get("tree")
            else ""
        )
        rows.append(visible(f"{e.address:>8}  {label}  {e.status}{files}", lines=False))
        found.append(
            {
                "address": e.address,
                "name": label,
                "status": e.status,
                "tree": world.get("tree"),
                "workspace": world.get("workspace"),
            }
        )
    if a.json:
        _print_json(found)
        return 0
    print("\n".join(rows) if rows else visible(f"run {a.run} has no checkpoints", lines=False))
    return 0


def cmd_resume(a: argparse.Namespace) -> int:
    from interpreters import resume

    if a.temporal:
        if not a.from_checkpoint:
            raise UsageError(
                f"a run on Temporal goes on by itself; fork run {a.run} with --from CHECKPOINT"
            )
        from interpreters.temporal import fork

        return _on_temporal(
            a, lambda client: fork(client, a.run, a.from_checkpoint, task_queue=a.task_queue)
        )

    kwargs = _named_code(a)
    return _report(resume(a.run, from_checkpoint=a.from_checkpoint, on_event=_sinks(a), **kwargs))


def _named_code(a: argparse.Namespace) -> dict[str, Any]:
    """What the user names for a run to go on with (``--program``, ``--tools``, ``--state``,
    ``--model``, ``--workspace``), as ``resume``'s keywords. Code named here is imported only
    after the same check as the code the journal names (:func:`check_code`): from the files
    the run started with, unless ``--accept-changed-code``."""
    from interpreters import load_program, open_journal
    from interpreters._durable import check_code, load_object
    from state import CRDTModel

    kwargs: dict[str, Any] = {"db": a.db, "accept_changed_code": a.accept_changed_code}
    refs = [r for r in (getattr(a, "program", None), getattr(a, "state", None)) if r]
    refs += getattr(a, "tools", None) or []
    if refs:
        record = open_journal(a.db, read_only=True).run(a.run)
        config = json.loads(record.config_json or "{}")
        check_code(a.run, config, refs, accept=a.accept_changed_code)
    if getattr(a, "workspace", None):
        kwargs["workspace"] = _workspace(a.workspace)
    if getattr(a, "model", None):
        kwargs["model"] = a.model
    if getattr(a, "tools", None):
        kwargs["tools"] = _load_tools(a.tools)
    if getattr(a, "state", None):
        cls = load_object(a.state, "state type")
        if not (isinstance(cls, type) and issubclass(cls, CRDTModel)):
            raise UsageError(f"--state {a.state!r} is not a CRDTModel class")
        kwargs["state_type"] = cls
    if getattr(a, "program", None):
        kwargs["program"] = load_program(a.program)
    return kwargs


def cmd_replay(a: argparse.Namespace) -> int:
    from interpreters import open_journal, replay

    kwargs = _named_code(a)
    kwargs["db"] = open_journal(a.db, read_only=True)
    result = replay(a.run, **kwargs)
    print(f"run {a.run} replayed from its journal: {result.status}, same value and state")
    return 0


def cmd_answer(a: argparse.Namespace) -> int:
    from interpreters import resume

    if a.temporal:
        import asyncio

        from interpreters.temporal import RunOutcome, answer, connect, outcome

        async def go() -> int:
            client = await connect(a.temporal)
            at = await answer(client, a.run, a.text, at=a.at)
            print(f"answered run {a.run} at address {at}; it goes on on Temporal")
            if a.detach:
                return 0
            handle = client.get_workflow_handle(a.run, result_type=RunOutcome)
            return _report_outcome(await outcome(handle))

        return asyncio.run(go())

    kwargs = _named_code(a)
    return _report(resume(a.run, answer=a.text, answer_at=a.at, on_event=_sinks(a), **kwargs))


def cmd_export(a: argparse.Namespace) -> int:
    from interpreters import export_run, open_journal

    text = export_run(open_journal(a.db, read_only=True), a.run)
    if a.output:
        Path(a.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def cmd_import(a: argparse.Namespace) -> int:
    from interpreters import import_run, open_journal

    try:
        text = Path(a.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {a.file}: {exc}") from None
    record = import_run(open_journal(a.db), text, source=a.file)
    config = json.loads(record.config_json or "{}")
    from interpreters._shown import visible
    from interpreters.models import redact_spec

    # what the file names, shell-quoted, a model's credentials never shown
    named = [f"--program {shlex.quote(record.program)}"]
    for option, key in (("tools", "tools"), ("model", "model"), ("workspace", "workspace")):
        value = config.get(key)
        for v in value if isinstance(value, list) else [value] if value else []:
            shown = redact_spec(str(v)) if option == "model" else str(v)
            named.append(f"--{option} {shlex.quote(shown)}")
    if record.state_json is not None:
        named.append(f"--state {shlex.quote(str(config.get('state_type')))}")
    print(
        visible(
            f"imported run {record.run_id}; nothing it names runs, gets a key or changes a "
            f"folder until you give it again to resume or replay it: {' '.join(named)}"
        )
    )
    return 0


def cmd_gc(a: argparse.Namespace) -> int:
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


def cmd_new(a: argparse.Namespace) -> int:
    from interpreters.cli._new import new_project

    written = new_project(a.path, version=_version())
    root = Path(a.path)
    print(f"created {root}/ ({len(written)} files):")
    for path in written:
        print(f"  {path.relative_to(root)}")
    print(f"next: cd {shlex.quote(str(root))} && pip install -e '.[test]' && pytest")
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("opdsl")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"


def cmd_demo(a: argparse.Namespace) -> int:
    if a.which == "director":
        from interpreters.cli._demo_director import director_demo

        return director_demo(_console())
    from interpreters.cli._demo import demo

    return demo(_console())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opdsl", description="Run, resume and replay agent programs."
    )
    parser.add_argument("--version", action="version", version=f"opdsl {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(
        name: str, fn: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.set_defaults(fn=fn)
        p.add_argument("--db", help="journal file (default: $OPDSL_DB or .opdsl/runs.db)")
        if name in _ON_TEMPORAL:
            p.add_argument(
                "--temporal", metavar="HOST:PORT", help="the runs are on this Temporal server"
            )
        if name in ("run", "resume", "answer", "worker"):
            p.add_argument(
                "--task-queue", default="opdsl", help="the Temporal task queue (default: opdsl)"
            )
        if name in ("run", "resume", "answer"):
            p.add_argument(
                "--detach", action="store_true", help="with --temporal: do not wait for the end"
            )
        return p

    p = add("run", cmd_run, "run a program: opdsl run module:function --arg name=value")
    p.add_argument("program")
    p.add_argument(
        "--arg", action="append", default=[], help="a program argument, NAME=VALUE (JSON or text)"
    )
    p.add_argument("--model", help="a model spec, e.g. scripted:answers.json")
    p.add_argument(
        "--model-timeout",
        help="seconds a whole model call may take, retries included (default 600)",
    )
    p.add_argument(
        "--tools", action="append", default=[], help="tools to bind, module:attr (repeatable)"
    )
    p.add_argument("--state", help="the initial state, a CRDTModel class as module:Class")
    p.add_argument("--seed", help="the seed of random() and uuid()")
    p.add_argument(
        "--workspace",
        help="a folder the workspace tools are confined to (snapshotted at checkpoints)",
    )
    p.add_argument("--dry-run", action="store_true", help="no side effects: print the plan")
    p.add_argument("--quiet", action="store_true", help="no live progress")
    p = add("runs", cmd_runs, "list runs")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("show", cmd_show, "a run's timeline")
    p.add_argument("run")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--follow", action="store_true", help="follow the run as it goes (opdsl tail)")
    p = add("tail", cmd_tail, "follow a run another process is running, until it ends")
    p.add_argument("run")
    p = add("report", cmd_report, "a run as one HTML page: timeline, every effect, totals")
    p.add_argument("run")
    p.add_argument("-o", "--output", help="the file to write (default: RUN.html)")
    p = add("diff", cmd_diff, "where two runs part: the first differing effect, and end states")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("checkpoints", cmd_checkpoints, "a run's checkpoints")
    p.add_argument("run")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = add("resume", cmd_resume, "continue a run, or fork it from a checkpoint with --from")
    p.add_argument("run")
    p.add_argument(
        "--from",
        dest="from_checkpoint",
        help="fork a new run from this checkpoint (NAME or NAME#k)",
    )
    p.add_argument("--workspace", help="the workspace folder (default: the one the run recorded)")
    p.add_argument("--model")
    p.add_argument("--model-timeout", help="seconds a whole model call may take, retries included")
    p.add_argument("--tools", action="append", default=[])
    _named_options(p)
    p.add_argument("--quiet", action="store_true")
    p = add("replay", cmd_replay, "re-run a run against its journal only; fails on divergence")
    p.add_argument("run")
    _named_options(p)
    p = add("answer", cmd_answer, "answer a run waiting on ask(), and continue it")
    p.add_argument("run")
    p.add_argument("text")
    p.add_argument(
        "--at", help="the address of the question to answer, when the run waits on several"
    )
    p.add_argument("--workspace", help="the workspace folder (default: the one the run recorded)")
    p.add_argument("--model")
    p.add_argument("--tools", action="append", default=[])
    _named_options(p)
    p.add_argument("--quiet", action="store_true")
    p = add("export", cmd_export, "write a run as JSONL")
    p.add_argument("run")
    p.add_argument("-o", "--output")
    p = add("import", cmd_import, "add a run from a JSONL file")
    p.add_argument("file")
    p = add("gc", cmd_gc, "remove finished runs and their workspace snapshots")
    p.add_argument("runs", nargs="+")
    p = add("demo", cmd_demo, "an example program, offline: the Coder, or the director workflow")
    p.add_argument("which", nargs="?", choices=("coder", "director"), default="coder")
    p = add("new", cmd_new, "a new agent program with its tests: opdsl new PATH")
    p.add_argument("path")
    p = add("worker", cmd_worker, "serve runs on a Temporal task queue (opdsl[temporal])")
    p.add_argument(
        "--program",
        action="append",
        required=True,
        help="a program this worker runs, module:function (repeatable; no other is run)",
    )
    p.add_argument("--tools", action="append", default=[], help="tools, module:attr (repeatable)")
    p.add_argument("--model", help="the model spec the runs' infer effects use")
    p.add_argument("--workspace", help="the folder workspace tools are confined to")
    return parser


def _named_options(p: argparse.ArgumentParser) -> None:
    """The options of the commands that go on with a run its journal names the code of."""
    p.add_argument("--program", help="module:function; needed for a run imported from a file")
    p.add_argument(
        "--state", help="the state type, module:Class; needed for a run imported from a file"
    )
    p.add_argument(
        "--accept-changed-code",
        action="store_true",
        help="run the program, tools and state type as their files are now, even if they "
        "changed or moved since the run started",
    )


_ON_TEMPORAL = frozenset(
    (
        "run",
        "runs",
        "show",
        "report",
        "diff",
        "checkpoints",
        "resume",
        "replay",
        "answer",
        "export",
        "worker",
    )
)
"""Commands that take ``--temporal HOST:PORT``."""


_READS = frozenset(("runs", "show", "report", "diff", "checkpoints", "replay", "export"))
"""Commands that only read runs: with ``--temporal`` they read them from the server."""


def main(argv: list[str] | None = None) -> int:
    """The command. Ctrl-C at any moment, from start-up to the process's end, is one line on
    stderr and status 130, never a traceback: before and during the command it is caught here;
    once the command is over (``argv`` None: this is the process's own command) a Ctrl-C ends
    the process at once (see :func:`_end_at_once_on_interrupt`)."""
    args: argparse.Namespace | None = None
    _SAID_STOPPED.clear()
    if argv is None:
        import atexit
        import signal

        # the last exit hook (the first registered): from there on Python itself tears
        # down, puts back the operating system's default for SIGINT, and a Ctrl-C would
        # kill the process by signal; ignored instead, the status stays the one given
        atexit.register(_set_sigint, signal.SIG_IGN)
    hook = sys.unraisablehook
    sys.unraisablehook = _redelivering(hook)
    try:
        try:
            args = _parser().parse_args(argv)
            code = _dispatch(args)
        except KeyboardInterrupt:
            code = _interrupted(ending=argv is None)
    finally:
        if argv is None:
            _end_at_once_on_interrupt()
            # CPython's ``-m`` (``python -m interpreters``) ends by signal, status -2, when a
            # KeyboardInterrupt once ended a string ``exec`` (a dataclass or namedtuple being
            # made) even though it was caught; the next string ``exec`` clears that mark
            exec("")
        else:
            sys.unraisablehook = hook
    if (
        argv is None
        and args is not None
        and (getattr(args, "temporal", None) or args.command == "worker")
    ):
        _exit_at_once(code)
    return code


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command; wrong input is one line and status 2."""
    from interpreters.journal import JournalError
    from interpreters.runtime._replay import Divergence
    from op import NotSerializable, OpdslError

    if getattr(args, "model_timeout", None) is not None:
        from interpreters.models._http import seconds_setting

        try:
            seconds_setting("--model-timeout", args.model_timeout)
        except ValueError as exc:
            print(f"opdsl: error: {exc}", file=sys.stderr)
            return 2
        os.environ["OPDSL_MODEL_TIMEOUT"] = args.model_timeout
    _import_path(args.command)
    try:
        if getattr(args, "temporal", None) or args.command == "worker":
            _check_temporal(args)
        code: int = args.fn(args)
        return code
    except Divergence as exc:
        print(f"opdsl: {exc}", file=sys.stderr)
        return 1
    except (
        UsageError,
        OpdslError,
        JournalError,
        NotSerializable,
        ValueError,
        TypeError,
        OSError,
        RecursionError,
    ) as exc:
        from interpreters._shown import visible
        from interpreters.runtime._redact import Redactor

        message = Redactor.from_env()(" ".join(str(exc).split()))
        print(f"opdsl: error: {visible(message, lines=False)}", file=sys.stderr)
        return 2


_NAMED_BY_JOURNAL = frozenset(("resume", "replay", "answer"))
"""Commands that import the code a journal names."""


def _import_path(command: str) -> None:
    """Programs are named module:function, importable from the current folder as with
    ``python -m``. When a journal names the code, the current folder (often the workspace,
    which confined commands may write) goes last, so that nothing planted there shadows an
    installed module such as ``programs``; the modules a run recorded are checked before
    they are imported (:func:`interpreters._durable.check_code`)."""
    here = os.getcwd()
    if command in _NAMED_BY_JOURNAL:
        sys.path[:] = [p for p in sys.path if p not in ("", here)] + [here]
    elif "" not in sys.path and here not in sys.path:
        sys.path.insert(0, here)


def _exit_at_once(code: int) -> None:
    """End the process without the interpreter's teardown. The Temporal client's native
    threads can outlive the event loop and abort the process while Python finalizes
    ("PyGILState_Release: thread state ... must be current", temporalio/sdk-python#300),
    turning a command that succeeded into a crash; what it printed is flushed first."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _check_temporal(a: argparse.Namespace) -> None:
    """``--temporal``: the extra must be installed; reading commands read the server's runs."""
    if a.command == "worker" and not a.temporal:
        raise UsageError("opdsl worker needs --temporal HOST:PORT")
    try:
        from interpreters.temporal import TemporalJournal
    except ImportError:
        raise UsageError(
            "--temporal needs the temporal extra: pip install 'opdsl[temporal]'"
        ) from None
    if a.db:
        raise UsageError("--temporal and --db name two places for the runs; give one")
    if a.command in _READS:
        a.db = TemporalJournal(a.temporal)


_SAID_STOPPED: list[bool] = []
"""Whether the line that says what Ctrl-C left was printed (it is printed once)."""


def _set_sigint(handler: Any) -> Any:
    """Set the SIGINT handler and give the one it replaced (None off the main thread)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, handler)


def _interrupted(*, ending: bool) -> int:
    """Ctrl-C stopped the command: say in one line what it left (a Ctrl-C pressed again
    meanwhile is ignored), and give status 130. ``ending``: the process ends next, so the
    ignoring is not undone (:func:`_end_at_once_on_interrupt` takes over)."""
    import signal

    previous = _set_sigint(signal.SIG_IGN)
    try:
        if not _SAID_STOPPED:
            print(_stopped(), file=sys.stderr)
            _SAID_STOPPED.append(True)
    finally:
        if not ending and previous is not None:
            _set_sigint(previous)
    return 130


def _redelivering(hook: Callable[[Any], object]) -> Callable[[Any], None]:
    """An unraisable-exception hook that delivers a Ctrl-C again when it landed where it
    cannot be raised (a weakref callback, a ``__del__``: Python prints "Exception ignored"
    and goes on as if it was never pressed); other unraisable exceptions go to ``hook``."""

    def redeliver(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            import _thread

            _thread.interrupt_main()  # the SIGINT handler runs again, in the main thread
            return
        hook(unraisable)

    return redeliver


def _end_at_once_on_interrupt() -> None:
    """From here to the process's end (its result is printed; the interpreter tears down), a
    Ctrl-C ends the process at once with status 130 and one line, where Python would raise
    KeyboardInterrupt wherever teardown happened to be (a traceback, or death by signal)."""

    def end(signum: int, frame: Any) -> None:
        try:
            if not _SAID_STOPPED:
                sys.stderr.write("opdsl: stopped\n")
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # a stream the signal caught mid-write: end all the same
            pass
        os._exit(130)

    _set_sigint(end)


def _stopped() -> str:
    """What Ctrl-C left: a run to continue, or nothing. Nothing is imported unless a run
    began: a Ctrl-C during start-up may have left a module half imported."""
    if not _STARTED:
        return "opdsl: stopped; no run was left to continue"
    from interpreters import open_journal
    from interpreters.journal._status import can_resume

    for run_id, db in reversed(_STARTED):
        try:
            status = open_journal(db, read_only=True).run(run_id).status
        except Exception:
            continue
        if can_resume(status):
            where = f" --db {db}" if db else ""
            from interpreters._shown import visible

            return visible(f"opdsl: stopped; continue with: opdsl resume {run_id}{where}")
    return "opdsl: stopped; no run was left to continue"


if __name__ == "__main__":
    sys.exit(main())
