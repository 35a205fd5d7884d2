"""Typed answers (``infer(..., output=Model)``), constrained tool calls and the warning about a
server that makes no tool calls, against real servers on 127.0.0.1 that speak each provider's
protocol (they record what they were sent)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from pydantic import BaseModel
from rich.console import Console

from interpreters import ConsoleSink, MemoryJournal, replay, run
from interpreters.models import AnthropicModel, OllamaModel, OpenAIModel
from interpreters.models._base import tools_template
from op import Infer, InvalidOutput, Message, Op, Response, infer
from op.events import Emitted, Event
from programs.loop import tool_loop
from state import canonical_json
from tests.servers import Answer, ScriptedServer, anthropic, ollama, openai

KEY = "sk-secret-test-key-123456"


class Step(BaseModel):
    path: str
    why: str = ""


class Plan(BaseModel):
    title: str
    steps: list[Step]


GOOD = {"title": "fix the bug", "steps": [{"path": "a.py", "why": "it divides by zero"}]}
BAD = {"title": "fix the bug", "steps": [{"why": "no path"}]}


def plan() -> Op[Plan]:
    return (yield from infer("Plan the fix.", output=Plan))


def plan_or_error(retries: int) -> Op[str]:
    try:
        p = yield from infer("Plan the fix.", output=Plan, retries=retries)
    except InvalidOutput as exc:
        return f"gave up after {exc.attempts}: {exc.error}"
    return p.title


def _model(provider: str, srv: ScriptedServer, stream: bool) -> Any:
    if provider == "anthropic":
        return AnthropicModel("claude-sonnet-4-5", base_url=srv.url, api_key=KEY, stream=stream)
    if provider == "ollama":
        return OllamaModel("qwen3:8b", base_url=srv.url, stream=stream)
    model = OpenAIModel("gpt-4.1-mini", base_url=f"{srv.url}/v1", api_key=KEY, stream=stream)
    if provider == "openai-compatible":
        model.provider = "openai-compatible"
    return model


def _answer(provider: str, data: Any) -> Answer:
    """The provider's answer whose structured content is ``data`` (text, or an object)."""
    text = data if isinstance(data, str) else json.dumps(data)
    if provider == "anthropic":
        if isinstance(data, str):
            return anthropic(data)
        return anthropic("", [("toolu_1", "Plan", data)])
    if provider == "ollama":
        return ollama(text)
    return openai(text)


def _infer_entries(journal: MemoryJournal, run_id: str) -> list[Any]:
    entries = sorted(journal.entries(run_id), key=lambda e: int(e.address.split(".")[0]))
    return [e for e in entries if e.kind == "infer"]


