"""``opdsl tail RUN``: follow a run that another process is executing, effect by effect.

The journal is the only channel: it is read (read-only) a few times a second, and what
changed since the last look is told to a sink as the events the running process's own
console saw, so the view is the same. It ends when the run does, or when the process that
was running it is gone (it crashed or was killed: the run can be resumed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from interpreters.journal._base import Entry, Journal, RunRecord, json_object
from interpreters.journal._content import Reader
from op import Checkpoint, Emit, Usage
from op.events import (
    CheckpointSaved,
    EffectFinished,
    EffectStarted,
    Emitted,
    Event,
    RunFinished,
    RunStarted,
)

__all__ = ["WriterGone", "follow"]


class WriterGone(Exception):
    """The process running the followed run is gone while the run was not finished."""


def _error(e: Entry) -> str | None:
    failure = e.tool_failure()
    return e.error_line() if failure is None else f"tool failed: {failure}"


def _finished(e: Entry) -> list[Event]:
    out: list[Event] = []
    effect = json_object(e.effect_json)  # a journal made by hand: shown as it is
    at = e.finished_at or e.started_at
    if e.status == "completed":
        if e.kind == Checkpoint.kind:
            out.append(
                CheckpointSaved(run_id=e.run_id, at=at, address=e.address, name=_name(effect))
            )
        elif e.kind == Emit.kind:
            out.append(
                Emitted(
                    run_id=e.run_id,
                    at=at,
                    address=e.address,
                    name=_name(effect),
                    data=effect.get("data"),
                )
            )
    out.insert(
        0,
        EffectFinished(
            run_id=e.run_id,
            at=at,
            address=e.address,
            kind=e.kind,
            status="completed"
            if e.status == "completed"
            else ("failed" if e.status == "failed" else "cancelled"),
            duration_s=max(0.0, at - e.started_at),
            usage=_usage(e.usage_json),
            error=_error(e),
        ),
    )
    return out


def _name(effect: dict[str, Any]) -> str:
    name = effect.get("name")
    return name if isinstance(name, str) else json.dumps(name, default=str)


def _usage(text: str | None) -> Usage | None:
    try:
        return Usage.model_validate_json(text) if text else None
    except ValueError:  # a journal made by hand: the effect is shown without it
        return None


def follow(
    journal: Journal,
    run_id: str,
    sink: Callable[[Event], None],
    *,
    poll: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
) -> RunRecord:
    """Tell ``sink`` what ``run_id`` does until it ends; returns its record then. Raises
    :class:`WriterGone` when the process running it is gone first."""
    run = journal.run(run_id)
    sink(
        RunStarted(run_id=run_id, at=run.created_at, program=run.program, parent_run=run.parent_run)
    )
    told: dict[str, str] = {}  # address -> the status last told
    reader = Reader(journal.content)  # each entry is read once, in order
    writer_alive = getattr(journal, "writer_alive", None)
    while True:
        run = journal.run(run_id)  # read first: every entry of a finished run is then seen
        for e in journal.entries(run_id):
            before = told.get(e.address)
            if before is None:
                sink(
                    EffectStarted(
                        run_id=run_id,
                        at=e.started_at,
                        address=e.address,
                        kind=e.kind,
                        effect=reader.effect(e.kind, e.effect_json),
                    )
                )
                told[e.address] = "started"
            if e.status != "started" and told[e.address] == "started":
                for event in _finished(e):
                    sink(event)
                told[e.address] = e.status
        if run.status != "running":
            error = None
            if run.error_json:
                err = json_object(run.error_json)
                error = f"{err.get('type')}: {err.get('message')}" if err else run.error_json[:200]
            sink(
                RunFinished(
                    run_id=run_id, at=run.finished_at or time.time(), status=run.status, error=error
                )
            )
            return run
        if callable(writer_alive) and writer_alive(run_id) is False:
            raise WriterGone(
                f"the process running {run_id} is gone (it crashed or was killed); "
                f"continue it with: opdsl resume {run_id}"
            )
        sleep(poll)
