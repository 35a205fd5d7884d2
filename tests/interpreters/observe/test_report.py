"""``opdsl report``: the page a user opens, checked in a real headless Chromium (Debian's
chromium and chromium-driver, which ``make test`` installs; skipped with the reason when
they are not there)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from interpreters import CallInfo, ScriptedModel, SqliteJournal, resume, run
from interpreters.cli._main import main
from interpreters.observe import report_data
from op import (
    Add,
    Budget,
    Op,
    Response,
    ToolResult,
    Usage,
    checkpoint,
    emit,
    get,
    infer,
    limit,
    par,
    timeout,
    tool,
    update,
)
from op.effects import ModelRequest
from state import CRDTModel, GSet

ROOT = Path(__file__).resolve().parents[3]
HOSTILE = (
    '</script><script>document.title="pwned"</script><img src=x onerror="document.title=\'pwned\'">'
)


class Notes(CRDTModel):
    seen: GSet[str] = GSet()


async def lookup(topic: str) -> str:
    """Look a topic up (it takes a moment, so the timeline has something to draw)."""
    await anyio.sleep(0.15 if topic == "alpha" else 0.25)
    return f"notes on {topic} {HOSTILE}"


async def broken() -> ToolResult:
    """Always fails."""
    await anyio.sleep(0.05)
    return ToolResult.failure("the disk is read-only")


class SlowModel:
    """Scripted answers that take a moment, as a model's do."""

    def __init__(self, answers: list[Response]) -> None:
        self.inner = ScriptedModel(answers)

    async def complete(self, request: ModelRequest, call: CallInfo) -> Response:
        await anyio.sleep(0.2)
        return await self.inner.complete(request, call)


def branch(topic: str) -> Op[str]:
    found = yield from tool("lookup", {"topic": topic})
    yield from update(seen=Add(topic))
    return found.output[:20]


def researched(question: str) -> Op[str]:
    yield from checkpoint("start")
    outcome = yield from limit(
        Budget(tokens=1_000, model_calls=3), infer(f"Plan: {question}", max_tokens=50)
    )
    plan = outcome.unwrap().text
    yield from par(branch("alpha"), branch("beta"))
    yield from timeout(30, tool("broken"))
    yield from emit("planned", {"plan": plan})
    yield from checkpoint("before-answer")
    state = yield from get(Notes)
    reply = yield from infer(f"Answer with {sorted(state.seen.items)}")
    return reply.text


def _model() -> SlowModel:
    return SlowModel(
        [
            Response(text="look both up", usage=Usage(input_tokens=40, output_tokens=8)),
            Response(text=f"the answer {HOSTILE}", usage=Usage(input_tokens=90, output_tokens=12)),
        ]
    )


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[str, str]:
    db = str(tmp_path / "runs.db")
    result = run(researched, "why?", model=_model(), tools=[lookup, broken], state=Notes(), db=db)
    assert result.status == "completed", result.error
    return db, result.run_id


def test_report_data_has_every_effect_scope_totals_and_fork_commands(
    recorded: tuple[str, str],
) -> None:
    db, run_id = recorded
    journal = SqliteJournal(db)
    data = report_data(journal.run(run_id), list(journal.entries(run_id)))
    journal.close()
    kinds = [e["kind"] for e in data["entries"]]
    assert kinds.count("infer") == 2 and kinds.count("tool") == 3 and "par" in kinds
    scope = next(e for e in data["entries"] if e["kind"] == "limit")
    assert scope["totals"]["tokens"] == 48 and scope["totals"]["model_calls"] == 1
    assert scope["totals"]["budget"]["tokens"] == 1_000
    assert scope["totals"]["cost_usd"] is None  # a scripted model has no price: unknown
    failed = next(e for e in data["entries"] if e["tool_error"])
    assert failed["tool_error"] == "the disk is read-only"
    commands = [e.get("command") for e in data["entries"] if e["kind"] == "checkpoint"]
    assert commands == [
        f"opdsl resume {run_id} --from start",
        f"opdsl resume {run_id} --from before-answer",
    ]


