"""A workflow's input is checked whole, once: malformed input fails the workflow at once with a
one-line reason (it never stays running, its task retried for ever); a low history limit
still ends; and of two answers to one question sent at once, the second is refused."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from interpreters import MemoryJournal, export_run, run
from interpreters.temporal import RunInput, RunOutcome, TemporalError, answer, outcome, start_run
from interpreters.temporal._client import TASK_TIMEOUT
from interpreters.temporal._input import _FIELDS, MAX_NESTING, checked_input, nesting
from interpreters.temporal._types import WORKFLOW, Admission, tools_digest
from interpreters.temporal._workflow import _run_tools
from tests.interpreters.temporal import programs
from tests.interpreters.temporal import tools as test_tools
from tests.interpreters.temporal.conftest import Server
from tests.interpreters.temporal.test_temporal import serving

STEPS = f"{programs.__name__}:steps"
ASKS = "tests.conformance.programs:asks"
DEEP = "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)


class _AsItIs(dict[str, Any]):
    """An input sent as it is: opdsl's codec would name its pieces by their texts."""


def _raw(text: str) -> RawValue:
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=text.encode()))


def _exported() -> str:
    journal = MemoryJournal()
    done = run(programs.steps, 1, 0.0, tools=[test_tools.slow], db=journal, run_id="given")
    assert done.status == "completed"
    return export_run(journal, "given")


def test_every_field_of_the_input_has_a_check() -> None:
    assert set(_FIELDS) == {f.name for f in dataclasses.fields(RunInput)}
    assert nesting('{"a": [1, {"b": "[[[\\"]]"}]}') == 3
    assert nesting(DEEP) == MAX_NESTING + 1


