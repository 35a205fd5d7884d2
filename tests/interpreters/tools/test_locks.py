"""Locks that hold whatever changes the workspace, and a step's test judged by what pytest
reports: in real repositories, with commands run for real inside bubblewrap.

Each attack of the review is run twice where it can be: through the plain ``run`` tool, where
it works (so the test cannot pass for a wrong reason), and through what a program trusts
(``run_test``, the locks), where it must not."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import pytest

from interpreters import Workspace
from interpreters.tools._sandbox import sandbox_problem
from op import ToolResult

pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None,
    reason=f"bubblewrap cannot run here: {sandbox_problem()} (make test installs it)",
)

GREET_RIGHT = 'def greet(name: str) -> str:\n    return "hello " + name\n'
GREET_WRONG = 'def greet(name: str) -> str:\n    return "bye " + name\n'
TEST_GREET = (
    "from greet import greet\n\n\ndef test_greet() -> None:\n"
    '    assert greet("Ada") == "hello Ada"\n'
)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "greet.py").write_text(GREET_WRONG)
    (root / "test_greet.py").write_text(TEST_GREET)
    (root / "tox.ini").write_text(FAST)
    return Workspace(root, allow=("python", "python3", "pytest"), timeout=60)


FAST = "[pytest]\naddopts = " + " ".join(
    f"-p no:{name}" for name in ("opdsl", "returns", "anyio", "hypothesispytest")
)
"""The repository's own pytest settings: without the plugins installed here (pytest starts
in a fifth of the time)."""


def run(ws: Workspace, argv: list[str]) -> ToolResult:
    return anyio.run(lambda: ws.run(argv))


def judge(ws: Workspace, argv: list[str]) -> ToolResult:
    return anyio.run(lambda: ws.run_test(argv))


PYTEST = ["python", "-m", "pytest", "-q"]

ATTACKS: dict[str, dict[str, str]] = {
    "a conftest.py that skips every test": {
        "conftest.py": (
            "import pytest\n\n\ndef pytest_collection_modifyitems(items):\n"
            "    for item in items:\n"
            '        item.add_marker(pytest.mark.skip(reason="later"))\n'
        )
    },
    "a conftest.py that forces exit status 0": {
        "conftest.py": "def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n"
    },
    "a conftest.py that ends the process with status 0": {
        "conftest.py": (
            "import os\n\n\ndef pytest_sessionfinish(session, exitstatus):\n    os._exit(0)\n"
        )
    },
    "pytest.ini with --collect-only": {"pytest.ini": FAST.replace("= ", "= --collect-only ")},
    "addopts='--co' in pyproject.toml": {
        "pyproject.toml": f'[tool.pytest.ini_options]\naddopts = "--co {FAST.split("= ")[1]}"\n'
    },
    "a pytest.py shadowing pytest under python -m pytest": {
        "pytest.py": "import sys\n\nsys.exit(0)\n"
    },
    "os._exit(0) at import of the module under test": {"greet.py": "import os\n\nos._exit(0)\n"},
    "the module under test skipping its test module": {
        "greet.py": 'import pytest\n\npytest.skip("not today", allow_module_level=True)\n',
        "test_other.py": "def test_other() -> None:\n    pass\n",
    },
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_wrong_module_never_passes_a_judged_pytest_run(ws: Workspace, attack: str) -> None:
    for name, content in ATTACKS[attack].items():
        (ws.root / name).write_text(content)
    fooled = run(ws, PYTEST)
    assert fooled.ok, fooled  # the attack works on the exit status
    judged = judge(ws, PYTEST)
    assert not judged.ok, (attack, judged)


def test_a_right_module_passes_saying_what_was_collected(ws: Workspace) -> None:
    wrong = judge(ws, PYTEST)  # wrong, and nothing else: it fails, saying which test
    assert not wrong.ok and "test_greet.py::test_greet (failed)" in (wrong.error or "")
    (ws.root / "greet.py").write_text(GREET_RIGHT)
    (ws.root / "test_more.py").write_text(
        "from greet import greet\n\n\ndef test_one() -> None:\n    assert greet('x')\n\n\n"
        "def test_two() -> None:\n    assert greet('y').startswith('hello')\n"
    )
    judged = judge(ws, PYTEST)
    assert judged.ok, judged
    assert judged.output.startswith("pytest: 3 collected, 3 passed")
    judged = judge(ws, ["pytest", "-q", "test_greet.py"])
    assert judged.ok and judged.output.startswith("pytest: 1 collected, 1 passed"), judged
    # what was not passed is named, with how it ended
    (ws.root / "test_more.py").write_text(
        "import pytest\n\n\n@pytest.mark.skip\ndef test_later() -> None:\n    pass\n"
    )
    judged = judge(ws, PYTEST)
    assert not judged.ok
    assert "pytest: 2 collected, 1 passed, exit code 0; not passed: " in (judged.error or "")
    assert "test_more.py::test_later (skipped)" in (judged.error or "")
    # nothing collected is not a pass
    (ws.root / "test_more.py").unlink()
    judged = judge(ws, [*PYTEST, "-k", "nothing_matches"])
    assert not judged.ok and "no test was collected" in (judged.error or ""), judged
    # a command that is not pytest is judged by its exit status, and still allowlisted
    assert judge(ws, ["python", "-c", "import greet"]).ok
    refused = judge(ws, ["sh", "-c", "true"])
    assert not refused.ok and "'sh' is not an allowed command" in (refused.error or "")


def test_a_report_that_never_comes_is_a_failure_that_says_why(ws: Workspace) -> None:
    (ws.root / "greet.py").write_text("import os\n\nos._exit(0)\n")
    judged = judge(ws, PYTEST)
    assert not judged.ok
    assert "pytest ended (exit code 0) without writing its report" in (judged.error or "")


def test_a_command_that_rewrites_a_locked_test_fails_and_the_test_is_put_back(
    ws: Workspace,
) -> None:
    ws.lock("test_greet.py")
    (ws.root / "notes.txt").write_text("mine")
    rewrite = (
        "open('test_greet.py', 'w').write('def test_ok():\\n    pass\\n');"
        "open('notes.txt', 'w').write('changed')"
    )
    result = run(ws, ["python", "-c", rewrite])
    assert not result.ok
    assert "the command changed locked files, which were put back: test_greet.py (changed)" in (
        result.error or ""
    )
    assert (ws.root / "test_greet.py").read_text() == TEST_GREET
    assert (ws.root / "notes.txt").read_text() == "changed"  # what is not locked stays
    # the program, checking after the turn, hears of it once
    checked = ws.check_locks()
    assert not checked.ok and "changed test_greet.py (changed)" in (checked.error or "")
    assert ws.check_locks().ok
    # removed, or replaced by a link: put back the same way
    for command in (
        "import os; os.remove('test_greet.py')",
        "import os; os.remove('test_greet.py'); os.symlink('notes.txt', 'test_greet.py')",
    ):
        result = run(ws, ["python", "-c", command])
        assert not result.ok and "test_greet.py (" in (result.error or ""), result
        assert not (ws.root / "test_greet.py").is_symlink()
        assert (ws.root / "test_greet.py").read_text() == TEST_GREET
    # the judged run is a command too: code under test that rewrites its test fails it
    (ws.root / "greet.py").write_text(
        "open('test_greet.py', 'w').write('def test_ok():\\n    pass\\n')\n" + GREET_WRONG
    )
    judged = judge(ws, PYTEST)
    assert not judged.ok and "test_greet.py (changed)" in (judged.error or "")
    assert (ws.root / "test_greet.py").read_text() == TEST_GREET


def test_a_locked_folder_swapped_for_a_link_is_seen_and_refused(ws: Workspace) -> None:
    root = ws.root
    (root / "handoff").mkdir()
    (root / "handoff" / "plan.json").write_text("{}")
    ws.lock("handoff/plan.json")
    # the folder moved aside and a link put in its place: the locked path is put back
    swap = "import os; os.rename('handoff', 'aside'); os.symlink('aside', 'handoff')"
    result = run(ws, ["python", "-c", swap])
    assert not result.ok and "handoff/plan.json (changed)" in (result.error or ""), result
    assert not (root / "handoff").is_symlink()
    assert (root / "handoff" / "plan.json").read_text() == "{}"
    # the file tools refuse a locked path by the name given, wherever it leads
    (root / "aside" / "plan.json").write_text("{}")
    (root / "other").symlink_to("aside")
    ws.lock("other/plan.json")
    refused = ws.write_file("other/plan.json", '{"forged": 1}')
    assert not refused.ok and "other/plan.json is locked" in (refused.error or "")


def test_a_change_made_outside_any_command_is_found_at_the_check(ws: Workspace) -> None:
    ws.lock("test_greet.py", runner=True)
    (ws.root / "test_greet.py").write_text("def test_ok():\n    pass\n")
    (ws.root / "conftest.py").write_text("")
    checked = ws.check_locks()
    assert not checked.ok
    assert "found changed: conftest.py (created), test_greet.py (changed)" in (checked.error or "")
    assert (ws.root / "test_greet.py").read_text() == TEST_GREET
    assert not (ws.root / "conftest.py").exists()


CONFIG = {
    "conftest.py": "",
    "tests/conftest.py": "",
    "pytest.ini": "[pytest]\n",
    ".pytest.ini": "[pytest]\n",
    "pytest.toml": "[pytest]\n",
    "sub/pytest.ini": "[pytest]\n",
    "sitecustomize.py": "",
    "usercustomize.py": "",
    "pytest.py": "",
    "pytest/__init__.py": "",
    "pluggy.py": "",
}


def test_the_runner_lock_keeps_how_tests_run(ws: Workspace) -> None:
    root = ws.root
    (root / "pyproject.toml").write_text('[project]\nname = "greet"\n')
    (root / "setup.cfg").write_text("[metadata]\nname = greet\n")
    (root / "tox.ini").write_text("[tox]\nenvlist = py311\n")
    ws.lock(runner=True)
    for name, content in sorted(CONFIG.items()):
        refused = ws.write_file(name, content)
        assert not refused.ok and f"{name} is locked" in (refused.error or ""), name
        assert not (root / name).exists()
    # of pyproject.toml, setup.cfg and tox.ini only the pytest settings are kept
    assert ws.write_file("pyproject.toml", '[project]\nname = "greeter"\n').ok
    for name, content in (
        (
            "pyproject.toml",
            '[project]\nname = "greeter"\n[tool.pytest.ini_options]\naddopts = "--co"\n',
        ),
        ("pyproject.toml", '[project]\nname = "greeter"\n[tool.pytest]\naddopts = ["--co"]\n'),
        ("pyproject.toml", "[project\n"),
        ("setup.cfg", "[metadata]\nname = greet\n[tool:pytest]\naddopts = --co\n"),
        ("tox.ini", "[tox]\nenvlist = py311\n[pytest]\naddopts = --co\n"),
        ("sub/setup.cfg", "[tool:pytest]\naddopts = --co\n"),
    ):
        refused = ws.write_file(name, content)
        assert not refused.ok and "its pytest settings are locked" in (refused.error or ""), (
            name,
            content,
        )
    os.link(root / "pyproject.toml", root / "alias.txt")
    assert not ws.write_file("alias.txt", "[tool.pytest]\n").ok
    # the same through a command: put back, and the command fails
    for name, content in (
        *CONFIG.items(),
        ("pyproject.toml", "[tool.pytest]\naddopts = ['--co']\n"),
    ):
        write = (
            f"import os; os.makedirs(os.path.dirname({name!r}) or '.', exist_ok=True); "
            f"open({name!r}, 'w').write({content!r})"
        )
        result = run(ws, ["python", "-c", write])
        assert not result.ok and f"{name} (" in (result.error or ""), (name, result)
        assert not (root / name).exists() or name == "pyproject.toml"
    assert (root / "pyproject.toml").read_text() == '[project]\nname = "greeter"\n'
    # lifted, the same writes are allowed
    ws.unlock(runner=True)
    assert ws.write_file("conftest.py", "").ok
    assert ws.write_file("tox.ini", "[pytest]\n").ok


def test_pytest_settings_are_read_as_pytest_reads_them_or_more() -> None:
    from interpreters.tools._locks import pytest_settings

    assert pytest_settings("pyproject.toml", b'[project]\nname = "x"\n') == ""
    assert pytest_settings("pyproject.toml", b"[tool.pytest.ini_options]\nx = 1\n") != ""
    assert pytest_settings("a/pyproject.toml", b"[tool.pytest]\n") != ""
    assert pytest_settings("pyproject.toml", b"[tool").startswith("unreadable:")
    assert pytest_settings("setup.cfg", b"[metadata]\nname = x\n") == ""
    ini = b"[metadata]\nname = x\n[tool:pytest]\naddopts = -q\n  [indented]\n  more\n[other]\ny\n"
    kept = pytest_settings("setup.cfg", ini)
    assert "addopts = -q" in kept and "more" in kept and "y" not in kept.split("\n")
    assert pytest_settings("tox.ini", b"[PyTest]\nx = 1\n") != ""
