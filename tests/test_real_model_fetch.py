"""The real-model fetcher takes a built server from the build cache instead of building."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

FETCH = Path(__file__).resolve().parent / "real_model" / "fetch.py"


def test_a_kept_build_is_copied_not_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location("fetch_under_test", FETCH)
    assert spec is not None and spec.loader is not None
    fetch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch)
    cache = tmp_path / "cache"
    cache.mkdir()
    kept = cache / f"llama-server-{fetch.SOURCES.replace('==', '-')}"
    kept.write_bytes(b"built before")
    monkeypatch.setenv("OPDSL_BUILD_CACHE", str(cache))

    def no_build(folder: Path, server: Path) -> None:
        raise AssertionError("built again though a build was kept")

    monkeypatch.setattr(fetch, "_build", no_build)
    fetch.build_server(tmp_path / "model")
    assert (tmp_path / "model" / "llama" / "llama-server").read_bytes() == b"built before"

    kept.unlink()  # none kept: built, then kept under its own name (no partial left)

    def build(folder: Path, server: Path) -> None:
        server.write_bytes(b"built now")

    monkeypatch.setattr(fetch, "_build", build)
    fetch.build_server(tmp_path / "model")
    assert kept.read_bytes() == b"built now"
    assert sorted(p.name for p in cache.iterdir()) == [kept.name]
