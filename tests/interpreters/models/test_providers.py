"""Models over HTTP against real servers on 127.0.0.1 that speak each provider's protocol."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interpreters import MemoryJournal, VirtualClock, export_run, resolve_model, run
from interpreters.cli._main import main
from interpreters.models import AnthropicModel, OllamaModel, OpenAIModel, Prices, RetryPolicy
from op import (
    Budget,
    Failure,
    Message,
    ModelError,
    Op,
    Response,
    TimedOut,
    Usage,
    infer,
    limit,
    timeout,
)
from op.events import TokenDelta
from programs.loop import tool_loop
from tests.fixtures.model_programs import TOOLS, summarize
from tests.helpers import Recorder
from tests.servers import ScriptedServer, anthropic, closed_port, hang, ollama, openai, status

KEY = "sk-secret-test-key-123456"


def openai_model(srv: ScriptedServer, **kw: Any) -> OpenAIModel:
    return OpenAIModel("gpt-4.1-mini", base_url=f"{srv.url}/v1", api_key=KEY, **kw)


EPHEMERAL = {"type": "ephemeral"}


def anthropic_model(srv: ScriptedServer, **kw: Any) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-5", base_url=srv.url, api_key=KEY, **kw)


def ollama_model(srv: ScriptedServer, **kw: Any) -> OllamaModel:
    return OllamaModel("qwen3:8b", base_url=srv.url, **kw)


def ask(text: str = "hi") -> Op[Response]:
    return (yield from infer(text))


def ask_catching() -> Op[str]:
    try:
        reply = yield from infer("hi")
    except ModelError as exc:
        return f"error: {exc}"
    return reply.text


@pytest.fixture
def notes(tmp_path: Path) -> str:
    path = tmp_path / "notes.txt"
    path.write_text("three short lines\nabout nothing\nat all\n")
    return str(path)


# -- a tool-calling round trip, streamed and not, for each provider -------------------------------


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
def test_tool_calling_round_trip(provider: str, stream: bool, notes: str) -> None:
    args = {"path": notes}
    with ScriptedServer() as srv:
        if provider == "openai":
            srv.add(
                openai("", [("call_1", "read_file", json.dumps(args))]),
                openai("It is about nothing."),
            )
            model: Any = openai_model(srv, stream=stream)
        elif provider == "anthropic":
            srv.add(
                anthropic("Let me read it.", [("toolu_1", "read_file", args)]),
                anthropic("It is about nothing."),
            )
            model = anthropic_model(srv, stream=stream)
        else:
            srv.add(ollama("", [("read_file", args)]), ollama("It is about nothing."))
            model = ollama_model(srv, stream=stream)
        rec = Recorder()
        result = run(summarize, notes, model=model, tools=TOOLS, db=MemoryJournal(), on_event=rec)
        assert result.value == "It is about nothing.", result.describe()
        second = srv.requests[1]
        if provider == "openai":
            assert second["messages"][0] == {"role": "system", "content": "You summarize files."}
            assert second["messages"][2]["tool_calls"][0]["function"] == {
                "name": "read_file",
                "arguments": json.dumps(args),
            }
            assert second["messages"][3] == {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": Path(notes).read_text(),
            }
            assert second["tools"][0]["function"]["parameters"]["required"] == ["path"]
            assert second.get("stream", False) is stream
        elif provider == "anthropic":
            # prompt caching: the system prompt, the tools and the conversation end cached
            # prefixes (cache_control)
            assert second["system"] == [
                {"type": "text", "text": "You summarize files.", "cache_control": EPHEMERAL}
            ]
            assert second["tools"][-1]["cache_control"] == EPHEMERAL
            assert second["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
            assert second["messages"][1]["content"][1] == {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "read_file",
                "input": args,
            }
            assert second["messages"][2]["content"][0]["tool_use_id"] == "toolu_1"
            assert second["tools"][0]["input_schema"]["required"] == ["path"]
        else:
            assert second["messages"][2]["tool_calls"][0]["function"] == {
                "name": "read_file",
                "arguments": args,
            }
            assert second["messages"][3]["tool_name"] == "read_file"
            assert second["stream"] is stream
        if stream:
            streamed = "".join(e.text for e in rec.of(TokenDelta))
            assert "It is about nothing." in streamed
        rec.check_protocol()


def test_the_journal_holds_the_assembled_response_stream_or_not() -> None:
    recorded = []
    for stream in (True, False):
        with ScriptedServer([openai("Hello there, friend.", usage=(7, 4, 0))]) as srv:
            journal = MemoryJournal()
            result = run(ask, model=openai_model(srv, stream=stream), db=journal)
            entry = journal.entries(result.run_id)[0]
            recorded.append(entry.result_json)
    assert recorded[0] == recorded[1]
    assert json.loads(recorded[0] or "{}")["text"] == "Hello there, friend."


def test_fragmented_openai_tool_call_arguments_are_assembled() -> None:
    args = json.dumps({"path": "a/very/long/path/to/a/file.py", "lines": [1, 2, 3]})
    with ScriptedServer(
        [openai("", [("call_9", "read_file", args), ("call_10", "read_file", '{"path": "b"}')])]
    ) as srv:
        reply = run(ask, model=openai_model(srv), db=MemoryJournal()).value
    assert [c.id for c in reply.tool_calls] == ["call_9", "call_10"]
    assert reply.tool_calls[0].arguments == json.loads(args)
    assert reply.stop_reason == "tool_use"


# -- retries and errors ---------------------------------------------------------------------------


def test_429_with_retry_after_is_retried_after_that_long() -> None:
    clock = VirtualClock()
    with ScriptedServer([status(429, "slow down", {"retry-after": "7"}), openai("ok")]) as srv:
        result = run(ask, model=openai_model(srv), clock=clock, db=MemoryJournal())
    assert result.value.text == "ok"
    assert clock.monotonic() == 7


def test_retry_after_ms_and_backoff() -> None:
    clock = VirtualClock()
    with ScriptedServer(
        [status(503, "busy", {"retry-after-ms": "1500"}), status(500, "oops"), anthropic("ok")]
    ) as srv:
        result = run(ask, model=anthropic_model(srv), clock=clock, db=MemoryJournal())
    assert result.value.text == "ok"
    assert 1.5 + 0.75 <= clock.monotonic() <= 1.5 + 1.0  # the second wait is backoff(1) with jitter


def test_529_overloaded_is_retried_and_gives_up_after_max_retries() -> None:
    clock = VirtualClock()
    with ScriptedServer([status(529, "Overloaded", kind="overloaded_error")] * 3) as srv:
        result = run(
            ask_catching,
            model=anthropic_model(srv, retry=RetryPolicy(max_retries=2)),
            clock=clock,
            db=MemoryJournal(),
        )
        assert len(srv.requests) == 3
    assert result.value == "error: model anthropic:claude-sonnet-4-5: HTTP 529: Overloaded"


@pytest.mark.parametrize("code", [400, 401, 403, 404, 413, 422])
def test_client_errors_are_not_retried_and_name_everything_but_the_key(code: int) -> None:
    with ScriptedServer([status(code, f"bad request ({KEY} was rejected)")]) as srv:
        journal = MemoryJournal()
        rec = Recorder()
        result = run(ask_catching, model=openai_model(srv), db=journal, on_event=rec)
        assert len(srv.requests) == 1
    assert (
        result.value
        == f"error: model openai:gpt-4.1-mini: HTTP {code}: bad request (*** was rejected)"
    )
    everything = export_run(journal, result.run_id) + "".join(
        e.model_dump_json() for e in rec.events
    )
    assert KEY not in everything and KEY not in repr(openai_model(srv))


def test_quota_429_is_not_retried() -> None:
    quota = status(429, "You exceeded your current quota", kind="insufficient_quota")
    with ScriptedServer([quota, openai("never")]) as srv:
        result = run(
            ask_catching, model=openai_model(srv), db=MemoryJournal(), clock=VirtualClock()
        )
        assert len(srv.requests) == 1
    assert "HTTP 429: You exceeded your current quota" in result.value


class _Looking(OpenAIModel):  # type: ignore[misc]  # OpenAI's wire format, a hook of the kit's
    """A provider that looks at each whole answer (``answered``), as Anthropic's forced tool
    does, and refuses one that says ``no``."""

    seen: list[tuple[str, float | None]]

    def answered(self, request: Any, response: Response, call: Any) -> Response:
        self.seen.append((response.text, response.usage.cost_usd))
        if response.text == "no":
            raise self.error("the answer said no", retryable=True)
        return response.model_copy(update={"text": response.text.upper()})


@pytest.mark.parametrize("stream", [False, True])
def test_a_provider_looks_at_the_whole_priced_answer_once_after_its_tries(stream: bool) -> None:
    clock = VirtualClock()
    with ScriptedServer([status(503, "busy"), openai("ok"), openai("no"), openai("later")]) as srv:
        model = _Looking("gpt-4.1-mini", base_url=f"{srv.url}/v1", api_key=KEY, stream=stream)
        model.seen = []
        first = run(ask, model=model, clock=clock, db=MemoryJournal())
        assert first.value.text == "OK" and len(srv.requests) == 2
        # priced before it is looked at; a failed try is never looked at
        assert [text for text, _ in model.seen] == ["ok"] and model.seen[0][1] is not None
        # what it raises is the call's error, never tried again, however retryable it says
        refused = run(ask_catching, model=model, clock=clock, db=MemoryJournal())
        assert len(srv.requests) == 3
    assert refused.value == "error: model openai:gpt-4.1-mini: the answer said no"


@pytest.mark.parametrize("stream", [False, True])
def test_a_provider_that_wraps_complete_still_gets_the_answer_looked_at(stream: bool) -> None:
    class Wrapping(_Looking):  # type: ignore[misc]
        async def complete(self, request: Any, call: Any) -> Response:
            response = await super().complete(request, call)
            return response.model_copy(update={"text": response.text + "!"})

    with ScriptedServer([openai("hello")]) as srv:
        model = Wrapping("gpt-4.1-mini", base_url=f"{srv.url}/v1", api_key=KEY, stream=stream)
        model.seen = []
        assert run(ask, model=model, db=MemoryJournal()).value.text == "HELLO!"
    assert [text for text, _ in model.seen] == ["hello"]


def test_a_stream_cut_before_any_output_is_retried_after_output_it_is_an_error() -> None:
    clock = VirtualClock()
    with ScriptedServer([openai("abcdefgh", cut=0), openai("abcdefgh")]) as srv:
        assert (
            run(ask, model=openai_model(srv), clock=clock, db=MemoryJournal()).value.text
            == "abcdefgh"
        )
        assert len(srv.requests) == 2
    with ScriptedServer([openai("abcdefgh", cut=2), openai("again")]) as srv:
        result = run(ask_catching, model=openai_model(srv), clock=clock, db=MemoryJournal())
        assert len(srv.requests) == 1
    assert result.value.startswith(
        "error: model openai:gpt-4.1-mini: HTTP 200: the stream was cut before it finished"
    )


def test_an_anthropic_200_stream_that_ends_in_an_error_event() -> None:
    clock = VirtualClock()
    with ScriptedServer([anthropic("hello", error_at_end="Overloaded"), anthropic("hello")]) as srv:
        result = run(ask, model=anthropic_model(srv), clock=clock, db=MemoryJournal())
        assert result.value.text == "hello" and len(srv.requests) == 2, (
            "nothing had reached the program: retried"
        )


def test_an_ollama_error_after_status_200() -> None:
    with ScriptedServer([ollama("partial answer here", error_after=2)]) as srv:
        result = run(
            ask_catching, model=ollama_model(srv), db=MemoryJournal(), clock=VirtualClock()
        )
    assert (
        result.value
        == "error: model ollama:qwen3:8b: HTTP 200: model runner has unexpectedly stopped"
    )


def test_an_empty_choice_list_is_an_error_the_program_sees() -> None:
    with ScriptedServer([openai("x", choices=False)]) as srv:
        result = run(ask_catching, model=openai_model(srv, stream=False), db=MemoryJournal())
    assert result.value == "error: model openai:gpt-4.1-mini: HTTP 200: the answer has no choices"


def test_invalid_json_in_tool_arguments_gives_the_model_a_readable_tool_error(notes: str) -> None:
    with ScriptedServer(
        [openai("", [("call_1", "read_file", '{"path": ')]), openai("sorry, retrying later")]
    ) as srv:
        result = run(summarize, notes, model=openai_model(srv), tools=TOOLS, db=MemoryJournal())
        tool_message = srv.requests[1]["messages"][3]
    assert result.value == "sorry, retrying later"
    assert tool_message["content"].startswith(
        "error: the arguments for tool 'read_file' are not a JSON object"
    )


def test_a_server_that_never_answers_is_ended_by_timeout() -> None:
    def program() -> Op[Any]:
        return (yield from timeout(0.5, infer("hello?")))

    with ScriptedServer([hang()]) as srv:
        result = run(program, model=openai_model(srv), db=MemoryJournal())
    assert result.value == Failure(TimedOut(seconds=0.5))


def test_the_default_model_when_unreachable_says_how_to_set_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = closed_port()
    monkeypatch.delenv("OPDSL_MODEL", raising=False)
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{port}")
    result = run(ask_catching, db=MemoryJournal())
    assert result.value == (
        f"error: no model was given and the default, ollama:qwen3:8b at http://127.0.0.1:{port}, is "
        "unreachable; start it, or set OPDSL_MODEL (for example OPDSL_MODEL=openai:gpt-4.1-mini with OPENAI_API_KEY)"
    )


# -- usage and cost -------------------------------------------------------------------------------


def test_usage_and_cost_from_the_price_table() -> None:
    with ScriptedServer([openai("a", usage=(1_000_000, 500_000, 200_000))]) as srv:
        reply = run(ask, model=openai_model(srv), db=MemoryJournal()).value
    # gpt-4.1-mini: 0.4 in, 1.6 out, 0.1 cached per million
    u = reply.usage
    assert (u.input_tokens, u.output_tokens, u.cached_tokens) == (1_000_000, 500_000, 200_000)
    assert u.cost_usd == pytest.approx(0.8 * 0.4 + 0.2 * 0.1 + 0.5 * 1.6)
    with ScriptedServer([anthropic("a", usage=(100, 10, 50))]) as srv:
        reply = run(ask, model=anthropic_model(srv), db=MemoryJournal()).value
    assert (reply.usage.input_tokens, reply.usage.cached_tokens, reply.usage.output_tokens) == (
        150,
        50,
        10,
    )
    with ScriptedServer([ollama("a")]) as srv:
        reply = run(ask, model=ollama_model(srv), db=MemoryJournal()).value
    assert reply.usage.cost_usd is None, "an unknown price is unknown, not zero"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (11, 18)


def test_opdsl_s_own_call_params_are_never_sent_on_to_the_provider() -> None:
    def careful() -> Op[str]:
        reply = yield from infer("hi", prompt_cache=False, max_tokens=64, temperature=0.5)
        return reply.text

    with ScriptedServer([openai("a")]) as srv:
        assert run(careful, model=openai_model(srv), db=MemoryJournal()).value == "a"
    [sent] = srv.requests
    assert "prompt_cache" not in sent and sent["temperature"] == 0.5
    assert sent["max_completion_tokens"] == 64 and "max_tokens" not in sent
    with ScriptedServer([ollama("a")]) as srv:
        assert run(careful, model=ollama_model(srv), db=MemoryJournal()).value == "a"
    [sent] = srv.requests
    assert "prompt_cache" not in sent
    assert sent["options"] == {"temperature": 0.5, "num_predict": 64}


def test_user_price_table_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"qwen3": {"input": 1.0, "output": 2.0}}))
    monkeypatch.setenv("OPDSL_PRICES", str(table))
    assert Prices().cost("qwen3:8b", Usage(input_tokens=1_000_000, output_tokens=1_000_000)) == 3.0
    table.write_text("{broken")
    with pytest.raises(ValueError, match="OPDSL_PRICES=.*cannot read the price table"):
        Prices()


def test_a_dollar_budget_stops_a_tool_calling_loop_between_calls(notes: str) -> None:
    call = openai("", [("c", "read_file", json.dumps({"path": notes}))], usage=(500_000, 0, 0))

    def program() -> Op[Any]:
        return (
            yield from limit(
                Budget(usd=0.5), tool_loop([Message.user("go")], tools=["read_file"], max_steps=50)
            )
        )

    with ScriptedServer([call] * 10) as srv:
        outcome = run(program, model=openai_model(srv), tools=TOOLS, db=MemoryJournal()).value
        asked = len(srv.requests)
    exhausted = outcome.failure()
    assert exhausted.exceeded == "usd" and asked == 3  # 0.2 USD a call: the 4th would go over
    assert exhausted.spent.usd == pytest.approx(0.6)


# -- specs, and end to end through the command ----------------------------------------------------


def test_model_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:2")
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:3")
    m = resolve_model("openai:gpt-4.1")
    assert isinstance(m, OpenAIModel) and m.base_url == "http://127.0.0.1:1/v1"
    a = resolve_model("anthropic:claude-sonnet-4-5")
    assert isinstance(a, AnthropicModel) and a.base_url == "http://127.0.0.1:2"
    o = resolve_model("ollama:qwen3:8b")
    assert isinstance(o, OllamaModel) and (o.model, o.base_url) == (
        "qwen3:8b",
        "http://127.0.0.1:3",
    )
    c = resolve_model("openai-compatible:llama-3@http://127.0.0.1:8080/v1")
    assert isinstance(c, OpenAIModel) and (c.model, c.base_url) == (
        "llama-3",
        "http://127.0.0.1:8080/v1",
    )
    with pytest.raises(ValueError, match="should look like openai-compatible:MODEL@http"):
        resolve_model("openai-compatible:llama-3")
    with pytest.raises(ValueError, match="unknown model provider 'gemini'"):
        resolve_model("gemini:pro")


@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic", "ollama"])
def test_end_to_end_through_opdsl_run(
    provider: str, notes: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = {"path": notes}
    with ScriptedServer() as srv:
        if provider == "openai-compatible":
            srv.add(
                openai("", [("call_1", "read_file", json.dumps(args))]), openai("Nothing much.")
            )
            spec = f"openai-compatible:local-model@{srv.url}/v1"
        elif provider == "anthropic":
            srv.add(anthropic("", [("toolu_1", "read_file", args)]), anthropic("Nothing much."))
            monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
            spec = "anthropic:claude-sonnet-4-5"
        else:
            srv.add(ollama("", [("read_file", args)]), ollama("Nothing much."))
            monkeypatch.setenv("OLLAMA_HOST", srv.url)
            spec = "ollama:qwen3:8b"
        code = main(
            [
                "run",
                "tests.fixtures.model_programs:summarize",
                "--arg",
                f"path={notes}",
                "--model",
                spec,
                "--tools",
                "tests.fixtures.model_programs:TOOLS",
            ]
        )
        out, err = capsys.readouterr()
    assert code == 0, err
    assert out.splitlines()[-1] == "Nothing much."
    assert "tool read_file" in out and KEY not in out + err
    assert KEY not in Path(".opdsl/runs.db").read_bytes().decode("utf-8", "replace")


# -- deadlines, size caps, malformed answers ----------------------------------------------------


def _ask() -> Op[str]:
    return (yield from infer("hi")).text


def test_a_model_call_has_one_deadline_retries_included(monkeypatch: pytest.MonkeyPatch) -> None:

    with ScriptedServer([hang(), hang(), hang()]) as srv:
        model = OpenAIModel("m", base_url=f"{srv.url}/v1", timeout=1.5, stream=False)
        t0 = time.monotonic()
        result = run(_ask, model=model, db=MemoryJournal())
        took = time.monotonic() - t0
    assert result.status == "failed" and took < 5, (took, result.describe())
    assert "model openai:m" in str(result.error) and "1.5s" in str(result.error)
    monkeypatch.setenv("OPDSL_MODEL_TIMEOUT", "0.5")
    with ScriptedServer([hang()]) as srv:
        t0 = time.monotonic()
        failed = run(_ask, model=f"openai-compatible:m@{srv.url}/v1", db=MemoryJournal())
        assert failed.status == "failed" and time.monotonic() - t0 < 4


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_over_the_size_cap_is_an_error(stream: bool) -> None:
    with ScriptedServer([openai("x" * 300_000)]) as srv:
        model = OpenAIModel("m", base_url=f"{srv.url}/v1", max_answer_bytes=100_000, stream=stream)
        result = run(_ask, model=model, db=MemoryJournal())
    assert result.status == "failed" and "over 100,000 bytes" in str(result.error), (
        result.describe()
    )


MALFORMED = [
    {"choices": [{"message": "not an object"}]},
    {"choices": "nope"},
    {"choices": [{"message": {"content": None, "tool_calls": [{"function": None}]}}]},
    {"usage": {"prompt_tokens": "many"}, "choices": [{"message": {"content": "x"}}]},
    [1, 2, 3],
    # the commonest answer's shape with a value of the wrong type (it is made without
    # validating its values again: each is checked as it is read)
    {"choices": [{"message": {"content": ["a", "list"]}}]},
    {"model": 7, "choices": [{"message": {"content": "x"}}]},
    {"choices": [{"message": {"content": "x"}, "finish_reason": 5}]},
    {"usage": {"prompt_tokens": -3}, "choices": [{"message": {"content": "x"}}]},
]


@pytest.mark.parametrize("body", MALFORMED)
def test_a_malformed_answer_names_the_provider_model_and_status(body: Any) -> None:
    from tests.servers import Reply

    with ScriptedServer([lambda req: Reply(body=body)]) as srv:
        model = OpenAIModel("gpt-x", base_url=f"{srv.url}/v1", stream=False)
        result = run(_ask, model=model, db=MemoryJournal())
    assert result.status == "failed", result.describe()
    assert isinstance(result.error, ModelError) and "model openai:gpt-x" in str(result.error), (
        result.describe()
    )
    assert "HTTP 200" in str(result.error) or "not an object" in str(result.error), (
        result.describe()
    )


@pytest.mark.parametrize(
    ("make", "body", "path"),
    [
        (
            lambda url: AnthropicModel("claude-x", base_url=url, stream=False),
            {"content": "nope", "usage": 3},
            "",
        ),
        (
            lambda url: AnthropicModel("claude-x", base_url=url, stream=False),
            {"content": [{"type": "tool_use"}]},
            "",
        ),
        (
            lambda url: OllamaModel("llama-x", base_url=url, stream=False),
            {"message": "a string"},
            "",
        ),
        (
            lambda url: OllamaModel("llama-x", base_url=url, stream=False),
            {"message": {"tool_calls": [7]}},
            "",
        ),
    ],
)
def test_malformed_answers_of_every_provider_are_clear_errors(
    make: Any, body: Any, path: str
) -> None:
    from tests.servers import Reply

    with ScriptedServer([lambda req: Reply(body=body)]) as srv:
        model = make(srv.url + path)
        result = run(_ask, model=model, db=MemoryJournal())
    assert result.status == "failed", result.describe()
    text = str(result.error)
    assert isinstance(result.error, ModelError) and f"model {model.spec}: HTTP 200" in text, text


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf"])
def test_a_bad_model_timeout_is_one_line_naming_the_setting(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("OPDSL_MODEL_TIMEOUT", value)
    code = main(
        [
            "run",
            "tests.fixtures.model_programs:summarize",
            "--arg",
            "path=x",
            "--model",
            "openai-compatible:m@http://127.0.0.1:9/v1",
            "--db",
            str(tmp_path / "r.db"),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(
        f"opdsl: error: OPDSL_MODEL_TIMEOUT={value!r}: expected a positive"
    ), err
    monkeypatch.delenv("OPDSL_MODEL_TIMEOUT")
    code = main(
        [
            "run",
            "tests.fixtures.model_programs:summarize",
            "--arg",
            "path=x",
            "--model-timeout",
            value,
            "--db",
            str(tmp_path / "r.db"),
            "--quiet",
        ]
    )
    assert (
        code == 2 and f"--model-timeout={value!r}: expected a positive" in capsys.readouterr().err
    )


def test_model_timeout_on_the_command_line_bounds_a_hanging_call(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    with ScriptedServer([hang(), hang(), hang()]) as srv:
        t0 = time.monotonic()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "interpreters",
                "run",
                "tests.fixtures.model_programs:summarize",
                "--arg",
                "path=x",
                "--tools",
                "tests.fixtures.model_programs:TOOLS",
                "--model",
                f"openai-compatible:m@{srv.url}/v1",
                "--model-timeout",
                "1",
                "--db",
                str(tmp_path / "r.db"),
                "--quiet",
            ],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 1 and time.monotonic() - t0 < 15, out.stderr
    assert "deadline of 1s" in out.stderr


@pytest.mark.parametrize("provider", ["openai", "ollama", "anthropic"])
def test_thinking_is_shown_live_and_kept_out_of_the_answer(provider: str) -> None:
    import io

    from rich.console import Console

    from interpreters import ConsoleSink

    text, thinking = "The answer is 4.", "Two and two make four."
    answer = (
        openai(text, thinking=thinking)
        if provider == "openai"
        else ollama(text, thinking=thinking)
        if provider == "ollama"
        else anthropic(text, thinking=thinking)
    )
    client: dict[str, Callable[..., Any]] = {
        "openai": openai_model,
        "ollama": ollama_model,
        "anthropic": anthropic_model,
    }
    with ScriptedServer([answer]) as srv:
        model = client[provider](srv, stream=True)
        rec = Recorder()
        out = io.StringIO()
        sink = ConsoleSink(Console(file=out, width=200, color_system=None), live=False)
        journal = MemoryJournal()

        def both(event: Any) -> None:
            rec(event)
            sink(event)

        result = run(ask, model=model, db=journal, on_event=both)
    assert result.value.text == "The answer is 4."
    deltas = rec.of(TokenDelta)
    assert "".join(d.text for d in deltas if d.thinking) == "Two and two make four."
    assert "".join(d.text for d in deltas if not d.thinking) == "The answer is 4."
    assert "Two and two" not in (journal.entries(result.run_id)[0].result_json or "")
    shown = out.getvalue()
    assert shown.index("Two and two make four.") < shown.index("The answer is 4.")
