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


RUN_SCRIPTED = """
import sys
from interpreters import MemoryJournal, ScriptedModel, run
from op import Op, infer

def hello(task: str) -> Op[str]:
    reply = yield from infer(task)
    return reply.text

assert run(hello, "hi", model=ScriptedModel(["done"]), db=MemoryJournal()).value == "done"
print(" ".join(m for m in ("httpx", "httpcore", "git", "rich") if m in sys.modules))
"""


def test_a_run_with_a_scripted_model_and_no_workspace_loads_no_http_or_git() -> None:
    out = subprocess.run(
        [sys.executable, "-c", RUN_SCRIPTED], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == ""


def _room(module: str) -> str:
    """The room a module is in: a top-level package, a sub-package of ``interpreters``, or a
    module of ``interpreters``' own (``interpreters._api``), each a room of its own."""
    parts = module.split(".")
    if parts[0] == "interpreters" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room_imports(root: Path, packages: tuple[str, ...]) -> dict[tuple[str, str], list[str]]:
    """(importing room, imported room): the imports that make that edge, every import counted
    (a function's own too), except those only a type checker runs (``if TYPE_CHECKING:``)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            me = _module_name(root, path)
            # what a relative import is relative to: the package itself, or the module's own
            here = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            typing_only = {
                id(n)
                for block in ast.walk(tree)
                if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                for n in ast.walk(block)
            }
            for node in ast.walk(tree):
                if id(node) in typing_only:
                    continue
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = here[: len(here) - node.level + 1] if node.level else []
                    targets = [".".join([*base, *([node.module] if node.module else [])])]
                else:
                    continue
                for target in targets:
                    a, b = _room(me), _room(target)
                    if target.split(".")[0] in packages and a != b:
                        edges.setdefault((a, b), []).append(f"{me} -> {target}")
    return edges


def _cycles(root: Path, packages: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """Pairs of rooms that import each other, each with one import either way."""
    edges = _room_imports(root, packages)
    return {
        (a, b): f"{edges[a, b][0]}; {edges[b, a][0]}" for a, b in edges if a < b and (b, a) in edges
    }


# rooms that still import each other, through files being reshaped elsewhere: each is a known
# debt, and the test fails once it is paid, so that the entry goes
KNOWN_CYCLES: set[tuple[str, str]] = set()


def test_no_two_rooms_import_each_other() -> None:
    cycles = _cycles(ROOT, ("op", "state", "interpreters", "programs"))
    assert set(cycles) == KNOWN_CYCLES, "\n".join(
        f"{a} <-> {b}: {w}" for (a, b), w in cycles.items()
    )


def test_the_cycle_check_sees_a_cycle_and_only_one(tmp_path: Path) -> None:
    for room, other in (("a", "b"), ("b", "a"), ("c", "a")):
        (tmp_path / room).mkdir()
        (tmp_path / room / "__init__.py").write_text(f"from {other} import x\n")
    (tmp_path / "a" / "_own.py").write_text("from . import x\nfrom .. import b\n")
    assert _cycles(tmp_path, ("a", "b", "c")) == {("a", "b"): "a -> b; b -> a"}
    assert _room("interpreters.models._http") == "interpreters.models"
    assert _room("interpreters._api") == "interpreters._api"


OWN_SQLITE3 = "# sqlite3 on purpose"
"""The mark of a line that opens a file with Python's sqlite3 where it cannot harm a journal:
a file made as opdsl 0.3.0 made them, closed before opdsl opens it; code run in a process of
its own; the hazard's own test."""


def _own_sqlite3(path: Path) -> list[str]:
    """The lines of ``path`` that open a file with Python's sqlite3, unmarked."""
    return [
        f"{path.name}:{n}: {line.strip()}"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "sqlite3.connect(" in line and OWN_SQLITE3 not in line
    ]


def test_tests_look_into_journals_through_the_journals_own_sqlite() -> None:
    """Python's sqlite3 closing a journal this process's journal has open deletes the WAL
    under it (``tests.helpers.RawJournal`` says why): a test that did so failed at random."""
    here = Path(__file__).resolve()
    bad = [b for p in sorted((ROOT / "tests").rglob("*.py")) if p != here for b in _own_sqlite3(p)]
    assert not bad, "\n".join(bad)


def test_the_sqlite3_rule_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "test_x.py"
    bad.write_text(f"a = sqlite3.connect(db)\nb = sqlite3.connect(db)  {OWN_SQLITE3}\n")
    assert _own_sqlite3(bad) == ["test_x.py:1: a = sqlite3.connect(db)"]
