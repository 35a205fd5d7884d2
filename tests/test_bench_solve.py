"""The solve-rate bench (``make bench-solve``) measures what it says: each task's bug makes
its tests fail and undoing it makes them pass, and the Coder's figures are read from its run's
journal. The real model is not needed: a loopback server plays it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.servers import ScriptedServer, openai, openai_calls

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _solve() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_solve", BENCH / "solve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


solve = _solve()


@pytest.mark.parametrize("task", solve.TASKS, ids=lambda t: t.name)
def test_each_task_fails_with_its_bug_and_passes_without(task: Any, tmp_path: Path) -> None:
    assert solve.check(task, tmp_path / "repo") == (True, True)
    assert task.issue


def test_the_check_command_says_which_task_is_broken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    harmless = solve.Task("bisect", ("if a[mid] < x:", "if a[mid] < x:  # no bug"))
    assert solve._check([harmless]) == 1
    assert "bisect       fails with the bug: False  passes without: True" in capsys.readouterr().out


def test_an_agent_that_edits_the_tests_gains_nothing(tmp_path: Path) -> None:
    task = next(t for t in solve.TASKS if t.name == "bisect")
    repo = solve.make_repo(task, tmp_path / "repo")
    (repo / "tests" / "test_bisect.py").write_text("def test_nothing():\n    pass\n")
    assert not solve.passes(task, repo)


def test_a_task_whose_bug_is_not_in_its_module_is_refused(tmp_path: Path) -> None:
    task = solve.Task("bisect", ("no such line", "x"))
    with pytest.raises(SystemExit, match="'no such line' is not in bisect.py"):
        solve.make_repo(task, tmp_path / "repo")


def test_the_coder_row_is_read_from_its_journal(tmp_path: Path) -> None:
    task = next(t for t in solve.TASKS if t.name == "bisect")
    repo = solve.make_repo(task, tmp_path / "repo")
    fix = {"path": "lib/bisect.py", "old": "if a[mid] <= x:", "new": "if a[mid] < x:"}
    answers = [lambda r: openai_calls(r, "c", ("edit_file", fix))]
    answers += [openai("Fixed bisect_left.", usage=(10, 5, 0))] * 8
    with ScriptedServer(answers) as server:
        outcome = solve.run_coder(task, repo, server.url, tmp_path, "tools")
        requests = len(server.requests)
    assert outcome.solved, outcome
    assert outcome.ended == "committed"
    assert outcome.calls == requests >= 3  # the fix, its end, the commit message
    assert outcome.tokens == 15 * requests
    log = solve._git(repo, "log", "--format=%s")
    assert len(log.splitlines()) == 2, log


def test_the_peer_driver_is_valid_python() -> None:
    compile(solve.PEER_DRIVER, "peer", "exec")  # it runs in mini-swe-agent's own virtualenv


def test_the_coder_row_in_propose_mode_through_opdsl_run(tmp_path: Path) -> None:
    """``--arg work_mode=propose`` and ``--arg propose_params=...`` as the README writes them."""
    task = next(t for t in solve.TASKS if t.name == "bisect")
    repo = solve.make_repo(task, tmp_path / "repo")
    fixed = "Line 88: it goes past equal items.\n```python\n        if a[mid] < x:\n```"
    answers = [openai(fixed, usage=(10, 5, 0))] + [openai("Fix bisect_left", usage=(10, 5, 0))] * 4
    with ScriptedServer(answers) as server:
        outcome = solve.run_coder(task, repo, server.url, tmp_path, "propose")
        asked = server.requests[0]
    assert outcome.solved and outcome.ended == "committed", outcome
    assert outcome.calls == 2  # the fix, then the commit message
    assert "line numbers on the left" in asked["messages"][-1]["content"] and "tools" not in asked