PROVIDERS = ["openai", "openai-compatible", "anthropic", "ollama"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_typed_answer_is_asked_in_the_providers_way_retried_once_and_replayed(
    provider: str, stream: bool
) -> None:
    journal = MemoryJournal()
    with ScriptedServer([_answer(provider, BAD), _answer(provider, GOOD)]) as srv:
        result = run(plan, model=_model(provider, srv, stream), db=journal)
        first, second = srv.requests
    value = result.value
    assert type(value) is Plan and value == Plan.model_validate(GOOD)
    schema = Plan.model_json_schema()
    if provider == "anthropic":
        assert first["tools"] == [
            {
                "name": "Plan",
                "description": "Give the answer as a Plan.",
                "input_schema": schema,
                "cache_control": {"type": "ephemeral"},
            }
        ]
        assert first["tool_choice"] == {"type": "tool", "name": "Plan"}
    elif provider == "ollama":
        assert first["format"] == schema
    else:
        fmt = first["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
        strict = fmt["json_schema"]["schema"]
        assert fmt["json_schema"]["name"] == "Plan"
        assert strict["additionalProperties"] is False and strict["required"] == ["title", "steps"]
        step = strict["$defs"]["Step"]
        assert step["required"] == ["path", "why"] and "default" not in step["properties"]["why"]
    # the reply that did not validate went back with what was wrong with it
    told = second["messages"][-1]
    text = told["content"] if isinstance(told["content"], str) else told["content"][0]["text"]
    assert text.startswith("Your answer is not a valid Plan: steps.0.path: Field required"), text
    # the journal holds what the model said, each try with its number; a replay is offline
    entries = _infer_entries(journal, result.run_id)
    assert [json.loads(e.effect_json)["output"]["attempt"] for e in entries] == [1, 2]
    said = [json.loads(Response.model_validate_json(e.result_json or "").text) for e in entries]
    assert said == [BAD, GOOD]
    again = replay(result.run_id, db=journal).value
    assert type(again) is Plan and again == value


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_answer_that_never_validates_is_an_error_the_program_reads(provider: str) -> None:
    journal = MemoryJournal()
    answers = [_answer(provider, BAD), _answer(provider, "not json at all")]
    with ScriptedServer(answers) as srv:
        result = run(plan_or_error, 1, model=_model(provider, srv, False), db=journal)
        assert len(srv.requests) == 2
    said = result.value
    assert said.startswith("gave up after 2: "), said
    if provider != "anthropic":  # Anthropic's forced tool always gives an object
        assert "Invalid JSON" in said, said
    assert len(_infer_entries(journal, result.run_id)) == 2


def test_an_uncaught_invalid_answer_fails_the_run_in_one_line() -> None:
    with ScriptedServer([openai("{}")] * 3) as srv:
        result = run(plan, model=_model("openai", srv, False))
    assert result.status == "failed" and isinstance(result.error, InvalidOutput)
    text = str(result.error)
    assert "\n" not in text
    assert text.startswith("the model's answer is not a valid Plan after 3 attempt(s): title: ")


def test_a_fenced_answer_validates_and_a_cut_one_is_said_to_be_cut() -> None:
    fenced = "Here it is:\n```json\n" + json.dumps(GOOD) + "\n```"
    with ScriptedServer([openai(fenced)]) as srv:
        assert run(plan, model=_model("openai", srv, False)).value.title == "fix the bug"

    def cut(req: Any) -> Any:
        reply = openai(json.dumps(GOOD)[:20])(req)
        reply.body["choices"][0]["finish_reason"] = "length"
        return reply

    with ScriptedServer([cut, cut]) as srv:
        said = run(plan_or_error, 1, model=_model("openai", srv, False)).value
    assert said == (
        "gave up after 2: it was cut off at the limit on its length before it ended; "
        "answer more briefly"
    )


def test_wrong_uses_of_output_are_refused_where_they_are_written() -> None:
    with pytest.raises(TypeError, match="output= takes a pydantic model class, not <class 'dict'>"):
        infer("x", output=dict)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="output= and tools= do not go together"):
        infer("x", output=Plan, tools=["read_file"])
    with pytest.raises(TypeError, match="retries= goes with output="):
        infer("x", retries=2)
    with pytest.raises(ValueError, match="retries= needs a whole number >= 0, got -1"):
        infer("x", output=Plan, retries=-1)


def test_an_infer_without_output_is_the_bytes_it_always_was() -> None:
    effect = Infer(messages=(Message.user("hi"),), tools=("a",), params={"max_tokens": 5})
    assert canonical_json(effect) == (
        '{"kind":"infer","messages":[{"content":"hi","role":"user","tool_call_id":null,'
        '"tool_calls":[]}],"model":null,"params":{"max_tokens":5},"tools":["a"]}'
    )


# -- constrained tool calls -----------------------------------------------------------------------


def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


def adding() -> Op[tuple[str, list[str]]]:
    reply, history = yield from tool_loop(
        [Message.user("What is 2 + 3?")], tools=["add"], constrained=True, max_steps=3
    )
    return reply.text, [m.content for m in history]


def test_a_constrained_loop_asks_for_calls_valid_by_construction_and_reads_them() -> None:
    call = json.dumps({"name": "add", "arguments": {"a": 2, "b": 3}})
    journal = MemoryJournal()
    events: list[Event] = []
    with ScriptedServer([openai(call), openai('{"answer": "5"}')]) as srv:
        model = _model("openai-compatible", srv, False)
        result = run(adding, model=model, tools=[add], db=journal, on_event=events.append)
        first = srv.requests[0]
    text, history = result.value
    assert text == "5"  # the final answer's words
    assert history == ["What is 2 + 3?", call, "Result of add:\n5", '{"answer": "5"}']
    fmt = first["response_format"]["json_schema"]
    assert fmt["name"] == "tool_call" and fmt["strict"] is False
    add_call, final = fmt["schema"]["anyOf"]
    assert add_call["properties"]["name"] == {"const": "add"}
    assert add_call["properties"]["arguments"]["required"] == ["a", "b"]
    assert final["required"] == ["answer"]
    assert first["tools"][0]["function"]["name"] == "add"  # the template still shows the tools
    assert [e.kind for e in journal.entries(result.run_id)] == ["infer", "tool", "infer"]
    # asked for calls as JSON text, the model wrote them so: no warning about the server
    assert not [e for e in events if isinstance(e, Emitted)]
    assert replay(result.run_id, db=journal).value == result.value


# -- a server that never returns a tool call -------------------------------------------------------


def test_a_server_that_returns_no_tool_calls_is_warned_about_once_naming_the_fix() -> None:
    call = '```json\n{"name": "add", "arguments": {"a": 1, "b": 1}}\n```'
    out = io.StringIO()
    events: list[Event] = []

    def both(event: Event) -> None:
        events.append(event)
        console(event)

    console = ConsoleSink(Console(file=out, width=100, color_system=None), live=False)
    with ScriptedServer([openai(call), openai(call), openai("2, twice")]) as srv:
        model = _model("openai-compatible", srv, False)

        def twice() -> Op[str]:
            reply, _ = yield from tool_loop([Message.user("1+1?")], tools=["add"], max_steps=4)
            return reply.text

        result = run(twice, model=model, tools=[add], on_event=both)
    assert result.value == "2, twice"
    warnings = [e for e in events if isinstance(e, Emitted) and e.name == "warning"]
    assert len(warnings) == 1
    said = str(warnings[0].data)
    assert "wrote its call as text: the server has returned no tool call" in said
    assert f"--chat-template-file {tools_template()}" in said
    assert tools_template().is_file()
    shown = " ".join(out.getvalue().split())
    assert f"warning: model {model.spec} was offered 1 tool(s)" in shown
    assert str(tools_template()) in shown  # shown whole, fix and all


def test_a_server_that_has_returned_a_tool_call_is_not_warned_about() -> None:
    text_call = '{"name": "add", "arguments": {"a": 1, "b": 1}}'
    events: list[Event] = []
    answers = [
        openai("", [("call_1", "add", '{"a": 1, "b": 1}')]),
        openai(text_call),
        openai("done"),
    ]
    with ScriptedServer(answers) as srv:
        model = _model("openai-compatible", srv, False)

        def loop() -> Op[str]:
            reply, _ = yield from tool_loop([Message.user("go")], tools=["add"], max_steps=4)
            return reply.text

        assert run(loop, model=model, tools=[add], on_event=events.append).value == "done"
    assert not [e for e in events if isinstance(e, Emitted)]


def test_a_dry_run_answers_a_typed_infer_with_a_value_that_fits() -> None:
    from interpreters import dry_run

    shown = dry_run(plan, model="openai:gpt-4.1-mini")
    assert shown.status == "completed", shown.error
    assert [s.kind for s in shown.steps] == ["infer"]  # one stub, no retries
    assert shown.value == Plan(title="", steps=[])
