"""`opdsl new` with paths it must refuse: nothing is written, and the error says why."""

from __future__ import annotations

import ast
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from interpreters.cli import main


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("os", "would shadow the module 'os'"),
        ("interpreters", "would shadow the module 'interpreters'"),
        ("123abc", "cannot name a project: a project name is ASCII letters"),
        ("class", "cannot name a project"),
        ("---", "cannot name a project"),
        ('"""; import os; os.system("touch pwned") #', "cannot name a project"),
        ('x"""\nimport os\n"""', "cannot name a project"),
        ('a"b', "cannot name a project"),
        ("a b", "cannot name a project"),
        ("a'b", "cannot name a project"),
        ("a$(touch pwned)", "cannot name a project"),
        ("café", "cannot name a project"),
        ("_private", "cannot name a project"),
        ("trailing-", "cannot name a project"),
    ],
)
def test_names_that_cannot_be_packages_are_refused(
    name: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opdsl: error: ") and message in err, err
    assert err.count("\n") == 1
    assert not (tmp_path / name).exists()
    assert not Path("pwned").exists() and not (tmp_path / "pwned").exists()


def test_an_existing_folder_or_file_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = tmp_path / "mine"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    assert main(["new", str(full)]) == 2
    assert (
        "already exists and is not an empty folder; nothing was written" in capsys.readouterr().err
    )
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    assert main(["new", str(a_file)]) == 2
    assert a_file.read_text() == "x"
    empty = tmp_path / "empty-ok"
    empty.mkdir()
    assert main(["new", str(empty)]) == 0
    assert (empty / "empty_ok" / "agent.py").exists()


def test_a_valid_name_is_written_quoted_and_the_cd_hint_runs_in_a_shell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a folder whose parents hold a space and a quote: the hint must still be one shell word
    where = tmp_path / "it's a place" / "My.Agent-2"
    where.parent.mkdir()
    assert main(["new", str(where)]) == 0
    out = capsys.readouterr().out
    meta = tomllib.loads((where / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["name"] == "My.Agent-2"
    assert meta["tool"]["setuptools"]["packages"]["find"]["include"] == ["my_agent_2*"]
    for source in (where / "my_agent_2").glob("*.py"):
        ast.parse(source.read_text(encoding="utf-8"))
    hint = next(line for line in out.splitlines() if line.startswith("next: cd "))
    cd = hint.removeprefix("next: ").split(" && ")[0]
    assert cd == f"cd {shlex.quote(str(where))}"
    done = subprocess.run(["sh", "-c", f"{cd} && pwd"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == str(where), done.stderr
