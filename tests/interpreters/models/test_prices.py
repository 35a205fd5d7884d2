"""The price table underneath every priced call: a kept-table price is built once a day, not
on every call, and the rates it shows above a tier are the rates it charges there."""

from __future__ import annotations

from datetime import UTC, datetime

from interpreters.models._prices import Prices
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
