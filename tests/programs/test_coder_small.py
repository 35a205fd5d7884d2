"""The Coder with what a small model does: it edits before it reads, invents an edit's ``old``
text, overwrites a module with a line, writes a tool's result back into a file, stops without
a change, and gets stuck in a verify retry. Scripted models, real git repositories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import git
import pytest

from interpreters import MemoryJournal, ScriptedModel, run
from op import Budget, Message, Response, ToolCall, Usage
from op.effects import ModelRequest
from programs.coder import NOTHING_CHANGED, WORK_TOOLS, CoderConfig, CodeState, coder
from tests.helpers import sample_repo, sh

FIX = {"path": "calc.py", "old": "return a - b", "new": "return a + b"}
WRONG = {"path": "calc.py", "old": "return a - b", "new": "return a * b"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return sample_repo(tmp_path)


def call(name: str, args: dict[str, Any], n: int = 1) -> Response:
    return Response(
        tool_calls=(ToolCall(id=f"c{n}", name=name, arguments=args),),
        usage=Usage(input_tokens=100, output_tokens=20),
    )


def say(text: str) -> Response:
    return Response(text=text, usage=Usage(input_tokens=50, output_tokens=10))


MESSAGE = say("Fix add\n\nIt subtracted.")


def config(repo: Path, **kw: Any) -> CoderConfig:
    return CoderConfig(task="Make the tests pass.", repo=str(repo), **kw)


def last_tool_message(request: ModelRequest) -> Message:
    return next(m for m in reversed(request.messages) if m.role == "tool")


def test_before_its_first_call_the_model_has_the_failure_and_the_files_it_names(
    repo: Path,
) -> None:
    journal = MemoryJournal()
    model = ScriptedModel([call("edit_file", FIX), say("Fixed add()."), MESSAGE])
    result = run(coder, config(repo), model=model, state=CodeState(), db=journal)
    assert result.value.ok, result.value
    first = model.requests[0].messages[-1].content
    assert "The test step failed (exit code 1)" in first and "-1 != 5" in first, first
    # the failing test names only itself; the module it imports is shown first
    assert first.index("calc.py:\n```\n") < first.index("tests/test_calc.py:\n```\n"), first
    assert "    return a - b\n" in first and "def test_add(self) -> None:" in first
    assert "conftest.py" not in first
    # read through the tools, journaled, before the model was asked anything
    kinds = [
        (e.kind, json.loads(e.effect_json).get("name"))
        for e in sorted(
            journal.entries(result.run_id), key=lambda e: [int(p) for p in e.address.split(".")]
        )
        if e.kind in ("tool", "infer")
    ]
    first_infer = kinds.index(("infer", None))
    assert ("tool", "read_file") in kinds[:first_infer], kinds
    assert [t.name for t in model.requests[0].tools] == WORK_TOOLS


def test_a_big_module_is_shown_around_the_lines_the_failure_names(tmp_path: Path) -> None:
    # the layout of the solve bench's tasks: lib/<module>.py, tests/test_<module>.py
    root = tmp_path / "proj"
    (root / "lib").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "lib" / "__init__.py").write_text("")
    filler = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n\n" for i in range(150))
    (root / "lib" / "shapes.py").write_text(
        filler + "def area(w, h):\n    if w < 0:\n        raise ValueError('w')\n    return w * h\n"
    )
    (root / "tests" / "test_shapes.py").write_text(
        "from lib import shapes\n\n\ndef test_area():\n    assert shapes.area(0, 2) == 0\n"
        "    assert shapes.area(-1, 2) == -2\n"
    )
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    (root / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n")
    sh(root, "init", "-q", "-b", "main")
    sh(root, "add", "-A")
    sh(root, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "shapes")
    model = ScriptedModel([say("I cannot tell."), say("No change.")])
    cfg = CoderConfig(
        task="Negative widths are allowed.",
        repo=str(root),
        test=["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        show_chars=4_000,
        verify_retries=1,
    )
    out = run(coder, cfg, model=model, state=CodeState(), db=MemoryJournal()).value
    assert not out.ok and out.phase == "verify"
    first = model.requests[0].messages[-1].content
    assert len(first) < 4_600, len(first)
    # the traceback's line in lib/shapes.py, with the lines around it, and where the rest is
    assert "lib/shapes.py:\n```\n(lines " in first, first
    assert "        raise ValueError('w')" in first and "def helper_0" not in first
    assert "read the others with read_file, start_line and end_line" in first
    assert "lib/__init__.py" not in first  # empty: nothing to show


def test_an_invented_old_text_is_answered_with_the_nearest_lines(repo: Path) -> None:
    invented = {"path": "calc.py", "old": "return a-b", "new": "return a+b"}
    model = ScriptedModel(
        [call("edit_file", invented), call("edit_file", FIX, 2), say("Fixed."), MESSAGE]
    )
    out = run(
        coder, config(repo, show_failure=False), model=model, state=CodeState(), db=MemoryJournal()
    ).value
    assert out.ok, out
    refusal = last_tool_message(model.requests[1]).content
    assert "was not found" in refusal and "line 6 (" in refusal, refusal
    assert "\n    return a - b" in refusal


def test_write_file_does_not_shrink_a_module_the_model_has_not_read(repo: Path) -> None:
    before = (repo / "calc.py").read_text()
    overwrite = {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}
    model = ScriptedModel(
        [call("write_file", overwrite), call("edit_file", FIX, 2), say("Fixed."), MESSAGE]
    )
    out = run(
        coder, config(repo, show_failure=False), model=model, state=CodeState(), db=MemoryJournal()
    ).value
    assert out.ok, out
    refusal = last_tool_message(model.requests[1]).content
    assert "use edit_file" in refusal and "read it with read_file first" in refusal, refusal
    assert (repo / "calc.py").read_text() == before.replace("return a - b", "return a + b")


def test_a_tool_result_written_back_as_a_file_is_refused(repo: Path) -> None:
    def small_model(request: ModelRequest) -> Response:
        turns = sum(1 for m in request.messages if m.role == "assistant")
        if request.messages[0].content.startswith("Write a git commit message"):
            return MESSAGE
        if turns == 0:
            return call("edit_file", FIX)
        if turns == 1:  # what the edit answered, written back as the file
            echo = last_tool_message(request).content
            return call("write_file", {"path": "calc.py", "content": echo}, 2)
        if turns == 2:  # the same, framed as a call written as text is answered
            return call("write_file", {"path": "calc.py", "content": "Result of edit_file:\n"}, 3)
        return say("Fixed add().")

    model = ScriptedModel(small_model)
    out = run(coder, config(repo), model=model, state=CodeState(), db=MemoryJournal()).value
    assert out.ok, out
    for n in (2, 3):
        refusal = last_tool_message(model.requests[n]).content
        assert "refused: content is the result of an earlier edit_file call" in refusal, refusal
    assert "return a + b" in (repo / "calc.py").read_text()
    assert "def mul" in (repo / "calc.py").read_text()


def test_a_model_that_stops_before_changing_anything_is_asked_once(repo: Path) -> None:
    model = ScriptedModel(
        [say("The bug is in add: it subtracts."), call("edit_file", FIX), say("Fixed."), MESSAGE]
    )
    out = run(coder, config(repo), model=model, state=CodeState(), db=MemoryJournal()).value
    assert out.ok, out
    assert model.requests[1].messages[-1].content == NOTHING_CHANGED


def test_stuck_in_a_verify_retry_ends_that_retry_not_the_run(repo: Path) -> None:
    again = {"path": "calc.py", "old": "return a * b\n\n", "new": "return a + b\n\n"}
    model = ScriptedModel(
        [
            call("edit_file", WRONG),
            say("Done."),
            *[call("read_file", {"path": "calc.py"}, n) for n in range(3)],  # stuck
            call("edit_file", again, 4),
            say("Fixed add()."),
            MESSAGE,
        ]
    )
    journal = MemoryJournal()
    result = run(coder, config(repo, verify_retries=3), model=model, state=CodeState(), db=journal)
    assert result.value.ok, result.value
    assert "return a + b" in (repo / "calc.py").read_text()
    ended = [
        json.loads(e.effect_json)["data"]
        for e in journal.entries(result.run_id)
        if e.kind == "emit" and json.loads(e.effect_json)["name"] == "verify_retry_ended"
    ]
    assert len(ended) == 1 and ended[0]["attempt"] == 1 and "stuck" in ended[0]["reason"]


def test_the_verify_phase_spends_a_budget_of_its_own(repo: Path) -> None:
    before = (repo / "calc.py").read_text()
    model = ScriptedModel(
        [
            call("edit_file", WRONG),
            say("Done."),
            *[call("list_files", {"pattern": f"*{n}"}, n) for n in range(10)],
        ]
    )
    cfg = config(repo, verify_budget=Budget(model_calls=3), work_budget=Budget(model_calls=2))
    out = run(coder, cfg, model=model, state=CodeState(), db=MemoryJournal()).value
    assert (out.ok, out.phase) == (False, "verify"), out
    assert "the verify budget ran out (model_calls)" in (out.reason or ""), out
    assert len(model.requests) == 2 + 3
    assert (repo / "calc.py").read_text() == before


def test_a_failed_result_names_no_file_that_recovery_put_back(repo: Path) -> None:
    model = ScriptedModel(
        [
            call("write_file", {"path": "notes/plan.md", "content": "plan"}),
            call("edit_file", WRONG, 2),
            say("Done."),
        ]
    )
    out = run(
        coder, config(repo, verify_retries=1), model=model, state=CodeState(), db=MemoryJournal()
    ).value
    assert (out.ok, out.phase) == (False, "verify"), out
    assert out.files == [], "both files were put back"
    assert not (repo / "notes").exists()
    assert not git.Repo(repo).is_dirty(untracked_files=True)


def test_a_long_run_of_path_characters_is_scanned_in_linear_time() -> None:
    """A failure's output of one long run of path characters (a hostile or garbled test
    output) is read for the files it names in time that grows with it, not its square."""
    import time

    from programs.coder import _named_files

    started = time.monotonic()
    assert _named_files("a.b" * 10000, set(), "/r") == {}
    assert time.monotonic() - started < 5  # it took 42 s when it grew with the square
    listing = {"lib/shapes.py", "tests/test_shapes.py"}
    output = (
        "a.b" * 10000
        + ' tests/test_shapes.py::test_area FAILED\n  File "/r/lib/shapes.py", line 7\n'
        + "lib/shapes.py:9: AssertionError"
    )
    started = time.monotonic()
    named = _named_files(output, listing, "/r")
    assert time.monotonic() - started < 5  # it took 42 s when it grew with the square
    assert named == {"tests/test_shapes.py": [], "lib/shapes.py": [7, 9]}
