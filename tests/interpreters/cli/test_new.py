"""`opdsl new` with paths it must refuse: nothing is written, and the error says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from interpreters.cli import main


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("os", "would shadow the module 'os'"),
        ("interpreters", "would shadow the module 'interpreters'"),
        ("123abc", "cannot name a Python package"),
        ("class", "cannot name a Python package"),
        ("---", "cannot name a Python package"),
    ],
)
def test_names_that_cannot_be_packages_are_refused(
    name: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opdsl: error: ") and message in err, err
    assert not (tmp_path / name).exists()


def test_an_existing_folder_or_file_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = tmp_path / "mine"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    assert main(["new", str(full)]) == 2
    assert (
        "already exists and is not an empty folder; nothing was written" in capsys.readouterr().err
    )
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    assert main(["new", str(a_file)]) == 2
    assert a_file.read_text() == "x"
    empty = tmp_path / "empty-ok"
    empty.mkdir()
    assert main(["new", str(empty)]) == 0
    assert (empty / "empty_ok" / "agent.py").exists()
