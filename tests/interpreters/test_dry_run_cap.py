"""``opdsl run --dry-run``: each model call is estimated at the cap the live call would send
(``?max_tokens=`` in the model spec, else ``$OPDSL_MAX_TOKENS``, else the default), not at a
fixed guess."""

from __future__ import annotations

import re

import pytest

from interpreters import ScriptedModel, dry_run
from interpreters.cli._main import main
from interpreters.models._remote import DEFAULT_MAX_TOKENS
from tests.fixtures import scripted_runs
from tests.servers import closed_port

PROGRAM = "tests.fixtures.scripted_runs:one_call"


def output_tokens(capsys: pytest.CaptureFixture[str], *argv: str) -> int:
    code = main(["run", PROGRAM, "--dry-run", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    found = re.search(r"estimated usage: \d+ input \+ (\d+) output tokens", out)
    assert found is not None, out
    return int(found.group(1))


def test_the_spec_s_max_tokens_is_the_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"  # never asked
    spec = f"openai-compatible:gpt-4.1-mini@{url}?max_tokens=64"
    assert output_tokens(capsys, "--model", spec) == 64


def test_opdsl_max_tokens_is_the_estimate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    monkeypatch.setenv("OPDSL_MAX_TOKENS", "123")
    assert output_tokens(capsys, "--model", f"openai-compatible:gpt-4.1-mini@{url}") == 123
    # the default model too (no --model): what a live run given none would send
    monkeypatch.setenv("OPDSL_MODEL", f"openai-compatible:gpt-4.1-mini@{url}")
    assert output_tokens(capsys) == 123


def test_without_any_setting_the_estimate_is_the_default_cap(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPDSL_MAX_TOKENS", raising=False)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    spec = f"openai-compatible:gpt-4.1-mini@{url}"
    assert output_tokens(capsys, "--model", spec) == DEFAULT_MAX_TOKENS
    # a model object that declares no cap is estimated at the guess, and says so
    plan = dry_run(scripted_runs.one_call, model=_NoCap())
    assert plan.usage.output_tokens == 500
    assert "else a guess of 500 a call" in plan.render()
    # a scripted model answers itself: its own usage, no estimate
    assert dry_run(scripted_runs.one_call, model=ScriptedModel(["hi"])).value == "hi"


class _NoCap:
    async def complete(self, request: object, call: object) -> object:
        raise AssertionError("a dry run never calls a real model")


def test_a_local_model_is_estimated_as_the_live_run_prices_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model served on this machine that shares an API model's name is not estimated at
    the API's price, as its live calls are not priced at it; the API's model is."""
    monkeypatch.delenv("OPDSL_PRICES", raising=False)
    url = f"http://127.0.0.1:{closed_port()}"
    local = [f"openai-compatible:gpt-4.1-mini@{url}/v1", f"ollama:gpt-4.1-mini@{url}"]
    for spec, priced in [*((s, False) for s in local), ("openai:gpt-4.1-mini", True)]:
        assert main(["run", PROGRAM, "--dry-run", "--model", spec]) == 0
        out = capsys.readouterr().out
        assert ("about $" in out) is priced, (spec, out)
        assert ("cost unknown" in out) is not priced, (spec, out)


def test_a_program_that_asks_no_model_does_not_load_the_default_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default model (``$OPDSL_MODEL``, else the built-in one) is made at the first
    model call: a dry run of a program that makes none does not load a provider and its HTTP
    stack (a quarter of a second or more, where the dry run itself takes milliseconds)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys\n"
        "from interpreters import dry_run\n"
        "from op import emit\n"
        "def prog():\n"
        "    yield from emit('hi')\n"
        "    return 'ok'\n"
        "assert dry_run(prog).value == 'ok'\n"
        "print(sorted(m for m in ('httpx', 'aiohttp', 'interpreters.models._http') "
        "if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
    # a program that does ask one is still estimated with the default's cap
    monkeypatch.delenv("OPDSL_MAX_TOKENS", raising=False)
    monkeypatch.delenv("OPDSL_MODEL", raising=False)
    assert dry_run(scripted_runs.one_call).usage.output_tokens == DEFAULT_MAX_TOKENS
