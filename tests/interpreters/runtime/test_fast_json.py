"""The commonest values are written without the generic walk: a tool's ``ok`` result (by the
driver) and every effect (field by field). They must be the very bytes the walk writes, or old
journals would not replay."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interpreters.runtime import Driver, Services, SystemClock
from interpreters.runtime._driver import response_json, usage_json
from interpreters.runtime._frame import Call, Handlers
from op import Checkpoint, Emit, Response, Tool, ToolCall, ToolResult, Usage
from op.effects import LeafEffect
from state import NotSerializable, canonical_json, dump_jsonable, to_jsonable


class _Nothing(Handlers):
    async def perform(self, effect: LeafEffect, call: Call) -> None:
        return None


_DRIVER = Driver(
    run_id="r",
    program="p",
    services=Services(handlers=_Nothing(), clock=SystemClock()),
)


@given(st.text(), st.booleans(), st.one_of(st.none(), st.text(min_size=1)))
def test_a_tool_result_is_written_as_canonical_json_writes_it(
    output: str, ok: bool, error: str | None
) -> None:
    if not ok and error is None:
        error = "failed"
    result = ToolResult(ok=ok, output=output, error=error)
    assert _DRIVER.json(result, "the result", "1") == canonical_json(result)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=5), inner, max_size=3)
        | st.frozensets(st.integers(), max_size=3)
        | st.tuples(inner, inner)
    ),
    max_leaves=8,
)


@given(st.text(), st.dictionaries(st.text(max_size=5), _JSON, max_size=4), _JSON)
def test_an_effect_is_written_as_the_generic_walk_writes_it(
    name: str, args: dict[str, Any], data: Any
) -> None:
    # effects are written field by field (``canonical_json``'s dataclass path), not through
    # ``to_jsonable``'s dict: the bytes must be the same, or old journals would not replay
    for effect in (Tool(name=name, args=args), Emit(name=name, data=data), Checkpoint(name=name)):
        assert canonical_json(effect) == dump_jsonable(to_jsonable(effect))


@dataclass(frozen=True)
class _OwnKind:
    kind: int
    b: str = "x"


@dataclass(frozen=True)
class _NoKind:
    z: tuple[int, ...]
    a: float
    hidden: str = field(default="h", metadata={"serialize": False})


@dataclass(frozen=True)
class _Subclassed(Tool):
    extra: str = "e"


def test_other_dataclasses_are_written_as_the_generic_walk_writes_them() -> None:
    for value in (_OwnKind(3), _NoKind((2, 1), 0.5), _Subclassed(name="t", extra="é\n")):
        assert canonical_json(value) == dump_jsonable(to_jsonable(value))
    assert canonical_json(_NoKind((1,), 1.0)) == '{"a":1.0,"z":[1]}'


def test_a_field_that_is_not_json_is_named_by_its_path() -> None:
    with pytest.raises(NotSerializable, match=r"\$\.args\.f: a object cannot") as caught:
        canonical_json(Tool(name="t", args={"f": object()}))
    assert caught.value.path == "$.args.f"
    with pytest.raises(NotSerializable, match=r"\$\.a: nan is not allowed"):
        canonical_json(_NoKind((), math.nan))


_COUNTS = st.integers(min_value=0, max_value=10**12)


@given(
    st.text(),
    st.text(),
    st.text(),
    _COUNTS,
    _COUNTS,
    _COUNTS,
    _COUNTS,
    st.one_of(st.none(), st.floats(min_value=0, allow_nan=False, allow_infinity=False)),
    st.one_of(st.none(), st.text()),
)
def test_a_response_and_its_usage_are_written_as_canonical_json_writes_them(
    text: str,
    model: str,
    stop: str,
    given_tokens: int,
    output: int,
    cached: int,
    written: int,
    cost: float | None,
    source: str | None,
) -> None:
    usage = Usage(
        input_tokens=given_tokens,
        output_tokens=output,
        cached_tokens=cached,
        cache_write_tokens=written,
        cost_usd=cost,
        price_source=source,
    )
    response = Response(text=text, model=model, stop_reason=stop, usage=usage)
    assert usage_json(usage) == canonical_json(usage)
    assert _DRIVER.json(response, "the result", "1") == canonical_json(response)
    assert _DRIVER.usage_text(usage) == canonical_json(usage)


def test_a_response_the_writer_does_not_know_is_written_by_the_generic_walk() -> None:
    calls = Response(text="t", tool_calls=(ToolCall(id="c", name="n", arguments={"a": 1}),))
    assert response_json(calls, usage_json(calls.usage)) is None
    assert _DRIVER.json(calls, "the result", "1") == canonical_json(calls)
    # a cost set without validation that JSON cannot hold is refused, naming where it was
    bad = Response(usage=Usage().model_copy(update={"cost_usd": math.inf}))
    assert usage_json(bad.usage) is None
    with pytest.raises(NotSerializable, match="the result at address 1"):
        _DRIVER.json(bad, "the result", "1")
    # an int where a float belongs is written as the walk writes it
    odd = Usage().model_copy(update={"cost_usd": 2})
    assert usage_json(odd) is None and _DRIVER.usage_text(odd) == canonical_json(odd)
