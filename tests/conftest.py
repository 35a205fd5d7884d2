"""Every test runs in its own empty working directory, so the default journal
(``.opdsl/runs.db``) and any file a test writes stay inside it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _own_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPDSL_DB", raising=False)


pytest_plugins = ["pytester"]
