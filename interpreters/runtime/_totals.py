"""What a whole run spent: :class:`Totals` (on :class:`~interpreters.runtime.RunResult`, in
``opdsl show``, its ``--json`` and the report's header) and :class:`Tally`, which adds a
run's effects up, as the driver performs them or as a journal recorded them, the same way."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, final

from op import Agent, Infer, Tool, Usage

__all__ = ["Tally", "Totals"]

_MODEL_KINDS = frozenset({Infer.kind, Agent.kind})


@final
@dataclass(frozen=True, slots=True)
class Totals:
    """The run's totals: prompt tokens (``input_tokens``, of which ``cached_tokens`` were read
    from the provider's prompt cache and ``cache_write_tokens`` written to it), answer tokens,
    model and tool calls, and the cost. ``cost_usd`` is None (unknown) when a model call had
    no known price: ``unpriced_calls`` counts them and ``priced_usd`` is what the others
    cost. ``price_sources``: the price tables that priced the calls, with their dates.

    Example:
        >>> t = Tally()
        >>> t.add("infer", Usage(input_tokens=900, cached_tokens=800, output_tokens=20, cost_usd=0.001))
        >>> t.add("tool", None)
        >>> t.totals().line()
        'tokens: 900 in (800 cached), 20 out; 1 model call, 1 tool call; cost $0.0010'
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    cost_usd: float | None = 0.0
    unpriced_calls: int = 0
    priced_usd: float = 0.0
    price_sources: tuple[str, ...] = ()

    @property
    def tokens(self) -> int:
        """Every token, prompt and answer (what a ``tokens`` budget counts)."""
        return self.input_tokens + self.output_tokens

    @classmethod
    def of_entries(cls, entries: Iterable[Any]) -> Totals:
        """The totals of a journal's entries (those that finished: what the run was given)."""
        tally = Tally()
        for e in entries:
            if e.status != "completed":
                continue
            usage = None
            if e.usage_json:
                try:
                    usage = Usage.model_validate_json(e.usage_json)
                except ValueError:
                    usage = None  # a journal someone made by hand: counted without it
            tally.add(e.kind, usage)
        return tally.totals()

    def cost_text(self) -> str:
        """The cost in words: ``$0.0123``, or ``unknown`` with what is known of it."""
        if self.cost_usd is not None:
            return f"${self.cost_usd:.4f}"
        calls = "call" if self.unpriced_calls == 1 else "calls"
        known = f"; ${self.priced_usd:.4f} for the rest" if self.priced_usd else ""
        return f"unknown ({self.unpriced_calls} model {calls} with no known price{known})"

    def line(self) -> str:
        """The totals in one line, as ``opdsl show`` prints them."""
        cache = []
        if self.cached_tokens:
            cache.append(f"{self.cached_tokens} cached")
        if self.cache_write_tokens:
            cache.append(f"{self.cache_write_tokens} written to the cache")
        prompt = f"{self.input_tokens} in" + (f" ({', '.join(cache)})" if cache else "")
        model = f"{self.model_calls} model call" + ("" if self.model_calls == 1 else "s")
        tool = f"{self.tool_calls} tool call" + ("" if self.tool_calls == 1 else "s")
        return (
            f"tokens: {prompt}, {self.output_tokens} out; {model}, {tool}; cost {self.cost_text()}"
        )

    def as_json(self) -> dict[str, Any]:
        """The totals as JSON data (``--json``, the report)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "cost_usd": self.cost_usd,
            "unpriced_calls": self.unpriced_calls,
            "priced_usd": self.priced_usd,
            "price_sources": list(self.price_sources),
        }


@final
@dataclass(slots=True)
class Tally:
    """Adds up a run's effects (:meth:`add`, one per effect that finished) into
    :class:`Totals`."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    unpriced_calls: int = 0
    usd: float = 0.0
    sources: dict[str, None] = field(default_factory=dict)

    def add(self, kind: str, usage: Usage | None) -> None:
        """Count an effect of ``kind`` that finished, with what it used (None: nothing)."""
        if kind == Tool.kind:
            self.tool_calls += 1
        elif kind in _MODEL_KINDS:
            self.model_calls += 1
            if usage is None or usage.cost_usd is None:
                self.unpriced_calls += 1
        if usage is None:
            return
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_tokens += usage.cached_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        if usage.cost_usd is not None:
            self.usd += usage.cost_usd
        if usage.price_source is not None:
            self.sources[usage.price_source] = None

    def totals(self) -> Totals:
        return Totals(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
            model_calls=self.model_calls,
            tool_calls=self.tool_calls,
            cost_usd=None if self.unpriced_calls else self.usd,
            unpriced_calls=self.unpriced_calls,
            priced_usd=self.usd,
            price_sources=tuple(self.sources),
        )
