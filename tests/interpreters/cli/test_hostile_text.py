"""Text a run recorded, or a journal someone handed us, is shown as written by every command:
never read as rich markup, its terminal control codes made visible, and a malformed record
refused by ``import`` (or shown) rather than a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from interpreters.cli._main import main
from tests.fixtures.hostile_programs import MARKUP

PROGRAMS = "tests.fixtures.hostile_programs"
SHOWN = MARKUP.replace("\x1b", "\\x1b").replace("\x07", "\\x07")
"""``MARKUP`` as a command prints it."""


def opdsl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _no_terminal_codes(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text, repr(text)


def test_every_command_shows_markup_and_terminal_codes_as_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "runs.db")
    tools = ["--tools", f"{PROGRAMS}:shout", "--tools", f"{PROGRAMS}:refuse"]
    code, out, err = opdsl(
        capsys, "run", f"{PROGRAMS}:marked", "--arg", f"text={MARKUP}", *tools, "--db", db
    )
    assert code == 0, err  # the live console showed it all (ConsoleSink)
    assert f"◆ checkpoint {SHOWN}\n" in out and "tool failed: tool 'refuse' raised" in out
    assert out.endswith(f"{MARKUP}!\n")  # the value itself, piped: as it is
    code, _, err = opdsl(
        capsys, "run", f"{PROGRAMS}:failing", "--arg", f"text={MARKUP}", "--db", db
    )
    assert code == 1 and f"RuntimeError: {SHOWN}" in err
    _no_terminal_codes(err)
    first, second = (
        r[0] for r in sqlite3.connect(db).execute("SELECT run_id FROM runs ORDER BY rowid")
    )

    code, out, _ = opdsl(capsys, "show", first, "--db", db)
    assert code == 0 and f"│ {SHOWN}" in out  # the checkpoints' and the emit's names
    assert "refuse: tool 'refuse' raised ValueError: [/] [bold]b[/bold]" in out
    assert '"text":"[/] [bold]b[/bold] [link=javascript:alert(1)]l[/link] :smile: ' in out
    _no_terminal_codes(out)
    code, out, _ = opdsl(capsys, "show", second, "--db", db)
    assert code == 0 and f"error at address 1: RuntimeError: {SHOWN}" in out
    code, out, _ = opdsl(capsys, "checkpoints", first, "--db", db)
    assert out.split("\n")[:2] == [
        f"       1  {SHOWN}  completed",
        f"       5  {SHOWN}#2  completed",
    ]
    code, out, _ = opdsl(capsys, "tail", first, "--db", db)
    assert code == 0 and f"◆ checkpoint {SHOWN}\n" in out and f"• {SHOWN}" in out
    _no_terminal_codes(out)
    code, out, _ = opdsl(capsys, "diff", first, second, "--db", db)
    assert code == 1 and "[/] [bold]b[/bold] [link=javascript:alert(1)]l[/link]" in out
    _no_terminal_codes(out)
    code, out, _ = opdsl(capsys, "runs", "--db", db)
    assert code == 0 and first in out and second in out
