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
from tests.helpers import running

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
    ws = Workspace(repo, allow=("python", "cat", "git", "sh", "true"), timeout=20)
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
    assert running(b"daemon.beat") == []  # gone as the command returns
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
        "import json, os, pathlib\n"
        "pathlib.Path('inside.txt').write_text('ok')\n"
        "home = pathlib.Path(os.environ['HOME'])\n"
        "(home / '.claude' / 'session.json').write_text('its own state')\n"
        "escaped = []\n"
        f"for place in ({str(outside / 'x.txt')!r}, home / '.bashrc', home / 'x'):\n"
        "    try:\n"
        "        pathlib.Path(place).write_text('escaped')\n"
        "        escaped.append(str(place))\n"
        "    except OSError as exc:\n"
        "        pass\n"
        "escaped = 'yes: ' + ' '.join(escaped) if escaped else 'no'\n"
        "print(json.dumps({'type': 'system', 'subtype': 'init', 'session_id': 's', 'tools': [], 'mcp_servers': []}))\n"
        "print(json.dumps({'type': 'result', 'subtype': 'success', 'result': escaped, 'num_turns': 1,"
        " 'usage': {'input_tokens': 1, 'output_tokens': 1}, 'total_cost_usd': 0.0}))\n"
    )
    fake.chmod(0o755)

    def program(confine: bool) -> Op[str]:
        record = yield from agent("claude-code", "go", cwd=str(work), confine=confine)
        return record.text

    backend = ClaudeCodeBackend(executable=str(fake), env={"HOME": str(tmp_path / "home")})
    (tmp_path / "home" / ".claude").mkdir(parents=True)
    confined = run(program, True, agents={"claude-code": backend}, db=MemoryJournal())
    # of its home, it writes only where it keeps its state: not a shell's startup file (a
    # home in /tmp is seen on the sandbox's own /tmp, where a write lands and is dropped)
    assert confined.status == "completed", confined.describe()
    assert (work / "inside.txt").read_text() == "ok" and not (outside / "x.txt").exists()
    assert (tmp_path / "home" / ".claude" / "session.json").read_text() == "its own state"
    assert not (tmp_path / "home" / ".bashrc").exists() and not (tmp_path / "home" / "x").exists()
    free = run(program, False, agents={"claude-code": backend}, db=MemoryJournal())
    assert (
        free.value.startswith("yes") and (outside / "x.txt").exists()
    )  # unconfined unless asked: said in SECURITY.md


def test_the_workspaces_journal_folder_is_read_only_to_commands(
    place: tuple[Workspace, Path, Path],
) -> None:
    ws, repo, _ = place
    assert not (repo / ".opdsl").exists()
    ok, text = run(ws, ["python", "-c", "open('.opdsl/runs.db', 'w').write('forged')"])
    assert not ok and "Read-only file system" in text, text
    assert (repo / ".opdsl").is_dir() and list((repo / ".opdsl").iterdir()) == []
    ok, text = run(ws, ["python", "-c", "import shutil; shutil.rmtree('.opdsl')"])
    assert not ok and (repo / ".opdsl").is_dir()


@pytest.mark.parametrize("where", ["data/runs.db", "runs.db"])
def test_a_journal_elsewhere_in_the_workspace_is_out_of_every_tools_reach(
    where: str, place: tuple[Workspace, Path, Path]
) -> None:
    from interpreters import SqliteJournal

    ws, repo, _ = place
    journal = repo / where
    journal.parent.mkdir(exist_ok=True)
    SqliteJournal(journal).close()
    before = journal.read_bytes()
    ws.guard_journal(journal)
    forge = (
        "import sqlite3, sys; name = sys.argv[1]\n"
        "for attempt in (lambda: sqlite3.connect(name).execute('CREATE TABLE forged (x)'),\n"  # sqlite3 on purpose: in the confined child
        "                lambda: open(name, 'r+b').write(b'forged'),\n"
        "                lambda: open(name + '-journal', 'wb').write(b'forged')):\n"
        "    try:\n"
        "        attempt(); print('written')\n"
        "    except Exception as exc:\n"
        "        print('refused', type(exc).__name__)\n"
    )
    ok, text = run(ws, ["python", "-c", forge, where])
    assert ok and "written" not in text and text.count("refused") == 3, text
    assert journal.read_bytes() == before
    assert SqliteJournal(journal, read_only=True).runs() == []
    # the file tools: neither the file, a file beside it in its folder, nor a folder holding it
    assert not ws.write_file(where, "forged").ok
    assert not ws.write_file(where + "-journal", "forged").ok
    assert not ws.delete_path(where).ok
    # nor read: opening it in this process would drop the locks SQLite holds on it
    read = ws.read_file(where)
    assert not read.ok and "holds the run's journal" in (read.error or "")
    assert "(no matches)" in ws.search("SQLite format", ".").output
    if "/" in where:
        assert not ws.write_file("data/other.db", "x").ok
        assert not ws.delete_path("data").ok
    assert journal.read_bytes() == before
    assert ws.write_file("elsewhere.txt", "fine").ok  # the rest of the workspace is writable


