"""Reading usage as Anthropic reports it (the Messages API and Claude Code's stream alike)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from op import Usage

__all__ = ["anthropic_usage"]


def anthropic_usage(u: Mapping[str, Any]) -> Usage:
    """Usage from an Anthropic ``usage`` object: cache reads and writes count as input.

    Example:
        >>> anthropic_usage({"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 7})
        Usage(input_tokens=105, output_tokens=7, cached_tokens=100, cost_usd=None)
    """
    cached = int(u.get("cache_read_input_tokens") or 0)
    created = int(u.get("cache_creation_input_tokens") or 0)
    return Usage(
        input_tokens=int(u.get("input_tokens") or 0) + cached + created,
        output_tokens=int(u.get("output_tokens") or 0),
        cached_tokens=cached,
    )
