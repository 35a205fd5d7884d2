"""Commands that go on with a run the journal holds: ``resume`` (in place, or a fork from a
checkpoint), ``replay`` (against the journal only) and ``answer`` (a question it waits on).

The code they run is the code the journal names, checked before it is imported
(:func:`interpreters._durable.check_code`); code the user names again is checked the same way.
"""

from __future__ import annotations

import argparse
import json
import shlex
from typing import Any

from interpreters.cli._command import (
    DETACH,
    JSON,
    MCP,
    NAMED_CODE,
    RUN,
    TASK_QUEUE,
    Command,
    OnTemporal,
    Option,
    UsageError,
)
from interpreters.cli._inputs import load_tools, model_spec, models_timed, state_class, workspace
from interpreters.cli._output import print_json, report_result, sinks
from interpreters.cli._run import MODEL_TIMEOUT_HELP, on_temporal, until_it_ends_or_waits
from interpreters.journal._seal import FOREIGN

__all__ = ["RESUME", "REPLAY", "ANSWER"]


def resume(a: argparse.Namespace) -> int:
    from interpreters import resume as resume_run

    if a.temporal:
        if not a.from_checkpoint:
            raise UsageError(
                f"a run on Temporal goes on by itself; fork run {a.run} with --from CHECKPOINT"
            )
        from interpreters.temporal import fork

        return on_temporal(
            a, lambda client: fork(client, a.run, a.from_checkpoint, task_queue=a.task_queue)
        )
    with models_timed(a.model_timeout):
        kwargs = _named_code(a)
        return report_result(
            resume_run(a.run, from_checkpoint=a.from_checkpoint, on_event=sinks(a), **kwargs),
            db=a.db,
        )


def replay(a: argparse.Namespace) -> int:
    from interpreters import Divergence, open_journal
    from interpreters import replay as replay_run

    kwargs = _named_code(a)
    kwargs["db"] = open_journal(a.db, read_only=True)
    try:
        result = replay_run(a.run, **kwargs)
    except Divergence as diverged:
        if not a.json:
            raise
        cp = diverged.checkpoint
        print_json(
            {
                "run_id": a.run,
                "replayed": False,
                "address": diverged.address,
                "where": diverged.where,
                "checkpoint": None if cp is None else {"name": cp[0], "address": cp[1]},
                "reason": diverged.reason,
                "recorded": _parsed(diverged.recorded),
                "now": _parsed(diverged.now),
                "divergence": str(diverged),
            }
        )
        return 1
    if a.json:
        print_json(
            {
                "run_id": a.run,
                "replayed": True,
                "status": result.status,
                "value": _jsonable(result.value) if result.status == "completed" else None,
                "state": None if result.state is None else json.loads(result.state.canonical()),
            }
        )
        return 0
    print(f"run {a.run} replayed from its journal: {result.status}, same value and state")
    return 0


def _parsed(text: str | None) -> Any:
    """Recorded JSON text as its value (text that is not JSON as it is)."""
    try:
        return None if text is None else json.loads(text)
    except ValueError:
        return text


def _jsonable(value: Any) -> Any:
    from state import NotSerializable, canonical_json

    try:
        return json.loads(canonical_json(value))
    except NotSerializable:
        return repr(value)


def answer(a: argparse.Namespace) -> int:
    from interpreters import resume as resume_run

    if a.temporal:
        return _answer_on_temporal(a)
    _say_which(a)
    kwargs = _named_code(a)
    return report_result(
        resume_run(a.run, answer=a.text, answer_at=a.at, on_event=sinks(a), **kwargs), db=a.db
    )


def _say_which(a: argparse.Namespace) -> None:
    """Without ``--at``, a run that waits on several questions is refused with the exact
    command for each."""
    from interpreters import open_journal
    from interpreters.cli._output import open_questions

    if a.at is not None:
        return
    asked = open_questions(open_journal(a.db, read_only=True), a.run)
    if len(asked) > 1:
        db = f" --db {shlex.quote(a.db)}" if a.db else ""
        each = "; ".join(f"opdsl answer {a.run}{db} --at {at} TEXT ({q})" for at, q in asked)
        raise UsageError(f"run {a.run} waits on {len(asked)} questions; answer one: {each}")


