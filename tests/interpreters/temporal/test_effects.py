"""What an activity performs is the effect the workflow asked for, field for field."""

from __future__ import annotations

from interpreters.temporal._activities import effect_from_json
from op import Infer, Message, Output
from state import canonical_json


def test_an_infer_reaches_the_activity_with_the_shape_its_answer_must_have() -> None:
    asked = Infer(
        messages=(Message.user("name a colour"),),
        tools=("paint",),
        params={"max_tokens": 5},
        output=Output(name="Colour", json_schema={"type": "object"}, attempt=2),
    )
    performed = effect_from_json(canonical_json(asked))
    assert performed == asked
    plain = Infer(messages=(Message.user("hi"),))
    assert effect_from_json(canonical_json(plain)) == plain
