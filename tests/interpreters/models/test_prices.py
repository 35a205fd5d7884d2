"""The price table underneath every priced call: a kept-table price is built once a day, not
on every call, and the rates it shows above a tier are the rates it charges there; the user's
keys match models by name, '/' and all; a broken price file is an error naming it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

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


def test_a_key_with_a_slash_prices_the_model_of_that_whole_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served by vLLM, Together or OpenRouter, a model's name has its maker before a '/': the
    user's key for that whole name prices it, over any shorter key; a key without a '/'
    still prices a model by the part of its name after the last '/'."""
    table = tmp_path / "prices.json"
    table.write_text(
        json.dumps(
            {
                "meta-llama/Llama-3-70b": {"input": 1.0, "output": 2.0},
                "Llama-3": {"input": 3.0, "output": 4.0},
                "qwen3": {"input": 5.0, "output": 6.0},
                "mistralai/": {"input": 7.0, "output": 8.0},
                "Mistral-7B": {"input": 0.5, "output": 0.5},
            }
        )
    )
    monkeypatch.setenv("OPDSL_PRICES", str(table))
    prices = Prices(kept=False)

    def rates(model: str) -> tuple[float, float] | None:
        price = prices.price(model)
        return None if price is None else (price.input, price.output)

    assert rates("meta-llama/Llama-3-70b") == (1.0, 2.0)
    assert rates("meta-llama/Llama-3-70b-Instruct") == (1.0, 2.0)  # a prefix, as ever
    # another maker's model of that name is not priced by this maker's key
    assert rates("other/Llama-3-70b") == (3.0, 4.0)
    assert rates("Llama-3-70b") == (3.0, 4.0)
    # keys without a '/' match as before: the part after the last '/', the longest winning
    assert rates("qwen3:8b") == rates("qwen/qwen3-8b") == (5.0, 6.0)
    assert rates("mistralai/Mixtral-8x7B") == (7.0, 8.0)
    # of two keys as long, the one without a '/' matched more of the name
    assert len("mistralai/") == len("Mistral-7B")
    assert rates("mistralai/Mistral-7B-v0.3") == (0.5, 0.5)
    assert rates("meta-llama") is None and rates("llama/") is None
    price = prices.price("meta-llama/Llama-3-70b")
    assert price is not None and price.source == f"OPDSL_PRICES={table}: meta-llama/Llama-3-70b"


def test_a_price_file_nested_too_deeply_is_an_error_naming_the_file(tmp_path: Path) -> None:
    table = tmp_path / "prices.json"
    table.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError) as caught:
        Prices.read(str(table))
    assert str(caught.value) == (
        f"OPDSL_PRICES={table}: cannot read the price table: its JSON is nested too deeply"
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '{"qwen3": {"input": 1, "output": 2}, "qwen3": {"input": 5, "output": 9}}',
            "model 'qwen3' is given twice",
        ),
        (
            '{"a": {"input": 1, "output": 2}, "qwen3": {"input": 1, "output": 2, "input": 0}}',
            "qwen3: 'input' is given twice",
        ),
        (
            "{" + ", ".join([f'"{"m" * 90}": {{"input": 1, "output": 2}}'] * 2) + "}",
            f"model {'m' * 80!r}... is given twice",
        ),
        (
            '{"": {"input": 1, "output": 2}}',
            "a model's name is empty (it would price every model); a key names the models "
            'it prices by the start of their names ("qwen3", "meta-llama/")',
        ),
    ],
)
def test_a_price_file_that_would_price_otherwise_than_it_reads_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, said: str
) -> None:
    """A key given twice (JSON keeps the last: the first price would be dropped unsaid) and
    an empty model name (a prefix of every name: it would price every model) are refused,
    naming the file, before any call is priced."""
    table = tmp_path / "prices.json"
    table.write_text(text)
    monkeypatch.setenv("OPDSL_PRICES", str(table))
    with pytest.raises(ValueError) as caught:
        Prices()
    assert str(caught.value) == f"OPDSL_PRICES={table}: {said}"
    if '""' in text:
        with pytest.raises(ValueError, match="^the price table given: a model's name is empty"):
            Prices({"": {"input": 1, "output": 2}})


def test_a_price_files_comments_may_repeat(tmp_path: Path) -> None:
    table = tmp_path / "prices.json"
    table.write_text(
        '{"_comment": "ours", "_comment": "since May", "qwen3": {"input": 1, "output": 2}}'
    )
    assert list(Prices.read(str(table))) == ["qwen3"]


@pytest.mark.parametrize(
    ("rates", "missing"),
    [({}, "input"), ({"output": 2.0}, "input"), ({"input": 1.0, "cached_input": 0.1}, "output")],
)
def test_an_entry_without_an_input_or_output_price_is_refused_not_priced_at_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rates: dict[str, float], missing: str
) -> None:
    """A usd budget fails closed on a model with no price: an entry that leaves out a price
    is refused by name, where it would have priced the model's calls at nothing."""
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"m": rates}))
    monkeypatch.setenv("OPDSL_PRICES", str(table))
    wanted = (
        f"OPDSL_PRICES={table}: m: no {missing!r} price (input and output are required, "
        "in USD per million tokens; 0 for a model that costs nothing)"
    )
    with pytest.raises(ValueError) as caught:
        Prices()
    assert str(caught.value) == wanted
    with pytest.raises(ValueError, match=f"the price table given: m: no {missing!r} price"):
        Prices({"m": rates})
    # a model that costs nothing says so
    assert Prices({"m": {"input": 0, "output": 0}}, kept=False).cost("m", Usage()) == 0.0
