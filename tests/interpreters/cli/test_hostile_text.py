"""Text a run recorded, or a journal someone handed us, is shown as written by every command:
never read as rich markup, its terminal control codes made visible, and a malformed record
refused by ``import`` (or shown) rather than a traceback."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interpreters.cli._main import main
from tests.fixtures.hostile_programs import MARKUP
from tests.helpers import RawJournal

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
    first, second = (r[0] for r in RawJournal(db).execute("SELECT run_id FROM runs ORDER BY rowid"))

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


# -- journals someone hands us ------------------------------------------------------------------


def _exported(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> list[dict[str, Any]]:
    """A real run of two checkpoints and an emit, exported: one JSON object a line."""
    db = str(tmp_path / "made.db")
    tools = ["--tools", f"{PROGRAMS}:shout", "--tools", f"{PROGRAMS}:refuse"]
    code, _, err = opdsl(
        capsys, "run", f"{PROGRAMS}:marked", "--arg", "text=plain", *tools, "--db", db, "--quiet"
    )
    assert code == 0, err
    run_id = str(RawJournal(db).execute("SELECT run_id FROM runs").fetchone()[0])
    code, out, err = opdsl(capsys, "export", run_id, "--db", db)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def _entry(lines: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(x["entry"] for x in lines if "entry" in x and x["entry"]["kind"] == kind)


def _set_effect(lines: list[dict[str, Any]], kind: str, **fields: Any) -> None:
    entry = _entry(lines, kind)
    entry["effect_json"] = json.dumps({**json.loads(entry["effect_json"]), **fields})


HOSTILE: dict[str, tuple[Callable[[list[dict[str, Any]]], object], str]] = {
    "program with markup": (
        lambda x: x[0]["run"].update(program="[bold]m:f[/]"),
        "the run's program '[bold]m:f[/]' is not module:function",
    ),
    "run id with a title code": (
        lambda x: (
            [x[0]["run"].update(run_id="r\x1b]0;owned\x07")]
            + [y["entry"].update(run_id="r\x1b]0;owned\x07") for y in x if "entry" in y]
        ),
        "the run's run_id 'r\\x1b]0;owned\\x07' is empty, too long or holds a control code",
    ),
    "parent with a clear-screen code": (
        lambda x: x[0]["run"].update(parent_run="p\x1b[2J"),
        "the run's parent_run 'p\\x1b[2J' is empty, too long or holds a control code",
    ),
    "created_at 1e308": (
        lambda x: x[0]["run"].update(created_at=1e308),
        "the run's created_at 1e+308 is not a time between 1970 and 9999",
    ),
    "an entry's time 1e308": (
        lambda x: _entry(x, "tool").update(finished_at=1e308),
        "entry 2's finished_at 1e+308 is not a time between 1970 and 9999",
    ),
    "checkpoint name an object": (
        lambda x: _set_effect(x, "checkpoint", name={"a": 1}),
        "entry 1: the checkpoint's name is not text",
    ),
    "emit name a list": (
        lambda x: _set_effect(x, "emit", name=["e"]),
        "entry 4: the emit's name is not text",
    ),
    "effect not an object": (
        lambda x: _entry(x, "tool").update(effect_json="[1, 2]"),
        "entry 2's effect is not a JSON object",
    ),
    "usage not a usage": (
        lambda x: _entry(x, "tool").update(usage_json='{"input_tokens": "many"}'),
        "entry 2's effect or usage is malformed",
    ),
    "kind with markup": (
        lambda x: _entry(x, "emit").update(kind="[red]emit"),
        "entry 4's kind '[red]emit' is not an effect's kind",
    ),
    # written whole or not at all: the run was left behind with no entries before
    "two entries at one address": (
        lambda x: _entry(x, "emit").update(address="2"),
        "address '2' is given to more than one entry",
    ),
    "a lone surrogate in a result": (
        lambda x: _entry(x, "tool").update(result_json='"\\udc00"'),
        "entry 2 holds text that is not JSON",
    ),
    "a lone surrogate in the arguments": (
        lambda x: x[0]["run"].update(args_json='{"args": ["\\ud800"], "kwargs": {}}'),
        "the run's args is not JSON text: it holds a lone surrogate (\\ud800-\\udfff), "
        "which is no text",
    ),
    "a config nested past the parser": (
        lambda x: x[0]["run"].update(config_json="[" * 100_000 + "]" * 100_000),
        "the run's config is not JSON text: its JSON is nested too deeply",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_import_refuses_a_hostile_record_whole_naming_what_is_wrong(
    case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = _exported(capsys, tmp_path)
    change, said = HOSTILE[case]
    change(lines)
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    db = str(tmp_path / "copy.db")
    code, out, err = opdsl(capsys, "import", str(path), "--db", db)
    assert (code, out, err) == (2, "", f"opdsl: error: {path}: {said}\n")
    code, out, _ = opdsl(capsys, "runs", "--json", "--db", db)
    assert json.loads(out) == []  # nothing of it was written


def test_a_journal_holding_hostile_records_is_read_by_every_command_without_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A journal file someone hands us was never checked by import: its records are shown."""
    from interpreters import Entry, RunRecord, SqliteJournal

    db = tmp_path / "handed.db"
    journal = SqliteJournal(db)
    run_id = "r\x1b]0;owned\x07\x1b[2J"
    journal.create_run(
        RunRecord(
            run_id=run_id,
            program="[bold]m:f[/] \x1b[2J",
            status="completed",
            parent_run="javascript:alert(1)",
            fork_checkpoint="[/]",
            created_at=1e308,
            finished_at=float("nan"),
            result_json='"[/]"',
            error_json="[1]",
        )
    )
    effects = [
        ("checkpoint", {"name": {"an": "object"}}, '{"state": 1, "world": [2]}'),
        ("emit", {"name": ["e"], "data": MARKUP}, "null"),
        ("tool", [1, 2], '{"ok": false, "error": "[/] \\u001b[2J"}'),
        ("[red]x\x1b[2J", {"name": MARKUP}, "null"),
    ]
    journal.add_entries(
        [
            Entry(
                run_id=run_id,
                seq=n,
                address=str(n + 1),
                kind=kind,
                effect_json=json.dumps(effect),
                status="completed",
                result_json=result,
                usage_json='{"input_tokens": "many"}' if n == 2 else None,
                started_at=1e308 if n == 0 else 1.0,
                finished_at=2.0,
            )
            for n, (kind, effect, result) in enumerate(effects)
        ]
    )
    journal.close()
    for argv in (["runs"], ["show", run_id], ["checkpoints", run_id], ["tail", run_id]):
        code, out, err = opdsl(capsys, *argv, "--db", str(db))
        assert (code, err) == (0, ""), (argv, code, err)
        _no_terminal_codes(out + err)
        if code == 0 and argv[0] != "checkpoints":
            assert "r\\x1b]0;owned\\x07\\x1b[2J" in out, (argv, out)


