"""What a model call costs, and which price table says so.

Prices come from three tables, the first that knows the model winning:

1. ``$OPDSL_PRICES``, a JSON file of the user's own prices;
2. opdsl's own ``prices.json`` (corrections shipped with opdsl, empty unless a price of the
   kept table is wrong);
3. `genai-prices <https://github.com/pydantic/genai-prices>`_, the table the Pydantic team
   keeps: dated prices, tiers by prompt length, cache reads and writes.

The first two have the same shape, USD per million tokens by model name (the longest
matching prefix wins)::

    {"qwen3": {"input": 0.2, "output": 0.6, "cached_input": 0.02, "cache_write": 0.25}}

A name with a ``/`` is a prefix of the model's whole name (``meta-llama/Llama-3-70b``); one
without, of the part after the model's last ``/`` (``qwen3`` prices ``qwen/qwen3-8b``).
``input`` and ``output`` are required (an entry without them would price its model at
zero); ``cached_input`` (a cache read) and ``cache_write`` default to the ``input`` price. A
file that gives a model or a price twice, or names a model ``""`` (a prefix of every name), is
refused: it would price otherwise than it reads. Keys starting with ``_`` are comments.

A model no table knows has an unknown cost (None), never zero. A model served on this
machine (Ollama) is priced only by the first two: a local model that shares a name with a
provider's API is not billed at that provider's price. Each priced :class:`~op.Usage` says
which table priced it (``price_source``), so a report read later names the table and the
date of the price."""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from importlib import resources
from typing import Any

from op import Usage
from op._values import replaced

__all__ = ["LOCAL_PROVIDERS", "Price", "Prices", "Tier", "price_advice"]

LOCAL_PROVIDERS = frozenset({"ollama"})
"""Providers whose models run on the user's own machine: the kept table never prices them."""

_KEPT_PROVIDERS = {"openai": "openai", "anthropic": "anthropic"}
"""opdsl's providers that are the kept table's providers of the same name."""


@dataclass(frozen=True, slots=True)
class Tier:
    """The rates (USD per million tokens) of a prompt longer than ``above`` tokens."""

    above: int
    input: float
    output: float
    cache_read: float
    cache_write: float


_Rates = tuple[float, float, float, float, bool, bool]
"""A kept price's input, output, cache-read and cache-write rates, and whether the table
prices cache reads and cache writes at all (:func:`_rates_of`)."""


@dataclass(frozen=True, slots=True)
class Price:
    """One model's price: USD per million tokens of prompt (``input``), answer (``output``),
    prompt read from the provider's cache (``cache_read``) and written to it
    (``cache_write``); ``tiers``: higher rates for longer prompts. ``source`` names the table
    and its entry; ``since``: the day this price took effect, where the table says."""

    model: str
    source: str
    input: float
    output: float
    cache_read: float
    cache_write: float
    tiers: tuple[Tier, ...] = ()
    since: date | None = None
    _kept: Any = field(default=None, repr=False, compare=False)
    _rates: _Rates | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        """What a priced usage records: the table, its entry and the price's date."""
        return self.source if self.since is None else f"{self.source}, from {self.since}"

    def cost(self, usage: Usage) -> float:
        """The USD that ``usage`` costs at this price."""
        if self._kept is not None:
            return _kept_cost(self._kept, usage, self._rates)
        rates: Price | Tier = self
        for tier in self.tiers:
            if usage.input_tokens > tier.above:
                rates = tier
        read = min(usage.cached_tokens, usage.input_tokens)
        written = min(usage.cache_write_tokens, usage.input_tokens - read)
        fresh = usage.input_tokens - read - written
        return (
            fresh * rates.input
            + read * rates.cache_read
            + written * rates.cache_write
            + usage.output_tokens * rates.output
        ) / 1_000_000


def _kept_cost(model_price: Any, usage: Usage, rates: _Rates | None = None) -> float:
    """What the kept table charges for ``usage``: by ``rates`` (:func:`_rates_of`) where
    they are all its price is, else by its own calculation."""
    if rates is not None:
        reads, writes = rates[4], rates[5]
    else:
        reads = getattr(model_price, "cache_read_mtok", None) is not None
        writes = getattr(model_price, "cache_write_mtok", None) is not None
    # a part of the prompt the table has no cache price for is priced as the rest of it
    read = min(usage.cached_tokens, usage.input_tokens) if reads else 0
    written = min(usage.cache_write_tokens, usage.input_tokens - read) if writes else 0
    if rates is not None:
        given, output, cache_read, cache_write = rates[:4]
        fresh = usage.input_tokens - read - written
        return (
            fresh * given + read * cache_read + written * cache_write + usage.output_tokens * output
        ) / 1_000_000
    from genai_prices import Usage as KeptUsage

    priced = model_price.calc_price(
        KeptUsage(
            input_tokens=usage.input_tokens,
            cache_read_tokens=read,
            cache_write_tokens=written,
            output_tokens=usage.output_tokens,
        )
    )
    return float(priced["total_price"])