def test_the_page_is_one_file_with_nothing_to_fetch(
    recorded: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, run_id = recorded
    out = tmp_path / "page.html"
    assert main(["report", run_id, "--db", db, "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "default-src 'none'" in page
    # the run's text is data, never markup: the hostile output appears only escaped
    assert "</script><script>" not in page.split('id="run-data">', 1)[1].split("</script>", 1)[0]


def test_reporting_an_unknown_run_is_one_line(
    recorded: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = recorded
    assert main(["report", "nope", "--db", db]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opdsl: error: ") and "nope" in err and len(err.splitlines()) == 1


# -- in a real browser --------------------------------------------------------------------------


@pytest.fixture
def browser() -> Iterator[Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip(
            "no chromium and chromedriver here (Debian: apt-get install chromium chromium-driver)"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install selenium)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_report_in_a_browser(recorded: tuple[str, str], tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    db, run_id = recorded
    # a fork, so the page links to its parent
    forked = resume(run_id, from_checkpoint="before-answer", db=db, model=_model_after_fork())
    page = tmp_path / f"{forked.run_id}.html"
    assert main(["report", forked.run_id, "--db", db, "-o", str(page)]) == 0
    browser.get(page.as_uri())
    errors = [m for m in browser.get_log("browser") if m["level"] == "SEVERE"]
    assert errors == [], errors
    assert browser.title == f"opdsl run {forked.run_id}"  # no injected script ran
    assert browser.find_elements(By.CSS_SELECTOR, "#detail img") == []
    journal = SqliteJournal(db)
    entries = list(journal.entries(forked.run_id))
    journal.close()
    rows = browser.find_elements(By.CSS_SELECTOR, "#rows .row")
    assert sorted(r.get_attribute("data-address") for r in rows) == sorted(
        e.address for e in entries
    )
    parent = browser.find_element(By.CSS_SELECTOR, "#fork a")
    assert parent.text == run_id and parent.get_attribute("href").endswith(f"{run_id}.html")
    # branches of the par are lanes
    lanes = {r.text for r in browser.find_elements(By.CSS_SELECTOR, "#rows .lane")}
    assert lanes == {"branch 1", "branch 2"}
    # a click opens the right detail: the last model call, its prompt and its response
    last_infer = max(
        (e for e in entries if e.kind == "infer"),
        key=lambda e: tuple(int(p) for p in e.address.split(".")),
    )
    browser.find_element(By.CSS_SELECTOR, f'.row[data-address="{last_infer.address}"]').click()
    detail = browser.find_element(By.ID, "detail").text
    assert f"infer at {last_infer.address}" in detail
    assert "Answer with ['alpha', 'beta']" in detail
    assert 'the answer </script><script>document.title="pwned"' in detail  # shown as text
    assert browser.title == f"opdsl run {forked.run_id}"
    # a failed tool shows its error
    failed = next(e for e in entries if e.kind == "tool" and '"ok":false' in (e.result_json or ""))
    browser.find_element(By.CSS_SELECTOR, f'.row[data-address="{failed.address}"]').click()
    assert "the disk is read-only" in browser.find_element(By.CSS_SELECTOR, "#detail .error").text
    # the limit scope shows what was spent against its budget
    scope = browser.find_element(By.CSS_SELECTOR, '.row[data-kind="limit"] .totals').text
    assert "tokens 48/1000" in scope and "model 1/3" in scope and "cost unknown" in scope
    shot = Path(os.environ.get("OPDSL_REPORT_SCREENSHOT") or tmp_path / "report.png")
    browser.find_element(By.CSS_SELECTOR, f'.row[data-address="{last_infer.address}"]').click()
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")


def _model_after_fork() -> SlowModel:
    # a scripted model's place is the run's: the fork's second call gets the second answer
    return _model()


def test_a_waiting_run_shows_its_question(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    from op import ask

    db = str(tmp_path / "runs.db")

    def asks() -> Op[str]:
        return (yield from ask("Ship it on Friday?"))

    result = run(asks, db=db)
    assert result.status == "waiting"
    page = tmp_path / "waiting.html"
    assert main(["report", result.run_id, "--db", db, "-o", str(page)]) == 0
    browser.get(page.as_uri())
    question = browser.find_element(By.ID, "question").text
    assert "Ship it on Friday?" in question and f"opdsl answer {result.run_id}" in question
    errors = [m for m in browser.get_log("browser") if m["level"] == "SEVERE"]
    assert errors == [], errors


# -- the page runs its own script only, and links only to run ids -------------------------------

JS_PARENT = "javascript:document.title='pwned'//"


def _page_of(run_id: str, parent: str | None, tmp_path: Path) -> Path:
    from interpreters import RunRecord
    from interpreters.observe import render_report

    record = RunRecord(run_id=run_id, program="m:f", status="completed", parent_run=parent)
    page = tmp_path / f"{run_id}.html"
    page.write_text(render_report(record, []), encoding="utf-8")
    return page


def test_the_policy_names_the_page_s_one_script_by_its_hash_and_allows_no_other(
    tmp_path: Path,
) -> None:
    import base64
    import hashlib

    from interpreters.observe._report import CSP

    page = _page_of("r1", "r0", tmp_path).read_text(encoding="utf-8")
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert policy is not None and policy.group(1) == CSP
    rules = dict(rule.strip().split(" ", 1) for rule in CSP.split(";"))
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)  # the ones a browser runs
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert rules["script-src"] == f"'sha256-{digest}'"  # no 'unsafe-inline', nothing else
    assert rules["default-src"] == "'none'" and rules["base-uri"] == "'none'"
    assert report_data_link("r0") == "r0.html"
    for parent in (JS_PARENT, "https://example.org/x", "../up", "a b", "data:text/html,x"):
        assert report_data_link(parent) is None, parent


def report_data_link(parent: str) -> str | None:
    from interpreters import RunRecord

    record = RunRecord(run_id="r1", program="m:f", parent_run=parent)
    link: str | None = report_data(record, [])["run"]["parent_link"]
    return link


def test_a_javascript_parent_is_text_and_no_planted_script_runs_in_a_browser(
    tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    page = _page_of("r1", JS_PARENT, tmp_path)
    browser.get(page.as_uri())
    assert browser.find_elements(By.CSS_SELECTOR, "#fork a") == []  # no link made of it
    assert JS_PARENT in browser.find_element(By.ID, "fork").text
    # a page where script was planted anyway (inline, a handler, a javascript: link): the
    # policy lets none of it run, while the page's own script still draws the run
    planted = page.read_text(encoding="utf-8").replace(
        "</body>",
        "<script>document.title='pwned inline'</script>"
        "<img src=x onerror=\"document.title='pwned handler'\">"
        "<a id=planted href=\"javascript:document.title='pwned link'\">x</a></body>",
    )
    tampered = tmp_path / "tampered.html"
    tampered.write_text(planted, encoding="utf-8")
    browser.get(tampered.as_uri())
    browser.find_element(By.ID, "planted").click()
    assert browser.title == "opdsl run r1"
    assert "run r1" in browser.find_element(By.ID, "head").text  # its own script ran


def test_a_run_id_that_is_no_file_name_needs_o(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from interpreters import RunRecord

    db = tmp_path / "runs.db"
    journal = SqliteJournal(db)
    journal.create_run(RunRecord(run_id="../up", program="m:f", status="completed"))
    journal.close()
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert main(["report", "../up", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err == "opdsl: error: run '../up' cannot name a file; say where with -o FILE\n"
    assert not (tmp_path / "up.html").exists()
    assert main(["report", "../up", "--db", str(db), "-o", "page.html"]) == 0
    assert (tmp_path / "here" / "page.html").exists()
