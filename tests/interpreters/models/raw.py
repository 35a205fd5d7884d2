"""Raw servers on 127.0.0.1 that send exactly the bytes each test scripts: what the
transport and answer-cap tests talk to."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable


class Conn:
    """The server's side of one connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def request(self) -> bytes:
        """One whole request (head and body); b"" when the client closed."""
        while b"\r\n\r\n" not in self.buf:
            more = self.sock.recv(65536)
            if not more:
                return b""
            self.buf += more
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += self.sock.recv(65536)
        self.buf = rest[length:]
        return head + b"\r\n\r\n" + rest[:length]

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)


Script = Callable[[Conn, int], None]


class RawServer:
    """Runs ``script(conn, n)`` for the n-th connection it accepts, each in a thread."""

    def __init__(self, script: Script, *, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.requests: list[bytes] = []
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            n = self.accepted
            self.accepted += 1
            t = threading.Thread(target=self._one, args=(sock, n), daemon=True)
            self._threads.append(t)
            t.start()

    def _one(self, sock: socket.socket, n: int) -> None:
        try:
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_side=True)
            self.script(Conn(sock), n)
        except (OSError, ssl.SSLError):
            pass
        finally:
            sock.close()

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/v1/chat"

    def close(self) -> None:
        self.listener.close()


def ok(body: bytes = b'{"a":1}', extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n"
        + extra
        + b"\r\n"
        + body
    )


def answering(*answers: bytes, then_close: bool = False, seen: list[bytes] | None = None) -> Script:
    """Each request on a connection gets the next answer (the last one repeats); each
    request is kept in ``seen``."""

    def script(conn: Conn, n: int) -> None:
        k = 0
        while request := conn.request():
            if seen is not None:
                seen.append(request)
            conn.send(answers[min(k, len(answers) - 1)])
            k += 1
            if then_close:
                return

    return script
