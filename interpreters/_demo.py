"""``opdsl demo``: the example program, offline, with a scripted model and real files."""

from __future__ import annotations

import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from interpreters._api import run
from interpreters._journal import MemoryJournal
from interpreters._models import ScriptedModel
from interpreters._sinks import ConsoleSink
from op import Response, ToolCall, Usage
from programs.examples import EditState, fix_file

__all__ = ["demo"]

TYPO = "Teh quick brown fox jumps over teh lazy dog.\n"
FIXED = "The quick brown fox jumps over the lazy dog.\n"


def _session() -> ScriptedModel:
    u = Usage(input_tokens=120, output_tokens=30)
    return ScriptedModel(
        [
            Response(tool_calls=(ToolCall(id="c1", name="read_file", arguments={"path": "notes.txt"}),), usage=u),
            Response(
                tool_calls=(
                    ToolCall(id="c2", name="write_file", arguments={"path": "notes.txt", "content": FIXED}),
                ),
                usage=u,
            ),
            Response(text="Fixed two misspellings of 'the'.", usage=u),
            Response(text="Correct: every sentence reads well.", usage=u),
            Response(text="Style: fine, one sentence, ends with a period.", usage=u),
        ],
        name="scripted:demo",
    )


def demo(console: Console | None = None) -> int:
    """Run the example program on a temporary file and show what happened."""
    console = console or Console(highlight=False)
    workdir = Path(tempfile.mkdtemp(prefix="opdsl-demo-"))
    (workdir / "notes.txt").write_text(TYPO, encoding="utf-8")

    def read_file(path: str) -> str:
        """Read a file of the demo folder."""
        return (workdir / Path(path).name).read_text(encoding="utf-8")

    def write_file(path: str, content: str) -> str:
        """Replace a file of the demo folder."""
        (workdir / Path(path).name).write_text(content, encoding="utf-8")
        return f"wrote {len(content)} characters"

    journal = MemoryJournal()
    console.print(f"[bold]opdsl demo[/]: fixing {workdir / 'notes.txt'} with a scripted model\n")
    result = run(
        fix_file,
        "notes.txt",
        "Fix the spelling mistakes.",
        model=_session(),
        tools=[read_file, write_file],
        state=EditState(),
        db=journal,
        on_event=ConsoleSink(console, show_tokens=False),
    )
    console.print()
    table = Table(title=f"journal of run {result.run_id}")
    for col in ("address", "kind", "status", "tokens"):
        table.add_column(col)
    for e in journal.entries(result.run_id):
        tokens = ""
        if e.usage_json:
            tokens = str(Usage.model_validate_json(e.usage_json).total_tokens)
        table.add_row(e.address, e.kind, e.status, tokens)
    console.print(table)
    state = result.state
    assert isinstance(state, EditState)
    console.print(f"result: [green]{result.value}[/]")
    console.print(f"files modified: {state.files_modified.sorted()}, tokens: {state.tokens.value}")
    console.print(f"notes: {list(state.notes.items)}")
    console.print(f"the file now reads: {(workdir / 'notes.txt').read_text(encoding='utf-8').strip()!r}")
    return 0 if result.status == "completed" else 1
