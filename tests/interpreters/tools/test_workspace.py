"""Workspace tools in real git repositories in temp dirs: every tool, every refusal,
commands and their process groups, git through gitpython, snapshots and recovery."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import git
import pytest

from interpreters import MemoryJournal, ScriptedModel, Workspace, WorkspaceError, resume, run
from interpreters.cli._main import main
from op import Op, Response, ToolCall, checkpoint, tool
from tests.helpers import RawJournal, running


def sh(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    sh(root, "init", "-q", "-b", "main")
    sh(root, "config", "user.name", "Someone")
    sh(root, "config", "user.email", "someone@example.com")
    (root / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_app.py").write_text(
        "from app import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "notes.txt").write_text("one\ntwo\nthree\n")
    sh(root, "add", "-A")
    sh(root, "commit", "-q", "-m", "initial")
    (root / "debug.log").write_text("ignored\n")
    return root


@pytest.fixture
def ws(repo: Path) -> Workspace:
    return Workspace(
        repo,
        allow=("python", "python3", "sh", "git", "echo", "sleep", "cat"),
        timeout=10,
        idle_timeout=5,
        grace=0.5,
    )


def test_read_write_edit_list_search_delete(ws: Workspace, repo: Path) -> None:
    assert ws.read_file("notes.txt").output == "one\ntwo\nthree\n"
    assert ws.read_file("notes.txt", 2, 3).output == "two\nthree\n"
    assert "past its end" in (ws.read_file("notes.txt", 9).error or "")
    assert (
        ws.write_file("src/new.py", "x = 1\n").ok
        and (repo / "src" / "new.py").read_text() == "x = 1\n"
    )
    assert ws.edit_file("app.py", "a - b", "a + b").ok
    assert (repo / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
    missing = ws.edit_file("app.py", "nothing like this", "x")
    assert "was not found" in (missing.error or "")
    ws.write_file("dup.txt", "x\nx\ny\n")
    assert (ws.edit_file("dup.txt", "x", "z").error or "").startswith(
        "dup.txt: the text to replace occurs 2 times (lines 1, 2); include more context so it occurs once"
    )
    listing = ws.list_files().output.splitlines()
    assert "app.py" in listing and "src/new.py" in listing and "debug.log" not in listing, (
        "respects .gitignore"
    )
    assert ws.list_files("tests").output == "tests/test_app.py"
    assert ws.list_files(pattern="*.py").output.splitlines() == [
        "app.py",
        "src/new.py",
        "tests/test_app.py",
    ]
    assert ws.search(r"def \w+").output.splitlines() == [
        "app.py:1: def add(a, b):",
        "tests/test_app.py:3: def test_add():",
    ]
    assert "bad regular expression" in (ws.search("(").error or "")
    assert ws.delete_path("src").ok and not (repo / "src").exists()


def test_binary_and_huge_files_are_refused_with_a_reason(ws: Workspace, repo: Path) -> None:
    (repo / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    assert ws.read_file("blob.bin").error == "blob.bin is a binary file; it cannot be read as text"
    (repo / "big.txt").write_text("line\n" * 300_000)
    big = ws.read_file("big.txt")
    assert "1,500,000 bytes, more than 1,000,000; read a line range" in (big.error or "")
    assert ws.read_file("big.txt", 10, 11).output == "line\nline\n"


HOSTILE = [
    ("read_file", {"path": "../outside.txt"}, "outside the workspace"),
    ("read_file", {"path": "/etc/passwd"}, "outside the workspace"),
    ("write_file", {"path": "../../x", "content": "x"}, "outside the workspace"),
    ("read_file", {"path": ".git/config"}, "inside .git/"),
    ("write_file", {"path": ".git/hooks/pre-commit", "content": "x"}, "inside .git/"),
    ("write_file", {"path": ".opdsl/runs.db", "content": "x"}, "inside .opdsl/"),
    ("delete_path", {"path": ".git"}, "inside .git/"),
    ("read_file", {"path": "link_out/secret.txt"}, "outside the workspace"),
    ("write_file", {"path": "escape.txt", "content": "x"}, "outside the workspace"),
    ("read_file", {"path": "a\x00b"}, "NUL byte"),
    ("write_file", {"path": "x" * 300, "content": "x"}, "too long"),
    ("delete_path", {"path": "."}, "refusing to delete the workspace root"),
    ("write_file", {"path": "tests/test_app.py", "content": "x"}, "locked"),
    ("edit_file", {"path": "tests/test_app.py", "old": "3", "new": "4"}, "locked"),
    ("delete_path", {"path": "tests"}, "holds locked files"),
    ("run", {"command": ["rm", "-rf", "/"]}, "not an allowed command"),
    ("run", {"command": "echo hi"}, "no shell is allowed"),
    ("run", {"command": ["echo", "x"], "cwd": "../"}, "outside the workspace"),
]


@pytest.mark.parametrize(
    ("name", "args", "message"), HOSTILE, ids=[f"{h[0]}:{str(h[1])[:30]}" for h in HOSTILE]
)
def test_hostile_inputs_are_refused_and_nothing_is_touched(
    ws: Workspace, repo: Path, tmp_path: Path, name: str, args: dict[str, Any], message: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.txt").write_text("secret")
    (tmp_path / "outside.txt").write_text("outside")
    (repo / "link_out").symlink_to(outside)
    (repo / "escape.txt").symlink_to(tmp_path / "outside.txt")
    ws.lock("tests/*")
    before = _tree_state(tmp_path)
    tools = {t.name: t for t in ws.tools()}
    result = anyio.run(tools[name].call, args)
    assert not result.ok and message in (result.error or ""), result
    assert _tree_state(tmp_path) == before


def _tree_state(top: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(top):
        for f in files:
            p = Path(dirpath) / f
            if not p.is_symlink():
                out[str(p.relative_to(top))] = p.read_bytes()
    return out


def test_a_symlink_swapped_in_after_the_check_is_not_followed(
    ws: Workspace, repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (repo / "sub").mkdir()
    real = ws.resolve("sub/file.txt", write=True)  # the check passes: sub is a real folder
    (repo / "sub").rmdir()
    (repo / "sub").symlink_to(outside)  # swapped in before the open
    with pytest.raises(Exception, match="symlink appeared on the way"):
        ws.open(real, os.O_WRONLY | os.O_CREAT)
    assert list(outside.iterdir()) == []


def test_run_scrubs_secrets_caps_output_and_reports_exit_codes(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_API_KEY", "sk-very-secret-value")
    monkeypatch.setenv("HARMLESS", "visible")
    env = anyio.run(
        ws.run,
        [
            "python",
            "-c",
            "import os; print(sorted(k for k in os.environ if k in ('MY_API_KEY', 'HARMLESS')))",
        ],
    )
    assert env.output.strip() == "[]"  # only the variables the workspace passes on
    ws.pass_env = ws.pass_env | {"HARMLESS", "MY_API_KEY"}
    env = anyio.run(
        ws.run,
        [
            "python",
            "-c",
            "import os; print(sorted(k for k in os.environ if k in ('MY_API_KEY', 'HARMLESS')))",
        ],
    )
    assert env.output.strip() == "['HARMLESS']"  # a secret-looking name never
    leak = anyio.run(ws.run, ["echo", "the key is sk-very-secret-value"])
    assert leak.output.strip() == "the key is [redacted]"
    failing = anyio.run(ws.run, ["python", "-c", "import sys; print('bad'); sys.exit(3)"])
    assert (failing.ok, failing.error, failing.output.strip()) == (False, "exit code 3", "bad")
    ws.max_output = 100
    long = anyio.run(ws.run, ["python", "-c", "print('x' * 5000)"])
    assert long.ok and long.output.endswith("[output cut: 4,901 more bytes]")


def test_no_process_outlives_a_timeout_even_children_that_ignore_sigterm(
    ws: Workspace, repo: Path
) -> None:
    # pids inside a confined command are its own namespace's: the processes prove they are
    # alive by writing a heartbeat file, which stops growing once they are gone
    beat = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    open(TARGET, 'a').write('.')\n    time.sleep(0.1)\n"
    script = repo / "stubborn.py"
    script.write_text(
        "import subprocess, sys\n"
        f"BEAT = {beat!r}\n"
        "for _ in range(20):\n"  # many: a PID namespace of 20 takes a moment to tear down
        "    subprocess.Popen([sys.executable, '-c', BEAT.replace('TARGET', repr('child.beat'))])\n"
        "print('started', flush=True)\n"
        "exec(BEAT.replace('TARGET', repr('parent.beat')))\n"
    )
    t0 = time.monotonic()
    result = anyio.run(lambda: ws.run(["python", "stubborn.py"], timeout=4))
    assert result.error == "timed out after 4s; the command and its children were killed"
    assert "started" in result.output
    assert time.monotonic() - t0 < 15
    # gone as it returns: the sandbox's processes die only after bubblewrap itself (its
    # command runs in a session of its own, out of the group killed); the call waits for them
    assert running(b"stubborn.py") == running(b"child.beat") == []
    sizes = [(repo / f).stat().st_size for f in ("parent.beat", "child.beat")]
    assert min(sizes) > 0
    time.sleep(1)
    assert [(repo / f).stat().st_size for f in ("parent.beat", "child.beat")] == sizes, (
        "a process outlived the timeout"
    )


def test_idle_timeout(ws: Workspace) -> None:
    ws.idle_timeout = 2
    result = anyio.run(
        ws.run, ["python", "-c", "import time; print('hi', flush=True); time.sleep(30)"]
    )
    assert (
        result.error == "no output for 2s; the command and its children were killed"
        and result.output.strip() == "hi"
    )


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_git_status_diff_log_add_commit_branch(ws: Workspace, repo: Path) -> None:
    assert ws.current_branch().output == "main"
    ws.edit_file("app.py", "a - b", "a + b")
    assert " M app.py" in ws.git_status().output
    assert "-    return a - b" in ws.git_diff().output
    assert ws.git_add().ok
    message = 'Fix add: "a - b" was $(rm -rf /) `wrong`\n\nSecond paragraph;\n  indented line\n'
    commit = ws.git_commit(message)
    assert commit.ok
    head = git.Repo(repo).head.commit
    assert head.hexsha == commit.output and head.message == message, "verbatim, whatever it holds"
    assert (head.author.name, head.committer.email) == ("opdsl", "opdsl@localhost")
    assert "Fix add" in ws.git_log(2).output
    nothing = ws.git_commit("nothing to commit")
    assert not nothing.ok and "commit failed" in (nothing.error or "")


def test_commit_hooks_are_off(ws: Workspace, repo: Path) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho hook ran > hook.txt\nexit 1\n")
    hook.chmod(0o755)
    ws.write_file("x.txt", "x")
    ws.git_add()
    assert ws.git_commit("with a failing hook").ok
    assert not (repo / "hook.txt").exists()


def test_a_commit_takes_an_author_and_locks_are_a_tool(ws: Workspace, repo: Path) -> None:
    ws.write_file("y.txt", "y")
    ws.git_add()
    assert ws.git_commit("as someone else", author="agent-implementor <agent@localhost>").ok
    head = git.Repo(repo).head.commit
    assert (head.author.name, head.author.email) == ("agent-implementor", "agent@localhost")
    assert (head.committer.name, head.committer.email) == ("agent-implementor", "agent@localhost")
    for bad in ("no email", "a <b>", "<x@y>", "a <x@y> trailing"):
        refused = ws.git_commit("bad author", author=bad)
        assert not refused.ok and "should look like Name <email@host>" in (refused.error or "")
    assert ws.lock_files(["y.txt", "tests/*.py"]).ok
    write = ws.write_file("y.txt", "changed")
    assert not write.ok and "y.txt is locked" in (write.error or "")
    assert (repo / "y.txt").read_text() == "y"
    for bad in ("/etc/passwd", "../up", ""):
        refused = ws.lock_files([bad])
        assert not refused.ok and "give paths inside the workspace" in (refused.error or "")


def _state(repo: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d != ".git"]
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(repo))] = p.read_text()
    return out


def test_snapshot_and_restore_round_trip_without_touching_the_users_git_state(
    ws: Workspace, repo: Path
) -> None:
    (repo / "untracked.txt").write_text("mine\n")
    (repo / "notes.txt").write_text("modified by the user\n")
    sh(repo, "add", "notes.txt")  # the user's staged change
    index_before = sh(repo, "diff", "--cached", "--stat")
    stash_before = sh(repo, "stash", "list")
    before = _state(repo)
    tree = ws.snapshot("run1/1")
    assert (
        sh(repo, "diff", "--cached", "--stat") == index_before
        and sh(repo, "stash", "list") == stash_before
    )
    assert sh(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    # the run changes everything: modify, delete, rename, create, and an ignored file appears
    ws.edit_file("app.py", "a - b", "a + b")
    ws.delete_path("untracked.txt")
    sh(repo, "mv", "tests/test_app.py", "tests/test_renamed.py")
    ws.write_file("new/deep/file.py", "x")
    (repo / "build").mkdir()
    (repo / "build" / "out.log").write_text("ignored build output\n")
    ws.restore(tree)
    after = _state(repo)
    assert {k: v for k, v in after.items() if not k.startswith("build/")} == before
    assert (repo / "build" / "out.log").exists(), "ignored files are left alone"
    assert ws.snapshots("run1/") == {"run1/1": tree}
    # a prefix is a prefix of the ref's name, whichever folder it ends in
    assert ws.snapshot("run10/1") == tree
    assert ws.snapshots("run1/") == {"run1/1": tree}
    assert ws.snapshots("run1") == {"run1/1": tree, "run10/1": tree}
    assert ws.drop_snapshot("run10/1") == 1
    assert ws.drop_snapshots("run1/") == 1 and ws.snapshots() == {}


def test_recovery_after_a_half_finished_edit(ws: Workspace, repo: Path) -> None:
    (repo / "user_work.txt").write_text("the user's own work in progress\n")
    base = ws.snapshot("r/baseline")
    before = _state(repo)
    ws.write_file("app.py", "def add(a, b):\n    return")  # half-written
    ws.write_file("scratch.py", "tmp")
    ws.restore(base)
    assert _state(repo) == before


# -- the workspace in a run ----------------------------------------------------------------------


def fixer() -> Op[str]:
    yield from checkpoint("before-edit")
    yield from tool("edit_file", {"path": "app.py", "old": "a - b", "new": "a + b"})
    yield from tool("write_file", {"path": "CHANGES.md", "content": "fixed add\n"})
    yield from checkpoint("before-commit")
    yield from tool("git_add", {})
    sha = yield from tool("git_commit", {"message": "Fix add"})
    return sha.output


def test_checkpoints_snapshot_the_workspace_and_forks_restore_it(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = MemoryJournal()
    first = run(fixer, workspace=repo, db=journal)
    assert first.status == "completed", first.describe()
    assert "return a + b" in (repo / "app.py").read_text()
    entries = journal.entries(first.run_id)
    snap = [e for e in entries if e.kind == "checkpoint"]
    assert all('"tree":' in (e.result_json or "") for e in snap)
    # move the repository on, then fork from before the edit: the files come back to that point
    sh(repo, "reset", "-q", "--hard", "HEAD~1")
    (repo / "app.py").write_text("something else entirely\n")
    (repo / "mine.txt").write_text("the user's new file\n")
    capsys.readouterr()
    fork = resume(first.run_id, db=journal, from_checkpoint="before-edit", program=fixer)
    assert fork.status == "completed", fork.describe()
    assert "return a + b" in (repo / "app.py").read_text() and (repo / "CHANGES.md").exists()
    refs = Workspace(repo).snapshots()
    assert f"{first.run_id}/1" in refs and f"{fork.run_id}/4" in refs
    # the user's own work was saved, named, and comes back with the command it printed
    said = capsys.readouterr().err
    command = said.split("bring them back with: ", 1)[1].strip()
    assert not (repo / "mine.txt").exists()
    subprocess.run(command, shell=True, check=True)
    assert (repo / "mine.txt").read_text() == "the user's new file\n"
    assert (repo / "app.py").read_text() == "something else entirely\n"


def test_a_workspace_without_git_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert run(fixer_checkpoint_only, workspace=plain, db=MemoryJournal()).status == "completed"
    err = capsys.readouterr().err
    assert "is not a git repository: checkpoints keep no snapshot" in err


def fixer_checkpoint_only() -> Op[None]:
    yield from checkpoint("only")


def test_workspace_tools_reach_the_model_and_refusals_come_back_readable(repo: Path) -> None:
    model = ScriptedModel(
        [
            Response(
                tool_calls=(
                    ToolCall(id="1", name="read_file", arguments={"path": "../../etc/passwd"}),
                )
            ),
            Response(text="I cannot read that."),
        ]
    )
    from op import Message
    from programs.loop import tool_loop

    def program() -> Op[str]:
        reply, history = yield from tool_loop([Message.user("read it")], tools="all")
        return history[2].content

    result = run(program, model=model, workspace=repo, db=MemoryJournal())
    assert result.value.startswith("error: path '../../etc/passwd' is outside the workspace")
    names = [t.name for t in model.requests[0].tools]
    assert {
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "search",
        "delete_path",
        "run",
        "git_status",
    } <= set(names)


def test_cli_workspace_checkpoints_and_gc(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "runs.db")
    code = main(
        [
            "run",
            "tests.interpreters.tools.test_workspace:fixer",
            "--workspace",
            str(repo),
            "--db",
            db,
            "--quiet",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    run_id = err.split("run ")[1].split()[0]
    main(["checkpoints", run_id, "--db", db])
    out, _ = capsys.readouterr()
    assert "before-edit  completed  files: tree" in out
    assert main(["gc", run_id, "--db", db]) == 0
    out, _ = capsys.readouterr()
    assert f"removed run {run_id} and 2 workspace snapshot(s)" in out
    assert Workspace(repo).snapshots() == {}
    assert main(["show", run_id, "--db", db]) == 2


def test_a_workspace_that_is_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="workspace /no/such/folder is not a directory"):
        Workspace("/no/such/folder")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(WorkspaceError, match="is not a directory"):
        Workspace(tmp_path / "file.txt")


def test_gc_removes_finished_runs_only_keeps_what_forks_need_and_gives_space_back(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    from tests.fixtures.durable_programs import chat

    db = str(tmp_path / "runs.db")
    first = run(fixer, workspace=repo, db=db)
    fork = resume(first.run_id, db=db, from_checkpoint="before-edit", program=fixer)
    waiting = run(chat, "x" * 200_000, db=db)
    assert waiting.status == "waiting"
    capsys.readouterr()
    assert main(["gc", waiting.run_id, "--db", db]) == 2
    assert "is waiting for an answer" in capsys.readouterr().err
    # the fork's copied checkpoints name the parent's trees: those refs stay
    before = dict(Workspace(repo).snapshots(f"{first.run_id}/"))
    assert main(["gc", first.run_id, "--db", db]) == 0
    out = capsys.readouterr().out
    assert "kept" in out and "other runs still need" in out
    kept = Workspace(repo).snapshots(f"{first.run_id}/")
    assert kept and set(kept.values()) <= set(before.values())
    assert (
        resume(fork.run_id, db=db, from_checkpoint="before-edit", program=fixer).status
        == "completed"
    )
    # space comes back: remove the big waiting run once it is answered and finished
    assert (
        resume(waiting.run_id, db=db, answer="me", model=ScriptedModel(["ok"])).status
        == "completed"
    )
    size = Path(db).stat().st_size
    RawJournal(db).execute("PRAGMA wal_checkpoint(TRUNCATE)")  # outside a transaction
    size = Path(db).stat().st_size
    assert main(["gc", waiting.run_id, "--db", db]) == 0
    assert Path(db).stat().st_size < size
