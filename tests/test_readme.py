"""The README's code blocks run and print what they say."""

from __future__ import annotations

import contextlib
import io
import re
import sys
import types
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run_and_match_their_comments() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 2
    # the blocks run as one importable module, as a user's script would be
    module = types.ModuleType("readme_example")
    sys.modules["readme_example"] = module
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(README), "exec"), module.__dict__)
        # every "print(...)  # expected" line must print what its comment says
        expected = [m.group(1) for m in re.finditer(r"^print\(.*?\)\s+# (.+)$", block, re.M)]
        printed = out.getvalue().splitlines()
        for want in expected:
            assert want in printed, (want, printed)
        shown = re.findall(r"^# (\[.*\])$", block, re.M)
        for want in shown:
            assert want in printed, (want, printed)


def test_every_command_in_the_readme_table_exists() -> None:
    import pytest

    from interpreters.cli._main import main

    text = README.read_text(encoding="utf-8")
    table = text.split("## The command", 1)[1].split("\n\n", 2)[1]
    commands = sorted(set(re.findall(r"^\| `opdsl ([a-z]+)", table, re.M)))
    assert {"run", "report", "tail", "diff", "show"} <= set(commands)
    for command in commands:
        with pytest.raises(SystemExit) as done, contextlib.redirect_stdout(io.StringIO()):
            main([command, "--help"])
        assert done.value.code == 0, command
