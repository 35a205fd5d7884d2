"""Prices as the user meets them: ``opdsl prices MODEL`` (the price, the table it comes from
and its date, what a call would be charged), ``$OPDSL_PRICES`` over the kept table, cached
prompt tokens priced as the providers bill them, and the table that priced a run named by
``opdsl show`` and the report long after, whatever the tables say by then; old journals
still read."""

from __future__ import annotations

import json
import shutil
from importlib.metadata import version
from pathlib import Path

import pytest

from interpreters import run
from interpreters.cli._main import main
from interpreters.journal import SqliteJournal
from interpreters.models import OllamaModel, OpenAIModel
from interpreters.observe._report import report_data
from op import Budget, Message, Op, infer, limit
from tests.helpers import RawJournal
from tests.servers import ScriptedServer, openai

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "journals"
KEPT = f"genai-prices {version('genai-prices')}"  # the table installed


def opdsl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_prices_shows_a_model_s_price_its_table_and_what_a_call_costs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = opdsl(
        capsys, "prices", "anthropic:claude-sonnet-4-5",
        "--input", "10,000", "--cached", "6000", "--cache-write", "3000", "--output", "500",
    )  # fmt: skip
    assert code == 0
    assert f"price from {KEPT}: anthropic claude-sonnet-4-5" in out
    assert "input $3.00, output $15.00, cache read $0.30, cache write $3.75" in out
    assert "prompts over 200,000 tokens: input $6.00" in out
    # Anthropic's rules: fresh input at $3, a cache read a tenth of it, a write 1.25 times
    expected = (1000 * 3 + 6000 * 0.3 + 3000 * 3.75 + 500 * 15) / 1e6
    assert (
        f"(6,000 read from the cache, 3,000 written to it) and 500 output tokens: ${expected:.6f}"
        in out
    )
    # a dated price says from when
    code, out, _ = opdsl(capsys, "prices", "openai:o3")
    assert code == 0 and f"price from {KEPT}: openai o3, from 2025-06-10" in out
    code, out, _ = opdsl(capsys, "prices", "gpt-4.1-mini", "--input", "1000", "--json")
    data = json.loads(out)
    assert data["source"] == f"{KEPT}: openai gpt-4.1-mini" and data["cost_usd"] == pytest.approx(
        0.0004
    )


def test_a_local_model_has_no_price_until_the_user_gives_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # deepseek-r1 is also the name of DeepSeek's API model: served by Ollama, it is not billed so
    code, out, _ = opdsl(capsys, "prices", "ollama:deepseek-r1:7b")
    assert code == 1 and "no known price" in out and "OPDSL_PRICES" in out
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"deepseek-r1": {"input": 0.5, "output": 1.0}}))
    monkeypatch.setenv("OPDSL_PRICES", str(table))
    code, out, _ = opdsl(
        capsys, "prices", "ollama:deepseek-r1:7b", "--input", "2000000", "--cached", "1000000"
    )
    assert code == 0 and f"price from OPDSL_PRICES={table}: deepseek-r1" in out
    assert "cache read $0.50" in out and ": $1.000000" in out  # a cache read at the input price
    # the user's price wins over the kept table's
    table.write_text(
        json.dumps({"claude-sonnet-4-5": {"input": 1.0, "output": 2.0, "cached_input": 0.1}})
    )
    code, out, _ = opdsl(capsys, "prices", "anthropic:claude-sonnet-4-5")
    assert code == 0 and f"OPDSL_PRICES={table}: claude-sonnet-4-5" in out and "input $1.00" in out
    # a wrong file is one line naming it and what is wrong, and changes nothing
    table.write_text(json.dumps({"claude-sonnet-4-5": {"inptu": 1.0}}))
    code, out, err = opdsl(capsys, "prices", "anthropic:claude-sonnet-4-5")
    assert (code, out) == (2, "")
    assert err.strip() == (
        f"opdsl: error: OPDSL_PRICES={table}: claude-sonnet-4-5: unknown key 'inptu' "
        "(the keys are input, output, cached_input and cache_write)"
    )
    table.write_text("{broken")
    code, _, err = opdsl(capsys, "prices", "anthropic:claude-sonnet-4-5")
    assert code == 2 and f"OPDSL_PRICES={table}: cannot read the price table" in err


def cached_question() -> Op[str]:
    reply = yield from infer([Message.system("S" * 4000), Message.user("Again?")])
    return reply.text


