"""The opdsl pytest plugin (installed with opdsl, enabled through its entry point).

Fixtures:

- ``opdsl_scripted``: ``opdsl_scripted([(expect(...), answer), ...]).run(program, ...)``, the
  scripted interpreter.
- ``opdsl_cassette``: ``opdsl_cassette.run(program, *args, model=..., tools=...)`` replays the
  program from a cassette, an exported run committed next to the test in
  ``cassettes/<test name>.jsonl``. With ``pytest --opdsl-record``, a cassette is recorded
  again (missing or not) by running the program live with the handlers given (everything
  ``run`` takes: ``answer=``, ``workspace=``, ``agents=``, ...), and the run lists the
  cassettes it wrote; without it, a missing cassette fails the test and says how to record
  it. A run that waits on ``ask`` is saved waiting; ``opdsl_cassette.answer(result, text)``
  answers it, recorded into a cassette of its own. A replay calls the program with the
  test's own arguments, so a change in what they make it ask for fails the test with the
  divergence alone.

Option: ``--opdsl-journals DIR`` makes each exported run in ``DIR`` a test that replays it
against the code as it is now (``_journals``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, final

import pytest

from interpreters._api import run
from interpreters._durable import replay, resume
from interpreters._live import AgentBackend
from interpreters._live import Answer as Answerer
from interpreters.journal import MemoryJournal, export_run, import_run
from interpreters.models._base import Model
from interpreters.runtime._clock import Clock
from interpreters.runtime._driver import RunResult
from interpreters.runtime._events import Sink
from interpreters.runtime._replay import Divergence
from interpreters.testing._journals import add_journals_option, pytest_collection_modifyitems
from interpreters.testing._scripted import Answer, Matcher, ScriptedInterpreter
from interpreters.tools._bound import ToolLike
from interpreters.tools._mcp import MCPServer
from interpreters.tools._workspace import Workspace
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
        self._runs: dict[str, _Ran] = {}
        #: recorded runs' journals and handlers, for :meth:`answer`
        self._live: dict[str, tuple[MemoryJournal, dict[str, Any]]] = {}

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
        agents: Mapping[str, AgentBackend] | None = None,
        state: CRDTModel | None = None,
        on_event: Sink | Iterable[Sink] | None = None,
        clock: Clock | None = None,
        seed: int | str | None = None,
        answer: Answerer | None = None,
        workspace: str | Path | Workspace | None = None,
        mcp: Mapping[str, MCPServer] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **program_kwargs: Any,
    ) -> RunResult[Any]:
        """Replay ``program(*args, **kwargs)`` from its cassette; with ``--opdsl-record``, run
        it live with everything :func:`interpreters.run` takes (its journal is the cassette)
        and save it. A run that ends waiting on ``ask`` is saved as it is (:meth:`answer`
        records what follows an answer); one given ``answer=`` keeps the answers it got. A
        replay that diverges fails the test with the divergence, and how to record again."""
        path = self.path(name)
        program_kwargs = {**dict(kwargs or {}), **program_kwargs}
        state_type = None if state is None else type(state)
        if path.exists() and not self.record:
            result = self._replay(path, program, args, program_kwargs, state_type)
        elif not self.record:
            self._missing(path)
        else:
            journal = MemoryJournal()
            tool_list = list(tools)
            result = run(
                program,
                *args,
                model=model,
                tools=tool_list,
                agents=agents,
                state=state,
                db=journal,
                on_event=on_event,
                clock=clock,
                seed=seed,
                answer=answer,
                workspace=workspace,
                mcp=mcp,
                kwargs=program_kwargs,
            )
            self._save(path, journal, result)
            live: dict[str, Any] = {
                "model": model,
                "tools": tool_list,
                "agents": agents,
                "clock": clock,
                "on_event": on_event,
                "workspace": workspace,
                "mcp": mcp,
            }
            self._live[result.run_id] = (journal, live)
        self._runs[result.run_id] = _Ran(program, path, state_type)
        return result

    def answer(
        self, waiting: RunResult[Any], text: str, *, at: str | None = None
    ) -> RunResult[Any]:
        """Answer a run of :meth:`run` that waits on ``ask`` (``at``: the question's address,
        when it waits on several) and go on: recorded live with ``--opdsl-record`` (with
        the handlers the run was given) into a cassette of its own beside the run's
        (``...-answer-N.jsonl``), replayed from it otherwise."""
        ran = self._runs.get(waiting.run_id)
        if ran is None:
            raise ValueError(f"run {waiting.run_id} was not run by this cassette")
        ran.answers += 1
        path = ran.path.with_name(f"{ran.path.stem}-answer-{ran.answers}.jsonl")
        if not self.record:
            if not path.exists():
                self._missing(path)
            return self._replay(path, ran.program, None, None, ran.state_type)
        journal, live = self._live[waiting.run_id]
        result = resume(
            waiting.run_id,
            db=journal,
            program=ran.program,
            answer=text,
            answer_at=at,
            state_type=ran.state_type,
            **live,
        )
        self._save(path, journal, result)
        return result

    def _replay(
        self,
        path: Path,
        program: Callable[..., Any],
        args: tuple[Any, ...] | None,
        kwargs: Mapping[str, Any] | None,
        state_type: type[CRDTModel] | None,
    ) -> RunResult[Any]:
        journal = MemoryJournal()
        record = import_run(journal, path.read_text(encoding="utf-8"), source=str(path))
        # the program is called as the test calls it now: an argument that changes what
        # it asks for is a divergence, as in any replay; the cassette is a file: the code it
        # runs is the test's (its program, its state)
        try:
            return replay(
                record.run_id,
                db=journal,
                program=program,
                args=args,
                kwargs=kwargs,
                state_type=state_type,
            )
        except Divergence as exc:
            diverged = exc
        # the divergence alone, raised outside the except block so nothing is chained to it
        pytest.fail(
            f"{diverged}\n(cassette {path}; if the change is meant, record it again: "
            f"pytest {self.nodeid} --opdsl-record)",
            pytrace=False,
        )

    def _missing(self, path: Path) -> NoReturn:
        pytest.fail(
            f"no opdsl cassette {path}; record it by running the test once with live handlers: "
            f"pytest {self.nodeid} --opdsl-record",
            pytrace=False,
        )

    def _save(self, path: Path, journal: MemoryJournal, result: RunResult[Any]) -> None:
        if result.status in ("completed", "waiting"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(export_run(journal, result.run_id), encoding="utf-8")
            self.written.append(path)


@dataclass
class _Ran:
    """What a cassette knows of a run it ran: to answer it later."""

    program: Callable[..., Any]
    path: Path
    state_type: type[CRDTModel] | None
    answers: int = 0


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
