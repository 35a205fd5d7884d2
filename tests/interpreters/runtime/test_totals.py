"""A run's totals, as the user meets them: ``RunResult.totals`` (tokens in, out and cached;
model and tool calls; cost, or unknown), the same as ``opdsl show`` and its ``--json`` give,
a run that waited and was answered counted once, and the report's header."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from interpreters import ScriptedModel, resume, run
from interpreters.cli._main import main
from op import Message, Op, Response, Usage, ask, infer, tool

PRICED = Usage(input_tokens=1200, cached_tokens=1000, cache_write_tokens=100, output_tokens=30)


def count(text: str) -> str:
    """Count the words of ``text``."""
    return str(len(text.split()))


def triage() -> Op[str]:
    first = yield from infer([Message.user("Label this issue.")])
    yield from tool("count", {"text": first.text})
    who = yield from ask("Who should take it?")
    second = yield from infer([Message.user(f"Tell {who}.")])
    yield from tool("count", {"text": second.text})
    return second.text


def _model(cost: float | None = 0.002) -> ScriptedModel:
    return ScriptedModel(
        [
            Response(text="bug", usage=PRICED.model_copy(update={"cost_usd": 0.001})),
            Response(text="told", usage=PRICED.model_copy(update={"cost_usd": cost})),
        ]
    )


def test_a_run_s_result_carries_its_totals_and_an_answered_run_counts_each_effect_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "runs.db")
    waiting = run(triage, model=_model(), tools=[count], db=db)
    assert waiting.status == "waiting"
    t = waiting.totals
    assert (t.input_tokens, t.cached_tokens, t.cache_write_tokens, t.output_tokens) == (
        1200,
        1000,
        100,
        30,
    )
    assert (t.model_calls, t.tool_calls) == (1, 1) and t.cost_usd == pytest.approx(0.001)
    done = resume(waiting.run_id, answer="Ana", model=_model(), tools=[count], db=db)
    assert done.status == "completed" and done.value == "told"
    t = done.totals
    # what the run recorded before it waited, and what it did after: each once
    assert (t.input_tokens, t.cached_tokens, t.output_tokens) == (2400, 2000, 60)
    assert (t.model_calls, t.tool_calls) == (2, 2) and t.cost_usd == pytest.approx(0.003)
    assert t.tokens == 2460
    # opdsl show and --json say the same
    assert main(["show", done.run_id, "--db", db]) == 0
    out = capsys.readouterr().out
    assert t.line() in out
    assert t.line() == (
        "tokens: 2400 in (2000 cached, 200 written to the cache), 60 out; "
        "2 model calls, 2 tool calls; cost $0.0030"
    )
    assert main(["show", done.run_id, "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"] == t.as_json()


def test_a_call_without_a_price_makes_the_cost_unknown_and_says_what_is_known(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "runs.db")
    waiting = run(triage, model=_model(cost=None), tools=[count], db=db)
    done = resume(waiting.run_id, answer="Ana", model=_model(cost=None), tools=[count], db=db)
    t = done.totals
    assert (t.cost_usd, t.unpriced_calls) == (None, 1) and t.priced_usd == pytest.approx(0.001)
    assert main(["show", done.run_id, "--db", db]) == 0
    assert (
        "cost unknown (1 model call with no known price; $0.0010 for the rest)"
        in capsys.readouterr().out
    )


def test_the_report_s_header_gives_the_run_s_totals(tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip(
            "no chromium and chromedriver here (Debian: apt-get install chromium chromium-driver)"
        )
    webdriver: Any = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    db = str(tmp_path / "runs.db")
    waiting = run(triage, model=_model(), tools=[count], db=db)
    done = resume(waiting.run_id, answer="Ana", model=_model(), tools=[count], db=db)
    page = tmp_path / "report.html"
    assert main(["report", done.run_id, "--db", db, "-o", str(page)]) == 0
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        browser.get(page.as_uri())
        shown = browser.find_element(By.ID, "totals").text
    finally:
        browser.quit()
    assert shown == done.totals.line()
