"""The opdsl pytest plugin (installed with opdsl, enabled through its entry point).

Fixtures:

- ``opdsl_scripted``: ``opdsl_scripted([(expect(...), answer), ...]).run(program, ...)``, the
  scripted interpreter.
- ``opdsl_cassette``: ``opdsl_cassette.run(program, *args, model=..., tools=...)`` replays the
  program from a cassette, an exported run committed next to the test in
  ``cassettes/<test name>.jsonl``. With ``pytest --opdsl-record``, a missing cassette is
  recorded again (missing or not) by running the program live with the handlers given, and
  the run lists the cassettes it wrote; without it, a missing cassette fails the test and
  says how to record it. A replay calls the program with the test's own arguments, so a
  change in what they make it ask for fails as a divergence.

Option: ``--opdsl-journals DIR`` makes each exported run in ``DIR`` a test that replays it
against the code as it is now (``_journals``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, final

import pytest

from interpreters._api import run
from interpreters._durable import replay
from interpreters.journal import MemoryJournal, export_run, import_run
from interpreters.models._base import Model
from interpreters.runtime._driver import RunResult
from interpreters.testing._journals import add_journals_option, pytest_collection_modifyitems
from interpreters.testing._scripted import Answer, Matcher, ScriptedInterpreter
from interpreters.tools._bound import ToolLike
from state import CRDTModel

__all__ = [
    "Cassette",
    "opdsl_cassette",
    "opdsl_scripted",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_terminal_summary",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opdsl")
    group.addoption(
        "--opdsl-record",
        action="store_true",
        default=False,
        help="record opdsl cassettes again (new or existing) by running their programs live",
    )
    add_journals_option(group)


@final
class Cassette:
    """Replays programs from recorded runs stored next to the test."""

    def __init__(self, directory: Path, test_name: str, nodeid: str, record: bool) -> None:
        self.directory = directory
        self.test_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)
        self.nodeid = nodeid
        self.record = record
        #: the cassettes this test wrote (``--opdsl-record``)
        self.written: list[Path] = []

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
    ) -> RunResult[Any]:
        path = self.path(name)
        if path.exists() and not self.record:
            journal = MemoryJournal()
            record = import_run(journal, path.read_text(encoding="utf-8"), source=str(path))
            # the program is called as the test calls it now: an argument that changes what
            # it asks for is a divergence, as in any replay
            # the cassette is a file: the code it runs is the test's (its program, its state)
            return replay(
                record.run_id,
                db=journal,
                program=program,
                args=args,
                kwargs=kwargs,
                state_type=None if state is None else type(state),
            )
        if not self.record:
            pytest.fail(
                f"no opdsl cassette {path}; record it by running the test once with live handlers: "
                f"pytest {self.nodeid} --opdsl-record",
                pytrace=False,
            )
        journal = MemoryJournal()
        result = run(
            program, *args, model=model, tools=tools, state=state, db=journal, kwargs=kwargs
        )
        if result.status == "completed":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(export_run(journal, result.run_id), encoding="utf-8")
            self.written.append(path)
        return result


_WRITTEN = pytest.StashKey[list[Path]]()


@pytest.fixture
def opdsl_cassette(request: pytest.FixtureRequest) -> Iterator[Cassette]:
    """Replay a program from its cassette (``--opdsl-record`` records it again, live)."""
    test_file = Path(str(request.node.fspath))
    cassette = Cassette(
        test_file.parent / "cassettes",
        request.node.name,
        request.node.nodeid,
        bool(request.config.getoption("--opdsl-record")),
    )
    yield cassette
    request.config.stash.setdefault(_WRITTEN, []).extend(cassette.written)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say which cassettes ``--opdsl-record`` wrote."""
    written = config.stash.get(_WRITTEN, [])
    if config.getoption("--opdsl-record", default=False):
        terminalreporter.write_sep("-", f"opdsl: {len(written)} cassette(s) recorded")
        for path in written:
            terminalreporter.write_line(f"  wrote {path}")


@pytest.fixture
def opdsl_scripted() -> Callable[[Sequence[tuple[Matcher, Answer]]], ScriptedInterpreter]:
    """``opdsl_scripted(script)`` is a :class:`ScriptedInterpreter` over ``script``."""
    return ScriptedInterpreter
