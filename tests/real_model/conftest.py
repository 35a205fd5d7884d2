"""A real llama.cpp server with a real (tiny) model, started on a free loopback port.

``make model`` fetches both (``tests/real_model/fetch.py``); without them these tests skip
and say why. The model is SmolLM2-135M-Instruct: small enough for two CPU cores, and far too
small to be right about anything, so the tests check the protocol and the journal, never
the words.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = Path(os.environ.get("OPDSL_REAL_MODEL_DIR") or ROOT / ".cache" / "real-model")
SERVER = MODEL_DIR / "llama" / "llama-server"
MODEL = MODEL_DIR / "smollm2-135m-instruct-f16.gguf"
TOOLS_TEMPLATE = Path(__file__).resolve().parent / "chatml_tools.jinja"
SLOTS = 2
CONTEXT = 4096
"""Tokens of context each of the server's slots has."""


@dataclass
class Llama:
    """A running llama-server."""

    root: str  # http://127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def spec(self) -> str:
        """The model spec a user would write for it."""
        return f"openai-compatible:smollm2@{self.root}/v1"

    def busy_slots(self) -> int:
        slots = httpx.get(f"{self.root}/slots", timeout=5).json()
        return sum(1 for s in slots if s.get("is_processing"))

    def wait_idle(self, within: float = 10.0) -> float:
        """Seconds until no slot is generating (the server stopped every task)."""
        t0 = time.monotonic()
        while self.busy_slots():
            if time.monotonic() - t0 > within:
                raise AssertionError(f"the server still generates after {within}s")
            time.sleep(0.05)
        return time.monotonic() - t0


def _missing() -> str | None:
    unavailable = MODEL_DIR / "unavailable"
    if unavailable.exists():
        return f"the real model could not be fetched: {unavailable.read_text().strip()}"
    if not (SERVER.exists() and MODEL.exists()):
        return f"no llama-server and model in {MODEL_DIR}: run `make model`"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start(log_dir: Path, *, template: Path | None, name: str) -> Llama:
    """Start llama-server; ``template`` replaces the model's own chat template."""
    missing = _missing()
    if missing is not None:
        pytest.skip(missing)
    port = _free_port()
    argv = [str(SERVER), "-m", str(MODEL), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["-c", str(CONTEXT * SLOTS), "--parallel", str(SLOTS), "--threads", "2", "--jinja"]
    if template is not None:
        argv += ["--chat-template-file", str(template)]
    log = log_dir / f"llama-{name}.log"
    env = {**os.environ, "LD_LIBRARY_PATH": str(SERVER.parent)}
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            tail = log.read_text(errors="replace")[-2000:]
            if code == -signal.SIGILL:
                pytest.skip(
                    "the prebuilt llama-server needs an instruction this CPU lacks (AVX-512); "
                    f"`make model-source` builds one for it:\n{tail}"
                )
            raise AssertionError(f"llama-server exited with {code}:\n{tail}")
        try:
            if httpx.get(f"{root}/health", timeout=2).status_code == 200:
                return Llama(root, process, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise AssertionError(f"llama-server did not come up in 120 s:\n{log.read_text()[-2000:]}")


def stop(server: Llama) -> None:
    server.process.terminate()
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Llama]:
    """llama-server with the tool-capable ChatML template these tests ship."""
    server = start(tmp_path_factory.mktemp("llama"), template=TOOLS_TEMPLATE, name="tools")
    yield server
    stop(server)


@pytest.fixture(scope="session")
def llama_json(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Llama]:
    """llama-server with opdsl's shipped template (tool calls as ```json blocks, which the
    server learns from the template, parses back into tool calls and can constrain)."""
    from interpreters.models._base import tools_template

    server = start(tmp_path_factory.mktemp("llama"), template=tools_template(), name="json")
    yield server
    stop(server)


@pytest.fixture(scope="session")
def llama_own_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Llama]:
    """llama-server with SmolLM2's own template, which has no place for tools."""
    server = start(tmp_path_factory.mktemp("llama"), template=None, name="own")
    yield server
    stop(server)
