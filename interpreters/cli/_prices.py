"""``opdsl prices MODEL``: what a model's calls would be charged, and which price table says
so (``$OPDSL_PRICES``, opdsl's own ``prices.json`` or genai-prices, with the price's date).
``--input``/``--output``/``--cached``/``--cache-write`` price one call of that many tokens;
``--json`` for all of it."""

from __future__ import annotations

import argparse
from typing import Any

from interpreters.cli._command import JSON, Command, Option, UsageError
from interpreters.cli._output import print_json

__all__ = ["PRICES"]


def _rates(rates: Any) -> str:
    return (
        f"input ${rates.input:.2f}, output ${rates.output:.2f}, "
        f"cache read ${rates.cache_read:.2f}, cache write ${rates.cache_write:.2f}"
    )


def prices(a: argparse.Namespace) -> int:
    from interpreters.models import resolve_model
    from interpreters.models._prices import Prices, price_advice
    from interpreters.models._remote import RemoteModel
    from op import Usage

    spec: str = a.model
    counts = {"--input": a.input, "--output": a.output, "--cached": a.cached}
    counts["--cache-write"] = a.cache_write
    for flag, n in counts.items():
        if n < 0:
            raise UsageError(f"{flag} {n}: a number of tokens is 0 or more")
    if a.cached + a.cache_write > a.input:
        raise UsageError(
            f"--cached {a.cached} and --cache-write {a.cache_write} are parts of the prompt: "
            f"together at most --input ({a.input})"
        )
    provider = base_url = None
    name = spec
    try:  # a spec that is wrong, a price file that is: the user's to fix
        model = resolve_model(spec) if ":" in spec else None
        table = Prices()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if model is not None:
        if not isinstance(model, RemoteModel):
            raise UsageError(
                f"{spec}: not a model behind an API; its answers say their own cost, if any"
            )
        provider, base_url, name, table = model.provider, model.base_url, model.model, model.prices
    price = table.price(name, provider=provider, base_url=base_url)
    usage = Usage(
        input_tokens=a.input,
        output_tokens=a.output,
        cached_tokens=a.cached,
        cache_write_tokens=a.cache_write,
    )
    asked = bool(a.input or a.output)
    if a.json:
        print_json(
            {
                "model": spec,
                "known": price is not None,
                "source": None if price is None else price.source,
                "since": None if price is None or price.since is None else str(price.since),
                "usd_per_million": None
                if price is None
                else {
                    "input": price.input,
                    "output": price.output,
                    "cache_read": price.cache_read,
                    "cache_write": price.cache_write,
                    "tiers": [
                        {
                            "above": t.above,
                            "input": t.input,
                            "output": t.output,
                            "cache_read": t.cache_read,
                            "cache_write": t.cache_write,
                        }
                        for t in price.tiers
                    ],
                },
                "call": usage.model_dump(exclude={"cost_usd", "price_source"}) if asked else None,
                "cost_usd": price.cost(usage) if price is not None and asked else None,
            }
        )
        return 0 if price is not None else 1
    if price is None:
        print(
            f"{spec}: no known price (opdsl's table and genai-prices have none"
            f"{' for a model served on this machine' if provider == 'ollama' else ''}); "
            f"{price_advice(name)}"
        )
        return 1
    print(spec)
    print(f"  price from {price.label}")
    print(f"  USD per million tokens: {_rates(price)}")
    for tier in price.tiers:
        print(f"  prompts over {tier.above:,} tokens: {_rates(tier)}")
    if asked:
        parts = []
        if a.cached:
            parts.append(f"{a.cached:,} read from the cache")
        if a.cache_write:
            parts.append(f"{a.cache_write:,} written to it")
        prompt = f"{a.input:,} input tokens" + (f" ({', '.join(parts)})" if parts else "")
        print(f"  a call of {prompt} and {a.output:,} output tokens: ${price.cost(usage):.6f}")
    return 0


def _count(raw: str) -> int:
    try:
        return int(raw.replace(",", "").replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of tokens") from None


def _tokens(flag: str, what: str) -> Option:
    return Option(flag, type=_count, default=0, metavar="N", help=what)


PRICES = Command(
    name="prices",
    help="what a model's calls cost and which price table says so: opdsl prices MODEL",
    run=prices,
    options=(
        Option("model", help="a model spec (anthropic:claude-sonnet-4-5) or a model's name"),
        _tokens("--input", "price a call of N prompt tokens"),
        _tokens("--output", "... and N answer tokens"),
        _tokens("--cached", "... N of the prompt read from the provider's cache"),
        _tokens("--cache-write", "... N of the prompt written to the cache"),
        JSON,
    ),
)
"""``opdsl prices MODEL``."""
