"""``opdsl worker --model scripted:answers.json``: the model's place in its answers is each
run's, not one list the worker's runs share, and it comes back from the run's history when
another worker (with a new model, read from the same file) takes the run over."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from interpreters.models import resolve_model
from interpreters.temporal import answer, connect, make_worker, outcome, start_run
from tests.interpreters.temporal.conftest import Server

PROGRAMS = ["tests.fixtures.scripted_runs:two_labels", "tests.fixtures.scripted_runs:summarize"]


def _worker(client: Client, queue: str, spec: str) -> Worker:
    return make_worker(
        client,
        task_queue=queue,
        programs=PROGRAMS,
        model=resolve_model(spec),
        passthrough=("tests",),
        sticky_seconds=0.5,
    )


def _spec(tmp_path: Path, *texts: str) -> str:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(list(texts)), encoding="utf-8")
    return f"scripted:{path}"


def test_each_run_on_one_worker_starts_at_the_first_answer(
    temporal: Server, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, "bug", "docs")

    async def main() -> list[str | None]:
        client = await connect(temporal.target)
        async with _worker(client, "scripted-runs", spec):
            ends = []
            for i in range(2):
                handle = await start_run(
                    client, PROGRAMS[0], task_queue="scripted-runs", run_id=f"scripted-{i}"
                )
                ended = await outcome(handle)
                assert ended.status == "completed", ended.error
                ends.append(ended.result_json)
            return ends

    assert [json.loads(e or "null") for e in asyncio.run(main())] == [["bug", "docs"]] * 2


def test_a_run_taken_over_by_a_new_worker_goes_on_from_its_next_answer(
    temporal: Server, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, "note 1", "note 2", "note 3", "the summary")

    async def main() -> str | None:
        client = await connect(temporal.target)
        async with _worker(client, "scripted-takeover", spec):
            handle = await start_run(
                client, PROGRAMS[1], task_queue="scripted-takeover", run_id="takeover"
            )
            while not await handle.query("waiting", result_type=dict):
                await asyncio.sleep(0.1)
        # the first worker is gone; a new one, with a new model read from the same file
        async with _worker(client, "scripted-takeover", spec):
            await answer(client, "takeover", "the team")
            ended = await outcome(handle)
            assert ended.status == "completed", ended.error
            return ended.result_json

    assert json.loads(asyncio.run(main()) or "null") == "the team: the summary"