def test_a_run_records_which_table_priced_it_and_counts_cached_tokens_as_openai_bills_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "runs.db")
    # OpenAI: prompt_tokens holds the cached ones, billed at the cached rate ($0.10, not $0.40)
    with ScriptedServer([openai("Yes.", usage=(3000, 40, 2048))]) as srv:
        kept = run(
            cached_question, model=OpenAIModel("gpt-4.1-mini", base_url=f"{srv.url}/v1"), db=db
        )
    expected = (952 * 0.4 + 2048 * 0.1 + 40 * 1.6) / 1e6
    t = kept.totals
    assert (t.input_tokens, t.cached_tokens, t.output_tokens, t.model_calls) == (3000, 2048, 40, 1)
    assert t.cost_usd == pytest.approx(expected)
    assert t.price_sources == (f"{KEPT}: openai gpt-4.1-mini",)
    # another run priced by the user's table
    table = tmp_path / "mine.json"
    table.write_text(json.dumps({"gpt-4.1-mini": {"input": 1.0, "output": 1.0}}))
    monkeypatch.setenv("OPDSL_PRICES", str(table))
    with ScriptedServer([openai("Yes.", usage=(3000, 40, 2048))]) as srv:
        mine = run(
            cached_question, model=OpenAIModel("gpt-4.1-mini", base_url=f"{srv.url}/v1"), db=db
        )
    assert mine.totals.cost_usd == pytest.approx(3040 / 1e6)
    # later, with neither table what it was, each run still names the table that priced it
    monkeypatch.delenv("OPDSL_PRICES")
    table.unlink()
    code, out, _ = opdsl(capsys, "show", kept.run_id, "--db", db)
    assert code == 0
    assert (
        f"tokens: 3000 in (2048 cached), 40 out; 1 model call, 0 tool calls; cost ${expected:.4f}"
        in out
    )
    assert f"priced by {KEPT}: openai gpt-4.1-mini" in out
    code, out, _ = opdsl(capsys, "show", mine.run_id, "--db", db, "--json")
    totals = json.loads(out)["totals"]
    assert totals["price_sources"] == [f"OPDSL_PRICES={table}: gpt-4.1-mini"]
    assert totals["cost_usd"] == pytest.approx(3040 / 1e6) and totals["cached_tokens"] == 2048
    journal = SqliteJournal(db)
    header = report_data(journal.run(mine.run_id), list(journal.entries(mine.run_id)))["totals"]
    journal.close()
    assert header["price_sources"] == [f"OPDSL_PRICES={table}: gpt-4.1-mini"]
    assert header["line"].endswith("cost $0.0030")


def spend_twice() -> Op[object]:
    def body() -> Op[str]:
        for turn in ("one", "two", "three"):  # the third is stopped: 6,080 tokens spent
            yield from infer([Message.system("S" * 4000), Message.user(turn)])
        return "done"

    return (yield from limit(Budget(tokens=5000), body()))


def test_a_budget_says_how_many_of_its_tokens_were_cached() -> None:
    with ScriptedServer([openai("a", usage=(3000, 40, 2048))] * 2) as srv:
        result = run(spend_twice, model=OpenAIModel("gpt-4.1-mini", base_url=f"{srv.url}/v1"))
    spent = result.value.failure().spent  # type: ignore[attr-defined]
    assert (spent.tokens, spent.cached_tokens, spent.model_calls) == (6080, 4096, 2)
    assert result.totals.cached_tokens == 4096
    # the report's limit scope says it too
    journal = SqliteJournal(".opdsl/runs.db")
    data = report_data(journal.run(result.run_id), list(journal.entries(result.run_id)))
    journal.close()
    scope = next(e for e in data["entries"] if e["kind"] == "limit")
    assert (scope["totals"]["tokens"], scope["totals"]["cached_tokens"]) == (6080, 4096)


def test_journals_from_before_prices_were_recorded_still_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("v0.1.0.db", "v0.3.0.db"):
        db = tmp_path / name
        shutil.copy(FIXTURES / name, db)
        runs = [r for (r,) in RawJournal(db).execute("SELECT run_id FROM runs")]
        assert runs
        for run_id in runs:
            code, out, err = opdsl(capsys, "show", run_id, "--db", str(db))
            assert code == 0, err
            assert "; cost " in out and "priced by" not in out
            code, out, err = opdsl(capsys, "show", run_id, "--db", str(db), "--json")
            assert code == 0, err
            assert json.loads(out)["totals"]["price_sources"] == []


