"""opdsl programs on Temporal (the ``opdsl[temporal]`` extra): a workflow that drives any
program, activities that perform its effects on workers, and a client that starts, answers,
forks and reads runs back as opdsl journals.

::

    client = await connect("127.0.0.1:7233")
    async with make_worker(client, task_queue="q", programs=["app:main"], tools=[...]):
        handle = await start_run(client, main, task_queue="q", kwargs={"goal": "..."})
        print((await outcome(handle)).status)

See ``_workflow`` for how each effect maps onto Temporal, and the README for when to use it.
Names are imported on first use, so that the workflow sandbox importing ``_workflow`` does not
import the worker side (HTTP clients, tools).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interpreters.journal._portable import parse_export, read_export
    from interpreters.temporal._activities import Activities, EffectReader, effect_from_json
    from interpreters.temporal._client import (
        TemporalError,
        TemporalJournal,
        Waiting,
        answer,
        connect,
        export,
        fork,
        outcome,
        outcome_or_waiting,
        start_run,
    )
    from interpreters.temporal._gc import collect_garbage
    from interpreters.temporal._store import (
        ContentCodec,
        ContentMissing,
        ContentStore,
        DirectoryStore,
        TemporalLimit,
        content_store,
    )
    from interpreters.temporal._types import WORKFLOW, Carried, RunInput, RunOutcome, activity_id
    from interpreters.temporal._worker import (
        PASSED_THROUGH,
        ProgramRefused,
        make_worker,
        sandbox_runner,
    )
    from interpreters.temporal._workflow import OpdslRun, TemporalClock

_WHERE = {
    "Activities": "interpreters.temporal._activities",
    "Carried": "interpreters.temporal._types",
    "ContentCodec": "interpreters.temporal._store",
    "ContentMissing": "interpreters.temporal._store",
    "ContentStore": "interpreters.temporal._store",
    "DirectoryStore": "interpreters.temporal._store",
    "EffectReader": "interpreters.temporal._activities",
    "TemporalLimit": "interpreters.temporal._store",
    "collect_garbage": "interpreters.temporal._gc",
    "content_store": "interpreters.temporal._store",
    "read_export": "interpreters.journal._portable",
    "OpdslRun": "interpreters.temporal._workflow",
    "PASSED_THROUGH": "interpreters.temporal._worker",
    "ProgramRefused": "interpreters.temporal._worker",
    "RunInput": "interpreters.temporal._types",
    "RunOutcome": "interpreters.temporal._types",
    "TemporalClock": "interpreters.temporal._workflow",
    "TemporalError": "interpreters.temporal._client",
    "TemporalJournal": "interpreters.temporal._client",
    "Waiting": "interpreters.temporal._client",
    "WORKFLOW": "interpreters.temporal._types",
    "activity_id": "interpreters.temporal._types",
    "answer": "interpreters.temporal._client",
    "connect": "interpreters.temporal._client",
    "effect_from_json": "interpreters.temporal._activities",
    "export": "interpreters.temporal._client",
    "fork": "interpreters.temporal._client",
    "make_worker": "interpreters.temporal._worker",
    "outcome": "interpreters.temporal._client",
    "outcome_or_waiting": "interpreters.temporal._client",
    "parse_export": "interpreters.journal._portable",
    "sandbox_runner": "interpreters.temporal._worker",
    "start_run": "interpreters.temporal._client",
}

__all__ = [
    "Activities",
    "Carried",
    "ContentCodec",
    "ContentMissing",
    "ContentStore",
    "DirectoryStore",
    "EffectReader",
    "TemporalLimit",
    "collect_garbage",
    "content_store",
    "read_export",
    "OpdslRun",
    "PASSED_THROUGH",
    "ProgramRefused",
    "RunInput",
    "RunOutcome",
    "TemporalClock",
    "TemporalError",
    "TemporalJournal",
    "Waiting",
    "WORKFLOW",
    "activity_id",
    "answer",
    "connect",
    "effect_from_json",
    "export",
    "fork",
    "make_worker",
    "outcome",
    "outcome_or_waiting",
    "parse_export",
    "sandbox_runner",
    "start_run",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'interpreters.temporal' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value