def price_advice(model: str) -> str:
    """How to give ``model`` a price: the entry of a file named by ``OPDSL_PRICES``, its key
    the model's whole name written as JSON (a key that prices it, whatever the name holds)."""
    key = json.dumps(model, ensure_ascii=False)
    return (
        f"give it in a JSON file named by OPDSL_PRICES: {{{key}: "
        '{"input": USD_PER_M, "output": USD_PER_M}}'
    )


def _entry(model: str, source: str, rates: Mapping[str, Any]) -> Price:
    def rate(key: str, default: float | None = None) -> float:
        value = rates.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
            raise ValueError(f"{source}: {key!r} is {value!r}, not a price in USD per million")
        return float(value)

    if not model:
        # "" is a prefix of every name: one entry would price every model the tables know
        raise ValueError(
            f"{source.removesuffix(': ')}: a model's name is empty (it would price every "
            'model); a key names the models it prices by the start of their names ("qwen3", '
            '"meta-llama/")'
        )
    if not isinstance(rates, Mapping):
        raise ValueError(f"{source}: expected an object of prices, not {rates!r}")
    twice = _twice(rates)
    if twice is not None:
        raise ValueError(f"{source}: {twice} is given twice")
    unknown = set(rates) - {"input", "output", "cached_input", "cache_write"}
    if unknown:
        raise ValueError(
            f"{source}: unknown key {sorted(unknown)[0]!r} "
            "(the keys are input, output, cached_input and cache_write)"
        )
    for key in ("input", "output"):
        if key not in rates:
            raise ValueError(
                f"{source}: no {key!r} price (input and output are required, in USD per "
                "million tokens; 0 for a model that costs nothing)"
            )
    given = rate("input")
    return Price(
        model=model,
        source=source,
        input=given,
        output=rate("output"),
        cache_read=rate("cached_input", given),
        cache_write=rate("cache_write", given),
    )


class _Read(dict[str, Any]):
    """A JSON object of a price file, and the first key it gives twice (``_`` ones aside,
    which say nothing): of two, JSON keeps the last, and a price the user wrote would be
    dropped unsaid."""

    twice: str | None = None


def _read_object(pairs: list[tuple[str, Any]]) -> _Read:
    out = _Read()
    for key, value in pairs:
        if key in out and out.twice is None and not key.startswith("_"):
            out.twice = key
        out[key] = value
    return out


def _twice(value: object) -> str | None:
    """The key a price file's object gives twice, shown (cut to 80 characters)."""
    key = getattr(value, "twice", None)
    return None if key is None else repr(key[:80]) + ("..." if len(key) > 80 else "")


def _shipped() -> dict[str, Any]:
    text = resources.files("interpreters").joinpath("prices.json").read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