def ask_once() -> Op[object]:
    def body() -> Op[str]:
        reply = yield from infer([Message.user("hi")])
        return reply.text

    return (yield from limit(Budget(usd=1.0), body()))


def test_a_usd_budget_stops_a_local_model_named_like_an_api_model_before_calling_it() -> None:
    from tests.servers import ollama

    with ScriptedServer([ollama("x")]) as srv:
        result = run(ask_once, model=OllamaModel("deepseek-r1:7b", base_url=srv.url))
        assert srv.requests == []  # DeepSeek's API price is not this machine's
    stopped = result.value.failure()  # type: ignore[attr-defined]
    assert (
        stopped.exceeded == "usd"
        and "no price is known for model 'deepseek-r1:7b'" in stopped.reason
    )


def test_a_model_named_with_a_slash_is_priced_by_the_key_opdsl_advises(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM and OpenRouter name a model ``maker/model``: the key ``opdsl prices`` says to give
    is the whole name, and once given it prices the model, in ``opdsl prices`` and for a
    usd budget, which refuses the call until then."""
    table = tmp_path / "prices.json"
    for spec in ("openai-compatible:meta-llama/Llama-3-70b@http://127.0.0.1:9/v1", 'my"odd\\model'):
        monkeypatch.delenv("OPDSL_PRICES", raising=False)
        code, out, _ = opdsl(capsys, "prices", spec)
        assert code == 1 and "no known price" in out
        # doing what it says: the JSON it shows, with numbers filled in
        advice = out.strip().split("named by OPDSL_PRICES: ", 1)[1]
        table.write_text(advice.replace("USD_PER_M", "1.0"))
        monkeypatch.setenv("OPDSL_PRICES", str(table))
        code, out, _ = opdsl(capsys, "prices", spec, "--input", "1000000", "--output", "1000000")
        assert code == 0, out
        assert f"price from OPDSL_PRICES={table}: " in out and ": $2.000000" in out

    # a usd budget: refused before the call, then priced by the key the refusal gives (as
    # JSON, whatever the name holds)
    for model in ("meta-llama/Llama-3-70b", 'meta/my"odd\\model'):
        monkeypatch.delenv("OPDSL_PRICES", raising=False)
        with ScriptedServer([openai("x", model=model)]) as srv:
            refused = run(ask_once, model=f"openai-compatible:{model}@{srv.url}/v1")
            assert srv.requests == []
        stopped = refused.value.failure()  # type: ignore[attr-defined]
        assert stopped.exceeded == "usd" and "OPDSL_PRICES" in stopped.reason
        advice = stopped.reason.split("named by OPDSL_PRICES: ", 1)[1]
        table.write_text(advice.replace("USD_PER_M", "1.0"))
        assert json.loads(table.read_text()) == {model: {"input": 1.0, "output": 1.0}}
        monkeypatch.setenv("OPDSL_PRICES", str(table))
        with ScriptedServer([openai("x", model=model, usage=(1000, 500, 0))]) as srv:
            priced = run(ask_once, model=f"openai-compatible:{model}@{srv.url}/v1")
            assert len(srv.requests) == 1
        assert priced.value.unwrap() == "x"  # type: ignore[attr-defined]
        assert priced.totals.cost_usd == pytest.approx(1500 / 1e6)
        assert priced.totals.price_sources == (f"OPDSL_PRICES={table}: {model}",)


@pytest.mark.parametrize(
    ("text", "wrong"),
    [
        (
            "[" * 200_000 + "]" * 200_000,
            "cannot read the price table: its JSON is nested too deeply",
        ),
        ('{"m": {}}', "m: no 'input' price"),
        ('{"m": {"input": 1.0}}', "m: no 'output' price"),
    ],
)
def test_a_price_file_too_deep_or_without_a_price_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    wrong: str,
) -> None:
    table = tmp_path / "prices.json"
    table.write_text(text)
    monkeypatch.setenv("OPDSL_PRICES", str(table))
    code, out, err = opdsl(capsys, "prices", "m", "--input", "1000")
    assert (code, out) == (2, "")
    assert err.startswith(f"opdsl: error: OPDSL_PRICES={table}: {wrong}")
    assert len(err.strip().splitlines()) == 1
