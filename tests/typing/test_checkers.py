"""Files that must fail to type-check do fail, each with the error it is about."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
FAILING = sorted((HERE / "fail").glob("*.py"))
BIN = Path(sys.executable).parent


def _expected(path: Path, checker: str) -> str:
    match = re.search(rf"^# expect-{checker}: (.+)$", path.read_text(), re.M)
    assert match, f"{path.name} has no '# expect-{checker}:' line"
    return match.group(1).strip()


@pytest.mark.parametrize("path", FAILING, ids=lambda p: p.name)
def test_mypy_rejects(path: Path) -> None:
    out = subprocess.run(
        [str(BIN / "mypy"), "--strict", "--no-incremental", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert _expected(path, "mypy") in out.stdout, out.stdout


def test_pyright_rejects_each_file() -> None:
    out = subprocess.run(
        [str(BIN / "pyright"), *map(str, FAILING)], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 1, out.stdout + out.stderr
    for path in FAILING:
        lines = [
            line for line in out.stdout.splitlines() if path.name in line or line.startswith("    ")
        ]
        assert _expected(path, "pyright") in out.stdout, f"{path.name}:\n" + "\n".join(lines)


def test_the_passing_programs_pass_both() -> None:
    targets = [str(HERE / "pass" / "programs.py"), str(HERE / "pass" / "patched.py")]
    mypy = subprocess.run(
        [str(BIN / "mypy"), "--strict", *targets], capture_output=True, text=True, cwd=ROOT
    )
    assert mypy.returncode == 0, mypy.stdout
    pyright = subprocess.run(
        [str(BIN / "pyright"), *targets], capture_output=True, text=True, cwd=ROOT
    )
    assert pyright.returncode == 0, pyright.stdout
