"""What the commands print, and how: the console, run text made safe to show, JSON, and how
a run that ended is reported (its value on stdout, what went wrong on stderr)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from interpreters.cli._interrupt import STARTED
from interpreters.journal._base import json_object
from interpreters.journal._content import read_json

__all__ = [
    "console",
    "json_object",
    "loads",
    "open_questions",
    "print_json",
    "report_outcome",
    "report_result",
    "report_waiting",
    "run_json",
    "sinks",
    "text",
    "when",
]


def console() -> Any:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # the reader went away: ended as any other output's (quietly, status 141)
            self.quiet = True
            raise BrokenPipeError

    # piped into another program: no wrapping, no colour codes
    piped = not sys.stdout.isatty()
    return _Console(highlight=False, width=100_000 if piped else None, no_color=piped or None)


def sinks(a: argparse.Namespace) -> list[Any]:
    """The live console (unless --quiet), and a note of which run is going."""
    from interpreters import ConsoleSink
    from op.events import RunStarted

    def note(event: Any) -> None:
        if isinstance(event, RunStarted):
            STARTED.append((event.run_id, a.db))

    return [note] if a.quiet else [note, ConsoleSink(console())]


def print_json(data: Any) -> None:
    """``data`` as JSON on stdout, non-ASCII text as it is but for what a terminal would act
    on or misread (C1 controls, bidirectional overrides, line separators): written as
    ``\\uXXXX``, which JSON reads back the same."""
    print(json_text(json.dumps(data, indent=2, ensure_ascii=False)))


# and lone surrogates (no UTF-8 holds one; a journal from before opdsl refused them may)
_JSON_UNSAFE = re.compile(
    "[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def json_text(dumped: str) -> str:
    """JSON written with ``ensure_ascii=False``, with the characters :func:`print_json` says
    escaped (they only occur in its strings, where the escape means the same)."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", dumped)


def when(t: float | None) -> str:
    if t is None:
        return ""
    try:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):  # a journal someone made by hand
        return f"(time {t!r} is out of range)"


def text(*parts: object) -> Any:
    """A line for rich built from run text: each part is text, or a (text, style) pair. Run
    text is never read as markup, and its control characters are shown escaped."""
    from rich.text import Text

    from interpreters._shown import visible

    out = Text()
    for part in parts:
        if isinstance(part, tuple):
            out.append(visible(part[0], lines=False), style=str(part[1]))
        else:
            out.append(visible(part, lines=False))
    return out


def loads(raw: str | None) -> Any:
    """Recorded JSON text as data; ContentError when a file changed outside opdsl holds
    something else there (or JSON nested deeper than Python's stack)."""
    return None if raw is None else read_json(raw, "a recorded text")


def run_json(r: Any) -> dict[str, Any]:
    """A run's record as ``runs --json`` and ``show --json`` print it, by the names the API
    and the journal give its fields (``run_id``, ``parent_run``)."""
    return {
        "run_id": r.run_id,
        "program": r.program,
        "status": r.status,
        "created_at": r.created_at,
        "finished_at": r.finished_at,
        "parent_run": r.parent_run,
        "fork_checkpoint": r.fork_checkpoint,
    }


def say_escaped(text: str) -> None:
    """One line of what a run holds (ids, names, a diff's lines) on stdout, every control
    character in it escaped (:func:`~interpreters._shown.visible`): a journal's text never
    acts on the terminal."""
    from interpreters._shown import visible

    say(visible(text, lines=False))


def say(text: str, stream: TextIO | None = None) -> None:
    """``text`` and its line's end, in one write to ``stream`` (stdout by default): a Ctrl-C
    lands before the line or after it, never between its text and its end (``print`` writes
    them apart, and the line that says what the Ctrl-C left would follow on the same line)."""
    (sys.stdout if stream is None else stream).write(text + "\n")


