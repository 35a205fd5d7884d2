"""op, state and programs do no I/O, and programs never import an interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE = ["op", "state", "programs"]
# modules that reach the world: network, files, processes, threads, event loops, git, SQL
IO_MODULES = {
    "anyio",
    "asyncio",
    "trio",
    "httpx",
    "httpcore",
    "socket",
    "ssl",
    "sqlite3",
    "apsw",
    "subprocess",
    "git",
    "threading",
    "multiprocessing",
    "urllib",
    "http",
    "requests",
    "shutil",
    "tempfile",
    "io",
    "os",
    "pathlib",
    "glob",
    "time",
    "random",
    "uuid",
    "datetime",
    "signal",
    "select",
    "interpreters",
    "rich",
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("package", PURE)
def test_pure_packages_import_no_io(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, module in _imports(path):
            if module.split(".")[0] in IO_MODULES:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not bad, "\n".join(bad)


def test_state_does_not_import_op() -> None:
    for path in (ROOT / "state").rglob("*.py"):
        assert all(m.split(".")[0] != "op" for _, m in _imports(path)), path


def test_importing_pure_packages_loads_no_io_library() -> None:
    code = (
        "import sys, op, state, programs, programs.examples, programs.loop\n"
        "print(' '.join(sorted(m for m in ('anyio', 'httpx', 'sqlite3', 'apsw', 'git', 'interpreters', 'trio') if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == ""


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import sqlite3\nfrom interpreters import run\n")
    assert [m for _, m in _imports(bad)] == ["sqlite3", "interpreters"]


HEAVY = ("httpx", "git", "sqlite3", "apsw", "rich")


def test_the_runtime_imports_no_http_git_sqlite_or_console_library() -> None:
    bad = []
    for path in sorted((ROOT / "interpreters" / "runtime").rglob("*.py")):
        for line, module in _imports(path):
            if module.split(".")[0] in HEAVY or module.startswith(
                (
                    "interpreters.models._http",
                    "interpreters.tools._workspace",
                    "interpreters.journal._sqlite",
                    "interpreters._sinks",
                )
            ):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "statement",
    [
        "import interpreters.runtime",
        "from interpreters import ScriptedInterpreter, VirtualClock, MemoryJournal, expect",
    ],
)
def test_the_light_parts_load_no_heavy_library(statement: str) -> None:
    code = f"import sys\n{statement}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == ""
