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