def report_result(result: Any, *, db: str | None = None) -> int:
    """How a local run ended: its value on stdout (status 0), or what stopped it on stderr
    (status 1; 0 for a run that waits for an answer, with how to give it)."""
    if result.status == "completed":
        value = result.value
        from state import NotSerializable, canonical_json

        try:
            shown = value if isinstance(value, str) else canonical_json(value)
        except NotSerializable:
            shown = repr(value)
        from interpreters._shown import visible

        # piped, the value as it is; on a terminal, no control code of it reaches the terminal
        say(visible(shown) if sys.stdout.isatty() else shown)
        failed = _failure(result.program, value)
        if failed:
            say(visible(f"run {result.run_id} completed, but {failed}"), sys.stderr)
            return 1
        say(f"run {result.run_id} completed; see `opdsl show {result.run_id}`", sys.stderr)
        return 0
    from interpreters._redact import Redactor
    from interpreters._shown import visible

    if result.status == "waiting":
        asked = open_questions(result.journal, result.run_id) or [
            (result.address or "", result.question or "")
        ]
        report_waiting(result.run_id, result.program, asked, db=db)
        return 0
    say(visible(Redactor.from_env()(result.describe())), sys.stderr)
    return 1


def open_questions(journal: Any, run_id: str) -> list[tuple[str, str]]:
    """(address, question) of each ``ask`` the run waits on, in address order."""
    from interpreters import open_journal
    from op import Ask

    try:
        journal = open_journal(journal, read_only=True)
        entries = journal.entries(run_id)
    except Exception:  # the journal is gone or closed: the result's own question is shown
        return []
    asked = []
    for entry in entries:
        if entry.kind == Ask.kind and entry.status == "started":
            effect = json_object(journal.whole(entry).effect_json)
            asked.append((entry.address, str(effect.get("question", ""))))
    return asked


def report_waiting(
    run_id: str,
    program: str,
    asked: list[tuple[str, str]],
    *,
    db: str | None = None,
    temporal: str | None = None,
) -> None:
    """A run that waits: each open question, and the exact command that answers it (with
    ``--at`` when there are several, since ``opdsl answer`` then needs it)."""
    from interpreters._redact import Redactor
    from interpreters._shown import visible

    where = "".join(
        f" {flag} {shlex.quote(value)}"
        for flag, value in (("--db", db), ("--temporal", temporal))
        if value
    )
    redact = Redactor.from_env()
    if len(asked) == 1:
        address, question = asked[0]
        say(
            visible(redact(f"run {run_id} of {program} is waiting for an answer to: {question}")),
            sys.stderr,
        )
        say(f"answer it with: opdsl answer {run_id}{where} TEXT", sys.stderr)
        return
    say(
        f"run {run_id} of {program} is waiting for answers to {len(asked)} questions; "
        "answer each with:",
        sys.stderr,
    )
    for address, question in asked:
        line = f"  opdsl answer {run_id}{where} --at {address} TEXT    # {question}"
        say(visible(redact(line)), sys.stderr)


def _failure(program: str, value: Any) -> str | None:
    """Why a run's result says the run failed (:func:`op.failure_of`), as the end of a line:
    "its result says it failed: why"; None when it does not. The program's own declaration
    counts when its module is loaded (the command loaded it to run it)."""
    from op import failure_of

    module, _, name = program.partition(":")
    loaded = sys.modules.get(module)
    fn = getattr(loaded, name, None) if loaded is not None and name else None
    why = failure_of(fn, value)
    return None if why is None else f"its result says it failed: {why}"


def report_outcome(ended: Any) -> int:
    """How a run on Temporal ended, as :func:`report_result` says it for a local run."""
    if ended.status == "completed":
        value = json.loads(ended.result_json or "null")
        say(json.dumps(value, indent=2, ensure_ascii=False))
        failed = _failure(ended.program, value)
        if failed:
            from interpreters._shown import visible

            say(visible(f"run {ended.run_id} completed, but {failed}"), sys.stderr)
            return 1
        return 0
    from interpreters._shown import visible

    where = f" at address {ended.address}" if ended.address else ""
    say(visible(f"run {ended.run_id} {ended.status}{where}: {ended.error}"), sys.stderr)
    return 1
