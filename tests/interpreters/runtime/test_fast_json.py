"""The driver writes the commonest result (a tool's ``ok`` result) without the generic walk:
it must be the very bytes ``canonical_json`` writes, or old journals would not replay."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from interpreters.runtime import Driver, EventBus, SystemClock
from interpreters.runtime._frame import Call, Handlers
from op import LeafEffect, ToolResult
from state import canonical_json


class _Nothing(Handlers):
    async def perform(self, effect: LeafEffect, call: Call) -> None:
        return None


_DRIVER = Driver(
    run_id="r",
    program="p",
    handlers=_Nothing(),
    journal=None,
    bus=EventBus([]),
    clock=SystemClock(),
)


@given(st.text(), st.booleans(), st.one_of(st.none(), st.text(min_size=1)))
def test_a_tool_result_is_written_as_canonical_json_writes_it(
    output: str, ok: bool, error: str | None
) -> None:
    if not ok and error is None:
        error = "failed"
    result = ToolResult(ok=ok, output=output, error=error)
    assert _DRIVER.json(result, "the result", "1") == canonical_json(result)
