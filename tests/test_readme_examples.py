"""Every fenced example of the README, taken from the README itself: each is run as it is
written and what it prints compared with what the README shows, or it says here why it is not
run by this module and which test runs it instead. A new example that is neither fails."""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


@dataclass(frozen=True)
class Block:
    language: str
    line: int
    text: str

    @property
    def first(self) -> str:
        return self.text.strip().splitlines()[0].strip()


def blocks() -> list[Block]:
    """The README's fenced blocks (indented ones too), with their language and first line."""
    found = []
    text = README.read_text(encoding="utf-8")
    for m in re.finditer(r"^( *)```(\w*)\n(.*?)^\1```", text, re.S | re.M):
        body = "\n".join(line.removeprefix(m.group(1)) for line in m.group(3).splitlines())
        found.append(Block(m.group(2), text.count("\n", 0, m.start()) + 1, body))
    return found


def block(starting: str) -> Block:
    (found,) = [b for b in blocks() if b.first.startswith(starting)]
    return found


# Each example but the python ones (tests/test_readme.py runs every ```python block, as one
# module, and compares what its prints say), by how its first line starts: run here (a test
# below), or run elsewhere, or no example to run at all, each with its reason.
HOW = {
    "make demo": "run: test_the_first_commands_run_as_written",
    "from op import Op, checkpoint, infer, tool": "run: tests/test_readme.py, and "
    "test_the_divergence_example_is_what_replay_says",
    "app:plan diverged": "run: test_the_divergence_example_is_what_replay_says",
    "opdsl run programs.coder:coder --mcp": "needs github-mcp-server and a model "
    "(tests/interpreters/tools/test_mcp.py parses each --mcp the README shows as the command "
    "line does, and starts those installed here; it runs --mcp against a server of the tests)",
    "opdsl run programs.coder:coder": "run: tests/test_new_user.py::"
    "test_the_readme_command_runs_the_coder_as_written (a loopback OpenAI server)",
    "make model": "run: tests/real_model/test_readme_llama.py, with make model's server and "
    "model; test_the_llama_server_example_names_what_make_model_fetches checks its paths",
    ".cache/real-model/llama/llama-server -m qwen": "needs a 1.12 GB model of the reader's; "
    "its server is the one above",
    "opdsl run programs.director:director": "needs a real model (OPENAI_API_KEY), or Claude Code",
    "temporal server start-dev": "run: tests/interpreters/temporal/test_workers.py::"
    "test_the_readme_commands_run_as_written (a test program in place of the reader's myagent)",
    "$ opdsl prices": "run: test_shown_commands_print_what_the_readme_shows",
    "opdsl trust --db old.db": "run: tests/interpreters/journal/test_seal.py::"
    "test_opdsl_trust_vouches_for_runs_saying_what_they_name (a 0.1.0 journal for old.db)",
    "opdsl mcp install": "needs Claude Code (claude); tests/programs/test_director_mcp_install.py "
    "runs opdsl mcp install and uninstall in a project of the tests",
    "@program(state=CodeState": "a fragment of programs/coder.py, not a whole example",
    "PLAN -> DRAFT": "a diagram",
    "def test_plan(opdsl_cassette)": "a fragment: real_model and note are the reader's",
    "op/            the language": "the layout of the repository",
}


def test_every_example_is_run_or_says_why() -> None:
    found = blocks()
    assert len(found) >= 15
    unknown = [
        f"README.md:{b.line}: {b.first}"
        for b in found
        if b.language != "python" and not any(b.first.startswith(k) for k in HOW)
    ]
    assert not unknown, f"examples this module neither runs nor explains: {unknown}"
    stale = [k for k in HOW if not any(b.first.startswith(k) for b in found)]
    assert not stale, f"HOW names examples the README no longer has: {stale}"


def test_the_divergence_example_is_what_replay_says(tmp_path: Path) -> None:
    """The Durable runs example saved as app.py, run, edited as the README says, replayed."""
    from interpreters import Divergence, ScriptedModel, replay, run

    program = block("from op import Op, checkpoint, infer, tool").text
    app = tmp_path / "app.py"
    app.write_text(program.split("\ndb = ")[0] + "\n", encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        import app as module  # type: ignore[import-not-found]

        db = str(tmp_path / "runs.db")
        first = run(
            module.plan,
            "ship it",
            model=ScriptedModel(["1. test 2. tag"]),
            tools=[module.note],
            db=db,
        )
        edited = app.read_text().replace('{"text": steps.text}', '{"text": steps.text.upper()}')
        assert edited != app.read_text()
        app.write_text(edited)
        importlib.reload(module)
        with pytest.raises(Divergence) as diverged:
            replay(first.run_id, db=db, accept_changed_code=True)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("app", None)
    said = str(diverged.value).replace(f"{tmp_path}/", "").splitlines()
    shown = block("app:plan diverged").text.strip().splitlines()
    assert shown[-1].strip() == "..."  # the README elides the rest of the diff
    assert said[: len(shown) - 1] == shown[:-1]


def test_the_first_commands_run_as_written(tmp_path: Path) -> None:
    """`opdsl new my-agent` from the first block, in an empty folder (make demo and make test
    are this repository's own: tests/test_demo.py and CI run them)."""
    first = block("make demo").text
    (new,) = [
        line.split("&&")[1].split("#")[0].strip()
        for line in first.splitlines()
        if "opdsl new" in line
    ]
    argv = shlex.split(new)
    out = subprocess.run(
        [sys.executable, "-m", "interpreters", *argv[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "my-agent" / "pyproject.toml").is_file()


def test_the_llama_server_example_names_what_make_model_fetches() -> None:
    """The server is started by the path `make model` puts it at, not from PATH."""
    from tests.real_model import conftest as real

    text = block("make model").text
    assert re.search(r"^model:", (ROOT / "Makefile").read_text(), re.M)
    assert not re.search(r"^llama-server", text, re.M), "llama-server is not on PATH"
    default = ROOT / ".cache" / "real-model"
    for path in (real.SERVER, real.MODEL, real.SERVER.parent):
        shown = (default / path.relative_to(real.MODEL_DIR)).relative_to(ROOT).as_posix()
        assert shown in text, shown
    assert f"LD_LIBRARY_PATH={(default / 'llama').relative_to(ROOT).as_posix()}" in text
    assert block(".cache/real-model/llama/llama-server -m qwen").text.startswith(
        ".cache/real-model/llama/llama-server"
    )


def test_shown_commands_print_what_the_readme_shows(tmp_path: Path) -> None:
    """A block that shows a command (``$ opdsl ...``) and what it prints: run as written, it
    prints that."""
    shown = [b for b in blocks() if b.first.startswith("$ opdsl")]
    assert shown
    for example in shown:
        command, *printed = example.text.strip().splitlines()
        argv = shlex.split(command.removeprefix("$ "))
        out = subprocess.run(
            [sys.executable, "-m", "interpreters", *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, (command, out.stderr)
        assert out.stdout.splitlines() == printed, (command, out.stdout)
