"""opdsl programs on a real Temporal server: the conformance programs end as they do locally,
histories replay, a changed effect is caught, cancellation reaches the activity, the history is
carried into continue-as-new, and what is refused is refused with a reason."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Replayer, Worker

from interpreters import MemoryJournal, VirtualClock, export_run, import_run, replay, resume, run
from interpreters.temporal import (
    OpdslRun,
    RunOutcome,
    TemporalError,
    TemporalJournal,
    answer,
    connect,
    export,
    fork,
    make_worker,
    outcome,
    parse_export,
    sandbox_runner,
    start_run,
)
from tests.conformance.programs import AGENTS, CASES, TOOLS, Case, model
from tests.interpreters.temporal import programs
from tests.interpreters.temporal import tools as test_tools
from tests.interpreters.temporal.conftest import Server

PROGRAMS = (
    [f"{c.program.__module__}:{c.program.__qualname__}" for c in CASES]
    + [f"{programs.__name__}:{name}" for name in ("steps", "cut_off", "greet", "budgeted")]
    + ["changing_program:greet", "clock_program:reads_the_clock"]
)


@asynccontextmanager
async def serving(
    server: Server, queue: str, *, tools: Iterable[Any] = (), **kwargs: Any
) -> AsyncIterator[Client]:
    client = await connect(server.target)
    worker: Worker = make_worker(
        client,
        task_queue=queue,
        programs=kwargs.pop("programs", PROGRAMS),
        tools=[*TOOLS, test_tools.slow, test_tools.word_count, test_tools.leak, *tools],
        model=model(),
        agents=AGENTS,
        passthrough=("tests",),
        **kwargs,
    )
    async with worker:
        yield client


def _local(case: Case) -> Any:
    return run(
        case.program,
        *case.args,
        model=model(),
        tools=TOOLS,
        agents=AGENTS,
        db=MemoryJournal(),
        state=case.state() if case.state else None,
        clock=VirtualClock(),
        seed=7,
        answer=case.answers.get,
    )


async def _answer_when_asked(client: Client, run_id: str, answers: dict[str, str]) -> None:
    handle = client.get_workflow_handle(run_id)
    while True:
        waiting = await handle.query("waiting", result_type=dict)
        if waiting:
            for address, question in waiting.items():
                await answer(client, run_id, answers[question], at=address)
            return
        await asyncio.sleep(0.1)


def test_conformance_programs_end_as_they_do_locally(temporal: Server) -> None:
    async def main() -> list[RunOutcome]:
        async with serving(temporal, "conformance") as client:
            handles = [
                await start_run(
                    client,
                    case.program,
                    task_queue="conformance",
                    args=case.args,
                    state=case.state() if case.state else None,
                    seed=7,
                    run_id=f"conf-{case.name}",
                )
                for case in CASES
            ]
            asking = [
                _answer_when_asked(client, f"conf-{c.name}", c.answers) for c in CASES if c.answers
            ]
            await asyncio.gather(*asking)
            ended = list(await asyncio.gather(*(outcome(h) for h in handles)))
            # Temporal's own replayer accepts every history the driver wrote
            replayer = Replayer(
                workflows=[OpdslRun],
                workflow_runner=sandbox_runner(("tests",)),
                data_converter=client.data_converter,
            )
            for h in handles:
                replayed = await replayer.replay_workflow(
                    await h.fetch_history(), raise_on_replay_failure=False
                )
                assert replayed.replay_failure is None, (h.id, replayed.replay_failure)
            return ended

    started = time.monotonic()
    outcomes = asyncio.run(main())
    # the slowest program waits 5 s on a timeout, 1 s and 2 s on sleeps: they ran at once
    assert time.monotonic() - started < 60
    for case, got in zip(CASES, outcomes, strict=True):
        local = _local(case)
        assert got.status == local.status, (case.name, got)
        if local.status == "failed":
            assert got.error == f"{type(local.error).__name__}: {local.error}"
            assert got.address == local.address
        else:
            value = json.loads(got.result_json or "null")
            expected = json.loads(local.journal.run(local.run_id).result_json or "null")
            if case.name == "time_and_randomness":
                # workflow time is real time: the 2 s sleep took 2 s and a little
                assert 2.0 <= value[0] < 5.0
                value, expected = value[1:], expected[1:]
            assert value == expected, case.name
        local_state = local.state.canonical() if local.state else None
        assert got.state_json == local_state, case.name


def test_a_temporal_run_reads_back_as_a_journal_replays_locally_and_forks(
    temporal: Server,
) -> None:
    case = next(c for c in CASES if c.name == "par_state")

    async def main() -> tuple[str, RunOutcome, RunOutcome]:
        async with serving(temporal, "readback") as client:
            first = await outcome(
                await start_run(
                    client,
                    case.program,
                    task_queue="readback",
                    state=case.state() if case.state else None,
                    run_id="readback-1",
                )
            )
            text = await export(client, "readback-1")
            child = await outcome(await fork(client, "readback-1", "joined", task_queue="readback"))
            return text, first, child

    text, first, child = asyncio.run(main())
    assert first.status == "completed" and child.status == "completed"
    assert child.result_json == first.result_json and child.state_json == first.state_json

    record, entries = parse_export(text)
    assert record.status == "completed" and record.program.endswith(":par_state")
    local_run = _local(case)
    assert local_run.journal is not None
    assert sorted(e.address for e in entries) == sorted(
        e.address for e in local_run.journal.entries(local_run.run_id)
    )
    assert all(e.status == "completed" for e in entries)

    # the same run through the read-only journal of the Temporal server
    remote = TemporalJournal(temporal.target)
    assert remote.run("readback-1").result_json == first.result_json
    assert [e.address for e in remote.entries("readback-1")] == [e.address for e in entries]
    assert remote.run(child.run_id).parent_run == "readback-1"
    listed = {r.run_id: r for r in remote.runs()}
    assert listed["readback-1"].status == "completed"
    with pytest.raises(Exception, match="read here, not written"):
        remote.delete_run("readback-1")

    # a local offline replay of it agrees
    local = MemoryJournal()
    import_run(local, text, source="readback-1.jsonl")
    state_type = type(case.state()) if case.state else None
    again = replay("readback-1", db=local, program=case.program, state_type=state_type)
    assert again.status == "completed"
    assert json.dumps(again.value, sort_keys=True) == json.dumps(
        json.loads(first.result_json or "null"), sort_keys=True
    )
    # and a local fork of it, from a checkpoint it passed on Temporal
    local_fork = resume(
        "readback-1",
        db=local,
        program=case.program,
        from_checkpoint="joined",
        state_type=state_type,
        tools=TOOLS,
        model=model(),
        agents=AGENTS,
        clock=VirtualClock(),
    )
    assert local_fork.status == "completed"
    assert local.run(local_fork.run_id).parent_run == "readback-1"
    assert local_fork.state is not None and local_fork.state.canonical() == first.state_json


def test_histories_replay_and_a_changed_tool_argument_does_not(
    temporal: Server, tmp_path: Path
) -> None:
    module = tmp_path / "changing_program.py"
    source = (
        "from op import Op, tool\n\n"
        "def greet(name: str) -> Op[str]:\n"
        "    r = yield from tool('slow', {'label': f'LABEL {name}', 'seconds': 0.0})\n"
        "    return r.output\n"
    )
    module.write_text(source.replace("LABEL", "hello"))
    sys.path.insert(0, str(tmp_path))
    try:

        async def main() -> None:
            async with serving(temporal, "replayer") as client:
                handle = await start_run(
                    client,
                    "changing_program:greet",
                    task_queue="replayer",
                    kwargs={"name": "Ada"},
                    run_id="replayer-1",
                )
                assert (await outcome(handle)).result_json == '"hello Ada"'
                history = await handle.fetch_history()
            replayer = Replayer(
                workflows=[OpdslRun],
                workflow_runner=sandbox_runner(),
                data_converter=client.data_converter,
            )
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            assert result.replay_failure is None

            module.write_text(source.replace("LABEL", "goodbye") + "\n# changed\n")
            changed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            assert changed.replay_failure is not None
            assert "activity" in str(changed.replay_failure).lower()

        asyncio.run(main())
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("changing_program", None)


def test_timeout_and_a_failing_branch_cancel_activities_in_flight(
    temporal: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = tmp_path / "marks"
    monkeypatch.setattr(test_tools, "MARKS", marks)

    async def main() -> tuple[RunOutcome, float]:
        async with serving(temporal, "cancel") as client:
            started = time.monotonic()
            got = await outcome(
                await start_run(
                    client, programs.cut_off, task_queue="cancel", args=(1.0,), run_id="cancel-1"
                )
            )
            took = time.monotonic() - started
            await asyncio.sleep(2.0)  # time for a heartbeat to carry the cancellation
            return got, took

    got, took = asyncio.run(main())
    assert got.status == "completed", got
    assert json.loads(got.result_json or "null") == ["TimedOut", "caught 'branch 2 gave up'"]
    # a 1 s timeout and a branch failing after 0.1 s: not the 30 s the tools would take
    assert took < 10, took
    lines = marks.read_text().splitlines()
    started = {line.split()[1] for line in lines if line.startswith("start")}
    finished = {line.split()[1] for line in lines if line.startswith("done")}
    assert {"timed", "sibling", "quick"} <= started
    assert finished == {"quick"}, "the cut-off tools were cancelled, not left running"


def test_a_long_history_continues_as_new_and_ends_as_locally(temporal: Server) -> None:
    async def main() -> tuple[RunOutcome, str, Any]:
        async with serving(temporal, "long") as client:
            handle = await start_run(
                client,
                programs.steps,
                task_queue="long",
                args=(12, 0.0),
                run_id="long-1",
                history_limit=40,
            )
            got = await outcome(handle)
            text = await export(client, "long-1")
            runs = [wf async for wf in client.list_workflows('WorkflowId="long-1"')]
            return got, text, runs

    got, text, runs = asyncio.run(main())
    assert got.status == "completed"
    assert json.loads(got.result_json or "null") == [f"s{i}" for i in range(12)]
    record, entries = parse_export(text)
    # the last run of the workflow holds the whole journal, each effect once
    assert [e.address for e in entries] == [str(i) for i in range(1, 25)]
    assert all(e.status == "completed" for e in entries)
    # it did continue as new: several runs of one workflow, all but the last continued
    assert len(runs) > 2
    assert (
        sum(wf.status == WorkflowExecutionStatus.CONTINUED_AS_NEW for wf in runs) == len(runs) - 1
    )


def test_refused_programs_answers_and_the_sandbox(temporal: Server, tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "asks")
    (tmp_path / "clock_program.py").write_text(
        "import time\n\nfrom op import Op, checkpoint\n\n\n"
        "def reads_the_clock() -> Op[float]:\n"
        "    yield from checkpoint('start')\n"
        "    return time.time()  # not deterministic: the sandbox refuses it\n"
    )
    sys.path.insert(0, str(tmp_path))

    async def main() -> None:
        async with serving(temporal, "refusals", programs=[PROGRAMS[0]]) as client:
            # a program this worker was not given
            denied = await outcome(
                await start_run(client, case.program, task_queue="refusals", run_id="denied-1")
            )
            assert denied.status == "failed"
            assert "this worker does not run tests.conformance.programs:asks" in (
                denied.error or ""
            )
        async with serving(temporal, "refusals", programs=["no_such_module:main"]) as client:
            # allowed, but not there: said at once, not retried forever
            missing = await outcome(
                await start_run(client, "no_such_module:main", task_queue="refusals")
            )
            assert missing.status == "failed"
            assert "cannot import program 'no_such_module:main'" in (missing.error or "")
        async with serving(temporal, "refusals2") as client:
            handle = await start_run(client, case.program, task_queue="refusals2", run_id="ask-1")
            while not await handle.query("waiting", result_type=dict):
                await asyncio.sleep(0.1)
            with pytest.raises(TemporalError, match="not waiting at address 9"):
                await answer(client, "ask-1", "Bob", at="9")
            assert await answer(client, "ask-1", "Ada") == "1"
            assert (await outcome(handle)).status == "completed"
            with pytest.raises(TemporalError, match="not waiting for an answer"):
                await answer(client, "ask-1", "again")

            # the sandbox refuses time.time(): the workflow task fails and is retried; the
            # program never sees the error and the run is not ended by it
            clock = await start_run(
                client, "clock_program:reads_the_clock", task_queue="refusals2", run_id="clock-1"
            )
            await asyncio.sleep(3)
            described = await clock.describe()
            assert described.status == WorkflowExecutionStatus.RUNNING
            events = [e async for e in clock.fetch_history_events()]
            failed = [e for e in events if e.HasField("workflow_task_failed_event_attributes")]
            assert failed
            message = failed[0].workflow_task_failed_event_attributes.failure.message
            assert "time.time" in message
            await clock.terminate("test over")

    try:
        asyncio.run(main())
    finally:
        sys.path.remove(str(tmp_path))


def test_unreachable_server_is_one_clear_error() -> None:
    with pytest.raises(TemporalError, match=r"cannot reach Temporal at 127\.0\.0\.1:1"):
        asyncio.run(connect("127.0.0.1:1"))


def test_quick_tools_secrets_and_seconds_budgets(
    temporal: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-4f9a8b7c6d5e"
    monkeypatch.setenv("OPDSL_TEST_API_KEY", secret)

    async def main() -> tuple[RunOutcome, Any, str]:
        async with serving(temporal, "budgets") as client:
            handle = await start_run(
                client, programs.budgeted, task_queue="budgets", args=(1.0,), run_id="budget-1"
            )
            got = await outcome(handle)
            history = await handle.fetch_history()
            return got, history, await export(client, "budget-1")

    got, history, text = asyncio.run(main())
    assert got.status == "completed", got
    # the budget stopped the slow steps on workflow time (a second: two or three of ten)
    assert json.loads(got.result_json or "null") == ["3", "the key is [redacted]", "seconds"]
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_id
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    markers = [e for e in history.events if e.HasField("marker_recorded_event_attributes")]
    # the quick tool (address 1) ran as a local activity: a marker, no scheduled activity
    assert not any(aid.startswith("1#") for aid in scheduled)
    assert any(aid.startswith("2#") for aid in scheduled)
    assert markers
    assert secret not in history.to_json() and secret not in text


def test_a_run_input_that_names_foreign_code_or_a_forged_journal_is_refused(
    temporal: Server,
) -> None:
    """Whoever can start a workflow writes its input: a state type from elsewhere (a module the
    worker would import) and a journal that is malformed or of another run are refused whole,
    before any effect."""
    from interpreters.temporal._client import _start
    from interpreters.temporal._types import RunInput

    steps = f"{programs.__name__}:steps"
    good = MemoryJournal()
    local = run(programs.steps, 1, 0.0, tools=[test_tools.slow], db=good, run_id="forged")
    assert local.status == "completed"
    exported = export_run(good, "forged")
    cases = [
        (
            RunInput(
                run_id="hostile-1",
                program=steps,
                args_json='{"args":[1,0],"kwargs":{}}',
                state_json="{}",
                state_type="antigravity:Nothing",
            ),
            "state type antigravity:Nothing is neither",
        ),
        (
            RunInput(run_id="hostile-2", program=steps, record="not a journal\n"),
            "the journal the run was given, line 1: expected a run record",
        ),
        (
            RunInput(run_id="hostile-3", program=steps, record=exported),
            "is of run forged",
        ),
        (
            RunInput(
                run_id="forged",
                program=steps,
                record=exported.replace('"address": "2"', '"address": "../2"'),
            ),
            "address '../2' is not an address",
        ),
    ]

    async def main() -> list[RunOutcome]:
        async with serving(temporal, "hostile") as client:
            return [await outcome(await _start(client, inp, "hostile")) for inp, _ in cases]

    for got, (_, expected) in zip(asyncio.run(main()), cases, strict=True):
        assert got.status == "failed" and expected in (got.error or ""), got
    assert "antigravity" not in sys.modules  # the worker never imported it
