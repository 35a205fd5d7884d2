"""Bound tools: arguments checked against the function's types; plain arguments of exactly
the declared types take a path with no validation that must give the same results."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from interpreters import BoundTool
from op import ToolResult


def scale(n: int, by: float, label: str, loud: bool) -> str:
    """Scale n."""
    return f"{label}:{n * by}:{loud}"


def count(n: int) -> int:
    """Count."""
    return n + 1


def _call(tool: BoundTool, args: dict[str, Any]) -> ToolResult:
    return anyio.run(tool.call, args)


def _validated(tool: BoundTool, args: dict[str, Any]) -> ToolResult:
    plain, tool._plain = tool._plain, None  # force the validating path
    try:
        return _call(tool, args)
    finally:
        tool._plain = plain


@pytest.mark.parametrize(
    "args",
    [
        {"n": 3, "by": 1.5, "label": "x", "loud": True},  # exact types: the fast path
        {"n": "3", "by": 1.5, "label": "x", "loud": True},  # coerced by validation
        {"n": 3, "by": 2, "label": "x", "loud": False},  # an int where a float goes
        {"n": True, "by": 1.5, "label": "x", "loud": True},  # a bool where an int goes
        {"n": 3, "by": 1.5, "label": "x"},  # one missing
        {"n": 3, "by": 1.5, "label": "x", "loud": True, "extra": 1},  # one too many
        {"n": [3], "by": 1.5, "label": "x", "loud": True},  # the wrong shape
        {"n": 3.0, "by": 1.5, "label": 7, "loud": "yes"},
    ],
)
def test_the_fast_path_and_validation_agree(args: dict[str, Any]) -> None:
    tool = BoundTool.from_function(scale)
    assert tool._plain == {"n": int, "by": float, "label": str, "loud": bool}
    assert _call(tool, args) == _validated(tool, args)


def test_only_plain_required_parameters_take_the_fast_path() -> None:
    def optional(n: int, m: int = 2) -> int:
        return n + m

    def listed(items: list[int]) -> int:
        return len(items)

    assert BoundTool.from_function(optional)._plain is None
    assert BoundTool.from_function(listed)._plain is None
    assert BoundTool.from_function(count)._plain == {"n": int}


def test_an_int_result_is_its_canonical_json() -> None:
    tool = BoundTool.from_function(count)
    assert _call(tool, {"n": 41}) == ToolResult(output="42")
    assert _call(tool, {"n": -(10**30)}).output == str(-(10**30) + 1)
