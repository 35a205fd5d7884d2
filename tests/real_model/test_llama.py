"""The ``openai-compatible:`` provider against a real llama.cpp server and a real model.

The model is tiny and sampled: every assertion is about the protocol and the journal (what
was sent, what came back, what was recorded, what replays), never about the words.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import git
import httpx
import pytest

from interpreters import SqliteJournal, ToolRegistry, replay, resolve_model, run
from interpreters.models.openai import OpenAIModel
from op import (
    Budget,
    BudgetExhausted,
    Failure,
    Message,
    ModelError,
    Op,
    Response,
    TimedOut,
    ToolCall,
    ToolResult,
    infer,
    limit,
    timeout,
)
from op.effects import ModelRequest
from op.events import Event, TokenDelta
from programs.coder import CoderConfig, CodeState, coder
from programs.loop import tool_loop
from tests.helpers import sample_repo
from tests.real_model.conftest import CONTEXT, Llama

pytestmark = pytest.mark.real_model

LONG = "Write a very long story about a lighthouse keeper, in many chapters."


def weather(city: str) -> str:
    """The weather in a city."""
    return f"rain in {city}"


def say_hello() -> Op[Response]:
    return (yield from infer("Say hello in one short sentence.", max_tokens=24))


def capped(n: int) -> Op[Response]:
    return (yield from infer(LONG, max_tokens=n, ignore_eos=True))


def uncapped() -> Op[Response]:
    return (yield from infer(LONG, ignore_eos=True))


def budgeted(tokens: int) -> Op[Any]:
    # ignore_eos (llama.cpp): the model writes until max_tokens, however short its story
    return (yield from limit(Budget(tokens=tokens), infer(LONG, max_tokens=1500, ignore_eos=True)))


def deadline(seconds: float) -> Op[Any]:
    return (yield from timeout(seconds, infer(LONG, max_tokens=1500, ignore_eos=True)))


PARIS = ToolCall(id="call_paris", name="weather", arguments={"city": "Paris"})
ROME = ToolCall(id="call_rome", name="weather", arguments={"city": "Rome"})
HISTORY = (
    Message.system("You answer questions about the weather with the weather tool."),
    Message.user("What is the weather in Paris and in Rome?"),
    Message(role="assistant", content="", tool_calls=(PARIS, ROME)),
    Message.tool_result(PARIS, ToolResult(output="rain in Paris")),
    Message.tool_result(ROME, ToolResult(output="sun in Rome")),
)


def two_calls_answered() -> Op[tuple[Response, list[Message]]]:
    """A turn that called two tools, their two results, then the model again (which may
    call more: the loop runs whatever it calls)."""
    return (
        yield from tool_loop(HISTORY, tools=["weather"], max_steps=2, params={"max_tokens": 48})
    )


def _sqlite(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


def _entries(db: str, run_id: str) -> list[Any]:
    """The run's entries, each with its whole effect and result (the journal keeps a
    conversation's messages once and refers to them)."""
    journal = SqliteJournal(db)
    try:
        return [journal.whole(e) for e in journal.entries(run_id)]
    finally:
        journal.close()


def test_a_plain_call_is_journaled_with_its_usage_and_replays_offline(
    llama: Llama, tmp_path: Path
) -> None:
    db = _sqlite(tmp_path)
    result = run(say_hello, model=llama.spec, db=db)
    reply = result.value
    assert reply.stop_reason in ("end_turn", "max_tokens")
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens <= 24
    assert reply.usage.cost_usd is None  # a local model has no price, and says so
    [entry] = _entries(db, result.run_id)
    assert entry.kind == "infer" and entry.status == "completed"
    assert json.loads(entry.usage_json)["output_tokens"] == reply.usage.output_tokens
    assert Response.model_validate_json(entry.result_json) == reply
    again = replay(result.run_id, db=db)  # no server is asked: it reads the journal only
    assert again.value == reply


def test_streamed_tokens_joined_are_the_journaled_text(llama: Llama, tmp_path: Path) -> None:
    deltas: list[str] = []

    def sink(event: Event) -> None:
        if isinstance(event, TokenDelta):
            deltas.append(event.text)

    db = _sqlite(tmp_path)
    result = run(capped, 40, model=llama.spec, db=db, on_event=sink)
    reply = result.value
    assert deltas and "".join(deltas) == reply.text
    [entry] = _entries(db, result.run_id)
    assert json.loads(entry.result_json)["text"] == "".join(deltas)


def test_a_call_without_streaming_says_the_same_things(llama: Llama) -> None:
    reply = run(capped, 8, model=f"{llama.spec}?stream=false").value
    assert reply.stop_reason == "max_tokens" and reply.usage.output_tokens == 8


def test_max_tokens_per_call_per_spec_and_by_default(
    llama: Llama, monkeypatch: pytest.MonkeyPatch
) -> None:
    per_call = run(capped, 5, model=llama.spec).value
    assert (per_call.stop_reason, per_call.usage.output_tokens) == ("max_tokens", 5)
    per_spec = run(uncapped, model=f"{llama.spec}?max_tokens=7").value
    assert (per_spec.stop_reason, per_spec.usage.output_tokens) == ("max_tokens", 7)
    monkeypatch.setenv("OPDSL_MAX_TOKENS", "6")
    by_default = run(uncapped, model=llama.spec).value
    assert (by_default.stop_reason, by_default.usage.output_tokens) == ("max_tokens", 6)


