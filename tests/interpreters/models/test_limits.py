"""What a provider learned from a real server: the cap on an answer's length, spec options,
tools a server would drop, a tokens budget that stops a streamed call. Against loopback
servers with scripted answers (the real llama.cpp server: tests/real_model)."""

from __future__ import annotations

from typing import Any

import pytest

from interpreters import MemoryJournal, resolve_model, run
from interpreters.models._http import HttpModel
from interpreters.models._remote import DEFAULT_MAX_TOKENS
from op import Budget, BudgetExhausted, Failure, Op, Response, infer, limit
from tests.servers import ScriptedServer, openai, status


def ask() -> Op[Response]:
    return (yield from infer("hi"))


def ask_capped(n: int) -> Op[Response]:
    return (yield from infer("hi", max_tokens=n))


def ask_with_tools() -> Op[Response]:
    return (yield from infer("hi", tools=["noop"]))


def noop() -> str:
    """Nothing."""
    return ""


def _http(spec: str) -> HttpModel:
    model = resolve_model(spec)
    assert isinstance(model, HttpModel)
    return model


# -- max_tokens ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("openai-compatible:m@{url}/v1", "max_tokens"),
        # OpenAI's own API: its reasoning models refuse max_tokens
        ("openai:m", "max_completion_tokens"),
    ],
)
def test_every_call_has_a_cap_and_a_call_may_set_its_own(
    spec: str, field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedServer([openai("a"), openai("b")]) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{srv.url}/v1")
        model = spec.format(url=srv.url)
        _ = run(ask, model=model).value
        _ = run(ask_capped, 12, model=model).value
    first, second = srv.requests
    assert first[field] == DEFAULT_MAX_TOKENS and second[field] == 12
    assert "max_tokens" not in second or field == "max_tokens"


def test_the_cap_comes_from_the_spec_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedServer([openai("a"), openai("b")]) as srv:
        _ = run(ask, model=f"openai-compatible:m@{srv.url}/v1?max_tokens=33").value
        monkeypatch.setenv("OPDSL_MAX_TOKENS", "44")
        _ = run(ask, model=f"openai-compatible:m@{srv.url}/v1").value
    assert [r["max_tokens"] for r in srv.requests] == [33, 44]


def test_anthropic_and_ollama_get_the_cap_in_their_own_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPDSL_MAX_TOKENS", "55")
    body = _http("anthropic:claude-x").body
    ollama = _http("ollama:qwen3:8b").body
    from op import Message
    from op.effects import ModelRequest

    request = ModelRequest(messages=(Message.user("hi"),))
    assert body(request, False)["max_tokens"] == 55
    assert ollama(request, False)["options"]["num_predict"] == 55
    capped = ModelRequest(messages=(Message.user("hi"),), params={"max_tokens": 9})
    assert body(capped, False)["max_tokens"] == 9
    assert ollama(capped, False)["options"] == {"num_predict": 9}


@pytest.mark.parametrize("value", ["0", "-3", "many", "1.5"])
def test_a_bad_cap_is_an_error_that_names_it(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        ValueError, match=rf"max_tokens={value!r}: expected a positive whole number"
    ):
        resolve_model(f"openai-compatible:m@http://127.0.0.1:9/v1?max_tokens={value}")
    monkeypatch.setenv("OPDSL_MAX_TOKENS", value)
    with pytest.raises(ValueError, match=rf"OPDSL_MAX_TOKENS={value!r}"):
        resolve_model("openai-compatible:m@http://127.0.0.1:9/v1")


def test_a_bad_cap_in_a_call_is_the_programs_error() -> None:
    with ScriptedServer([]) as srv:
        result = run(ask_capped, 0, model=f"openai-compatible:m@{srv.url}/v1")
    assert result.status == "failed" and "max_tokens=0" in str(result.error)
    assert srv.requests == []  # nothing was sent


# -- spec options -------------------------------------------------------------------------------


def test_spec_options() -> None:
    model = _http("openai-compatible:m@http://127.0.0.1:9/v1?max_tokens=7&stream=false&timeout=3")
    assert (model.max_tokens, model.stream, model.deadline) == (7, False, 3.0)
    assert model.base_url == "http://127.0.0.1:9/v1" and model.model == "m"
    # a base URL's own query string is not taken for options
    kept = _http("openai-compatible:m@http://127.0.0.1:9/v1?api-version=2024")
    assert kept.base_url == "http://127.0.0.1:9/v1?api-version=2024"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("openai:m?colour=red", "colour='red': not an option of a model spec"),
        ("openai:m?timeout=soon", "timeout='soon': expected a positive number of seconds"),
        ("scripted:x.json?max_tokens=5", "cannot read"),
    ],
)
def test_bad_spec_options_name_the_spec(spec: str, says: str) -> None:
    with pytest.raises(ValueError, match="model spec") as info:
        resolve_model(spec)
    assert says in str(info.value) and spec.split("?")[0] in str(info.value)


