"""The value types that programs, interpreters and handlers share. Field names are API."""

from __future__ import annotations

import math
from typing import Any, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "Budget",
    "BudgetExhausted",
    "Message",
    "RAW_ARGUMENTS",
    "ModelRequest",
    "Output",
    "Response",
    "Spent",
    "TimedOut",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "TurnRecord",
    "Usage",
]


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Usage(_Value):
    """Tokens and money one effect used. ``cost_usd`` is None when the price is unknown.

    ``input_tokens`` counts every token of the prompt, as it is billed: ``cached_tokens`` of
    them were read from the provider's prompt cache (billed at its cache-read price) and
    ``cache_write_tokens`` were written to it (Anthropic bills them at its cache-write
    price). ``price_source``: which price table priced ``cost_usd`` and the date of its price
    (``genai-prices 0.2.3: anthropic claude-sonnet-4-5``, ``OPDSL_PRICES=prices.json``).
    Both are left out of the canonical form while unset, so usage without them is the same
    bytes as in journals from before them.

    Example:
        >>> (Usage(input_tokens=3, cost_usd=0.5) + Usage(output_tokens=2)).total_tokens
        5
    """

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)
    price_source: str | None = Field(default=None, json_schema_extra={"omit_if_none": True})

    def __canonical_implied__(self) -> dict[str, Any]:
        """Fields the canonical form leaves out while they hold these values."""
        return {"cache_write_tokens": 0}

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        cost = None
        if self.cost_usd is not None or other.cost_usd is not None:
            cost = (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cost_usd=cost,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            price_source=self.price_source if self.price_source == other.price_source else None,
        )


RAW_ARGUMENTS = "__raw__"
"""The key under which a tool call's arguments that were not a JSON object are kept, as the
text the model wrote (``ToolCall(arguments={RAW_ARGUMENTS: "not json"})``): a provider keeps
them so, and a bound tool answers such a call with an error the model can read."""


class ToolCall(_Value):
    """A model's request to call a tool."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


def _text_says_error(role: object, content: object) -> bool:
    """How a tool message said it reported a failure before ``Message.is_error`` existed: its
    text began ``error: `` (what :meth:`Message.tool_result` writes for a failed tool)."""
    return role == "tool" and isinstance(content, str) and content.startswith("error: ")


class Message(_Value):
    """One message of a conversation with a model.

    ``is_error``: a tool message that reports a failed call (providers that can say so tell
    the model, as Anthropic's ``tool_result`` does). A message written without it (by a
    journal from before it, say) reads it from its text, as those journals meant it: a tool
    message whose text begins ``error: ``; and it is left out of the canonical form wherever
    it is what the text says, so such a message is the same bytes as in those journals.

    Example:
        >>> Message.tool_result(ToolCall(id="c1", name="t"), ToolResult.failure("boom")).is_error
        True
        >>> from state import canonical_json
        >>> canonical_json(Message(role="tool", content="error: boom", is_error=True))
        '{"content":"error: boom","role":"tool","tool_call_id":null,"tool_calls":[]}'
    """

    role: Literal["user", "assistant", "system", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False

    @model_validator(mode="before")
    @classmethod
    def _error_from_old_text(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and "is_error" not in data
            and _text_says_error(data.get("role"), data.get("content"))
        ):
            return {**data, "is_error": True}
        return data

    def __canonical_implied__(self) -> dict[str, Any]:
        """Fields the canonical form leaves out while they hold these values (what a message
        without them reads as)."""
        return {"is_error": _text_says_error(self.role, self.content)}

    @classmethod
    def user(cls, content: str) -> Message:
        return cls(role="user", content=content)

    @classmethod
    def system(cls, content: str) -> Message:
        return cls(role="system", content=content)

    @classmethod
    def tool_result(cls, call: ToolCall, result: ToolResult) -> Message:
        """The message that answers ``call`` with ``result``."""
        text = result.output if result.ok else f"error: {result.error}"
        return cls(role="tool", content=text, tool_call_id=call.id, is_error=not result.ok)


class Response(_Value):
    """What a model said: text, tool calls, why it stopped, and what it cost."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str = "end_turn"
    usage: Usage = Usage()
    model: str = ""

    def as_message(self) -> Message:
        """This response as the assistant message to append to a history."""
        return Message(role="assistant", content=self.text, tool_calls=self.tool_calls)


class ToolResult(_Value):
    """The outcome of a tool call. A failing tool is a value (``ok=False``), not an exception."""

    ok: bool = True
    output: str = ""
    error: str | None = None

    @model_validator(mode="after")
    def _error_iff_failed(self) -> Self:
        if not self.ok and not self.error:
            raise ValueError("a failed ToolResult needs an error message")
        return self

    @classmethod
    def failure(cls, error: str, output: str = "") -> ToolResult:
        return cls(ok=False, output=output, error=error)