def test_a_tokens_budget_stops_a_streamed_call_and_charges_what_came(
    llama: Llama, tmp_path: Path
) -> None:
    db = _sqlite(tmp_path)
    outcome = run(budgeted, 30, model=llama.spec, db=db).value
    assert isinstance(outcome, Failure), outcome
    exhausted = outcome.failure()
    assert isinstance(exhausted, BudgetExhausted) and exhausted.exceeded == "tokens"
    # what streamed was charged: at least the 30 it was allowed, far from the 1,500 asked
    assert 30 <= exhausted.spent.tokens < 200, exhausted
    llama.wait_idle(within=15)  # the server stopped writing when the connection closed
    [scope, call] = sorted(_entries(db, run_id_of(db)), key=lambda e: e.address)
    assert (scope.kind, call.kind, call.status) == ("limit", "infer", "cancelled")


def run_id_of(db: str) -> str:
    journal = SqliteJournal(db)
    try:
        [record] = journal.runs()
        return record.run_id
    finally:
        journal.close()


def test_a_timeout_cancels_the_call_and_the_server_stops_the_task(llama: Llama) -> None:
    t0 = time.monotonic()
    outcome = run(deadline, 1.0, model=llama.spec).value
    assert isinstance(outcome, Failure) and isinstance(outcome.failure(), TimedOut)
    assert time.monotonic() - t0 < 10  # cut at its 1 s deadline, not at the answer's end
    llama.wait_idle(within=15)  # it stopped the task: 1,500 tokens take far longer


def overflow() -> Op[Response]:
    return (yield from infer("word " * (CONTEXT + 500), max_tokens=4))


def bad_parameter() -> Op[Response]:
    return (yield from infer("hi", temperature="hot"))


@pytest.mark.parametrize(
    ("program", "says"),
    [
        (overflow, "exceeds the available context size"),
        (bad_parameter, "Field 'temperature': [json.exception.type_error.302] type must be number"),
    ],
)
def test_server_errors_reach_the_program_verbatim_and_the_journal(
    llama: Llama, tmp_path: Path, program: Any, says: str
) -> None:
    db = _sqlite(tmp_path)
    result = run(program, model=llama.spec, db=db)
    assert result.status == "failed" and isinstance(result.error, ModelError)
    text = str(result.error)
    assert f"model {llama.spec}: HTTP 400: " in text and says in text, text
    [entry] = _entries(db, result.run_id)
    assert entry.status == "failed" and says in (entry.error_json or "")


def test_tools_sent_to_a_template_that_cannot_render_them_are_refused(
    llama_own_template: Llama,
) -> None:
    result = run(two_calls_answered, model=llama_own_template.spec, tools=[weather])
    assert result.status == "failed"
    assert "chat_template_caps.supports_tools is false" in str(result.error)


def _rendered_tokens(llama: Llama, body: dict[str, Any]) -> int:
    """How many tokens the server's own template makes of ``body`` (its /apply-template and
    /tokenize endpoints)."""
    prompt = httpx.post(f"{llama.root}/apply-template", json=body, timeout=30).json()["prompt"]
    assert prompt.count('{"name": "weather", "arguments": {"city": ') == 2, prompt
    assert prompt.count("<tool_response>") == 2, prompt
    tokens = httpx.post(
        f"{llama.root}/tokenize", json={"content": prompt, "add_special": False}, timeout=30
    ).json()["tokens"]
    return len(tokens)


def test_two_tool_calls_in_one_turn_go_round_trip_through_the_shipped_template(
    llama: Llama, tmp_path: Path
) -> None:
    db = _sqlite(tmp_path)
    result = run(two_calls_answered, model=llama.spec, tools=[weather], db=db)
    reply, history = result.value
    entries = sorted(_entries(db, result.run_id), key=lambda e: int(e.address))
    first = entries[0]
    assert first.kind == "infer" and first.status == "completed"
    # the server rendered exactly the conversation opdsl sent, tools and both calls included:
    # the prompt it counted is the one its template makes of our request
    sent = json.loads(first.effect_json)
    model = resolve_model(llama.spec)
    assert isinstance(model, OpenAIModel)
    request = ModelRequest(
        messages=tuple(Message.model_validate(m) for m in sent["messages"]),
        tools=ToolRegistry([weather]).specs("all"),
    )
    body = model.body(request, stream=False)
    counted = Response.model_validate_json(first.result_json).usage.input_tokens
    assert counted == _rendered_tokens(llama, body)
    # whatever the model did next, every tool call it made was run and journaled in order
    calls = [c for m in history[len(HISTORY) :] for c in m.tool_calls]
    ran = [json.loads(e.effect_json)["name"] for e in entries if e.kind == "tool"]
    assert ran == [c.name for c in calls]
    again = replay(result.run_id, db=db)
    assert again.value == (reply, history)


def test_the_coder_ends_cleanly_against_a_real_model_within_its_budget(
    llama: Llama, tmp_path: Path
) -> None:
    repo = sample_repo(tmp_path)
    before = {p.name: p.read_text() for p in repo.glob("*.py")}
    config = CoderConfig(
        task="Make the tests pass.",
        repo=str(repo),
        max_tokens=96,
        work_budget=Budget(tokens=6_000, model_calls=4, seconds=90),
        max_work_iterations=4,
        verify_retries=1,
    )
    result = run(coder, config, model=llama.spec, state=CodeState(), db=_sqlite(tmp_path))
    assert result.status == "completed", result.error  # a result, never an exception
    out = result.value
    if out.ok:
        assert out.commit and git.Repo(repo).head.commit.hexsha == out.commit
    else:
        assert out.phase in ("init", "work", "verify", "commit") and out.reason, out
        # the repository is back as it was
        assert {p.name: p.read_text() for p in repo.glob("*.py")} == before
        assert not git.Repo(repo).is_dirty(untracked_files=True)
    assert isinstance(result.state, CodeState) and result.state.tokens.value > 0
