"""The tool-calling loop most agent programs start from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from op import Message, Op, Response, emit, infer, tool

__all__ = ["tool_loop"]


def tool_loop(
    messages: Sequence[Message],
    *,
    tools: Sequence[str] | Literal["all"] = "all",
    max_steps: int = 20,
    model: str | None = None,
) -> Op[tuple[Response, list[Message]]]:
    """Ask the model, run the tools it calls, feed the results back, until it stops calling.

    Returns the last response and the whole conversation. Tool failures are given to the model
    as tool messages (it can read them and try again); after ``max_steps`` model calls the loop
    stops and emits ``max_steps_reached``.
    """
    history = list(messages)
    reply = yield from infer(history, tools=tools, model=model)
    steps = 1
    while reply.tool_calls:
        history.append(reply.as_message())
        for call in reply.tool_calls:
            result = yield from tool(call.name, call.arguments)
            history.append(Message.tool_result(call, result))
        if steps >= max_steps:
            yield from emit("max_steps_reached", {"steps": steps})
            break
        reply = yield from infer(history, tools=tools, model=model)
        steps += 1
    history.append(reply.as_message())
    return reply, history