def test_check_cost_and_json_output_never_carry_what_a_terminal_acts_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A journal's text reaches the terminal escaped from every command: ``check``, ``cost``
    and ``whatif`` printed it as it was (an OSC 52 wrote the clipboard), and JSON output kept
    C1 controls, bidirectional overrides and line separators raw (JSON escapes only C0)."""
    db = str(tmp_path / "runs.db")
    code, _, err = opdsl(capsys, "run", "tests.fixtures.durable_programs:stamped", "--db", db)
    assert code == 0, err
    (run_id,) = (r[0] for r in RawJournal(db).execute("SELECT run_id FROM runs"))
    hostile = "m:p\x1b]52;c;cHduZWQ=\x07\x1b[2J\r\x9d52;c;aGk=\x9c\u202e\u2028"
    raw = RawJournal(db)
    raw.execute("UPDATE runs SET program=?", (hostile,))
    raw.close()
    for argv in (
        ["check", "--db", db],
        ["cost", "--model", "anthropic:claude-sonnet-4-5", run_id, "--db", db],
        ["show", run_id, "--json", "--db", db],
        ["runs", "--json", "--db", db],
    ):
        _, out, err = opdsl(capsys, *argv)
        for said in (out, err):
            assert not any(c in said for c in "\x1b\x07\r\x9d\x9c\u202e\u2028"), (argv, said)
        assert "52;c;" in out + err, (argv, out, err)  # shown, escaped
    _, out, _ = opdsl(capsys, "show", run_id, "--json", "--db", db)
    assert json.loads(out)["program"] == hostile  # the JSON still reads back as it was