def test_errors_name_the_model_as_the_user_wrote_it() -> None:
    with ScriptedServer([status(400, "no such model")]) as srv:
        spec = f"openai-compatible:tiny@{srv.url}/v1?max_tokens=5"
        result = run(ask, model=spec)
    assert str(result.error).endswith(f"model {spec}: HTTP 400: no such model"), result.error


# -- tools a server would drop ------------------------------------------------------------------


def test_tools_are_refused_when_the_server_says_its_template_drops_them() -> None:
    with ScriptedServer([openai("a"), openai("b")]) as srv:
        srv.props = {"chat_template_caps": {"supports_tools": False}}
        spec = f"openai-compatible:m@{srv.url}/v1"
        model = resolve_model(spec)
        refused = run(ask_with_tools, model=model, tools=[noop])
        plain = run(ask, model=model)  # a call without tools is fine
    assert refused.status == "failed"
    assert "chat_template_caps.supports_tools is false" in str(refused.error)
    assert "--chat-template-file" in str(refused.error)
    assert plain.value.text == "a"
    assert len(srv.requests) == 1  # the tools were never sent
    assert srv.gets == ["/props"]  # asked once


@pytest.mark.parametrize(
    "props", [None, {"chat_template_caps": {"supports_tools": True}}, {"other": 1}]
)
def test_tools_are_sent_when_the_server_can_use_them_or_does_not_say(props: Any) -> None:
    with ScriptedServer([openai("a"), openai("b")]) as srv:
        srv.props = props
        model = resolve_model(f"openai-compatible:m@{srv.url}/v1")
        assert run(ask_with_tools, model=model, tools=[noop]).value.text == "a"
        assert run(ask_with_tools, model=model, tools=[noop]).value.text == "b"
    assert all("tools" in r for r in srv.requests)
    assert srv.gets == ["/props"]


def test_openai_itself_is_not_asked_for_props(monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedServer([openai("a")]) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{srv.url}/v1")
        assert run(ask_with_tools, model="openai:m", tools=[noop]).value.text == "a"
    assert srv.gets == []


# -- a tokens budget and a streamed call --------------------------------------------------------


def spend(tokens: int) -> Op[Any]:
    return (yield from limit(Budget(tokens=tokens), infer("write a lot")))


def test_a_streamed_call_stops_at_its_tokens_budget_and_what_came_is_charged() -> None:
    text = "abcd" * 50  # fifty pieces of four characters: fifty tokens as the stream counts
    journal = MemoryJournal()
    with ScriptedServer([openai(text, usage=(10, 50, 0))]) as srv:
        result = run(spend, 8, model=f"openai-compatible:m@{srv.url}/v1", db=journal)
    outcome = result.value
    assert isinstance(outcome, Failure)
    exhausted = outcome.failure()
    assert isinstance(exhausted, BudgetExhausted) and exhausted.exceeded == "tokens"
    assert exhausted.spent.tokens == 8 and exhausted.spent.model_calls == 1
    statuses = {e.kind: e.status for e in journal.entries(result.run_id)}
    assert statuses == {"limit": "completed", "infer": "cancelled"}


def test_a_streamed_call_within_its_budget_is_charged_its_usage() -> None:
    with ScriptedServer([openai("abcd" * 3, usage=(10, 3, 0))]) as srv:
        outcome = run(spend, 100, model=f"openai-compatible:m@{srv.url}/v1").value
    assert outcome.unwrap().text == "abcd" * 3


def test_a_password_in_the_specs_url_never_reaches_an_error() -> None:
    with ScriptedServer([status(400, "no such model")]) as srv:
        host = srv.url.removeprefix("http://")
        spec = f"openai-compatible:tiny@http://user:hunter2-secret@{host}/v1"
        result = run(ask, model=spec)
    text = str(result.error)
    assert "HTTP 400: no such model" in text and "hunter2-secret" not in text, text
    # the credentials went as a Basic authorization header, not in the URL
    import base64

    sent = srv.headers[0]["authorization"]
    assert base64.b64decode(sent.removeprefix("Basic ")) == b"user:hunter2-secret"
