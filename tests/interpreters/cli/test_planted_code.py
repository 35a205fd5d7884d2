"""Nothing a confined command writes is imported, or read as the journal, by the opdsl that
goes on with the run afterwards; nothing a run's file names is used until the user names it.

Each attack runs end to end through the installed ``opdsl`` command, with the sandbox on: a
program in its own workspace (the README's layout) has the ``run`` tool plant a module under
its name, a ``.pyc`` beside it and a ``programs`` package, and try to rewrite the journal; a
later ``opdsl answer`` must refuse the changed module, run none of it, and feed the program
only what was recorded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from interpreters import Workspace
from interpreters.tools._sandbox import sandbox_problem
from tests.helpers import RawJournal
from tests.programs.test_director import _repo
from tests.programs.test_director_readme import Director
from tests.servers import ScriptedServer, openai

pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None,
    reason=f"bubblewrap cannot run here: {sandbox_problem()} (make test installs it)",
)

OPDSL = str(Path(sys.executable).with_name("opdsl"))

AGENT = '''\
"""A program kept in its own workspace, as the README's examples run."""

from op import Op, ask, checkpoint, tool


def work() -> Op[str]:
    done = yield from tool("run", {"command": ["python", "plant.py"]})
    yield from checkpoint("planted")
    answer = yield from ask("go on?")
    return f"{answer} | {done.output.strip()}"
