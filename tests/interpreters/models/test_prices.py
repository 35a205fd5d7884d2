"""The price table underneath every priced call: a kept-table price is built once a day, not
on every call, and the rates it shows above a tier are the rates it charges there."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from interpreters.models._prices import Price, Prices
from op import Usage


def test_a_kept_price_is_built_once_per_model_and_day_not_on_every_call() -> None:
    table = Prices()
    first = table.price("gpt-4.1-mini", provider="openai", base_url=None)
    assert first is not None
    assert table.price("gpt-4.1-mini", provider="openai", base_url=None) is first
    # another server, another entry; a price asked for a day is built for that day
    assert table.price("gpt-4.1-mini", provider=None, base_url=None) is not first
    dated = table.price("gpt-4.1-mini", provider="openai", base_url=None, at=datetime.now(UTC))
    assert dated is not first and dated == first
    usage = Usage(input_tokens=1000, output_tokens=100)
    assert table.cost("gpt-4.1-mini", usage, provider="openai", base_url=None) == first.cost(usage)


def test_every_kept_tier_shows_the_rates_it_charges() -> None:
    """Above each tier of every tiered model in the kept table, the rates opdsl shows
    (``opdsl prices``) price a call as the table does: a prompt part with no cache price of
    its own is charged at the tier's input rate, and shown at it."""
    import dataclasses

    from genai_prices.data_snapshot import get_snapshot
    from genai_prices.types import TieredPrices

    from interpreters.models._prices import _kept_price

    now = datetime.now(UTC)
    keys = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok")
    checked = 0
    for provider in get_snapshot().providers:
        for info in provider.models:
            kept = info.get_prices(now)
            if not any(isinstance(getattr(kept, k, None), TieredPrices) for k in keys):
                continue
            price = _kept_price(info.id, (provider, info), now)
            shown = dataclasses.replace(price, _kept=None)  # priced from the rates shown
            for tier in price.tiers:
                usage = Usage(
                    input_tokens=tier.above + 1000,
                    cached_tokens=500,
                    cache_write_tokens=300,
                    output_tokens=700,
                )
                assert abs(shown.cost(usage) - price.cost(usage)) < 1e-9, (info.id, tier)
                checked += 1
    assert checked > 10, checked  # the table has tiered models to check


def test_a_price_of_four_rates_charges_what_the_tables_own_calculation_does() -> None:
    """A kept price made of the four token rates alone is charged by them, without the
    table's own calculation (half a millisecond a call): for every such model in the table,
    and prompts with and without cache reads and writes, the cost is the table's."""
    import random

    from genai_prices.data_snapshot import get_snapshot

    from interpreters.models._prices import _kept_cost, _kept_price

    now = datetime.now(UTC)
    rnd = random.Random(7)
    by_rates = by_table = 0
    for provider in get_snapshot().providers:
        for info in provider.models:
            price = _kept_price(info.id, (provider, info), now)
            if price._rates is None:  # tiered, or priced by more than tokens
                by_table += 1
                continue
            by_rates += 1
            for _ in range(5):
                prompt = rnd.randrange(0, 300_000)
                usage = Usage(
                    input_tokens=prompt,
                    cached_tokens=rnd.randrange(0, prompt + 1),
                    cache_write_tokens=rnd.randrange(0, 5_000),
                    output_tokens=rnd.randrange(0, 9_000),
                )
                table = _kept_cost(price._kept, usage)  # the table's own calculation
                assert abs(price.cost(usage) - table) <= 1e-12 * max(table, 1e-9), info.id
    assert by_rates > 100 and by_table > 10, (by_rates, by_table)


def test_a_calls_price_is_looked_up_once_per_names_and_day(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = Prices({"bench": {"input": 1.0, "output": 2.0}}, kept=True)
    searched: list[str] = []
    price = table.price

    def counted(
        model: str,
        *,
        provider: str | None = None,
        base_url: str | None = None,
        at: datetime | None = None,
    ) -> Price | None:
        searched.append(model)
        return price(model, provider=provider, base_url=base_url, at=at)

    monkeypatch.setattr(table, "price", counted)
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    # the server names its model otherwise than the call asked: both names looked up once
    for _ in range(3):
        priced = table.priced("server-name", usage, asked="gpt-4.1-mini", provider="openai")
        assert priced.cost_usd is not None and priced.price_source is not None
        assert "gpt-4.1-mini" in priced.price_source
    assert searched == ["server-name", "gpt-4.1-mini"]
    assert table.priced("bench-7b", usage, provider="openai").cost_usd == 3.0
    # a table changed since is searched again
    table.table.update(Prices({"server": {"input": 5.0, "output": 0.0}}, kept=False).table)
    assert (
        table.priced("server-name", usage, asked="gpt-4.1-mini", provider="openai").cost_usd == 5.0
    )
