"""Workspace commands confined by bubblewrap: every hostile command of the safety review, run
for real. Where bubblewrap is missing, commands are refused unless the user opted in."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from interpreters import Workspace
from interpreters.tools._sandbox import sandbox_problem

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None,
    reason=f"bubblewrap cannot run here: {sandbox_problem()} (make test installs it)",
)


@pytest.fixture
def place(tmp_path: Path) -> tuple[Workspace, Path, Path]:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the neighbour's secret")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ws = Workspace(repo, allow=("python", "cat", "git", "sh"), timeout=20)
    return ws, repo, tmp_path


def run(ws: Workspace, argv: list[str], timeout: float | None = None) -> tuple[bool, str]:
    result = anyio.run(lambda: ws.run(argv, timeout=timeout))
    return result.ok, f"{result.error or ''} {result.output}"


def test_hostile_commands_touch_nothing_outside_the_workspace(
    place: tuple[Workspace, Path, Path],
) -> None:
    ws, repo, base = place
    hostile = [
        ["cat", "../outside/secret.txt"],
        ["cat", str(base / "outside" / "secret.txt")],
        ["python", "-c", f"open({str(base / 'elsewhere' / 'x')!r}, 'w').write('x')"],
        ["python", "-c", "open('/etc/opdsl-was-here', 'w')"],
        ["git", "-C", str(base / "elsewhere"), "init"],
        ["python", "-c", "open('.git/hooks/post-commit', 'w').write('#!/bin/sh\\nrm -rf /')"],
        ["python", "-c", "open('.git/config', 'a').write('[core]\\nfsmonitor = evil')"],
    ]
    for argv in hostile:
        ok, text = run(ws, argv)
        assert not ok, (argv, text)
        assert "the neighbour's secret" not in text
    assert list((base / "elsewhere").iterdir()) == []
    assert not Path("/etc/opdsl-was-here").exists()
    assert not (repo / ".git" / "hooks" / "post-commit").exists()
    assert "fsmonitor" not in (repo / ".git" / "config").read_text()
    # the workspace itself is writable, and a private /tmp is there
    ok, text = run(
        ws, ["python", "-c", "open('made.txt', 'w').write('ok'); open('/tmp/t', 'w').write('t')"]
    )
    assert ok, text
    assert (repo / "made.txt").read_text() == "ok"


def test_the_parents_secrets_are_not_visible(
    place: tuple[Workspace, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, _, _ = place
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-secret-123456")
    monkeypatch.setenv("DATABASE_URL", "postgres://admin:hunter2hunter2@db/prod")
    code = (
        "import base64, os\n"
        "seen = [open(f'/proc/{p}/environ', 'rb').read() for p in (os.getppid(), 1) if os.path.exists(f'/proc/{p}/environ')]\n"
        "print(base64.b64encode(b''.join(seen)).decode())\n"
        "print(sorted(os.listdir('/proc')))\n"
    )
    ok, text = run(ws, ["python", "-c", code])
    assert ok, text
    import base64

    decoded = base64.b64decode(text.split()[0]).decode("utf-8", "replace")
    assert "sk-parent-secret" not in decoded and "hunter2" not in decoded
    assert str(os.getpid()) not in text.split("\n", 1)[1]  # opdsl's own process cannot be seen


def test_no_child_outlives_its_command_even_after_setsid(
    place: tuple[Workspace, Path, Path],
) -> None:
    ws, repo, _ = place
    daemon = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        while True:\n"
        "            open('daemon.beat', 'a').write('.')\n"
        "            time.sleep(0.1)\n"
        "    os._exit(0)\n"
        "print('forked', flush=True)\n"
        "time.sleep(60)\n"
    )
    (repo / "daemon.py").write_text(daemon)
    ok, text = run(ws, ["python", "daemon.py"], timeout=2)
    assert not ok and "timed out after 2s" in text
    size = (repo / "daemon.beat").stat().st_size
    time.sleep(1)
    assert (repo / "daemon.beat").stat().st_size == size
    # a command that returns at once leaves no daemon behind either
    ok, _ = run(ws, ["python", "-c", daemon.replace("time.sleep(60)", "pass")])
    time.sleep(0.5)
    size = (repo / "daemon.beat").stat().st_size
    time.sleep(1)
    assert (repo / "daemon.beat").stat().st_size == size


def test_no_network_unless_allowed(place: tuple[Workspace, Path, Path]) -> None:
    import socket

    ws, _, _ = place
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('connected')"
        ok, text = run(ws, ["python", "-c", probe])
        assert not ok and "connected" not in text
        ws.network = True
        ok, text = run(ws, ["python", "-c", probe])
        assert ok and "connected" in text, text
    finally:
        server.close()


def test_the_model_cannot_raise_the_workspace_timeout(place: tuple[Workspace, Path, Path]) -> None:
    ws, _, _ = place
    ws.timeout = 1
    t0 = time.monotonic()
    ok, text = run(ws, ["python", "-c", "import time; time.sleep(30)"], timeout=1e9)
    assert not ok and "timed out after 1s" in text and time.monotonic() - t0 < 10
    ok, text = run(ws, ["python", "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert not ok and "timed out after 0.5s" in text


@pytest.mark.parametrize("opt_in", [False, True])
def test_without_bubblewrap_commands_are_refused_unless_opted_in(
    tmp_path: Path, opt_in: bool
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    script = (
        "import anyio\n"
        "from interpreters import Workspace\n"
        f"ws = Workspace({str(repo)!r})\n"
        "for _ in range(2):\n"
        "    r = anyio.run(ws.run, ['python', '-c', 'print(41 + 1)'])\n"
        "    print(r.ok, r.error, r.output.strip())\n"
    )
    bin_dir = tmp_path / "bin"  # git, but no bwrap
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    env = {"PATH": str(bin_dir), "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    if opt_in:
        env["OPDSL_UNCONFINED"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr  # said once, in one line
    if opt_in:
        assert "NOT confined" in lines[0]
        assert out.stdout.splitlines() == ["True None 42"] * 2
    else:
        assert "refused" in lines[0] and "bubblewrap (bwrap) is not installed" in lines[0]
        assert all(
            line.startswith("False commands cannot run here") for line in out.stdout.splitlines()
        )


def test_an_agent_cli_asked_to_be_confined_writes_only_its_folder(tmp_path: Path) -> None:
    from interpreters import ClaudeCodeBackend, MemoryJournal, run
    from op import Op, agent

    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    fake = tmp_path / "claude"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib\n"
        "pathlib.Path('inside.txt').write_text('ok')\n"
        "try:\n"
        f"    pathlib.Path({str(outside / 'x.txt')!r}).write_text('escaped')\n"
        "    escaped = 'yes'\n"
        "except OSError as exc:\n"
        "    escaped = 'no: ' + exc.strerror\n"
        "print(json.dumps({'type': 'system', 'subtype': 'init', 'session_id': 's', 'tools': [], 'mcp_servers': []}))\n"
        "print(json.dumps({'type': 'result', 'subtype': 'success', 'result': escaped, 'num_turns': 1,"
        " 'usage': {'input_tokens': 1, 'output_tokens': 1}, 'total_cost_usd': 0.0}))\n"
    )
    fake.chmod(0o755)

    def program(confine: bool) -> Op[str]:
        record = yield from agent("claude-code", "go", cwd=str(work), confine=confine)
        return record.text

    backend = ClaudeCodeBackend(executable=str(fake), env={"HOME": str(tmp_path / "home")})
    (tmp_path / "home").mkdir()
    confined = run(program, True, agents={"claude-code": backend}, db=MemoryJournal())
    assert confined.value.startswith("no: "), confined.describe()
    assert (work / "inside.txt").read_text() == "ok" and not (outside / "x.txt").exists()
    free = run(program, False, agents={"claude-code": backend}, db=MemoryJournal())
    assert (
        free.value == "yes" and (outside / "x.txt").exists()
    )  # unconfined unless asked: said in SECURITY.md
