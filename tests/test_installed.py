"""opdsl as a user gets it: the wheel and the sdist built from the checkout, the wheel
installed into a fresh virtualenv outside it, and there: `opdsl --version`, `opdsl demo`, the
README's quickstart, the Coder with a scripted model, `opdsl new`, and a user's own pytest file
using the plugin. Needs the package index for opdsl's dependencies (as a user's install does)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.helpers import sample_repo

ROOT = Path(__file__).resolve().parent.parent
VERSION = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)  # type: ignore[union-attr]


def sh(
    *argv: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, (
        f"{' '.join(map(str, argv))} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    return out


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("dist")
    # the wheel is built from the sdist, which shows the sdist holds what building needs
    sh(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT, cwd=ROOT)
    wheel = next(out.glob("opdsl-*.whl"))
    sdist = next(out.glob("opdsl-*.tar.gz"))
    return wheel, sdist


@pytest.fixture(scope="module")
def user(
    dists: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, str]]:
    """A fresh virtualenv with the wheel (and pytest), and a folder outside the checkout."""
    home = tmp_path_factory.mktemp("user")
    sh(sys.executable, "-m", "venv", home / "venv", cwd=home)
    sh(home / "venv" / "bin" / "pip", "install", "-q", dists[0], "pytest", "mypy", cwd=home)
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "OPDSL_DB")
    }
    env["PATH"] = f"{home / 'venv' / 'bin'}:{env['PATH']}"
    return home, env


def test_the_distributions_hold_what_they_must(dists: tuple[Path, Path]) -> None:
    wheel, sdist = dists
    with zipfile.ZipFile(wheel) as zipped:
        names = set(zipped.namelist())
    # every file the code opens at run time: every non-Python file of the packages
    needed = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "interpreters").rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    assert "interpreters/cli/demo/session.json" in needed and "interpreters/prices.json" in needed
    missing = sorted(set(needed) - names)
    assert not missing, f"package data missing from the wheel: {missing}"
    assert any(n.endswith("licenses/LICENSE") or n.endswith("/LICENSE") for n in names)
    assert all(f"{pkg}/py.typed" in names for pkg in ("op", "state", "interpreters", "programs"))
    with tarfile.open(sdist) as tarred:
        members = {n.split("/", 1)[1] for n in tarred.getnames() if "/" in n}
    for want in (
        "LICENSE",
        "CHANGELOG.md",
        "Makefile",
        "constraints.txt",  # the Makefile installs with it
        "pyproject.toml",
        "tests/test_installed.py",
        "tests/fixtures/journals/v0.1.0.db",
        "tests/fixtures/fake_cli/claude",
        "interpreters/cli/demo/session.json",
    ):
        assert want in members, want


def test_the_installed_command_and_the_demo(user: tuple[Path, dict[str, str]]) -> None:
    home, env = user
    assert sh("opdsl", "--version", cwd=home, env=env).stdout.strip() == f"opdsl {VERSION}"
    demo = sh("opdsl", "demo", cwd=home, env=env, timeout=300)
    assert "identical" in demo.stdout and "DIFFERENT" not in demo.stdout


def test_the_readme_quickstart_and_the_coder_installed(
    user: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    home, env = user
    quickstart = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    (tmp_path / "quickstart.py").write_text(quickstart)
    out = sh("python", "quickstart.py", cwd=tmp_path, env=env).stdout
    assert "completed A short file." in out
    repo = sample_repo(tmp_path)
    fix = {"path": "calc.py", "old": "return a - b", "new": "return a + b"}
    answers = [
        {"tool_calls": [{"id": "c1", "name": "edit_file", "arguments": fix}]},
        "Fixed add().",
        "Fix add()\n\nIt subtracted.",
    ]
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    ran = sh(
        "opdsl",
        "run",
        "programs.coder:coder",
        "--arg",
        f"repo={repo}",
        "--arg",
        "task=Make the tests pass",
        "--model",
        "scripted:answers.json",
        "--quiet",
        cwd=tmp_path,
        env=env,
    )
    assert json.loads(ran.stdout.splitlines()[-1])["ok"] is True


def test_a_users_own_tests_with_the_plugin_and_opdsl_new(
    user: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    home, env = user
    (tmp_path / "test_mine.py").write_text(
        "from op import Op, infer, tool\n"
        "from interpreters import ScriptedModel, expect\n\n"
        "def plan(goal: str) -> Op[str]:\n"
        "    reply = yield from infer(f'Plan: {goal}')\n"
        "    return reply.text\n\n"
        "def test_scripted(opdsl_scripted):\n"
        "    assert opdsl_scripted([(expect('infer'), 'a plan')]).run(plan, 'x').value == 'a plan'\n\n"
        "def test_cassette(opdsl_cassette):\n"
        "    assert opdsl_cassette.run(plan, 'ship', model=ScriptedModel(['shipped'])).value == 'shipped'\n"
    )
    sh(
        "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--opdsl-record",
        cwd=tmp_path,
        env=env,
    )
    assert (tmp_path / "cassettes" / "test_cassette.jsonl").exists()
    sh("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=tmp_path, env=env)
    # opdsl new, then the commands its own README gives, as written: install, tests, mypy
    sh("opdsl", "new", "my-agent", cwd=tmp_path, env=env)
    project = tmp_path / "my-agent"
    readme = (project / "README.md").read_text()
    block = re.findall(r"```sh\n(.*?)```", readme, re.S)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["pip install -e '.[test]'", "pytest", "mypy my_agent tests"]
    for command in commands:
        sh("bash", "-c", command, cwd=project, env=env)


def _extras() -> list[str]:
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get(
        "optional-dependencies", {}
    )
    return sorted(name for name in declared if name != "test")


@pytest.mark.parametrize("extra", _extras())
def test_each_extra_installs_on_its_own(
    extra: str, dists: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    # every optional extra (opdsl[temporal], opdsl[otel], ...) in a fresh virtualenv of its own;
    # an empty list until one is declared, and then each is tried once here
    home = tmp_path_factory.mktemp(f"extra-{extra}")
    sh(sys.executable, "-m", "venv", home / "venv", cwd=home)
    sh(home / "venv" / "bin" / "pip", "install", "-q", f"{dists[0]}[{extra}]", cwd=home)
    sh(home / "venv" / "bin" / "opdsl", "--version", cwd=home)
    if extra == "mcp":
        # what the extra is for: the MCP server Claude Code starts, run by path as opdsl does
        check = (
            "import runpy, sys\n"
            "from interpreters.agents import _bridge\n"
            "assert _bridge.mcp_problem() is None, _bridge.mcp_problem()\n"
            "runpy.run_path(str(_bridge.SHIM), run_name='not_main')\n"
            "print('shim ok')\n"
        )
        out = sh(home / "venv" / "bin" / "python", "-c", check, cwd=home)
        assert out.stdout.strip() == "shim ok"