class Prices:
    """The price of a model call (see the module's docstring for the tables and their order).

    ``table``: prices to use instead of ``$OPDSL_PRICES`` and opdsl's ``prices.json`` (the
    same shape); ``kept``: whether to fall back on genai-prices. A broken ``$OPDSL_PRICES``
    is a ValueError naming the file, raised here, before any call is made.

    Example:
        >>> p = Prices({"qwen3": {"input": 1.0, "output": 2.0}}, kept=False)
        >>> p.cost("qwen3:8b", Usage(input_tokens=1_000_000, output_tokens=500_000))
        2.0
        >>> p.cost("llama3", Usage()) is None
        True
    """

    def __init__(
        self, table: Mapping[str, Mapping[str, float]] | None = None, *, kept: bool = True
    ) -> None:
        entries: dict[str, Price] = {}
        if table is None:
            for name, rates in _shipped().items():
                if not name.startswith("_"):
                    entries[name] = _entry(name, f"opdsl prices.json: {name}", rates)
            extra = os.environ.get("OPDSL_PRICES")
            if extra:
                entries.update(self.read(extra))
        else:
            for name, rates in table.items():
                if not name.startswith("_"):
                    entries[name] = _entry(name, f"the price table given: {name}", rates)
        #: USD per million tokens by model name (the longest matching prefix wins; a name
        #: without a '/' is matched against the part after the model's last '/')
        self.table = entries
        self.kept = kept
        self._found: dict[tuple[str, str | None, str | None], Any] = {}
        # the kept table's prices built today (a price is dated by the day, so it is built
        # once a day per model and server, not on every call)
        self._built: dict[tuple[str, str | None, str | None, date], Price] = {}
        # the price each call's names found today (the day as UTC days since 1970), and the
        # size of the table it was found in: a call is priced without a search of the tables
        self._prices_of: dict[tuple[str, str | None, str | None, str | None], Price | None] = {}
        self._prices_day = (-1, -1)

    @staticmethod
    def read(path: str) -> dict[str, Price]:
        """A price file's prices by model, or a ValueError naming the file and what is wrong."""
        try:
            with open(path, encoding="utf-8") as f:
                table = json.load(f, object_pairs_hook=_read_object)
        except (OSError, ValueError) as exc:
            raise ValueError(f"OPDSL_PRICES={path}: cannot read the price table: {exc}") from None
        except RecursionError:  # JSON nested deeper than the parser's stack
            raise ValueError(
                f"OPDSL_PRICES={path}: cannot read the price table: its JSON is nested too deeply"
            ) from None
        if not isinstance(table, dict):
            raise ValueError(
                f"OPDSL_PRICES={path}: cannot read the price table: expected a JSON object "
                'of models, {"MODEL": {"input": USD_PER_M, "output": USD_PER_M}}'
            )
        twice = _twice(table)
        if twice is not None:
            raise ValueError(f"OPDSL_PRICES={path}: model {twice} is given twice")
        return {
            name: _entry(name, f"OPDSL_PRICES={path}: {name}", rates)
            for name, rates in table.items()
            if not name.startswith("_")
        }

    def price(
        self,
        model: str,
        *,
        provider: str | None = None,
        base_url: str | None = None,
        at: datetime | None = None,
    ) -> Price | None:
        """The price of ``model`` as ``provider`` serves it from ``base_url`` (where known),
        on the day ``at`` (default: now); None when no table knows it."""
        # a key with a '/' is matched against the whole name, one without against the part
        # after its last '/'; of two keys as long, the one without a '/' matched more of it
        name = model.rsplit("/", 1)[-1]
        best = max(
            (k for k in self.table if (model if "/" in k else name).startswith(k)),
            key=lambda k: (len(k), "/" not in k),
            default=None,
        )
        if best is not None:
            return self.table[best]
        if not self.kept or provider in LOCAL_PROVIDERS:
            return None
        key = (model, provider, base_url)
        if key not in self._found:
            self._found[key] = _kept_model(model, provider, base_url)
        found = self._found[key]
        if found is None:
            return None
        if at is not None:
            return _kept_price(model, found, at)
        now = datetime.now(UTC)
        day = (model, provider, base_url, now.date())
        built = self._built.get(day)
        if built is None:
            if any(k[3] != now.date() for k in self._built):
                self._built.clear()  # yesterday's prices: kept no longer
            built = self._built[day] = _kept_price(model, found, now)
        return built

    def cost(
        self,
        model: str,
        usage: Usage,
        *,
        provider: str | None = None,
        base_url: str | None = None,
    ) -> float | None:
        """The USD ``usage`` of ``model`` costs; None when no table knows its price."""
        price = self.price(model, provider=provider, base_url=base_url)
        return None if price is None else price.cost(usage)

    def priced(
        self,
        model: str,
        usage: Usage,
        *,
        asked: str | None = None,
        provider: str | None = None,
        base_url: str | None = None,
    ) -> Usage:
        """``usage`` with its cost and the table that priced it (unchanged when none does).
        ``model``: the model that answered, as the server names it; ``asked``: the name the
        call asked for, priced when no table knows the first (a server that calls its model
        otherwise than its users do)."""
        key = (model, asked, provider, base_url)
        day = (int(time.time() // 86400), len(self.table))
        if day != self._prices_day:
            self._prices_of.clear()  # another day's prices, or a table changed since
            self._prices_day = day
        if key in self._prices_of:
            price = self._prices_of[key]
        else:
            price = self.price(model, provider=provider, base_url=base_url)
            if price is None and asked and asked != model:
                price = self.price(asked, provider=provider, base_url=base_url)
            if len(self._prices_of) >= 1024:
                self._prices_of.clear()
            self._prices_of[key] = price
        if price is None:
            return usage
        return replaced(usage, {"cost_usd": price.cost(usage), "price_source": price.label})


def _kept_model(model: str, provider: str | None, base_url: str | None) -> Any:
    """The kept table's (provider, model) for ``model``: by opdsl's provider when it is one
    of the table's, else by the server's URL, else (no provider said) by the name alone."""
    from genai_prices.data_snapshot import get_snapshot

    snapshot = get_snapshot()
    try:
        if provider in _KEPT_PROVIDERS:
            return snapshot.find_provider_model(model, None, _KEPT_PROVIDERS[provider], None)
        if base_url:
            return snapshot.find_provider_model(model, None, None, base_url)
        if provider is None:
            return snapshot.find_provider_model(model, None, None, None)
    except LookupError:
        return None
    return None


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("genai-prices")
    except PackageNotFoundError:
        return "?"


def _kept_price(model: str, found: Any, at: datetime) -> Price:
    from genai_prices.types import ConditionalPrice, TieredPrices

    provider, info = found
    model_price = info.get_prices(at)
    since = None
    if isinstance(info.prices, list):
        for conditional in reversed(info.prices):
            if not isinstance(conditional, ConditionalPrice):
                continue
            constraint = conditional.constraint
            if constraint is None or constraint.active(at):
                start = getattr(constraint, "start_date", None)
                since = start.date() if isinstance(start, datetime) else start
                break

    def base(key: str, default: float = 0.0) -> float:
        value = getattr(model_price, key, None)
        if isinstance(value, TieredPrices):
            return float(value.base)
        return default if value is None else float(value)

    def tiered(key: str, above: int, default: float) -> float:
        value = getattr(model_price, key, None)
        if isinstance(value, TieredPrices):
            rate = value.base
            for tier in value.tiers:
                if above >= tier.start:
                    rate = tier.price
            return float(rate)
        return default if value is None else float(value)

    given = base("input_mtok")
    starts = sorted(
        {
            int(t.start)
            for key in ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok")
            if isinstance(v := getattr(model_price, key, None), TieredPrices)
            for t in v.tiers
        }
    )

    def tier(start: int) -> Tier:
        # a part of the prompt with no cache price is charged as the rest of it: the tier's
        # input rate, not the base one
        rate = tiered("input_mtok", start, given)
        return Tier(
            above=start,
            input=rate,
            output=tiered("output_mtok", start, base("output_mtok")),
            cache_read=tiered("cache_read_mtok", start, rate),
            cache_write=tiered("cache_write_mtok", start, rate),
        )

    tiers = tuple(tier(start) for start in starts)
    return Price(
        model=model,
        source=f"genai-prices {_version()}: {provider.id} {info.id}",
        input=given,
        output=base("output_mtok"),
        cache_read=base("cache_read_mtok", given),
        cache_write=base("cache_write_mtok", given),
        tiers=tiers,
        since=since,
        _kept=model_price,
        _rates=_rates_of(model_price),
    )


_RATES = frozenset({"input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok"})
_UNCOUNTED = frozenset(
    {
        # what opdsl's Usage never counts, so that the table charges nothing for it: searches,
        # and the parts of a prompt or an answer it does not tell apart (audio, images, video,
        # reasoning, citations, an hour-long cache write), charged as the rest of it
        "web_searches_kcount",
        "storage_searches_kcount",
        "cache_write_1h_mtok",
        "input_audio_mtok",
        "input_image_mtok",
        "input_video_mtok",
        "cache_audio_read_mtok",
        "cache_image_read_mtok",
        "output_audio_mtok",
        "output_image_mtok",
        "output_video_mtok",
        "output_reasoning_mtok",
        "output_citation_mtok",
    }
)
"""Prices a kept entry may hold beside its token rates and still be charged by them (a test
checks every entry of the table against its own calculation)."""


def _rates_of(model_price: Any) -> _Rates | None:
    """The kept price's input, output, cache-read and cache-write rates where the table
    charges a call by these four alone (none tiered, nothing else priced that opdsl counts or
    the table would count for it: requests, pages, hours), so that it is charged by them
    here, and whether it has a cache-read and a cache-write price (asked once: the table's
    objects answer a missing one through Python code of their own); None where the table's
    own calculation must do it (half a millisecond a call)."""
    from genai_prices.types import TieredPrices

    given = {k: v for k, v in vars(model_price).items() if not k.startswith("_") and v is not None}
    if not set(given) <= _RATES | _UNCOUNTED or any(
        isinstance(v, TieredPrices) for v in given.values()
    ):
        return None
    rate = {k: float(given.get(k, 0)) for k in _RATES}
    return (
        rate["input_mtok"],
        rate["output_mtok"],
        rate["cache_read_mtok"],
        rate["cache_write_mtok"],
        given.get("cache_read_mtok") is not None,
        given.get("cache_write_mtok") is not None,
    )
