"""What a command run in the sandbox leaves for opdsl to trust outside it: a repository nested
in the workspace with a config that runs programs, a ``.git`` made where there was none, a
``.pth`` planted in a Python that lives in the workspace. Each is a hostile model's way out;
none may run anything outside the sandbox."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from interpreters import Workspace
from interpreters.tools._sandbox import bwrap_argv, sandbox_problem

pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}"
)


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=u", "-c", "user.email=u@x", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def _repo(tmp_path: Path) -> Workspace:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "a.txt").write_text("a\n")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "init")
    return Workspace(root)


def _planted(marker: Path) -> str:
    """A command a model runs: a repository of its own in the workspace, whose config names
    a program git runs whenever it looks into it (an fsmonitor)."""
    return f"""
import subprocess as s
def git(*a):
    s.run(['git', '-C', 'sub', '-c', 'user.name=u', '-c', 'user.email=u@x', *a], check=True)
s.run(['git', 'init', '-q', 'sub'], check=True)
open('sub/f', 'w').write('x')
git('add', 'f')
git('commit', '-qm', 's')
git('config', 'core.fsmonitor', 'touch {marker}; false')
"""


def test_a_repository_a_command_nests_in_the_workspace_runs_nothing_outside(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    ws = _repo(tmp_path)
    ran = anyio.run(lambda: ws.run([sys.executable, "-c", _planted(marker)]))
    assert ran.ok, ran
    assert not marker.exists()  # made in the sandbox, run by nothing yet
    (ws.root / "b.txt").write_text("the work\n")
    staged = ws.git_add()  # every change: the nested repository is not one opdsl commits
    assert staged.ok, staged
    assert "not staged: sub: a git repository inside the workspace" in staged.output
    for done in (ws.git_status(), ws.git_diff(), ws.git_diff(staged=True)):
        assert done.ok, done
    ws.snapshot_files("before")
    assert ws.git_commit("work").ok
    assert ws.git_status().ok
    assert not marker.exists(), "git ran the nested repository's fsmonitor outside the sandbox"
    tree = subprocess.run(
        ["git", "ls-tree", "-r", "HEAD"], cwd=ws.root, capture_output=True, text=True
    ).stdout
    assert "160000" not in tree  # no gitlink was committed


def test_a_git_folder_a_command_makes_where_there_was_none_is_never_used(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    root = tmp_path / "plain"
    root.mkdir()
    ws = Workspace(root)
    make = (
        "import subprocess as s\n"
        "s.run(['git', 'init', '-q'], check=True)\n"
        f"s.run(['git', 'config', 'core.fsmonitor', 'touch {marker}; false'], check=True)\n"
        f"s.run(['git', 'config', 'core.hooksPath', '{tmp_path}'], check=True)\n"
    )
    ran = anyio.run(lambda: ws.run([sys.executable, "-c", make]))
    assert ran.ok, ran
    assert (root / ".git").is_dir()
    status = ws.git_status()
    assert not status.ok and ".git was made while commands ran here" in (status.error or "")
    assert ws.repo() is None
    assert ws.files() == []  # listed without git, and without the .git folder
    assert not marker.exists()


def test_a_python_inside_the_workspace_stays_read_only_to_its_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project's own .venv, where opdsl's Python may be: a .pth planted in its
    site-packages would run at that Python's next start, outside the sandbox."""
    root = tmp_path / "repo"
    site = root / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    (root / "notes").mkdir()
    # the sandbox made as for a Python whose import path lies in the workspace
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    plant = (
        "import pathlib, sys\n"
        "for target in sys.argv[1:]:\n"
        "    try:\n"
        "        pathlib.Path(target).write_text('import os')\n"
        "        print('wrote', target)\n"
        "    except OSError as exc:\n"
        "        print('refused', target, exc.errno)\n"
    )
    argv = bwrap_argv(
        [sys.executable, "-c", plant, str(site / "evil.pth"), str(root / "notes" / "n.txt")],
        root=root,
        cwd=root,
        network=False,
    )
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert f"refused {site / 'evil.pth'}" in done.stdout, done.stdout
    assert not (site / "evil.pth").exists()
    # the rest of the workspace is the commands' to write
    assert (root / "notes" / "n.txt").read_text() == "import os"


def test_a_journal_file_in_the_workspaces_folder_is_its_folder_read_only(tmp_path: Path) -> None:
    """A journal named as a file (as a stdio MCP server's sandbox is given it) in a folder of
    the workspace (``.opdsl/runs.db``): the folder is read-only whole, which the stand-ins for
    its missing sidecars could not be mounted in (the command did not start), and its
    run-lock file is a stand-in."""
    from interpreters import SqliteJournal

    root = tmp_path.resolve()
    (root / ".opdsl").mkdir()
    SqliteJournal(root / ".opdsl" / "runs.db").close()
    shown = "stat -c %F .opdsl/runs.db-runlocks; touch .opdsl/x 2>/dev/null || echo refused"
    argv = bwrap_argv(
        ["sh", "-c", shown],
        root=root,
        cwd=root,
        network=False,
        read_only=(root / ".opdsl" / "runs.db",),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["character special file", "refused"], done.stdout
