"""Programs that wait on questions, run on Temporal through the command line."""

from __future__ import annotations

import gc
from typing import Any

from op import Op, ask, checkpoint, par, tool


def plan_then_ask(goal: str) -> Op[str]:
    """A checkpoint to fork from, then a question."""
    yield from checkpoint("plan")
    answer = yield from ask(f"Go ahead with {goal}?")
    return f"{goal}: {answer}"


def two_asks() -> Op[tuple[Any, ...]]:
    """Two questions open at once."""
    return (yield from par(ask("Which colour?"), ask("Which size?")))


def ask_then_dotted() -> Op[str]:
    """A question, then a tool of the hostile MCP server (``tests/fixtures/mcp_hostile.py``):
    nothing of the server's comes before the question."""
    answer = yield from ask("go on?")
    dotted = yield from tool("h_a_b", {})
    return f"{answer} {dotted.output}"


def echo_ask_count_dotted(text: str) -> Op[str]:
    """A tool of the hostile MCP server, a question, a quick tool (``word_count``: a local
    activity), then another of the server's tools."""
    said = yield from tool("h_echo", {"text": text})
    answer = yield from ask("go on?")
    counted = yield from tool("word_count", {"text": f"{said.output} {answer}"})
    dotted = yield from tool("h_a_b", {})
    return f"{said.output} {answer} {counted.output} {dotted.output}"


def collect_garbage() -> Op[str]:
    """Collects the garbage inside the workflow's own activation: where the runs a stopped
    worker left in its cache are closed, if nothing closed them before."""
    gc.collect()
    yield from checkpoint("collected")
    return "collected"
