"""A proxy's credentials never leave, and a proxy at fault is named: against proxies on
127.0.0.1 that ask for credentials, answer 407 (quoting the credentials back), 502,
bytes that are not HTTP, or nothing, on asyncio (aiohttp's pool) and trio (httpx's); and
proxy URLs that do not parse, or name a port no proxy can have."""

from __future__ import annotations

import asyncio
import base64
import traceback
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from interpreters import LiveInterpreter, run
from interpreters._redact import Redactor, without_passwords
from interpreters.journal._content import ContentError, kept_body
from interpreters.models import OpenAIModel, ProviderError, RetryPolicy
from interpreters.models._transport import ProxyRoutes
from op import Op, infer
from tests.helpers import RawJournal
from tests.interpreters.models.raw import Conn, RawServer
from tests.interpreters.models.test_proxies import PROXY_VARIABLES, ForwardProxy
from tests.servers import ScriptedServer, openai

PASSWORD = "hunter2-secret"
BASIC = base64.b64encode(f"me:{PASSWORD}".encode()).decode()
BACKENDS = ["asyncio", "trio"]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def ask() -> Op[str]:
    return (yield from infer("hi")).text


def _model(base_url: str) -> OpenAIModel:
    return OpenAIModel(
        "m", base_url=base_url, stream=False, retry=RetryPolicy(max_retries=0), timeout=5
    )


