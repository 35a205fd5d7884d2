"""Runs pytest and writes what it collected and how each test ended to a report file: the
workspace's ``run_test`` runs this file as a script, ``python -I``, inside the sandbox, with a
report path outside the workspace.

``python -I`` keeps the folder it runs in off ``sys.path`` while pytest is imported, so no
``pytest.py`` (or ``pluggy``, ``sitecustomize``) written there is loaded in its place; the
folder is put first on the path afterwards when the command was ``python -m pytest``, as
that command does. The report is written once pytest has returned: a run that ends early
(``os._exit``, a crash, a signal) leaves none, and the workspace counts that as a failure.

This file imports nothing of opdsl: it runs on opdsl's interpreter with no path of its own.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["Report", "main"]


class Report:
    """A pytest plugin that notes each collected test and how it ended."""

    def __init__(self) -> None:
        self.collected: list[str] | None = None
        self.outcomes: dict[str, str] = {}
        #: modules that failed or were skipped at collection
        self.collection: dict[str, str] = {}

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.collection[str(report.nodeid) or "(collection)"] = "error"
        elif report.skipped:
            self.collection[str(report.nodeid) or "(collection)"] = "skipped"

    def pytest_collection_finish(self, session: Any) -> None:
        self.collected = [str(item.nodeid) for item in session.items]

    def pytest_runtest_logreport(self, report: Any) -> None:
        node = str(report.nodeid)
        was = self.outcomes.get(node)
        if report.failed:
            self.outcomes[node] = "failed"
        elif was == "failed":
            return
        elif report.skipped:
            self.outcomes[node] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        elif report.when == "call" and was is None:
            self.outcomes[node] = "xpassed" if hasattr(report, "wasxfail") else "passed"


def main(argv: list[str]) -> int:
    """``REPORT MODE ARGS...``: run pytest with ARGS, then write the report to REPORT.
    ``MODE`` is ``module`` (the command was ``python -m pytest``) or ``script``."""
    path, mode, args = argv[0], argv[1], argv[2:]
    try:
        import pytest
    except ImportError as exc:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"error": f"pytest cannot be imported by {sys.executable}: {exc}"}, f)
        return 4
    if mode == "module":
        sys.path.insert(0, os.getcwd())
    report = Report()
    code = pytest.main(args, plugins=[report])
    with open(path, "w", encoding="utf-8") as f:
        json.dump(
            {
                "exit": int(code),
                "collected": report.collected,
                "outcomes": report.outcomes,
                "collection": report.collection,
            },
            f,
        )
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
