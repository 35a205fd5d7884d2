"""A worker that stops holding a run (here one waiting on its question) leaves that run's
coroutines to the garbage collector, which closes them wherever it runs next: often inside
another run's activation, where the ``finally`` blocks of the closed run execute. Nothing they
do may reach the run that happens to be active: a memo upserted there once put an event into
another run's history that its own code never asked for, and the run failed to replay."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio.client import Client
from temporalio.worker import Replayer

from interpreters.temporal import OpdslRun, connect, make_worker, outcome, sandbox_runner, start_run
from tests.interpreters.temporal.conftest import Server, asked

ASKS = "tests.interpreters.temporal.asking_programs:plan_then_ask"
COLLECTS = "tests.interpreters.temporal.asking_programs:collect_garbage"


@asynccontextmanager
async def _worker(client: Client, queue: str) -> AsyncIterator[None]:
    worker = make_worker(
        client,
        task_queue=queue,
        programs=[ASKS, COLLECTS],
        passthrough=("tests",),
        sticky_seconds=0.5,
    )
    async with worker:
        yield


def test_a_run_a_stopped_worker_left_behind_reaches_no_other_run(temporal: Server) -> None:
    async def main() -> None:
        client = await connect(temporal.target)
        gc.disable()  # the left run is closed by the collection inside the other run, not before
        try:
            async with _worker(client, "abandoned"):
                left = await start_run(
                    client, ASKS, task_queue="abandoned", args=("a plan",), run_id="left"
                )
                await asked(left)
            async with _worker(client, "abandoned"):
                other = await start_run(client, COLLECTS, task_queue="abandoned", run_id="collects")
                ended = await outcome(other)
        finally:
            gc.enable()
        assert ended.status == "completed", ended.error
        history = await other.fetch_history()
        upserts = [
            e.event_id
            for e in history.events
            if e.HasField("workflow_properties_modified_event_attributes")
        ]
        assert upserts == [], f"events {upserts} of run 'collects' came from run 'left'"
        replayer = Replayer(
            workflows=[OpdslRun],
            workflow_runner=sandbox_runner(("tests",)),
            data_converter=client.data_converter,
        )
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, str(replayed.replay_failure)

    asyncio.run(main())
