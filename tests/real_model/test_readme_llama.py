"""The README's commands for a local llama.cpp server, run as written: the server with the
model ``make model`` fetched, then the Coder against it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import httpx
import pytest

from tests.helpers import sample_repo
from tests.real_model.conftest import MODEL_DIR, ROOT, SERVER, _free_port, _missing

pytestmark = pytest.mark.real_model


def _commands() -> tuple[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "llama-server" in b)
    lines = block.replace("\\\n", " ").strip().splitlines()
    server = next(line for line in lines if "llama-server -m" in line)
    client = next(line for line in lines if line.startswith("opdsl"))
    return server, client


def test_the_readme_runs_the_coder_against_a_local_llama_server(tmp_path: Path) -> None:
    missing = _missing()
    if missing is not None:
        pytest.skip(missing)
    server, client = _commands()
    port = str(_free_port())
    # the same commands, with this machine's paths for the binary, the model and a free port
    server = server.replace(".cache/real-model", str(MODEL_DIR))
    server = server.replace("8080", port).removesuffix("&").strip()
    client = client.replace("8080", port)
    repo = sample_repo(tmp_path)
    before = {p.name: p.read_text() for p in repo.glob("*.py")}
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(SERVER.parent),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "OPDSL_DB": str(tmp_path / "runs.db"),
    }
    log = open(tmp_path / "llama.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        ["bash", "-c", f"exec {server}"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        for _ in range(600):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            code = process.poll()
            if code == -signal.SIGILL:
                pytest.skip(
                    "the prebuilt llama-server needs an instruction this CPU lacks (AVX-512); "
                    "`make model-source` builds one for it"
                )
            assert code is None, (tmp_path / "llama.log").read_text()[-2000:]
            time.sleep(0.2)
        out = subprocess.run(
            ["bash", "-c", client], cwd=repo, env=env, capture_output=True, text=True, timeout=400
        )
    finally:
        process.terminate()
        process.wait(10)
        log.close()
    assert out.stdout.strip(), out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    # a Coder that gives up still prints its result, and exits 1
    assert out.returncode == (0 if result["ok"] else 1), out.stderr
    if result["ok"]:
        assert result["commit"] == git.Repo(repo).head.commit.hexsha
    else:
        assert result["phase"] and result["reason"], result
        assert {p.name: p.read_text() for p in repo.glob("*.py")} == before