class ToolSpec(_Value):
    """A tool as a model sees it: name, description, JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    read_only: bool = False


class Output(_Value):
    """The shape an ``infer``'s answer must have, asked of the provider in its own way
    (a JSON Schema response format, a forced tool, a grammar).

    ``json_schema``: the JSON Schema of the answer (a pydantic model's, for
    ``infer(..., output=Model)``), named ``name``; ``attempt``: which try this is (1 for the
    first; a reply that did not validate is given back and asked again). ``calls``: the answer
    is one call of an offered tool, ``{"name": ..., "arguments": {...}}``, or the final
    answer, ``{"answer": "..."}``; the handler makes that schema from the offered tools
    (``tool_loop(..., constrained=True)``), so ``json_schema`` is left empty.
    """

    name: str
    json_schema: dict[str, Any] = Field(default_factory=dict)
    attempt: int = Field(default=1, ge=1)
    calls: bool = False


class ModelRequest(_Value):
    """What a model handler is asked: the conversation, the model, the tools it may call,
    and the shape its answer must have (``output``, None: any text)."""

    messages: tuple[Message, ...]
    model: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    params: dict[str, Any] = Field(default_factory=dict)
    output: Output | None = None


def _finite(v: float | None) -> float | None:
    if v is not None and (math.isnan(v) or math.isinf(v)):
        raise ValueError("must be a finite number")
    return v


class Budget(_Value):
    """Limits for a ``limit`` scope. None means no limit on that measure.

    Example:
        >>> Budget(tokens=50_000, tool_calls=20).tokens
        50000
    """

    tokens: int | None = Field(default=None, ge=0)
    usd: float | None = Field(default=None, ge=0)
    model_calls: int | None = Field(default=None, ge=0)
    tool_calls: int | None = Field(default=None, ge=0)
    seconds: float | None = Field(default=None, ge=0)

    _check_usd = field_validator("usd", "seconds")(_finite)


class Spent(_Value):
    """What a scope has used so far. ``usd_unknown`` counts calls whose price was unknown."""

    tokens: int = 0
    usd: float = 0.0
    model_calls: int = 0
    tool_calls: int = 0
    seconds: float = 0.0
    usd_unknown: int = 0
    #: of ``tokens``, how many prompt tokens were read from a provider's prompt cache (left
    #: out of the canonical form while 0, as journals before it have it)
    cached_tokens: int = 0

    def __canonical_implied__(self) -> dict[str, Any]:
        """Fields the canonical form leaves out while they hold these values."""
        return {"cached_tokens": 0}


class BudgetExhausted(_Value):
    """Why a ``limit`` scope stopped: its budget, what it spent, which measure ran out."""

    budget: Budget
    spent: Spent
    exceeded: Literal["tokens", "usd", "model_calls", "tool_calls", "seconds"]
    #: why, when the measure alone does not say (a ``usd`` budget that cannot price a call);
    #: left out of the canonical form when None, as journals before it have it
    reason: str | None = Field(default=None, json_schema_extra={"omit_if_none": True})


class TimedOut(_Value):
    """A ``timeout`` scope's deadline passed. ``cut``: the work it cut off, one line each,
    saying which kind of tool it was and whether its work can still land (a synchronous
    tool's thread cannot be stopped; an ``@isolated`` one's process is killed)."""

    seconds: float
    cut: tuple[str, ...] = ()


class TurnRecord(_Value):
    """The record of one delegated agent turn (the ``agent`` effect)."""

    backend: str
    text: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    turns: int = 0
    usage: Usage = Usage()
    duration_s: float = 0.0
    session_id: str | None = None
    exit_code: int | None = None
    crashed: bool = False
    crash_reason: str | None = None
    #: the turn ran out of its ``max_turns``: it ended there, which is not a failure
    max_turns_exhausted: bool = False
    #: the backend's cooperative stop ended it at a message boundary, cleanly
    stopped: bool = False
    #: what the turn ran against: the CLI's ``cli_version``, the ``model``, the ``endpoint``
    environment: dict[str, str] = Field(default_factory=dict)

    def __canonical_implied__(self) -> dict[str, Any]:
        """Fields the canonical form leaves out while unset (journals before them hold none)."""
        return {"max_turns_exhausted": False, "stopped": False, "environment": {}}


def usage_of(value: object) -> Usage | None:
    """The usage carried by a result, if it carries any."""
    if type(value) is ToolResult:  # the commonest result, and it carries none
        return None
    if isinstance(value, Response | TurnRecord):
        return value.usage
    return None


_V = TypeVar("_V", bound=_Value)


def replaced(value: _V, changes: dict[str, Any]) -> _V:
    """``value.model_copy(update=changes)``, the values in ``changes`` taken as they are (not
    validated, as ``model_copy`` does not), made without ``model_copy``'s copies of the
    extra and private fields a value never has (every model call's usage and answer is
    copied once it is priced)."""
    cls = type(value)
    if cls.__private_attributes__ or value.__pydantic_extra__ is not None:  # a subclass's
        return value.model_copy(update=changes)
    copied = cls.__new__(cls)
    fields = value.__dict__.copy()
    fields.update(changes)
    object.__setattr__(copied, "__dict__", fields)
    object.__setattr__(copied, "__pydantic_extra__", None)
    object.__setattr__(
        copied, "__pydantic_fields_set__", value.__pydantic_fields_set__ | changes.keys()
    )
    object.__setattr__(copied, "__pydantic_private__", None)
    return copied
