"""The transport under the providers: aiohttp's pool on asyncio (through httpx's API), httpx's
own under trio or when asked; clients closed with their event loop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from interpreters import resolve_model, run
from interpreters.models import RetryPolicy
from interpreters.models._http import HttpModel
from op import Op, infer
from tests.servers import Reply, ScriptedServer, openai

ROOT = Path(__file__).resolve().parents[3]


def ask() -> Op[str]:
    return (yield from infer("hi")).text


async def _carrier(model: HttpModel) -> httpx.AsyncBaseTransport:
    """The transport a call of this loop goes over."""
    return (await model._pool("run"))[1]


@pytest.mark.parametrize(
    ("backend", "forced", "expected"),
    [
        ("asyncio", None, "AiohttpTransport"),
        ("trio", None, "HttpxTransport"),
        ("asyncio", "httpx", "HttpxTransport"),
    ],
)
def test_which_transport(
    backend: str, forced: str | None, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if forced:
        monkeypatch.setenv("OPDSL_HTTP_TRANSPORT", forced)
    with ScriptedServer([openai("a"), openai("b")]) as srv:
        model = resolve_model(f"openai-compatible:m@{srv.url}/v1")
        assert isinstance(model, HttpModel)
        first = anyio.run(_carrier, model, backend=backend)
        assert type(first).__name__ == expected
        # a second run is a second event loop: a client of its own
        assert anyio.run(_carrier, model, backend=backend) is not first
        assert run(ask, model=model, backend=backend).value == "a"
        assert run(ask, model=model, backend=backend).value == "b"
    if backend == "asyncio":
        assert model._clients is None and not model._pools, "an ended loop's clients are kept"


def test_no_client_is_left_unclosed_when_the_loop_ends() -> None:
    code = (
        "import gc\n"
        "from tests.servers import ScriptedServer, openai\n"
        "from interpreters import run, resolve_model\n"
        "from op import infer\n"
        "def ask():\n"
        "    return (yield from infer('hi')).text\n"
        "with ScriptedServer([openai('a'), openai('b')]) as srv:\n"
        "    m = resolve_model(f'openai-compatible:m@{srv.url}/v1')\n"
        "    print(run(ask, model=m).value, run(ask, model=m).value)\n"
        "del m\n"
        "gc.collect()\n"
    )
    out = subprocess.run(
        [sys.executable, "-X", "dev", "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "a b"
    assert "Unclosed" not in out.stderr, out.stderr


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_call_is_one_plain_post_whose_cookies_are_not_kept(backend: str) -> None:
    """A model call goes to the transport directly: no cookie jar (an answer's cookie is never
    sent back), no redirect followed, opdsl's own user agent and idempotency key."""

    def with_cookie(req: dict[str, object]) -> Reply:
        reply = openai("a")(req)
        reply.headers["set-cookie"] = "session=abc123; Path=/"
        return reply

    def redirect(req: dict[str, object]) -> Reply:
        return Reply(status=307, body={"error": {"message": "moved"}}, headers={"location": "/x"})

    with ScriptedServer([with_cookie, openai("b"), redirect]) as srv:
        model = resolve_model(f"openai-compatible:m@{srv.url}/v1?stream=false")
        assert isinstance(model, HttpModel)
        model.retry = RetryPolicy(max_retries=0)

        def three() -> Op[list[str]]:
            out = [(yield from ask()), (yield from ask())]
            try:
                out.append((yield from ask()))
            except Exception as exc:
                out.append(str(exc))
            return out

        value = run(three, model=model, backend=backend).value
    assert value[:2] == ["a", "b"]
    assert "307" in value[2] and len(srv.requests) == 3  # reported, not followed
    assert "cookie" not in {k.lower() for k in srv.headers[1]}
    assert srv.headers[0]["user-agent"] == "opdsl" and srv.headers[0]["idempotency-key"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_key_with_a_line_break_is_refused_unsent_and_unnamed(backend: str) -> None:
    """An API key pasted with a line break would end its header and start another one."""
    from interpreters.models import OpenAIModel

    with ScriptedServer([openai("a")]) as srv:
        model = OpenAIModel(
            "m", base_url=f"{srv.url}/v1", api_key="sk-secret\r\nx-evil: 1", stream=False
        )
        result = run(ask, model=model, backend=backend)
    assert result.status == "failed" and srv.requests == []
    assert "model openai:m" in str(result.error) and "sk-secret" not in str(result.error)


@pytest.mark.parametrize("value", ["aiohttp", "HTTPX", "h2"])
def test_an_unknown_transport_setting_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("OPDSL_HTTP_TRANSPORT", value)
    with ScriptedServer([openai("a")]) as srv:
        model = resolve_model(f"openai-compatible:m@{srv.url}/v1")
        result = run(ask, model=model)
    assert result.status == "failed" and srv.requests == []
    assert f"OPDSL_HTTP_TRANSPORT={value!r} is not a transport" in str(result.error)
