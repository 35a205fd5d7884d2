"""The real model's own tool call and a typed answer, through opdsl, against a real llama.cpp
server started with opdsl's shipped chat template.

The model (SmolLM2-135M) is far too small to choose a tool well or to start its own
```` ```json ```` block (with ``tool_choice="required"`` this server's grammar still lets it
write words first, and it writes only words), so it is asked to decode under a grammar:
``tool_loop(..., constrained=True)`` makes each answer a call of an offered tool or the final
answer, valid by construction, and ``output=Model`` makes its answer keep to the model's JSON
Schema. What is checked is the protocol and the journal: the model's own call, run, its result
fed back, replayed offline; an answer that validates as the pydantic model at its first
attempt, replayed as that type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from interpreters import SqliteJournal, replay, run
from op import Message, Op, Response, ToolResult, infer
from programs.loop import tool_loop
from tests.real_model.conftest import Llama

pytestmark = pytest.mark.real_model

CALLED: list[str] = []


def weather(city: str) -> str:
    """The weather in a city."""
    CALLED.append(city)
    return f"rain in {city}"


def asks_the_weather() -> Op[tuple[Response, list[Message]]]:
    return (
        yield from tool_loop(
            [Message.user("What is the weather in Paris? Use the weather tool.")],
            tools=["weather"],
            max_steps=2,
            constrained=True,
            params={"max_tokens": 48, "temperature": 0},
            on_max_steps=lambda steps: None,
        )
    )


class City(BaseModel):
    name: str = Field(max_length=40)
    country: str = Field(max_length=40)


def names_a_city() -> Op[City]:
    return (
        yield from infer("Name a city and its country.", output=City, max_tokens=64, temperature=0)
    )


def _entries(db: str, run_id: str) -> list[Any]:
    """The run's entries in order, each with its whole effect and result."""
    journal = SqliteJournal(db)
    try:
        return [
            journal.whole(e) for e in sorted(journal.entries(run_id), key=lambda e: int(e.address))
        ]
    finally:
        journal.close()


def test_the_model_makes_a_real_tool_call_that_is_run_fed_back_and_replayed(
    llama_json: Llama, tmp_path: Path
) -> None:
    db = str(tmp_path / "runs.db")
    CALLED.clear()
    result = run(asks_the_weather, model=llama_json.spec, tools=[weather], db=db)
    reply, history = result.value
    entries = _entries(db, result.run_id)
    assert [e.kind for e in entries[:3]] == ["infer", "tool", "infer"], entries
    asked = json.loads(entries[0].effect_json)
    assert asked["output"] == {"attempt": 1, "calls": True, "json_schema": {}, "name": "tool_call"}
    # what the model wrote, under the grammar: a call of the offered tool, nothing else
    said = Response.model_validate_json(entries[0].result_json or "").text
    written = json.loads(said)
    assert written["name"] == "weather" and isinstance(written["arguments"]["city"], str), said
    city = written["arguments"]["city"]
    # the tool ran with those arguments, and its result went back to the model
    assert json.loads(entries[1].effect_json)["args"] == {"city": city}
    assert CALLED[0] == city
    result_text = f"rain in {city}"
    assert ToolResult.model_validate_json(entries[1].result_json or "").output == result_text
    second = json.loads(entries[2].effect_json)
    fed = Message.user(f"Result of weather:\n{result_text}")
    assert Message.model_validate(second["messages"][2]) == fed
    assert history[1] == Message(role="assistant", content=said) and history[2] == fed
    # a replay needs no server and no tool
    runs = len(CALLED)
    assert replay(result.run_id, db=db).value == (reply, history)
    assert len(CALLED) == runs


def test_a_typed_answer_from_the_real_server_validates_and_replays_as_its_type(
    llama_json: Llama, tmp_path: Path
) -> None:
    db = str(tmp_path / "runs.db")
    result = run(names_a_city, model=llama_json.spec, db=db)
    city = result.value
    assert type(city) is City and city.name and city.country, city
    [entry] = _entries(db, result.run_id)  # valid at the first attempt: the grammar saw to it
    assert json.loads(entry.effect_json)["output"]["attempt"] == 1
    said = Response.model_validate_json(entry.result_json or "").text
    assert City.model_validate_json(said) == city  # the journal holds what the model said
    again = replay(result.run_id, db=db).value
    assert type(again) is City and again == city
