"""A model fallback chain: ``--model 'a:x,b:y'`` (and ``FallbackModel`` in the API) asks the
next model when one fails after its own retries; the journal says which one answered. Against
real servers on loopback, one of them failing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from interpreters import MemoryJournal, SqliteJournal, VirtualClock, dry_run, run
from interpreters.cli._main import main
from interpreters.models import FallbackModel, RetryPolicy, resolve_model
from interpreters.models.anthropic import AnthropicModel
from interpreters.models.ollama import OllamaModel
from interpreters.models.openai import OpenAIModel
from op import ModelError
from tests.fixtures import scripted_runs
from tests.helpers import RawJournal
from tests.servers import Reply, Request, ScriptedServer, anthropic, closed_port, openai, status

DOWN = status(503, "the server is down for maintenance", headers={"retry-after-ms": "1"})


def test_the_command_falls_back_and_the_journal_names_the_model_that_answered(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedServer([DOWN] * 3) as down, ScriptedServer([anthropic("from claude")]) as up:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", up.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        spec = f"openai-compatible:gpt-4.1-mini@{down.url}/v1,anthropic:claude-sonnet-4-5"
        code = main(["run", "tests.fixtures.scripted_runs:one_call", "--model", spec, "--quiet"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert out.strip() == "from claude"
        assert len(down.requests) == 3  # the first model's own retries came first
        assert len(up.requests) == 1
    run_id = str(RawJournal(".opdsl/runs.db").execute("SELECT run_id FROM runs").fetchone()[0])
    (entry,) = [e for e in SqliteJournal(".opdsl/runs.db").entries(run_id) if e.kind == "infer"]
    assert json.loads(entry.result_json or "{}")["model"] == "anthropic:claude-sonnet-4-5"


def test_the_api_falls_back_after_the_retries_and_warns_of_the_failure() -> None:
    events: list[Any] = []
    with ScriptedServer([DOWN] * 2) as down, ScriptedServer([openai("second")]) as up:
        first = resolve_model(f"openai-compatible:gpt-4.1-mini@{down.url}/v1")
        assert isinstance(first, OpenAIModel)
        first.retry = RetryPolicy(max_retries=1)
        chain = FallbackModel([first, f"openai-compatible:gpt-4.1-nano@{up.url}/v1"])
        result = run(
            scripted_runs.one_call,
            model=chain,
            db=MemoryJournal(),
            clock=VirtualClock(),
            on_event=events.append,
        )
        assert (result.value, len(down.requests), len(up.requests)) == ("second", 2, 1)
    warnings = [e.data for e in events if getattr(e, "name", None) == "warning"]
    assert (
        len(warnings) == 1
        and "HTTP 503" in warnings[0]
        and "asking openai-compatible:" in warnings[0]
    )


def test_when_every_model_fails_the_error_names_each() -> None:
    spec = ",".join(f"openai-compatible:m{i}@http://127.0.0.1:{closed_port()}/v1" for i in range(2))
    chain = resolve_model(spec)
    assert isinstance(chain, FallbackModel) and len(chain.models) == 2
    result = run(scripted_runs.one_call, model=chain, db=MemoryJournal(), clock=VirtualClock())
    assert result.status == "failed"
    assert isinstance(result.error, ModelError)
    text = str(result.error)
    assert "every model of the chain failed (2)" in text and "m0" in text and "m1" in text


def test_a_chain_spec_s_parts_keep_their_options_and_a_dry_run_reads_the_first() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    chain = resolve_model(
        f"openai-compatible:gpt-4.1-mini@{url}?max_tokens=77, anthropic:claude-sonnet-4-5"
    )
    assert isinstance(chain, FallbackModel)
    first, second = chain.models
    assert isinstance(first, OpenAIModel) and first.max_tokens == 77
    assert isinstance(second, AnthropicModel)
    assert dry_run(scripted_runs.one_call, model=chain).usage.output_tokens == 77
    with pytest.raises(ValueError, match="unknown model provider 'nope'"):
        resolve_model(f"openai-compatible:gpt-4.1-mini@{url},nope:x")


def _endless_count(answer: str) -> Any:
    """An answer whose token count is a number no count can be (``1e400`` reads as infinity)."""

    def reply(req: Request) -> Reply:
        return Reply(chunks=[answer])

    return reply


OPENAI_ENDLESS = (
    '{"id": "c", "object": "chat.completion", "model": "gpt-4.1-mini", "choices": [{"index": 0,'
    ' "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}],'
    ' "usage": {"prompt_tokens": 1e400, "completion_tokens": 1}}'
)
OLLAMA_ENDLESS = (
    '{"model": "qwen3:8b", "message": {"role": "assistant", "content": "x"}, "done": true,'
    ' "prompt_eval_count": 1e400, "eval_count": Infinity}'
)


@pytest.mark.parametrize("provider", ["openai", "ollama"])
def test_an_answer_counting_endless_tokens_is_a_provider_error_and_the_chain_falls_back(
    provider: str,
) -> None:
    answer = OPENAI_ENDLESS if provider == "openai" else OLLAMA_ENDLESS
    with ScriptedServer([_endless_count(answer)]) as bad, ScriptedServer([openai("sane")]) as up:
        first: Any = (
            OpenAIModel("gpt-4.1-mini", base_url=f"{bad.url}/v1", api_key="k", stream=False)
            if provider == "openai"
            else OllamaModel("qwen3:8b", base_url=bad.url, stream=False)
        )
        alone = run(scripted_runs.one_call, model=first, db=MemoryJournal())
        assert alone.status == "failed" and alone.error is not None
        assert "malformed answer" in str(alone.error), alone.error
        bad.add(_endless_count(answer))
        chain = FallbackModel([first, f"openai-compatible:gpt-4.1-mini@{up.url}/v1"])
        result = run(scripted_runs.one_call, model=chain, db=MemoryJournal())
    assert result.status == "completed" and result.value == "sane"