def test_malformed_input_fails_the_workflow_at_once_with_its_reason(temporal: Server) -> None:
    good = {"program": STEPS, "args_json": '{"args":[1,0],"kwargs":{}}'}
    given = _exported()
    lines = given.splitlines(keepends=True)
    entry = json.loads(lines[1])
    entry["entry"]["result_json"] = DEEP
    deep_entry = lines[0] + json.dumps(entry) + "\n" + "".join(lines[2:])
    cases: list[tuple[Any, str]] = [
        ({**good, "history_limit": 0}, "history_limit is 0; it must be from 1 to 51,200"),
        ({**good, "history_limit": 60_000}, "history_limit is 60,000; it must be from 1 to"),
        ({**good, "history_limit": "100"}, "history_limit is a whole number, not a str"),
        ({**good, "generation": -1}, "generation is -1; it must be 0 or more"),
        ({**good, "args_json": '["a"]'}, 'args_json is an object {"args": [...]'),
        ({**good, "args_json": '{"args":{"n":1}}'}, "args_json's args are a list, not a dict"),
        ({**good, "args_json": '{"args":[], "kwargs":[1]}'}, "kwargs are an object, not a list"),
        ({**good, "args_json": '{"args":[' + DEEP + "]}"}, "args_json nests deeper than 100"),
        (
            {**good, "args_json": '{"args":[],"kwargs":{"n":1,"seconds":0,"nope":2}}'},
            f"the arguments do not fit the program {STEPS}: got an unexpected keyword",
        ),
        ({**good, "args_json": '{"args":[1,2,3]}'}, "do not fit the program"),
        ({**good, "args_json": 7}, "args_json is text, not a int"),
        (
            {**good, "state_json": '{"x":' + DEEP + "}", "state_type": "state:CRDTModel"},
            "state_json nests deeper than 100",
        ),
        ({**good, "state_json": "{}"}, "state_json and state_type come together"),
        ({**good, "program": ["a", "b"]}, "program is text, not a list"),
        ({**good, "program": "no colon"}, "program 'no colon' is not a reference"),
        ({**good, "bogus": 1}, "a run's input has no field 'bogus'"),
        ({"args_json": good["args_json"]}, "a run's input needs its program"),
        ({**good, "run_id": "someone-else"}, "run_id 'someone-else' is not the workflow's id"),
        ({**good, "record": DEEP}, "the journal the run was given, line 1, nests deeper"),
        ({**good, "record": deep_entry}, "entry 1's result_json nests deeper than 100"),
        ({**good, "record": given, "restore_at": "9"}, "restore_at '9' is not a checkpoint"),
        ({**good, "restore_at": "2"}, "restore_at names a checkpoint of a record"),
        ({**good, "history_bytes": 10}, "history_bytes is 10; it must be from 65,536 to"),
        ({**good, "pieces": "x"}, "pieces is an object of texts by hash, not a str"),
        (_AsItIs({**good, "pieces": {"h": 1}}), "pieces: piece 'h' is text, not a int"),
        ({**good, "pieces": {"a" * 64: '"x"'}}, "pieces are the content of a record"),
        (
            _AsItIs({**good, "record": given, "pieces": {"a" * 64: '"not what its name says"'}}),
            f"piece {'a' * 64}: its text does not have that hash",
        ),
        (
            {**good, "record": given, "pieces": {"b" * 64: "[" + DEEP + "]"}},
            "nests deeper than 100",
        ),
        ({**good, "tools_json": "[]"}, "tools_json is not a listing of MCP tools: it is an"),
        (
            {**good, "tools_json": '{"git":{"tools":[{"name":"git_log","description":""}]}}'},
            "server 'git': tool 1 needs its parameters as an object",
        ),
        (_raw("[1, 2]"), "a run's input is an object of RunInput's fields, not a list"),
        (_raw("[" * 100_000 + "]" * 100_000), "a run's input cannot be decoded"),
    ]

    async def start(client: Client, n: int, value: Any) -> Any:
        run_id = "given" if isinstance(value, dict) and "record" in value else f"malformed-{n}"
        if isinstance(value, _AsItIs):
            value = _raw(json.dumps({"run_id": run_id, **value}))
        elif isinstance(value, dict) and "run_id" not in value:
            value = {"run_id": run_id, **value}
        handle = await client.start_workflow(
            WORKFLOW, value, id=run_id, task_queue="malformed", task_timeout=TASK_TIMEOUT
        )
        # no retries: the workflow ends at once (a task that failed would keep it running)
        got = await asyncio.wait_for(outcome(handle), 20)
        return got, (await handle.describe()).status

    async def main() -> list[Any]:
        async with serving(temporal, "malformed") as client:
            alone = [n for n, (v, _) in enumerate(cases) if isinstance(v, dict) and "record" in v]
            ended = dict(
                zip(
                    (n for n in range(len(cases)) if n not in alone),
                    await asyncio.gather(
                        *(start(client, n, v) for n, (v, _) in enumerate(cases) if n not in alone)
                    ),
                    strict=True,
                )
            )
            for n in alone:  # the runs given the one journal share its run id: one at a time
                ended[n] = await start(client, n, cases[n][0])
            return [ended[n] for n in range(len(cases))]

    for (got, status), (value, expected) in zip(asyncio.run(main()), cases, strict=True):
        assert status == WorkflowExecutionStatus.FAILED, (value, got)
        assert expected in (got.error or ""), (expected, got.error)
        assert "\n" not in (got.error or "")


def test_a_history_limit_of_one_still_ends(temporal: Server) -> None:
    """Each run of the workflow performs an effect before it continues as new."""

    async def main() -> tuple[Any, int]:
        async with serving(temporal, "tight") as client:
            handle = await start_run(
                client, programs.steps, task_queue="tight", args=(2, 0.0), history_limit=1
            )
            got = await asyncio.wait_for(outcome(handle), 60)
            runs = [wf async for wf in client.list_workflows(f'WorkflowId="{handle.id}"')]
            return got, len(runs)

    got, runs = asyncio.run(main())
    assert got.status == "completed", got
    assert json.loads(got.result_json or "null") == ["s0", "s1"]
    assert runs == 4  # one run of the workflow for each of the four effects


