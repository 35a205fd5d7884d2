"""The tests' own loopback servers: what one answers ends with it."""

from __future__ import annotations

import http.client
import json

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
