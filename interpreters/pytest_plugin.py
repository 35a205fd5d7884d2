"""The opdsl pytest plugin (installed with opdsl, enabled through its entry point).

Fixtures:

- ``opdsl_scripted``: ``opdsl_scripted([(expect(...), answer), ...]).run(program, ...)``, the
  scripted interpreter.
- ``opdsl_cassette``: ``opdsl_cassette.run(program, *args, model=..., tools=...)`` replays the
  program from a cassette, an exported run committed next to the test in
  ``cassettes/<test name>.jsonl``. With ``pytest --opdsl-record``, a missing cassette is
  recorded by running the program live with the handlers given; without it, a missing
  cassette fails the test and says how to record it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, final

import pytest

from interpreters._api import run
from interpreters._driver import RunResult
from interpreters._durable import replay
from interpreters._journal import MemoryJournal, export_run, import_run
from interpreters._models import Model
from interpreters._scripted import Answer, Matcher, ScriptedInterpreter
from interpreters._tools import ToolLike
from state import CRDTModel

__all__ = ["Cassette", "opdsl_cassette", "opdsl_scripted", "pytest_addoption"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opdsl")
    group.addoption(
        "--opdsl-record",
        action="store_true",
        default=False,
        help="record missing opdsl cassettes by running their programs live",
    )


@final
class Cassette:
    """Replays programs from recorded runs stored next to the test."""

    def __init__(self, directory: Path, test_name: str, nodeid: str, record: bool) -> None:
        self.directory = directory
        self.test_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)
        self.nodeid = nodeid
        self.record = record

    def path(self, name: str | None = None) -> Path:
        stem = self.test_name if name is None else f"{self.test_name}-{name}"
        return self.directory / f"{stem}.jsonl"

    def run(
        self,
        program: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        model: str | Model | None = None,
        tools: Iterable[ToolLike] = (),
        state: CRDTModel | None = None,
        **kwargs: Any,
    ) -> RunResult:
        path = self.path(name)
        if path.exists():
            journal = MemoryJournal()
            record = import_run(journal, path.read_text(encoding="utf-8"), source=str(path))
            return replay(record.run_id, db=journal, program=program)
        if not self.record:
            pytest.fail(
                f"no opdsl cassette {path}; record it by running the test once with live handlers: "
                f"pytest {self.nodeid} --opdsl-record",
                pytrace=False,
            )
        journal = MemoryJournal()
        result = run(program, *args, model=model, tools=tools, state=state, db=journal, kwargs=kwargs)
        if result.status == "completed":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(export_run(journal, result.run_id), encoding="utf-8")
        return result


@pytest.fixture
def opdsl_cassette(request: pytest.FixtureRequest) -> Cassette:
    """Replay a program from its cassette (``--opdsl-record`` records a missing one)."""
    test_file = Path(str(request.node.fspath))
    return Cassette(
        test_file.parent / "cassettes",
        request.node.name,
        request.node.nodeid,
        bool(request.config.getoption("--opdsl-record")),
    )


@pytest.fixture
def opdsl_scripted() -> Callable[[Sequence[tuple[Matcher, Answer]]], ScriptedInterpreter]:
    """``opdsl_scripted(script)`` is a :class:`ScriptedInterpreter` over ``script``."""
    return ScriptedInterpreter
