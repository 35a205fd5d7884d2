"""Every test runs in its own empty working directory, so the default journal
(``.opdsl/runs.db``) and any file a test writes stay inside it; runs are sealed with a key
of the test session's own (the processes the tests start use it too), never the user's."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ["OPDSL_SEAL_KEY"] = str(Path(tempfile.mkdtemp(prefix="opdsl-seal-")) / "seal.key")


@pytest.fixture(autouse=True)
def _own_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPDSL_DB", raising=False)


pytest_plugins = ["pytester"]