def _answer_on_temporal(a: argparse.Namespace) -> int:
    import asyncio

    from interpreters.temporal import RunOutcome, connect
    from interpreters.temporal import answer as answer_run

    async def go() -> int:
        client = await connect(a.temporal)
        at = await answer_run(client, a.run, a.text, at=a.at)
        print(f"answered run {a.run} at address {at}; it goes on on Temporal")
        if a.detach:
            return 0
        handle = client.get_workflow_handle(a.run, result_type=RunOutcome)
        return await until_it_ends_or_waits(a, handle, answered=at)

    return asyncio.run(go())


def _named_code(a: argparse.Namespace) -> dict[str, Any]:
    """What the user names for a run to go on with (``--program``, ``--tools``, ``--state``,
    ``--model``, ``--workspace``), as ``resume``'s keywords. Code named here is imported only
    after the same check as the code the journal names (:func:`check_code`): from the files
    the run started with, unless ``--accept-changed-code``."""
    from interpreters import load_program
    from interpreters._durable import check_code

    kwargs: dict[str, Any] = {"db": a.db, "accept_changed_code": a.accept_changed_code}
    refs = [r for r in (a.program, a.state) if r]
    refs += getattr(a, "tools", None) or []
    if refs:
        check_code(a.run, _config(a), refs, accept=a.accept_changed_code)
    if getattr(a, "workspace", None):
        kwargs["workspace"] = workspace(a.workspace)
    if getattr(a, "model", None):
        kwargs["model"] = model_spec(a.model)
    elif hasattr(a, "model"):  # it goes on live with the model the run recorded: checked now
        recorded = _config(a)
        # a foreign run's is not (its file chose it: a `scripted:PATH` would be read), nor
        # anything but a spec: the resume refuses them, saying why
        if not recorded.get(FOREIGN) and isinstance(recorded.get("model"), str):
            model_spec(recorded["model"] or None)
    if getattr(a, "tools", None):
        kwargs["tools"] = load_tools(a.tools)
    if getattr(a, "mcp", None):
        from interpreters.tools._mcp import mcp_servers

        kwargs["mcp"] = mcp_servers(a.mcp)
    if a.state:
        kwargs["state_type"] = state_class(a.state)
    if a.program:
        kwargs["program"] = load_program(a.program)
    return kwargs


def _config(a: argparse.Namespace) -> dict[str, Any]:
    """The config the run recorded (what it was started with)."""
    from interpreters import open_journal
    from interpreters.journal._seal import config_of

    return config_of(open_journal(a.db, read_only=True).run(a.run))


WORKSPACE_AGAIN = Option(
    "--workspace", help="the workspace folder (default: the one the run recorded)"
)
TOOLS_AGAIN = Option("--tools", action="append", default=[])


RESUME = Command(
    name="resume",
    help="continue a run, or fork it from a checkpoint with --from",
    run=resume,
    temporal=OnTemporal.RUNS,
    code_from_journal=True,
    options=(
        TASK_QUEUE,
        DETACH,
        RUN,
        Option(
            "--from",
            dest="from_checkpoint",
            help="fork a new run from this checkpoint (NAME or NAME#k)",
        ),
        WORKSPACE_AGAIN,
        Option("--model"),
        Option("--model-timeout", help=MODEL_TIMEOUT_HELP),
        TOOLS_AGAIN,
        MCP,
        *NAMED_CODE,
        Option("--quiet", action="store_true"),
    ),
)

REPLAY = Command(
    name="replay",
    help="re-run a run against its journal only; fails on divergence",
    run=replay,
    temporal=OnTemporal.READS,
    code_from_journal=True,
    options=(RUN, JSON, *NAMED_CODE),
)

ANSWER = Command(
    name="answer",
    help="answer a run waiting on ask(), and continue it",
    run=answer,
    temporal=OnTemporal.RUNS,
    code_from_journal=True,
    options=(
        TASK_QUEUE,
        DETACH,
        RUN,
        Option("text"),
        Option("--at", help="the address of the question to answer, when the run waits on several"),
        WORKSPACE_AGAIN,
        Option("--model"),
        TOOLS_AGAIN,
        MCP,
        *NAMED_CODE,
        Option("--quiet", action="store_true"),
    ),
)
