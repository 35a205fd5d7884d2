"""opdsl programs on Temporal (the ``opdsl[temporal]`` extra): a workflow that drives any
program, activities that perform its effects on workers, and a client that starts, answers,
forks and reads runs back as opdsl journals.

::

    client = await connect("127.0.0.1:7233")
    async with make_worker(client, task_queue="q", programs=["app:main"], tools=[...]):
        handle = await start_run(client, main, task_queue="q", kwargs={"goal": "..."})
        print((await outcome(handle)).status)

See ``_workflow`` for how each effect maps onto Temporal, and the README for when to use it.
"""

from interpreters.temporal._activities import Activities, effect_from_json
from interpreters.temporal._client import (
    TemporalError,
    TemporalJournal,
    answer,
    connect,
    export,
    fork,
    outcome,
    parse_export,
    start_run,
)
from interpreters.temporal._types import WORKFLOW, RunInput, RunOutcome, activity_id
from interpreters.temporal._worker import PASSED_THROUGH, make_worker, sandbox_runner
from interpreters.temporal._workflow import OpdslRun, TemporalClock

__all__ = [
    "PASSED_THROUGH",
    "WORKFLOW",
    "Activities",
    "OpdslRun",
    "RunInput",
    "RunOutcome",
    "TemporalClock",
    "TemporalError",
    "TemporalJournal",
    "activity_id",
    "answer",
    "connect",
    "effect_from_json",
    "export",
    "fork",
    "make_worker",
    "outcome",
    "parse_export",
    "sandbox_runner",
    "start_run",
]
