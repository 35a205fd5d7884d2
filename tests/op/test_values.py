"""``replaced``: the copy every priced model call makes, as ``model_copy`` makes it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import PrivateAttr, ValidationError

from op import Message, Response, ToolCall, Usage
from op._values import replaced


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    assert a == b and a.__dict__ == b.__dict__
    assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__
    assert a.__pydantic_extra__ == b.__pydantic_extra__
    assert a.__pydantic_private__ == b.__pydantic_private__
    assert a.model_dump() == b.model_dump()


@pytest.mark.parametrize(
    ("value", "changes"),
    [
        (Usage(input_tokens=10, output_tokens=1), {"cost_usd": 5.6e-06, "price_source": "x"}),
        (Usage(), {"cost_usd": 0.0}),
        (
            Response(
                text="ok",
                tool_calls=(ToolCall(id="c1", name="f", arguments={"a": 1}),),
                usage=Usage(input_tokens=3),
                model="m",
            ),
            {"usage": Usage(input_tokens=3, cost_usd=1.0)},
        ),
        (Message.user("hi"), {"content": "there"}),
    ],
)
def test_a_value_replaced_is_what_model_copy_makes(value: Any, changes: dict[str, Any]) -> None:
    made = replaced(value, changes)
    _same(made, value.model_copy(update=changes))
    assert made is not value and made.__dict__ is not value.__dict__
    # the copy is its own: the value it came from is as it was
    assert all(getattr(value, k) != v for k, v in changes.items())
    # still frozen
    with pytest.raises(ValidationError, match="frozen"):
        setattr(made, next(iter(changes)), None)


class _Noted(Usage):
    _note: str = PrivateAttr(default="kept")


def test_a_subclass_with_private_fields_is_copied_by_model_copy() -> None:
    value = _Noted(input_tokens=2)
    value._note = "its own"
    made = replaced(value, {"cost_usd": 1.0})
    assert type(made) is _Noted and made.cost_usd == 1.0 and made._note == "its own"
    _same(made, value.model_copy(update={"cost_usd": 1.0}))