def _top_level_place(name: str) -> Path:
    """A new folder directly under /, for the layouts a temporary folder cannot show."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder directly under /")
    top = Path("/") / f"{name}-{os.getpid()}-{time.monotonic_ns()}"
    try:
        top.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make {top}: {exc}")
    return top


@pytest.mark.parametrize("layout", ["under-a-top-level-folder", "directly-under-root"])
def test_siblings_are_hidden_whatever_the_workspaces_depth(layout: str) -> None:
    if layout == "under-a-top-level-folder":  # /srv/ws: its siblings are /srv/*
        top = _top_level_place("opdsl-srv")
        made = [top]
        root, sibling = top / "ws", top / "other-project"
    else:  # /ws: its siblings are the top-level folders that are not the system's
        root = _top_level_place("opdsl-ws")
        sibling = _top_level_place("opdsl-other-project")
        made = [root, sibling]
    try:
        root.mkdir(exist_ok=True)
        sibling.mkdir(exist_ok=True)
        (sibling / "secret.txt").write_text("the neighbour's secret")
        loose = sibling.parent / f"{sibling.name}.txt"
        loose.write_text("a file beside the workspace")
        made.append(loose)
        ws = Workspace(root, allow=("python", "cat", "ls"), timeout=20)
        for argv in (["cat", str(sibling / "secret.txt")], ["cat", str(loose)]):
            ok, text = run(ws, argv)
            assert "the neighbour's secret" not in text and "beside" not in text, (argv, text)
        ok, text = run(ws, ["ls", "-A", str(sibling)])
        assert "secret.txt" not in text, text
        if layout == "under-a-top-level-folder":  # the folder is empty but for the workspace
            ok, text = run(ws, ["ls", "-A", str(root.parent)])
            assert ok and text.split() == [root.name], text
        # the system and the Python still work, and the workspace is writable
        ok, text = run(ws, ["python", "-c", "import json; open('made.txt', 'w').write('ok')"])
        assert ok, text
        assert (root / "made.txt").read_text() == "ok"
    finally:
        for path in reversed(made):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)


def test_a_workspace_in_a_system_folder_is_refused_unless_the_user_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder in /var")
    root = Path("/var") / f"opdsl-ws-{os.getpid()}-{time.monotonic_ns()}"
    root.mkdir()
    try:
        ws = Workspace(root, allow=("true",), timeout=20)
        ok, text = run(ws, ["true"])
        assert not ok and "lies in /var, a system folder" in text, text
        assert "OPDSL_SHOW_SIBLINGS=1" in text
        monkeypatch.setenv("OPDSL_SHOW_SIBLINGS", "1")
        ok, text = run(ws, ["true"])
        assert ok, text
    finally:
        shutil.rmtree(root)


def test_a_journal_folder_that_is_a_link_is_refused(place: tuple[Workspace, Path, Path]) -> None:
    # a link could be replaced by a command with a folder holding a journal of its own
    ws, repo, base = place
    (base / "elsewhere" / "journals").mkdir()
    (repo / ".opdsl").symlink_to(base / "elsewhere" / "journals")
    ok, text = run(ws, ["python", "-c", "import os; os.remove('.opdsl'); os.mkdir('.opdsl')"])
    assert not ok and ".opdsl is not a folder" in text, text
    assert (repo / ".opdsl").is_symlink()


def test_the_seal_key_is_out_of_every_commands_reach(
    place: tuple[Workspace, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from interpreters.journal._seal import SealKeyError, seal_key

    ws, repo, _ = place
    # in a folder commands see (the Python's own, bound read-only), unlike /tmp
    folder = Path(tempfile.mkdtemp(dir=sys.prefix, prefix="seal-test-"))
    try:
        key = folder / "seal.key"
        monkeypatch.setenv("OPDSL_SEAL_KEY", str(key))
        monkeypatch.setattr("interpreters.journal._seal._KEYS", {})
        read = ["python", "-c", f"print(open({str(key)!r}).read() or 'empty')"]
        run(ws, ["true"])  # the key is made before the first command
        secret = key.read_text().strip()
        assert len(bytes.fromhex(secret)) == 32 and oct(key.stat().st_mode)[-3:] == "600"
        assert seal_key() == bytes.fromhex(secret)
        # as its owner would (a command runs as the user; here root, mapped to nobody);
        # a key opdsl now refuses (others may read it) is hidden all the same
        folder.chmod(0o755)
        key.chmod(0o644)
        monkeypatch.setattr("interpreters.journal._seal._KEYS", {})
        with pytest.raises(SealKeyError, match="not yours alone"):
            seal_key()
        ok, text = run(ws, read)  # /dev/null in its place: empty, or refused as a device
        assert secret not in text and (text.split() == ["empty"] or "Permission denied" in text)
        with monkeypatch.context() as unguarded:  # the check can fail: without the bind, seen
            unguarded.setattr("interpreters.tools._sandbox._seal_key_place", lambda: None)
            assert secret in run(ws, read)[1]
    finally:
        shutil.rmtree(folder)


def test_a_seal_key_inside_the_workspace_cannot_be_moved_replaced_or_read(
    place: tuple[Workspace, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace that is the user's home holds their config folder: a command could move
    the key's folder aside and leave a key of its own in its place, unless every folder down
    to the key is a mount point; the file tools never touch the key or a folder holding it."""
    from interpreters.journal._seal import seal_key

    ws, repo, _ = place
    key = repo / "home" / ".config" / "opdsl" / "seal.key"
    monkeypatch.setenv("OPDSL_SEAL_KEY", str(key))
    monkeypatch.setattr("interpreters.journal._seal._KEYS", {})
    made = seal_key()
    for hostile in (
        "import os; os.rename('home/.config/opdsl', 'moved')",
        "import os; os.rename('home/.config', 'moved')",
        "import os; os.rename('home', 'moved')",
        "import shutil; shutil.rmtree('home')",
        "import os; os.remove('home/.config/opdsl/seal.key')",
        "open('home/.config/opdsl/seal.key', 'w').write('00' * 32)",
        "print(open('home/.config/opdsl/seal.key').read() or 'empty')",
    ):
        ok, text = run(ws, ["python", "-c", hostile])
        assert made.hex() not in text, (hostile, text)
        assert not ok or text.split() == ["empty"], (hostile, text)
        assert not (repo / "moved").exists(), hostile
    with monkeypatch.context() as unpinned:  # the check can fail: without the pins, moved
        unpinned.setattr("interpreters.tools._sandbox._pin_seal_key", lambda key, places: [])
        ok, text = run(ws, ["python", "-c", "import os; os.rename('home/.config', 'moved')"])
        assert ok and (repo / "moved" / "opdsl" / "seal.key").is_file(), text
        (repo / "moved").rename(repo / "home" / ".config")
    # the rest of the folder is the workspace's as ever
    ok, text = run(ws, ["python", "-c", "open('home/.config/other', 'w').write('x')"])
    assert ok, text
    for tool, arguments in (
        ("read_file", {"path": "home/.config/opdsl/seal.key"}),
        ("write_file", {"path": "home/.config/opdsl/seal.key", "content": "00" * 32}),
        ("delete_path", {"path": "home/.config"}),
    ):
        result = getattr(ws, tool)(**arguments)
        assert not result.ok and "holds opdsl's seal key" in str(result.error), (tool, result)
    monkeypatch.setattr("interpreters.journal._seal._KEYS", {})
    assert seal_key() == made and key.is_file()
    # found through a link in a folder commands may write (~/.config a link to dotfiles): a
    # link cannot be pinned, and one to a key of a command's could be put in its place
    (repo / "dotfiles").mkdir()
    (repo / "home" / ".config").rename(repo / "dotfiles" / "config")
    (repo / "home" / ".config").symlink_to(repo / "dotfiles" / "config")
    ok, text = run(ws, ["python", "-c", "print('ran')"])
    assert not ok and f"is found through the link {repo / 'home' / '.config'}" in text, text
    assert "ran" not in text.split()
    real = repo / "dotfiles" / "config" / "opdsl" / "seal.key"
    assert f"set OPDSL_SEAL_KEY to the key's real path, {real}" in text, text
    monkeypatch.setenv("OPDSL_SEAL_KEY", str(real))  # as the message says: the same key
    ok, text = run(ws, ["python", "-c", "print('ran')"])
    assert ok and text.split() == ["ran"], text
    assert seal_key() == made