def _bad_proxy(mode: str) -> RawServer:
    """A proxy that answers every request (a CONNECT or one to forward) as ``mode`` says."""

    def script(conn: Conn, n: int) -> None:
        head = conn.request().decode("latin-1")
        if mode == "407echo":  # quotes the credentials it was given back: reason, header, body
            said = next(
                (f for f in head.split("\r\n") if f.lower().startswith("proxy-authorization")),
                "none",
            ).encode()
            conn.send(
                b"HTTP/1.1 407 denied: "
                + said
                + b"\r\nx-you-sent: "
                + said
                + b"\r\ncontent-length: %d\r\n" % len(said)
                + b"connection: close\r\n\r\n"
                + said
            )
        elif mode == "407":
            conn.send(
                b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                b'proxy-authenticate: Basic realm="test"\r\ncontent-length: 0\r\n'
                b"connection: close\r\n\r\n"
            )
        elif mode == "502":
            conn.send(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
        elif mode == "garbage":
            conn.send(b"SSH-2.0-OpenSSH_9.0\r\nthis is not http at all\r\n\r\n")
        # "close": nothing, the connection closed

    return RawServer(script)


def _everything_said(error: BaseException) -> Iterator[str]:
    """Every text reachable from ``error``: its chain's (causes and contexts), and each one's
    message, arguments, attributes and traceback."""
    seen: list[BaseException] = []
    todo = [error]
    while todo:
        e = todo.pop()
        if any(e is s for s in seen):
            continue
        seen.append(e)
        yield from (str(e), repr(e), repr(e.args), repr(vars(e)))
        yield "".join(traceback.format_exception(e))
        todo += [x for x in (e.__cause__, e.__context__) if x is not None]


def _journal(path: Path) -> str:
    """Every value the journal file holds, as text: a compressed one unpacked, a piece's hash
    as hex."""
    raw = RawJournal(path, read_only=True)
    said = []
    try:
        tables = [t for (t,) in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in raw.execute(f"SELECT * FROM {table}"):
                for value in row:
                    if isinstance(value, bytes):
                        try:
                            value = kept_body(value, table)
                        except ContentError:
                            value = value.hex()
                    said.append(str(value))
    finally:
        raw.close()
    return "\n".join(said)


def _assert_no_credentials(error: BaseException, *more: str) -> None:
    for text in [*_everything_said(error), *more]:
        assert PASSWORD not in text and BASIC not in text, text


# -- P1: credentials on a request the proxy forwards -----------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_http_proxy_credentials_go_with_a_request_it_forwards(
    monkeypatch: pytest.MonkeyPatch, backend: str, stream: bool
) -> None:
    """A plain-http server through a proxy that wants credentials: no CONNECT, the request
    itself carries ``Proxy-Authorization`` (aiohttp sends ``proxy_headers`` on a CONNECT
    only)."""
    proxy = ForwardProxy(credentials=f"me:{PASSWORD}")
    try:
        with ScriptedServer([openai("through the proxy")]) as srv:
            monkeypatch.setenv("HTTP_PROXY", proxy.url(f"me:{PASSWORD}"))
            model = _model(f"{srv.url}/v1")
            model.stream = stream
            result = run(ask, model=model, backend=backend)
    finally:
        proxy.close()
    assert result.value == "through the proxy", result.describe()
    line, headers = proxy.seen[0]
    assert line == f"POST {srv.url}/v1/chat/completions HTTP/1.1"
    assert headers["proxy-authorization"] == f"Basic {BASIC}"
    assert all(not k.startswith("proxy-") for k in srv.headers[0])  # not sent on


# -- P3, P4, P7: misbehaving proxies --------------------------------------------------------


@pytest.mark.parametrize("mode", ["407", "407echo", "502", "garbage", "close"])
@pytest.mark.parametrize("scheme", ["https", "http"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_error_a_proxy_causes_holds_its_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, scheme: str, mode: str
) -> None:
    """Not in the error's text, nor anywhere on its chain (aiohttp's errors hold the request's
    headers), nor in the journal: even when the proxy quotes them back (``407echo``)."""
    proxy = _bad_proxy(mode)
    variable = f"{scheme.upper()}_PROXY"
    try:
        monkeypatch.setenv(variable, f"http://me:{PASSWORD}@127.0.0.1:{proxy.port}")
        db = tmp_path / "journal.db"
        result = run(ask, model=_model(f"{scheme}://127.0.0.1:9/v1"), backend=backend, db=db)
    finally:
        proxy.close()
    assert result.status == "failed" and result.error is not None
    _assert_no_credentials(result.error, result.describe(), _journal(db))
    text = str(result.error)
    # the proxy at fault is named, with its variable
    assert f"proxy http://127.0.0.1:{proxy.port} ({variable})" in text or mode == "502", text


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_forward_proxys_407_names_the_proxy_and_its_variable(
    monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    proxy = ForwardProxy(credentials="me:the-right-one")
    try:
        with ScriptedServer([openai("never")]) as srv:
            monkeypatch.setenv("HTTP_PROXY", proxy.url(f"me:{PASSWORD}"))
            result = run(ask, model=_model(f"{srv.url}/v1"), backend=backend)
    finally:
        proxy.close()
    text = str(result.error)
    assert isinstance(result.error, ProviderError) and result.error.status == 407, text
    assert f"the proxy {proxy.url()} (HTTP_PROXY) refused the request" in text
    assert srv.requests == []
    _assert_no_credentials(result.error)


def test_a_model_on_two_loops_names_and_hides_each_loops_own_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One model used from two event loops whose pools were made while the environment
    named two proxies: an error on the first loop names its own proxy and holds none of its
    credentials, though the other loop's pool was made after it."""
    first, second = _bad_proxy("407echo"), _bad_proxy("407echo")
    interp = LiveInterpreter(model=_model("http://127.0.0.1:9/v1"))
    loops = [asyncio.new_event_loop(), asyncio.new_event_loop()]
    try:
        monkeypatch.setenv("HTTP_PROXY", f"http://me:{PASSWORD}@127.0.0.1:{first.port}")
        loops[0].run_until_complete(interp.arun(ask))  # the first loop's pool: this proxy
        monkeypatch.setenv("HTTP_PROXY", f"http://you:another-secret@127.0.0.1:{second.port}")
        loops[1].run_until_complete(interp.arun(ask))  # the second's, made last
        result = loops[0].run_until_complete(interp.arun(ask))
    finally:
        for loop in loops:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
        first.close()
        second.close()
    assert result.error is not None
    text = str(result.error)
    assert f"the proxy http://127.0.0.1:{first.port} (HTTP_PROXY) refused the request" in text
    _assert_no_credentials(result.error)


def test_a_secret_that_starts_another_leaves_none_of_the_other_to_be_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The longest is replaced first, whichever proxy, pool or key each comes from: else the
    shorter, replaced inside the longer, would leave its tail."""
    monkeypatch.setenv("HTTP_PROXY", "http://me:hunter2@127.0.0.1:1")
    monkeypatch.setenv("HTTPS_PROXY", "http://you:hunter2-longer@127.0.0.1:2")
    routes = ProxyRoutes()
    assert routes.scrubbed("you:hunter2-longer and me:hunter2") == "you:*** and me:***"
    model = OpenAIModel(
        "m",
        base_url="http://127.0.0.1:9/v1",
        api_key="hunter2-longer-yet",
        stream=False,
        retry=RetryPolicy(max_retries=0),
        timeout=5,
    )
    loop = asyncio.new_event_loop()
    try:  # a call (refused by the proxy's closed port) makes the loop's pool, with its proxies
        loop.run_until_complete(LiveInterpreter(model=model).arun(ask))
        said = str(model.error("sent hunter2-longer-yet, hunter2-longer and hunter2", 400))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    assert said == "model openai:m: HTTP 400: sent ***, *** and ***"


def test_a_proxy_that_closes_mid_connect_is_named_not_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = _bad_proxy("close")
    try:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
        result = run(ask, model=_model("https://127.0.0.1:9/v1"))
    finally:
        proxy.close()
    text = str(result.error)
    assert (
        f"the proxy http://127.0.0.1:{proxy.port} (HTTPS_PROXY) closed the connection "
        "unanswered, on the way to 127.0.0.1:9"
    ) in text, text


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_a_proxys_malformed_answer_names_the_proxy(
    monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    proxy = _bad_proxy("garbage")
    variable = f"{scheme.upper()}_PROXY"
    try:
        monkeypatch.setenv(variable, f"http://127.0.0.1:{proxy.port}")
        result = run(ask, model=_model(f"{scheme}://127.0.0.1:9/v1"))
    finally:
        proxy.close()
    text = str(result.error)
    assert (
        f"a malformed answer from the proxy http://127.0.0.1:{proxy.port} ({variable}), "
        "on the way to 127.0.0.1:9: Bad status line"
    ) in text, text


# -- P2, P5: proxy URLs opdsl cannot use ----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("http://me:pa/ss-secret@127.0.0.1:3128", "me:[redacted]@127.0.0.1"),
        ("http://me:pa\tss-secret@127.0.0.1:3128", "me:[redacted]@127.0.0.1"),
        ("socks5://me:pa/ss-secret@127.0.0.1:1080", "me:[redacted]@127.0.0.1"),
        # many proxies take a token as the user name, with no password: a secret as well
        ("socks5://tok-ss-secret@127.0.0.1:1080", "//[redacted]@127.0.0.1"),
        ("http://tok-ss-secret@127.0.0.1:99999", "//[redacted]@127.0.0.1"),
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_proxy_url_opdsl_cannot_use_never_shows_its_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, value: str, shown: str
) -> None:
    """A password with a raw ``/`` (or a tab): the URL does not parse as one, and its
    password is hidden all the same, in the error and in the journal; so is a token given
    as the user name alone, in a URL refused for its scheme or its port."""
    monkeypatch.setenv("HTTPS_PROXY", value)
    db = tmp_path / "journal.db"
    result = run(ask, model=_model("https://127.0.0.1:9/v1"), backend=backend, db=db)
    text = str(result.error)
    assert result.error is not None and "HTTPS_PROXY=" in text, text
    assert shown in text, text
    for said in [*_everything_said(result.error), result.describe(), _journal(db)]:
        assert "ss-secret" not in said, said


@pytest.mark.parametrize("port", ["99999", "0", "65536"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_proxy_port_out_of_range_is_refused_by_its_variable(
    monkeypatch: pytest.MonkeyPatch, backend: str, port: str
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", f"http://me:{PASSWORD}@127.0.0.1:{port}")
    result = run(ask, model=_model("https://127.0.0.1:9/v1"), backend=backend)
    text = str(result.error)
    assert isinstance(result.error, ProviderError), repr(result.error)
    assert (
        f"HTTPS_PROXY='http://me:[redacted]@127.0.0.1:{port}': the port {port} is not 1 to 65535"
    ) in text, text
    _assert_no_credentials(result.error)


def test_proxy_routes_refuse_a_port_no_proxy_can_have(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "proxy.internal:70000")
    routes = ProxyRoutes()  # refused where a URL would go through it
    assert routes.refusal(httpx.URL("https://a.b/v1")) is None
    said = routes.refusal(httpx.URL("http://a.b/v1"))
    assert said is not None and said.startswith(
        "HTTP_PROXY='http://proxy.internal:70000': the port"
    )
    with pytest.raises(httpx.ProxyError, match=r"^HTTP_PROXY='http://proxy.internal:70000'"):
        routes(httpx.URL("http://a.b/v1"))
    monkeypatch.setenv("HTTP_PROXY", "proxy.internal:65535")
    assert ProxyRoutes()(httpx.URL("http://a.b/v1")) is not None


# -- P2: the redactor -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "password"),
    [
        ("http://me:pa/ss-secret@127.0.0.1:3128", "pa/ss-secret"),
        ("http://me:pa\tss-secret@proxy:3128", "pa\tss-secret"),
        ("http://me:pa ss-secret@pr/oxy:3128", "pa ss-secret"),
        ("socks5://me:pa/ss-secret@proxy:1080", "pa/ss-secret"),
        ("http://me:p@ss-secret@proxy:3128", "p@ss-secret"),
        ("http://:pass-secret@proxy:3128", "pass-secret"),
    ],
)
def test_a_url_password_is_redacted_whatever_it_holds(value: str, password: str) -> None:
    """Everything between ``scheme://user:`` and the last ``@`` before the host: in the
    value itself, and wherever the journal's redactor (made from the environment) meets it."""
    assert without_passwords(value) == value.replace(password, "[redacted]")
    redact = Redactor.from_env({"HTTPS_PROXY": value})
    said = f"HTTPS_PROXY={value!r} is not a proxy's URL; {password}"
    assert password not in redact(said) and "[redacted]" in redact(said)


def test_the_redactor_hides_a_password_with_a_slash_or_an_at_in_running_text() -> None:
    redact = Redactor()
    # a host's port and path, an @ further on: no password, left as it is
    for said in (
        "curl http://localhost:3000/users?email=alice@example.com",
        "GET https://api.example.com:8443/v1/users/bob@corp.com",
    ):
        assert redact(said) == said
    assert redact("see http://me:pa/ss-secret@proxy:3128 now") == (
        "see http://me:[redacted]@proxy:3128 now"
    )
    assert redact("'http://me:p@ss-secret@proxy:3128'") == "'http://me:[redacted]@proxy:3128'"
    # a URL without credentials is left alone
    assert redact("http://host:8080/v1 by me@example.com") == (
        "http://host:8080/v1 by me@example.com"
    )


def test_without_passwords_keeps_each_url_of_a_list_apart() -> None:
    assert without_passwords("http://a:first-pw@h1,http://c:second-pw@h2") == (
        "http://a:[redacted]@h1,http://c:[redacted]@h2"
    )
    assert without_passwords("http://proxy:3128") == "http://proxy:3128"
    assert without_passwords("http://token@proxy:3128") == "http://token@proxy:3128"


_HOSTILE = """
import sys
from interpreters._redact import Redactor, without_passwords
n = 60_000
texts = ["a://b:" * n + " x@y", "a" * 6 * n + " x@y://", "http://u:p@" * n, "http://u:p@h " * n]
redact = Redactor.from_env({"DATABASE_URL": "postgres://u:pw-98765@db/x"})
for text in texts:
    redact(text)
    Redactor.from_env({"X": text})
    without_passwords(text)
print("done")
"""


def test_the_redactor_reads_a_tools_hostile_output_in_one_pass() -> None:
    """Every text a run journals passes the redactor, a tool's output too: a pattern that
    backtracked took minutes on texts like these (a 360 KB run of letters with an ``@`` and a
    ``://`` beside it); each is read once now. The bound is a hang's, a hundred times what it
    takes."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _HOSTILE], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "done", done.stderr
