"""Tool calls a model wrote as text: ``{"name": ..., "arguments": {...}}``, bare or fenced.

A model served without a working tool-call format (a local model whose chat template has no
place for tools, or one the server cannot parse) often writes its call into its answer
instead: the whole answer is the JSON object, or it holds one in a ```` ```json ```` fence or
a ``<tool_call>`` tag. :func:`text_calls` finds such calls, strictly: a call names a tool
that was offered, and its arguments are a JSON object; anything that looks like a call and is
not one is a *problem*, said in words a model can act on. Pure: the same text gives the same
answer in every process, so a program that acts on it replays exactly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from op._values import ToolCall

__all__ = ["CALL_FORMAT", "TextCalls", "text_calls"]

CALL_FORMAT = '```json\n{"name": "TOOL", "arguments": {...}}\n```'
"""How a call written as text looks (what the project's chat template asks for)."""

# a fence with no language or json, or a Hermes-style tag: what models write calls in
_BLOCKS = re.compile(
    r"```[ \t]*(?:json|tool_call)?[ \t]*\r?\n(?P<fenced>.*?)```"
    r"|<tool_call>(?P<tagged>.*?)</tool_call>",
    re.DOTALL | re.IGNORECASE,
)
_ARGUMENT_KEYS = ("arguments", "parameters")
_CALL_KEYS = frozenset({"name", *_ARGUMENT_KEYS, "id", "type"})


@dataclass(frozen=True, slots=True)
class TextCalls:
    """What an answer's text held: ``calls`` to perform, or the ``problem`` that stops them
    (then ``calls`` is empty: a text with one bad call performs none of its calls)."""

    calls: tuple[ToolCall, ...] = ()
    problem: str | None = None


def text_calls(
    text: str, offered: Collection[str] | None, *, prefix: str = "text"
) -> TextCalls | None:
    """The tool calls ``text`` holds, or None when nothing in it looks like a call.

    ``offered``: the tool names the model was given (None: any name, for ``tools="all"``).
    A call is a JSON object with a ``name`` and its ``arguments`` (``parameters`` is taken
    too) as an object; the answer is the object (or a list of them), or holds each in a
    ```` ```json ```` fence or a ``<tool_call>`` tag. Calls get the ids ``PREFIX_1``, ...

    Example:
        >>> text_calls('```json\\n{"name": "read_file", "arguments": {"path": "a.py"}}\\n```',
        ...            ["read_file"]).calls[0].arguments
        {'path': 'a.py'}
        >>> text_calls('{"name": "rm", "arguments": {}}', ["read_file"]).problem
        "tool 'rm' was not offered here; the tools are: read_file"
        >>> text_calls("All done: the tests pass.", ["read_file"]) is None
        True
    """
    pieces = [m.group("fenced") or m.group("tagged") or "" for m in _BLOCKS.finditer(text)]
    stripped = text.strip()
    if not pieces and stripped[:1] in ("{", "["):
        pieces = [stripped]
    found: list[dict[str, Any]] = []
    for piece in pieces:
        try:
            data = json.loads(piece)
        except json.JSONDecodeError as exc:
            if '"name"' in piece:
                return TextCalls(
                    problem=f"your tool call is not valid JSON ({exc.msg} at line {exc.lineno} "
                    f"column {exc.colno})"
                )
            continue
        except RecursionError:  # nested deeper than any call is
            continue
        items = data if isinstance(data, list) else [data]
        for item in items:
            if _looks_like_call(item, offered):
                found.append(item)
    if not found:
        return None
    calls = []
    for i, item in enumerate(found, start=1):
        name = item.get("name")
        if not isinstance(name, str) or not name:
            return TextCalls(problem='a tool call needs a "name" that is a string')
        if offered is not None and name not in offered:
            names = ", ".join(offered) or "none"
            return TextCalls(problem=f"tool {name!r} was not offered here; the tools are: {names}")
        unknown = sorted(set(item) - _CALL_KEYS)
        if unknown:
            return TextCalls(
                problem=f"the call of {name!r} has keys a call does not have: {', '.join(unknown)}"
                ' (a call is {"name": ..., "arguments": {...}})'
            )
        arguments = _arguments(item)
        if arguments is None:
            return TextCalls(
                problem=f'the "arguments" of the call of {name!r} are not a JSON object'
            )
        calls.append(ToolCall(id=f"{prefix}_{i}", name=name, arguments=arguments))
    return TextCalls(calls=tuple(calls))


def _looks_like_call(item: Any, offered: Collection[str] | None) -> bool:
    """An object that is meant as a call: it has a name and arguments, or names a tool that
    was offered (an answer's own JSON, ``{"name": "Ada", "age": 3}``, is not a call)."""
    if not isinstance(item, dict) or "name" not in item:
        return False
    if any(k in item for k in _ARGUMENT_KEYS):
        return True
    return offered is not None and item["name"] in offered


def _arguments(item: dict[str, Any]) -> dict[str, Any] | None:
    raw: Any = next((item[k] for k in _ARGUMENT_KEYS if k in item), {})
    if isinstance(raw, str):  # OpenAI's own shape: the arguments as JSON text
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return None
    return raw if isinstance(raw, dict) else None