def test_two_answers_to_one_question_at_once_the_second_is_refused(temporal: Server) -> None:
    async def main() -> tuple[list[Any], Any]:
        async with serving(temporal, "answers") as client:
            handle = await start_run(client, ASKS, task_queue="answers")
            while not await handle.query("waiting", result_type=dict):
                await asyncio.sleep(0.05)
            names = [f"name-{i}" for i in range(4)]
            sent = await asyncio.gather(
                *(answer(client, handle.id, n) for n in names), return_exceptions=True
            )
            return sent, await outcome(handle)

    sent, got = asyncio.run(main())
    accepted = [i for i, s in enumerate(sent) if s == "1"]
    assert len(accepted) == 1, sent
    for i, s in enumerate(sent):
        if i not in accepted:
            assert isinstance(s, TemporalError), s
            assert "answered already" in str(s) or "not waiting" in str(s), s
    # the program got the answer that was accepted, not another one
    assert got.status == "completed"
    value = json.loads(got.result_json or "null")
    assert [n for n in range(4) if f"name-{n}" in value] == accepted, value


SURROGATE = '{"h":{"tools":[{"name":"x","description":"\\ud800","parameters":{}}]}}'
"""A listing of MCP tools whose one tool's description is a lone surrogate (JSON lets it be
written; a journal handed over keeps it, as SQLite's text does)."""


def _given_with_config(config: dict[str, Any]) -> str:
    """The journal of :func:`_exported`, its run's config replaced by ``config``."""
    lines = _exported().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["run"]["config_json"] = json.dumps(config)
    return json.dumps(first) + "\n" + "".join(lines[1:])


def test_a_listing_with_a_lone_surrogate_is_one_like_another() -> None:
    """The MCP tools a run goes with come from its input (a continue-as-new) or from its
    carried record's config (a fork): a lone surrogate in either is a listing like another
    (its digest is taken, not a task that fails for ever)."""
    listing = json.loads(SURROGATE)
    checked = checked_input({"run_id": "r", "program": STEPS, "tools_json": SURROGATE}, "r")
    tools = _run_tools(checked, Admission(mcp=listing))
    assert tools is not None and tools.listing == listing
    assert tools.digest == tools_digest(listing) != tools_digest({})
    forked = {"run_id": "given", "program": STEPS, "record": _given_with_config({"mcp": listing})}
    tools = _run_tools(checked_input(forked, "given"), Admission(mcp=listing))
    assert tools is not None and tools.listing == listing


def test_a_listing_that_is_not_one_fails_the_run_naming_why() -> None:
    """Carried into a continue-as-new (``tools_json``) or in a forked record's config, what is
    not a listing of MCP tools fails the run at once, saying what is wrong with it."""
    with pytest.raises(ApplicationError) as caught:
        bare = '{"h":{"tools":[{"name":"x"}]}}'
        checked_input({"run_id": "r", "program": STEPS, "tools_json": bare}, "r")
    assert caught.value.message == (
        "tools_json is not a listing of MCP tools: server 'h': tool 1 needs its description as text"
    )
    assert caught.value.non_retryable
    not_one = {"run_id": "given", "program": STEPS, "record": _given_with_config({"mcp": {"h": 5}})}
    with pytest.raises(ApplicationError) as caught:
        _run_tools(checked_input(not_one, "given"), Admission(mcp={}))
    assert caught.value.message == (
        "the carried record's MCP tools are not a listing: server 'h' has no list of tools"
    )
    assert caught.value.non_retryable


def test_a_run_given_a_listing_with_a_lone_surrogate_goes_on(temporal: Server) -> None:
    """A run of a worker with no MCP servers, given that listing as the tools it goes with,
    goes on without them (nothing it did depends on them), rather than failing its first
    task for ever."""

    async def main() -> Any:
        async with serving(temporal, "surrogate") as client:
            handle = await client.start_workflow(
                WORKFLOW,
                {
                    "run_id": "surrogate",
                    "program": STEPS,
                    "args_json": '{"args":[1,0],"kwargs":{}}',
                    "tools_json": SURROGATE,
                },
                id="surrogate",
                task_queue="surrogate",
                task_timeout=TASK_TIMEOUT,
                result_type=RunOutcome,
            )
            return await asyncio.wait_for(outcome(handle), 20)

    got = asyncio.run(main())
    assert got.status == "completed", got
    assert json.loads(got.result_json or "null") == ["s0"]
