"""Commands that start programs: ``opdsl run`` (here, as a dry run, or on Temporal) and
``opdsl worker`` (serve a Temporal task queue)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from interpreters.cli._command import (
    DETACH,
    MCP,
    TASK_QUEUE,
    Command,
    OnTemporal,
    Option,
    UsageError,
)
from interpreters.cli._inputs import (
    check_call,
    load_tools,
    model_spec,
    models_timed,
    program_args,
    state_class,
    workspace,
)
from interpreters.cli._output import report_outcome, report_result, report_waiting, sinks

__all__ = ["RUN_COMMAND", "WORKER", "on_temporal"]


def run(a: argparse.Namespace) -> int:
    with models_timed(a.model_timeout):
        return _run(a)


def _run(a: argparse.Namespace) -> int:
    from interpreters import dry_run, load_program
    from interpreters import run as run_program
    from interpreters.tools._mcp import listed_tools, mcp_servers

    program = load_program(a.program)
    kwargs = program_args(a.arg)
    tools = load_tools(a.tools)
    state = state_class(a.state)() if a.state else None
    check_call(program, a.program, kwargs)
    _check_run_id(a.run_id)
    if a.temporal:
        return _run_on_temporal(a, kwargs, state)
    folder = workspace(a.workspace)
    model = model_spec(a.model)
    mcp = mcp_servers(a.mcp)
    if a.dry_run:
        tools = [*tools, *listed_tools(mcp, root=folder)]  # listed, never called
        plan = dry_run(
            program, model=model, tools=tools, state=state, kwargs=kwargs, workspace=folder
        )
        print(plan.render())
        return 0 if plan.status == "completed" else 1
    result = run_program(
        program,
        model=model,
        tools=tools,
        state=state,
        db=a.db,
        on_event=sinks(a),
        kwargs=kwargs,
        seed=a.seed,
        run_id=a.run_id,
        tool_refs=a.tools or None,
        workspace=folder,
        mcp=mcp,
    )
    return report_result(result, db=a.db)


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def _check_run_id(run_id: str | None) -> None:
    """A run id the user chose is a word a command line can name again: letters, digits and
    ``._:-``, at most 128 characters."""
    if run_id is not None and not _RUN_ID.fullmatch(run_id):
        raise UsageError(
            f"--run-id {run_id!r}: a run id is 1 to 128 letters, digits, '.', '_', ':' or '-', "
            "starting with a letter or digit"
        )


def _run_on_temporal(a: argparse.Namespace, kwargs: dict[str, Any], state: Any) -> int:
    if a.tools or a.model or a.workspace or a.dry_run or a.mcp:
        raise UsageError(
            "with --temporal the workers hold the tools, model and workspace "
            "(opdsl worker --tools/--mcp/--model/--workspace); --dry-run runs locally"
        )
    from interpreters.temporal import start_run

    return on_temporal(
        a,
        lambda client: start_run(
            client,
            a.program,
            task_queue=a.task_queue,
            kwargs=kwargs,
            state=state,
            seed=a.seed,
            run_id=a.run_id,
        ),
    )


def on_temporal(a: argparse.Namespace, start: Callable[[Any], Any]) -> int:
    """Start a run on Temporal (``start(client)`` gives its handle), say its id, and wait for it
    unless ``--detach``."""
    import asyncio

    from interpreters.temporal import connect

    async def go() -> int:
        client = await connect(a.temporal)
        handle = await start(client)
        print(f"run {handle.id} started on Temporal at {a.temporal} (task queue {a.task_queue})")
        if a.detach:
            print(f"see it with: opdsl show {handle.id} --temporal {a.temporal}")
            return 0
        return await until_it_ends_or_waits(a, handle)

    return asyncio.run(go())


async def until_it_ends_or_waits(
    a: argparse.Namespace, handle: Any, *, answered: str | None = None
) -> int:
    """Wait for a run on Temporal to end, or to wait on a question (reported as a local run's
    would be: each question and the command that answers it, status 0). A workflow task that
    keeps failing meanwhile is said on stderr, in one line, as it happens."""
    import sys

    from interpreters._shown import visible
    from interpreters.temporal import Waiting, outcome_or_waiting

    def failing(message: str) -> None:
        print(visible(f"opdsl: run {handle.id}: {message}", lines=False), file=sys.stderr)

    ended = await outcome_or_waiting(handle, answered=answered, on_task_failure=failing)
    if isinstance(ended, Waiting):
        asked = list(ended.questions.items())
        report_waiting(ended.run_id, ended.program, asked, temporal=a.temporal)
        return 0
    return report_outcome(ended)


def worker(a: argparse.Namespace) -> int:
    import asyncio

    from interpreters import load_program, resolve_model
    from interpreters._live import as_workspace
    from interpreters.temporal import connect, make_worker
    from interpreters.tools._mcp import mcp_servers, open_mcp

    for ref in a.program:
        load_program(ref)  # one that cannot be imported: said now, not at each run's admission
    tools = load_tools(a.tools)
    folder = as_workspace(workspace(a.workspace))
    model = resolve_model(model_spec(a.model))
    mcp = mcp_servers(a.mcp)

    async def serve() -> int:
        client = await connect(a.temporal)
        # the MCP servers run as long as the worker: started once, ended with it
        async with open_mcp(mcp, root=None if folder is None else folder.root) as listed:
            served = make_worker(
                client,
                task_queue=a.task_queue,
                programs=a.program,
                tools=tools,
                model=model,
                workspace=folder,
                mcp=listed,
                accept_changed_code=a.accept_changed_code,
            )
            print(
                f"opdsl worker on task queue {a.task_queue} at {a.temporal}: runs "
                f"{', '.join(a.program)}; Ctrl-C stops it",
                flush=True,
            )
            return await _serve_until_stopped(served)

    return asyncio.run(serve())


async def _serve_until_stopped(served: Any) -> int:
    """Run the worker until SIGINT or SIGTERM (0), or until it fails (1, saying why)."""
    import asyncio
    import contextlib
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    serving = asyncio.create_task(served.run())
    await asyncio.wait({serving, asyncio.create_task(stop.wait())}, return_when="FIRST_COMPLETED")
    if serving.done():
        serving.result()  # it failed: say why
        return 1
    # a stopped worker's activities are retried on another after the heartbeat timeout;
    # the shutdown waits for a long poll to return, so it is bounded
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(served.shutdown(), 5)
    print("opdsl worker stopped", flush=True)
    return 0


MODEL_TIMEOUT_HELP = "seconds a whole model call may take, retries included"


RUN_COMMAND = Command(
    name="run",
    help="run a program: opdsl run module:function --arg name=value",
    run=run,
    temporal=OnTemporal.RUNS,
    options=(
        TASK_QUEUE,
        DETACH,
        Option("program"),
        Option(
            "--arg",
            action="append",
            default=[],
            help="a program argument, NAME=VALUE (JSON or text)",
        ),
        Option("--model", help="a model spec, e.g. scripted:answers.json"),
        Option("--model-timeout", help=f"{MODEL_TIMEOUT_HELP} (default 600)"),
        Option(
            "--tools",
            action="append",
            default=[],
            help="tools to bind, module:attr (repeatable)",
        ),
        MCP,
        Option("--state", help="the initial state, a CRDTModel class as module:Class"),
        Option("--seed", help="the seed of random() and uuid()"),
        Option("--run-id", help="the run's id (default: a new one); refused if the journal has it"),
        Option(
            "--workspace",
            help="a folder the workspace tools are confined to (snapshotted at checkpoints)",
        ),
        Option("--dry-run", action="store_true", help="no side effects: print the plan"),
        Option("--quiet", action="store_true", help="no live progress"),
    ),
)

WORKER = Command(
    name="worker",
    help="serve runs on a Temporal task queue (opdsl[temporal])",
    run=worker,
    temporal=OnTemporal.SERVES,
    options=(
        TASK_QUEUE,
        Option(
            "--program",
            action="append",
            required=True,
            help="a program this worker runs, module:function (repeatable; no other is run)",
        ),
        Option("--tools", action="append", default=[], help="tools, module:attr (repeatable)"),
        MCP,
        Option("--model", help="the model spec the runs' infer effects use"),
        Option("--workspace", help="the folder workspace tools are confined to"),
        Option(
            "--accept-changed-code",
            action="store_true",
            help="go on with a run that depends on MCP tools these servers now offer otherwise "
            "than when it started (it waits for another worker otherwise)",
        ),
    ),
)
