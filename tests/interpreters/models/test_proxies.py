"""Model calls through proxies, as ``HTTPS_PROXY``, ``HTTP_PROXY`` and ``NO_PROXY`` name them,
and through a client the user hands in. Against a real forward and CONNECT proxy on
127.0.0.1 (written below: it relays bytes, and can ask for credentials), on asyncio
(aiohttp's pool) and trio (httpx's), to plain and TLS servers with a test CA."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from interpreters import arun, run
from interpreters.models import OpenAIModel, RetryPolicy
from interpreters.models._transport import ProxyRoutes
from op import Op, infer
from tests.interpreters.models.raw import RawServer, answering, ok
from tests.servers import ScriptedServer, closed_port, openai

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


class ForwardProxy:
    """An HTTP proxy on 127.0.0.1: ``CONNECT host:port`` opens a tunnel; a request for an
    absolute URL is sent on to its server (in origin form). With ``credentials``, any
    request without them is answered 407. Every request line and its headers are kept."""

    def __init__(self, credentials: str | None = None) -> None:
        self.credentials = credentials
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}"

    def close(self) -> None:
        self.listener.close()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(sock,), daemon=True).start()

    def _one(self, client: socket.socket) -> None:
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                more = client.recv(65536)
                if not more:
                    return
                buf += more
            head, _, rest = buf.partition(b"\r\n\r\n")
            line, *fields = head.decode("latin-1").split("\r\n")
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)
            }
            self.seen.append((line, headers))
            if self.credentials is not None:
                given = headers.get("proxy-authorization", "")
                wanted = "Basic " + base64.b64encode(self.credentials.encode()).decode()
                if given != wanted:
                    client.sendall(
                        b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                        b'proxy-authenticate: Basic realm="test"\r\ncontent-length: 0\r\n'
                        b"connection: close\r\n\r\n"
                    )
                    return
            method, target, _ = line.split(" ")
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                upstream = socket.create_connection((host, int(port)))
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first = rest
            else:
                url = httpx.URL(target)
                upstream = socket.create_connection((url.host, url.port or 80))
                kept = [f for f in fields if not f.lower().startswith("proxy-")]
                origin = f"{method} {url.raw_path.decode()} HTTP/1.1"
                first = ("\r\n".join([origin, *kept]) + "\r\n\r\n").encode("latin-1") + rest
            if first:
                upstream.sendall(first)
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
            _pump(client, upstream)
        except OSError:
            pass
        finally:
            client.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    p = ForwardProxy()
    yield p
    p.close()


@pytest.fixture
def tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RawServer]:
    """A server that answers chat completions over TLS, with a certificate from a test CA
    that ``SSL_CERT_FILE`` names (so the default TLS context trusts it)."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    server = RawServer(answering(ok(_answer("over tls"))), tls=context)
    yield server
    server.close()


