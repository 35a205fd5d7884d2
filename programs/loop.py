"""The tool-calling loop most agent programs start from."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from op import (
    Infer,
    Message,
    Op,
    Output,
    Response,
    ToolCall,
    ToolResult,
    emit,
    infer,
    text_calls,
    tool,
)
from op._text_calls import CALL_FORMAT

__all__ = ["CUT_OFF", "NO_CALL", "Hook", "echoed", "text_result", "tool_loop"]

CUT_OFF = (
    "Your answer was cut off at the limit on its length. Go on from where it stopped, "
    "more briefly, or call a tool."
)
"""What the loop tells the model when its answer was cut by ``max_tokens``."""

NO_CALL = (
    "Your answer held no tool call that could be run: {problem}. To call a tool, answer with "
    "the call alone, as " + CALL_FORMAT + "; to finish, answer without a call."
)
"""What the loop tells the model when its answer looked like a tool call and was not one."""


def text_result(call: ToolCall, result: ToolResult) -> str:
    """How the result of a call the model wrote as text is given back to it (as the user's
    message: its answer was text, so there is no tool-call id to answer)."""
    if result.ok:
        return f"Result of {call.name}:\n{result.output}"
    return f"{call.name} failed: {result.error}" + (f"\n{result.output}" if result.output else "")


def echoed(text: str, earlier: Sequence[tuple[ToolCall, ToolResult]]) -> ToolCall | None:
    """The earlier call whose result ``text`` is (its output or error as it was, or as this
    loop gave it back: :func:`text_result`, or a tool message), or None.

    What a program refuses as a file's content: a small model writes the result it was just
    given (``wrote 38 characters to calc.py``, ``Result of read_file: ...``) back into the file
    it meant to change.

    Example:
        >>> from op import ToolCall, ToolResult
        >>> call = ToolCall(id="c1", name="write_file", arguments={})
        >>> done = ToolResult(output="wrote 3 characters to a.py")
        >>> echoed("wrote 3 characters to a.py", [(call, done)]) is call
        True
        >>> echoed("def add(a, b): ...", [(call, done)]) is None
        True
    """
    said = text.strip()
    if not said:
        return None
    # the forms :func:`text_result` gives start with one of the heads, and a tool message is
    # the output or ``error: ...``: nothing is built per earlier call, so a check costs about
    # the text's length and the number of calls, not the size of every result given so far
    for call, result in reversed(earlier):
        if said.startswith((f"Result of {call.name}:", f"{call.name} failed:")):
            return call
        if len(said) <= len(result.output) and said == result.output.strip():
            return call
        error = result.error
        if (
            error
            and len(said) <= len(error) + 7
            and said in (error.strip(), f"error: {error}".strip())
        ):
            return call
    return None


Hook = Op[None] | None
"""What a hook returns: effects to run (a generator), or None when it has none."""


def tool_loop(
    messages: Sequence[Message],
    *,
    tools: Sequence[str] | Literal["all"] = "all",
    max_steps: int = 20,
    model: str | None = None,
    on_reply: Callable[[Response], Hook] | None = None,
    on_result: Callable[[ToolCall, ToolResult], Hook] | None = None,
    on_turn: Callable[[int, Sequence[tuple[ToolCall, ToolResult]]], Hook] | None = None,
    on_max_steps: Callable[[int], Hook] | None = None,
    on_call: Callable[[ToolCall], ToolResult | None] | None = None,
    params: Mapping[str, Any] | None = None,
    constrained: bool = False,
) -> Op[tuple[Response, list[Message]]]:
    """Ask the model, run the tools it calls, feed the results back, until it stops calling.

    Returns the last response and the whole conversation. Tool failures are given to the model
    as tool messages (it can read them and try again); so is a call to a tool it was not
    offered, which does not run. An answer cut by ``max_tokens`` is
    not taken as the end: the model is told so (:data:`CUT_OFF`) and asked again.

    A tool call the model wrote as text (the answer is ``{"name": ..., "arguments": {...}}``,
    or holds it in a ```` ```json ```` fence or a ``<tool_call>`` tag: what a local model
    writes when its server has no working tool-call format) is performed as that call, parsed
    strictly (:func:`~op.text_calls`: a tool that was offered, arguments that are an object,
    which the tool validates), and its result is given back as the user's message
    (:func:`text_result`). One that looks like a call and is not one (JSON that does not
    parse, a tool that was not offered) runs nothing and is answered with what was wrong
    (:data:`NO_CALL`). Neither is taken as the end. The journal keeps the model's answer as
    it was; reading a call out of it is the program's, so a replay reads the same. After
    ``max_steps`` model calls the loop stops with the last response, which still has its
    tool calls (or was cut); ``on_max_steps(steps)`` runs then (default: emit
    ``max_steps_reached``). ``params`` go with every model call (``max_tokens=512``, ...).

    ``constrained=True`` is for a server that decodes under a JSON Schema (llama.cpp, Ollama,
    vLLM) but has no reliable tool calls: every answer is asked to be one call of an offered
    tool, ``{"name": ..., "arguments": {...}}`` with that tool's own arguments, or the final
    answer, ``{"answer": "..."}`` (:class:`~op.Output` with ``calls``), so a small model
    writes no malformed or invented call. The call is read from the answer's text as above;
    the last response is returned with the final answer's words as its text (the history
    keeps what the model wrote). A provider whose API returns tool calls itself (OpenAI,
    Anthropic) sends the tools as usual.

    A program adds its own rules with hooks, each a function that may return effects to run:
    ``on_reply(response)`` after every model call (charge its cost), ``on_result(call,
    result)`` after every tool call (note a written file), ``on_turn(step, calls)`` after the
    tools of model call number ``step`` ran (stop a loop that is stuck, checkpoint). A hook
    stops the loop by raising. ``on_call(call)``, a plain function, is asked before each call
    runs: a result it returns is the call's (a refusal the model reads: content that is an
    earlier result, :func:`echoed`), and the tool does not run; None runs it.

    Example:
        >>> from op import Message
        >>> loop = tool_loop([Message.user("hi")], on_max_steps=lambda steps: None)
        >>> type(loop).__name__
        'generator'
    """
    history = list(messages)
    offered = None if tools == "all" else list(tools)
    steps = 0
    while True:
        if constrained:
            reply = yield from _constrained(history, tools, model, params)
        else:
            reply = yield from infer(history, tools=tools, model=model, **dict(params or {}))
        steps += 1
        if on_reply is not None:
            yield from _run(on_reply(reply))
        history.append(reply.as_message())
        written = (
            None if reply.tool_calls else text_calls(reply.text, offered, prefix=f"text_{steps}")
        )
        if reply.tool_calls or (written is not None and written.calls):
            calls: list[tuple[ToolCall, ToolResult]] = []
            for call in reply.tool_calls or (written.calls if written is not None else ()):
                if offered is not None and call.name not in offered:
                    # a model may name any tool; only those it was offered run
                    result = ToolResult.failure(
                        f"tool {call.name!r} was not offered here; the tools are: "
                        f"{', '.join(offered) or 'none'}"
                    )
                else:
                    refused = None if on_call is None else on_call(call)
                    result = (
                        refused
                        if refused is not None
                        else (yield from tool(call.name, call.arguments))
                    )
                if reply.tool_calls:
                    history.append(Message.tool_result(call, result))
                calls.append((call, result))
                if on_result is not None:
                    yield from _run(on_result(call, result))
            if not reply.tool_calls:  # the results of calls written as text: one message
                history.append(Message.user("\n\n".join(text_result(c, r) for c, r in calls)))
            if on_turn is not None:
                yield from _run(on_turn(steps, calls))
        elif reply.stop_reason == "max_tokens":
            history.append(Message.user(CUT_OFF))
        elif written is not None and written.problem is not None:
            history.append(Message.user(NO_CALL.replace("{problem}", written.problem)))
        else:
            final = _final_answer(reply.text) if constrained else None
            if final is not None:
                reply = reply.model_copy(update={"text": final})
            return reply, history
        if steps >= max_steps:
            if on_max_steps is None:
                yield from emit("max_steps_reached", {"steps": steps})
            else:
                yield from _run(on_max_steps(steps))
            return reply, history


CALL_OUTPUT = Output(name="tool_call", calls=True)
"""What a constrained loop asks of every answer: a call of an offered tool, or the answer."""


def _constrained(
    history: list[Message],
    tools: Sequence[str] | Literal["all"],
    model: str | None,
    params: Mapping[str, Any] | None,
) -> Op[Response]:
    names: tuple[str, ...] | Literal["all"] = "all" if tools == "all" else tuple(tools)
    reply: Response = yield Infer(
        messages=tuple(history),
        model=model,
        tools=names,
        params=dict(params or {}),
        output=CALL_OUTPUT,
    )
    return reply


def _final_answer(text: str) -> str | None:
    """The words of a constrained final answer, ``{"answer": "..."}``; None for other text."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, dict) and set(data) == {"answer"} and isinstance(data["answer"], str):
        return data["answer"]
    return None


def _run(effects: Hook) -> Op[None]:
    if effects is not None:
        yield from effects
