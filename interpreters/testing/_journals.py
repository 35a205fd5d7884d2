"""Real runs as regression tests: ``pytest --opdsl-journals DIR`` makes each exported run in
``DIR`` (``*.jsonl``, as ``opdsl export`` writes them; subfolders too) a test that replays it
against the code as it is now, as ``opdsl check`` does. A run that diverges fails with the
divergence (address, source line, nearest checkpoint, the diff); a run in flight passes while
it would resume where it stands.

The files are the project's own, so each runs the program it names, imported by that name
(unlike ``opdsl check``, which runs only code named on its command line).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, final

import pytest

__all__ = ["add_journals_option", "pytest_collection_modifyitems"]

OPTION = "--opdsl-journals"


def add_journals_option(group: Any) -> None:
    """Add ``--opdsl-journals DIR`` to the plugin's group of options."""
    group.addoption(
        OPTION,
        action="append",
        default=[],
        metavar="DIR",
        help="make each exported run (*.jsonl) in DIR a test that replays it against the "
        "code as it is now (again for more folders)",
    )


@final
class JournalRun(pytest.Item):
    """One exported run, replayed against the code as it is now."""

    def __init__(self, *, path: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_path = path

    def runtest(self) -> None:
        from interpreters._checking import acheck_run, exported_runs
        from interpreters.journal import JournalError
        from interpreters.journal._portable import read_export
        from interpreters.runtime._sync import blocking

        try:
            text = self.run_path.read_text(encoding="utf-8")
            program = read_export(text, source=str(self.run_path)).run.program
        except (OSError, UnicodeDecodeError, JournalError) as exc:
            pytest.fail(f"{self.run_path}: {exc}", False)
        # the project's own file: the program it names, by that name
        (stored,) = exported_runs([self.run_path], [program])
        checked = blocking(
            lambda: acheck_run(stored.journal, stored.run_id, program=stored.program)
        )
        if not checked.ok:
            pytest.fail("\n".join([checked.line(), *(f"    {d}" for d in checked.diff)]), False)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.run_path, None, f"opdsl run {self.run_path.name}"


@final
class JournalFolder(pytest.Collector):
    """The exported runs of one folder given to ``--opdsl-journals``."""

    def __init__(self, *, folder: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.folder = folder

    def collect(self) -> Iterator[pytest.Item]:
        if not self.folder.is_dir():
            raise pytest.UsageError(f"{OPTION} {self.folder}: no such folder")
        for path in sorted(self.folder.rglob("*.jsonl")):
            name = path.relative_to(self.folder).as_posix()
            yield JournalRun.from_parent(self, name=name, path=path, nodeid=f"{self.nodeid}/{name}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add a test for each exported run of the folders ``--opdsl-journals`` names (before
    ``-k`` and ``-m`` choose among the tests)."""
    for folder in config.getoption(OPTION, default=[]) or []:
        path = Path(folder).resolve()
        try:  # named as pytest names files: from the root folder
            shown = path.relative_to(config.rootpath).as_posix()
        except ValueError:
            shown = path.as_posix()
        collector = JournalFolder.from_parent(session, name=shown, folder=path, nodeid=shown)
        items.extend(collector.collect())
