"""The tests' own loopback servers: what one answers ends with it."""

from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
import time

import pytest

from tests.servers import Reply, ScriptedServer


def test_a_kept_alive_connection_ends_with_its_server() -> None:
    """A client pools keep-alive connections by host and port; a server's handler threads
    answered on them after it closed, from its own script, so a later test's server on the
    same port had a request of its answered by an earlier test's script."""
    srv = ScriptedServer([lambda request: Reply(body={"n": 1})] * 2)
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    conn.request("POST", "/v1", body=json.dumps({}), headers={"content-type": "application/json"})
    assert json.loads(conn.getresponse().read()) == {"n": 1}
    srv.close()
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.request("POST", "/v1", body="{}", headers={"content-type": "application/json"})
        conn.getresponse().read()
    assert len(srv.requests) == 1


def test_a_client_that_hangs_up_mid_request_prints_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Tests cut connections on purpose; socketserver printed a traceback for each (after
    the test, where nothing captured it), which read as a failure in the suite's output."""
    with ScriptedServer([lambda request: Reply(body={"n": 1})]) as srv:
        conn = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.sendall(b"POST /v1 HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
        time.sleep(0.2)  # the handler is reading the body
        conn.close()  # an RST, not a FIN: the handler's read fails
        time.sleep(0.3)
    assert "Traceback" not in capfd.readouterr().err


def test_a_listening_socket_that_finds_no_connection_goes_back_to_waiting() -> None:
    """socketserver accepts when its poll says a connection waits; one gone by then left a
    blocking accept, and the server's shutdown, hanging for ever."""
    with ScriptedServer([]) as srv:
        done = threading.Event()

        def accept() -> None:
            srv.httpd._handle_request_noblock()  # type: ignore[attr-defined]  # as after a poll
            done.set()

        threading.Thread(target=accept, daemon=True).start()
        assert done.wait(5), "the accept blocked"