def _answer(text: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()


def ask() -> Op[str]:
    return (yield from infer("hi")).text


def _model(base_url: str, *, stream: bool = False, **kw: Any) -> OpenAIModel:
    return OpenAIModel(
        "m", base_url=base_url, stream=stream, retry=RetryPolicy(max_retries=0), **kw
    )


BACKENDS = ["asyncio", "trio"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_http_proxy_carries_a_call_to_a_plain_server(
    proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch, backend: str, stream: bool
) -> None:
    with ScriptedServer([openai("through the proxy")]) as srv:
        monkeypatch.setenv("HTTP_PROXY", proxy.url())
        result = run(ask, model=_model(f"{srv.url}/v1", stream=stream), backend=backend)
    assert result.value == "through the proxy", result.describe()
    host = srv.url.removeprefix("http://")
    assert [line for line, _ in proxy.seen] == [f"POST {srv.url}/v1/chat/completions HTTP/1.1"]
    assert proxy.seen[0][1]["host"] == host


@pytest.mark.parametrize("backend", BACKENDS)
def test_https_goes_through_a_connect_tunnel_with_the_proxys_credentials(
    tls_server: RawServer, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    proxy = ForwardProxy(credentials="me:hunter2-secret")
    try:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url("me:hunter2-secret"))
        result = run(ask, model=_model(f"https://127.0.0.1:{tls_server.port}/v1"), backend=backend)
    finally:
        proxy.close()
    assert result.value == "over tls", result.describe()
    line, headers = proxy.seen[0]
    assert line == f"CONNECT 127.0.0.1:{tls_server.port} HTTP/1.1"
    assert base64.b64decode(headers["proxy-authorization"].split()[1]) == b"me:hunter2-secret"


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_proxy_credentials_are_an_error_that_names_the_proxy_not_the_password(
    tls_server: RawServer, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    proxy = ForwardProxy(credentials="me:the-right-one")
    try:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url("me:hunter2-secret"))
        model = _model(f"https://127.0.0.1:{tls_server.port}/v1")
        model.retry = RetryPolicy(max_retries=2, base=0.01)
        result = run(ask, model=model, backend=backend)
    finally:
        proxy.close()
    text = str(result.error)
    assert result.status == "failed" and "407" in text and proxy.url() in text, text
    assert "refused the tunnel" in text and "HTTPS_PROXY" in text
    assert "hunter2-secret" not in text and "hunter2-secret" not in result.describe()
    assert tls_server.accepted == 0  # nothing reached the server
    assert len(proxy.seen) == 1  # not asked again: it would answer the same


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unreachable_proxy_is_named_and_its_password_is_not(
    monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    port = closed_port()
    monkeypatch.setenv("HTTP_PROXY", f"http://me:hunter2-secret@127.0.0.1:{port}")
    with ScriptedServer([openai("never")]) as srv:
        result = run(ask, model=_model(f"{srv.url}/v1"), backend=backend)
    text = str(result.error)
    assert result.status == "failed" and f"proxy http://127.0.0.1:{port}" in text, text
    assert "hunter2-secret" not in text and srv.requests == []


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy", "all_proxy"])
@pytest.mark.parametrize(
    "value", ["socks5://me:hunter2-secret@127.0.0.1:1080", "http://me:hunter2-secret@"]
)
def test_a_proxy_opdsl_cannot_use_is_refused_by_its_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, variable: str
) -> None:
    """Named as the user set it: the lower-case name when that is the one that gave it."""
    monkeypatch.setenv(variable, value)
    result = run(ask, model=_model("https://127.0.0.1:1/v1"))
    text = str(result.error)
    assert result.status == "failed" and f"{variable}=" in text, text
    assert "hunter2-secret" not in text


def test_a_proxy_opdsl_cannot_use_stops_only_the_calls_that_would_go_through_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A VPN's ALL_PROXY=socks5://... does not stop a call to a host NO_PROXY names (a model
    served on this machine), nor does a malformed HTTP_PROXY an https call; a call that would
    go through such a proxy is refused, never sent straight past it."""
    monkeypatch.setenv("ALL_PROXY", "socks5://me:hunter2-secret@127.0.0.1:1080")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with ScriptedServer([openai("straight")]) as srv:
        result = run(ask, model=_model(f"{srv.url}/v1"))
    assert (result.status, result.value) == ("completed", "straight"), result.error
    routes = ProxyRoutes()
    with pytest.raises(httpx.ProxyError, match="ALL_PROXY=") as refused:
        routes(httpx.URL("https://api.example.com/v1"))
    assert "hunter2-secret" not in str(refused.value)
    monkeypatch.delenv("ALL_PROXY")
    monkeypatch.setenv("HTTP_PROXY", "http://me:hunter2-secret@")
    assert ProxyRoutes()(httpx.URL("https://api.example.com/v1")) is None


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "*", "example.com, 127.0.0.0/8", "PORT"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_proxy_sends_a_call_straight_to_its_server(
    proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch, backend: str, no_proxy: str
) -> None:
    with ScriptedServer([openai("straight")]) as srv:
        port = srv.url.rpartition(":")[2]
        monkeypatch.setenv("HTTP_PROXY", proxy.url())
        monkeypatch.setenv("no_proxy", no_proxy.replace("PORT", f"127.0.0.1:{port}"))
        result = run(ask, model=_model(f"{srv.url}/v1"), backend=backend)
    assert result.value == "straight", result.describe()
    assert proxy.seen == []


@pytest.mark.parametrize(
    ("no_proxy", "url", "bypassed"),
    [
        ("example.com", "https://api.example.com/v1", True),
        (".example.com", "https://example.com/v1", True),
        ("example.com", "https://notexample.com/v1", False),
        ("*.example.com", "https://a.example.com/v1", True),
        ("127.0.0.1:8080", "http://127.0.0.1:9090/v1", False),
        # a URL without a port has its scheme's
        ("api.example.com:443", "https://api.example.com/v1", True),
        ("api.example.com:443", "https://api.example.com:443/v1", True),
        ("127.0.0.1:80", "http://127.0.0.1/v1", True),
        ("api.example.com:443", "http://api.example.com/v1", False),
        ("api.example.com:80", "https://api.example.com/v1", False),
        ("10.0.0.0/8", "http://10.1.2.3/v1", True),
        ("10.0.0.0/8", "http://11.1.2.3/v1", False),
        ("[::1]", "http://[::1]:8000/v1", True),
        ("", "https://example.com/v1", False),
        ("example.com:\u00b2", "https://example.com/v1", False),  # "2" superscript: no port
        # a fully qualified name (its root's trailing dot) is the same host
        ("api.example.com.", "https://api.example.com/v1", True),
        ("example.com", "https://api.example.com./v1", True),
        (".example.com.", "https://example.com./v1", True),
        ("example.com.", "https://notexample.com/v1", False),
    ],
)
def test_which_hosts_no_proxy_names(
    monkeypatch: pytest.MonkeyPatch, no_proxy: str, url: str, bypassed: bool
) -> None:
    monkeypatch.setenv("ALL_PROXY", "proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    routes = ProxyRoutes()
    chosen = routes(httpx.URL(url))
    assert (chosen is None) == bypassed
    if chosen is not None:  # a bare host:port is an http:// proxy, named by its variable
        assert (chosen.url, chosen.variable) == ("http://proxy.internal:3128", "ALL_PROXY")


# -- a client of the user's own ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_users_client_carries_every_call_and_stays_open(stream: bool) -> None:
    """Its headers and event hooks apply; opdsl does not close it."""
    hooked: list[str] = []

    async def hook(request: httpx.Request) -> None:
        hooked.append(str(request.url))

    async def main(srv: ScriptedServer) -> tuple[list[str], bool]:
        async with httpx.AsyncClient(
            headers={"x-gateway": "team-a"}, event_hooks={"request": [hook]}
        ) as client:
            model = _model(f"{srv.url}/v1", stream=stream, http_client=client)
            values = [(await arun(ask, model=model)).value for _ in range(2)]
            return values, client.is_closed

    with ScriptedServer([openai("one"), openai("two")]) as srv:
        values, closed = asyncio.run(main(srv))
    assert values == ["one", "two"] and not closed
    assert hooked == [f"{srv.url}/v1/chat/completions"] * 2
    assert [h["x-gateway"] for h in srv.headers] == ["team-a"] * 2
    assert srv.headers[0]["user-agent"] == "opdsl"


def test_a_users_client_with_its_own_proxy_and_ca(
    tls_server: RawServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's own proxy and CAs, whatever the environment says."""
    ca_file = tmp_path / "ca.pem"
    monkeypatch.delenv("SSL_CERT_FILE")  # the default context would not trust the server
    proxy = ForwardProxy()

    async def main() -> Any:
        verify = ssl.create_default_context(cafile=str(ca_file))
        async with httpx.AsyncClient(proxy=proxy.url(), verify=verify) as client:
            model = _model(f"https://127.0.0.1:{tls_server.port}/v1", http_client=client)
            return await arun(ask, model=model)

    try:
        result = asyncio.run(main())
    finally:
        proxy.close()
    assert result.value == "over tls", result.describe()
    assert proxy.seen[0][0] == f"CONNECT 127.0.0.1:{tls_server.port} HTTP/1.1"


def test_a_users_client_keeps_the_deadline_and_the_size_cap() -> None:
    big = _answer("x" * 100_000)
    srv = RawServer(answering(ok(big)))

    async def main() -> Any:
        async with httpx.AsyncClient() as client:
            model = _model(
                f"http://127.0.0.1:{srv.port}/v1", http_client=client, max_answer_bytes=10_000
            )
            return await arun(ask, model=model)

    try:
        result = asyncio.run(main())
    finally:
        srv.close()
    assert result.status == "failed" and "over 10,000 bytes" in str(result.error)


@pytest.mark.parametrize("stream", [False, True])
def test_a_users_client_whose_transport_answers_already_read(stream: bool) -> None:
    """httpx's ``MockTransport`` hands back answers already read: they are taken as they are,
    under the same cap."""
    sse = 'data: {"choices": [{"index": 0, "delta": {"content": "mocked"}}]}\n\ndata: [DONE]\n\n'

    def answer(request: httpx.Request) -> httpx.Response:
        if stream:
            return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, content=_answer("mocked"))

    async def main(cap: int) -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            model = _model(
                "https://llm.test/v1", stream=stream, http_client=client, max_answer_bytes=cap
            )
            return await arun(ask, model=model)

    assert asyncio.run(main(10_000)).value == "mocked"
    capped = asyncio.run(main(20))
    assert capped.status == "failed" and "over 20 bytes" in str(capped.error)


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_takes_a_model_with_a_users_client(backend: str) -> None:
    """``run(..., model=...)`` from synchronous code, on either event loop: the client is
    made outside any loop and used in the one the run makes."""
    seen: list[str] = []

    async def hook(request: httpx.Request) -> None:
        seen.append(request.headers["idempotency-key"])

    client = httpx.AsyncClient(event_hooks={"request": [hook]})
    with ScriptedServer([openai("sync")]) as srv:
        result = run(ask, model=_model(f"{srv.url}/v1", http_client=client), backend=backend)
    assert result.value == "sync", result.describe()
    assert seen == [srv.headers[0]["idempotency-key"]]