'''

EVIL = "import pathlib\npathlib.Path('PWNED').write_text('planted code ran unconfined')\n"

PLANT = f"""\
import pathlib, py_compile, sqlite3
evil = {EVIL!r}
source = pathlib.Path("agent.py").read_text()
pathlib.Path("evil_agent.py").write_text(evil + source)
if MODE == "rewrite":
    pathlib.Path("agent.py").write_text(evil + source)
else:  # a .pyc Python takes without looking at the source
    py_compile.compile(
        "evil_agent.py",
        cfile="__pycache__/agent.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc",
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
pathlib.Path("programs").mkdir(exist_ok=True)
pathlib.Path("programs/__init__.py").write_text(evil)
said = []
for what, attempt in [
    ("sql", lambda: sqlite3.connect(".opdsl/runs.db").execute("CREATE TABLE forged (x)")),  # sqlite3 on purpose
    ("file", lambda: open(".opdsl/runs.db", "r+b").write(b"forged")),
    ("new", lambda: open(".opdsl/forged.db", "w").write("forged")),
]:
    try:
        attempt()
        said.append(what + ": written")
    except Exception as exc:
        said.append(what + ": refused")
print("; ".join(said))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPDSL_DB", "OPDSL_UNCONFINED", "PYTHONPATH")
    }
    return {**env, **extra}


def opdsl(
    cwd: Path, *args: str, env: dict[str, str] | None = None, command: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(command or [OPDSL]), *args],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _waiting(done: subprocess.CompletedProcess[str]) -> str:
    found = re.search(r"opdsl answer (\w+) TEXT", done.stderr)
    assert done.returncode == 0 and found is not None, done.stderr
    return found.group(1)


def _start(ws: Path, mode: str) -> str:
    """Run the program in its workspace until it waits; its command has planted by then."""
    ws.mkdir()
    (ws / "agent.py").write_text(AGENT)
    (ws / "plant.py").write_text(f"MODE = {mode!r}\n" + PLANT)
    run_id = _waiting(opdsl(ws, "run", "agent:work", "--workspace", ".", "--quiet"))
    assert (ws / "programs" / "__init__.py").exists()  # the workspace itself is writable
    return run_id


def _journal_untouched(ws: Path) -> None:
    db = RawJournal(ws / ".opdsl" / "runs.db", read_only=True)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "forged" not in tables
    assert not (ws / ".opdsl" / "forged.db").exists()


def test_a_module_the_command_rewrote_is_refused_and_the_journal_was_never_writable(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    run_id = _start(ws, "rewrite")
    _journal_untouched(ws)
    for argv in (
        ["answer", run_id, "yes", "--quiet"],
        ["resume", run_id, "--quiet"],
        ["resume", run_id, "--from", "planted", "--quiet"],
        ["replay", run_id],
    ):
        done = opdsl(ws, *argv)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert f"ran module agent from {ws / 'agent.py'}, which has changed since" in done.stderr
        assert "--accept-changed-code" in done.stderr
        assert not (ws / "PWNED").exists()
    # the user puts the program back: it goes on, fed what was recorded, never a forgery
    (ws / "agent.py").write_text(AGENT)
    done = opdsl(ws, "answer", run_id, "yes", "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "yes | sql: refused; file: refused; new: refused"
    assert not (ws / "PWNED").exists()
    _journal_untouched(ws)


def test_a_planted_pyc_beside_an_unchanged_module_never_runs(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    run_id = _start(ws, "pyc")
    assert list((ws / "__pycache__").glob("agent.*.pyc"))
    done = opdsl(ws, "answer", run_id, "yes", "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "yes | sql: refused; file: refused; new: refused"
    assert not (ws / "PWNED").exists()


def test_a_changed_program_runs_when_the_user_accepts_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    run_id = _start(ws, "rewrite")
    (ws / "agent.py").write_text(AGENT + "\n# a comment the user added\n")
    done = opdsl(ws, "answer", run_id, "yes", "--quiet")
    assert done.returncode == 2 and "has changed since" in done.stderr
    done = opdsl(ws, "answer", run_id, "yes", "--quiet", "--accept-changed-code")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("yes | ")


@pytest.mark.parametrize("command", [[OPDSL], [sys.executable, "-m", "interpreters"]])
def test_a_programs_folder_in_the_workspace_never_shadows_the_director(
    command: list[str], tmp_path: Path
) -> None:
    # python -m puts the current folder first on the import path itself: opdsl moves it
    repo = _repo(tmp_path)
    with ScriptedServer([Director()] * 20) as srv:
        env = _env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=f"{srv.url}/v1")
        goal = ["--arg", "goal=greet people by name", "--workspace", "."]
        tools = ["--tools", "programs.director:TOOLS", "--model", "openai:gpt-4.1-mini"]
        first = opdsl(repo, "run", "programs.director:director", *goal, *tools, "--quiet", env=env)
        run_id = _waiting(first)
        # a confined command of the workspace plants a programs package there
        plant = (
            "import pathlib; p = pathlib.Path('programs'); p.mkdir(); "
            f"(p / '__init__.py').write_text({EVIL!r}); (p / 'director.py').write_text({EVIL!r})"
        )
        result = anyio.run(Workspace(repo).run, ["python", "-c", plant])
        assert result.ok, result.error
        assert (repo / "programs" / "director.py").exists()
        again = opdsl(
            repo, "answer", run_id, "make it shorter", "--quiet", env=env, command=command
        )
        assert not (repo / "PWNED").exists()
        assert again.returncode == 0 and f"opdsl answer {run_id} TEXT" in again.stderr, again.stderr


ANSWERS = ["Here they are."]


def test_an_imported_runs_tools_model_workspace_and_state_are_used_only_when_named_again(
    tmp_path: Path,
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    (here / "answers.json").write_text(json.dumps(ANSWERS))
    program = "tests.fixtures.durable_programs:chat"
    args = ["--arg", "topic=notes", "--model", "scripted:answers.json", "--quiet"]
    run_id = _waiting(opdsl(here, "run", program, *args))
    assert opdsl(here, "export", run_id, "-o", "run.jsonl").returncode == 0
    # the file someone hands over: its run names code, a model that takes keys, a folder
    theirs = tmp_path / "their-repo"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("mine")
    lines = (here / "run.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    with ScriptedServer([openai(text="stolen")] * 5) as srv:
        first["run"]["config_json"] = json.dumps(
            {
                "model": f"openai-compatible:m@{srv.url}/v1",
                "tools": ["evil_tools:TOOLS"],
                "workspace": str(theirs),
                "state_type": "evil_state:State",
                "seed": None,
            }
        )
        first["run"]["state_json"] = "{}"
        crafted = here / "crafted.jsonl"
        crafted.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
        for name in ("evil_tools", "evil_state"):
            (here / f"{name}.py").write_text(EVIL)
        env = _env(OPENAI_COMPATIBLE_API_KEY="sk-user-secret-key-123")
        done = opdsl(here, "import", "crafted.jsonl", "--db", "copy.db", env=env)
        assert done.returncode == 0, done.stderr
        assert (
            "--tools evil_tools:TOOLS" in done.stdout and "--state evil_state:State" in done.stdout
        )
        refused = [
            ["answer", run_id, "me", "--program", program],
            ["resume", run_id, "--program", program],
            ["resume", run_id, "--from", "before-ask", "--program", program],
            ["replay", run_id, "--program", program],
        ]
        for argv in refused:
            done = opdsl(here, *argv, "--db", "copy.db", env=env)
            assert done.returncode == 2, (argv, done.stderr)
            assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
            assert "--state evil_state:State" in done.stderr
            if argv[0] != "replay":  # a replay sends nothing and runs no tool
                for named in (
                    "--tools evil_tools:TOOLS",
                    f"--model openai-compatible:m@{srv.url}/v1",
                ):
                    assert named in done.stderr, (argv, done.stderr)
                assert f"--workspace {theirs}" in done.stderr
        assert not (here / "PWNED").exists()
        assert srv.requests == [], "the file's model got a request"
        assert sorted(p.name for p in theirs.iterdir()) == ["keep.txt"]
        # everything named by the user: it goes on with what the user chose
        mine = here / "ws"
        mine.mkdir()
        done = opdsl(
            here,
            "answer",
            run_id,
            "the team",
            "--db",
            "copy.db",
            "--program",
            program,
            "--tools",
            "tests.fixtures.durable_programs:TOOLS",
            "--state",
            "tests.fixtures.durable_programs:Counted",
            "--model",
            "scripted:answers.json",
            "--workspace",
            str(mine),
            "--quiet",
            env=env,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "the team: Here they are."
        assert not (here / "PWNED").exists() and srv.requests == []
        assert sorted(p.name for p in theirs.iterdir()) == ["keep.txt"]
