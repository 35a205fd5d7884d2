"""Reading usage as the providers report it: Anthropic's (the Messages API and Claude Code's
stream alike) and OpenAI's chat completions (and every server that speaks them).

Each gives a :class:`~op.Usage` whose ``input_tokens`` is the whole prompt as billed, with
the part read from the provider's prompt cache in ``cached_tokens`` and the part written to
it in ``cache_write_tokens``, so a price table can price each part at its own rate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from op import Usage

__all__ = ["anthropic_usage", "openai_usage"]


def _count(u: Mapping[str, Any], key: str) -> int:
    """A count the provider gave; a missing or null one is 0, and one that is not a number
    (``1e400`` and ``Infinity`` read as infinity) raises a ValueError (the answer is
    malformed: the provider's error names the model and the status)."""
    value = u.get(key) or 0
    try:
        return int(value)
    except OverflowError:
        raise ValueError(f"{key} is {value!r}, not a count of tokens") from None


def anthropic_usage(u: Mapping[str, Any]) -> Usage:
    """Usage from an Anthropic ``usage`` object. Anthropic's ``input_tokens`` are only the
    prompt tokens after the last cache breakpoint; cache reads and writes are billed input
    too, so they are added in.

    Example:
        >>> u = anthropic_usage({"input_tokens": 5, "cache_read_input_tokens": 100,
        ...     "cache_creation_input_tokens": 20, "output_tokens": 7})
        >>> (u.input_tokens, u.cached_tokens, u.cache_write_tokens, u.output_tokens)
        (125, 100, 20, 7)
    """
    read = _count(u, "cache_read_input_tokens")
    written = _count(u, "cache_creation_input_tokens")
    return Usage(
        input_tokens=_count(u, "input_tokens") + read + written,
        output_tokens=_count(u, "output_tokens"),
        cached_tokens=read,
        cache_write_tokens=written,
    )


def openai_usage(u: object) -> Usage:
    """Usage from an OpenAI chat completion's ``usage`` object: ``prompt_tokens`` already
    holds the cached ones, which ``prompt_tokens_details.cached_tokens`` counts (OpenAI
    caches by itself and bills no cache writes).

    Example:
        >>> u = openai_usage({"prompt_tokens": 1200, "completion_tokens": 30,
        ...     "prompt_tokens_details": {"cached_tokens": 1024}})
        >>> (u.input_tokens, u.cached_tokens, u.output_tokens)
        (1200, 1024, 30)
    """
    if not isinstance(u, Mapping):
        return Usage()
    details = u.get("prompt_tokens_details")
    prompt = _count(u, "prompt_tokens")
    cached = _count(details, "cached_tokens") if isinstance(details, Mapping) else 0
    return Usage(
        input_tokens=prompt,
        output_tokens=_count(u, "completion_tokens"),
        cached_tokens=min(cached, prompt),
    )
