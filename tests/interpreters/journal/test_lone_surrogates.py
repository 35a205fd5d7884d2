"""A lone surrogate (a code point of U+D800 to U+DFFF alone: no character, and no UTF-8
holds it) reaches a run from a model's JSON (``"\\ud800"``), from a byte that is not UTF-8
read with ``surrogateescape`` (a command line, a file), or from a program's own text. None is
journaled: the effect, result or argument holding one is refused, naming where, and the run
ends failed with its journal whole and readable. A journal written before opdsl refused them
(one may hold a lone surrogate in a compressed text) still shows, reports, replays and forks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from interpreters import JsonlSink, ScriptedModel, SqliteJournal, replay, resume, run
from interpreters.cli._main import main
from interpreters.journal import JournalError
from interpreters.models import OpenAIModel
from op import Add, Op, OpdslError, emit, infer, tool, update
from state import CRDTModel, GSet, NotSerializable, canonical_json
from tests.fixtures.durable_programs import chat, conversed, measured
from tests.fixtures.scripted_runs import one_call
from tests.servers import ScriptedServer, openai, status

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "journals"


def opdsl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def named() -> Op[None]:
    # a name made of bytes read as Python reads a file name that is not UTF-8
    yield from emit(b"bad \xff name".decode("utf-8", "surrogateescape"))


def test_canonical_json_refuses_a_lone_surrogate_naming_its_path() -> None:
    with pytest.raises(NotSerializable) as caught:
        canonical_json({"a": ["fine", {"b": "x\udcff"}]})
    assert caught.value.path == "$.a[1].b"
    assert "lone surrogate ('\\udcff')" in str(caught.value)
    with pytest.raises(NotSerializable) as caught:
        canonical_json({"k\ud800": 1})
    assert caught.value.path == "$ (a key)"
    # a character outside the basic plane is one code point, not a pair: it is text
    assert canonical_json({"a": "\U0001f600 caf\u00e9"}) == '{"a":"\U0001f600 caf\u00e9"}'


@pytest.mark.parametrize("stream", [False, True])
def test_a_models_answer_is_made_whole_text_as_a_browser_makes_it(
    tmp_path: Path, stream: bool
) -> None:
    """A server's JSON may write a surrogate pair as two escapes (joined into its character)
    or a lone one (U+FFFD, as a web browser makes a string it sends): the run goes on with
    text, and its journal keeps what the program saw."""
    db = tmp_path / "runs.db"
    # the server writes JSON's escapes, "\ud83d\ude00" and "\ud800", as json.dumps does
    with ScriptedServer([openai("pair: \ud83d\ude00, half: \ud800, end")]) as server:
        model = OpenAIModel(
            "gpt-4.1-mini", base_url=f"{server.url}/v1", api_key="sk-test", stream=stream
        )
        result = run(one_call, model=model, db=db, run_id="answered")
    assert result.status == "completed", result.error
    assert result.value == "pair: \U0001f600, half: \ufffd, end"
    assert replay("answered", db=db).value == result.value


def test_a_scripted_answer_holding_one_ends_the_run_saying_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What no server parsed (a script, a model of the program's own) is not made whole: the
    run ends, failed, at the call whose answer it is, and stays readable."""
    db = tmp_path / "runs.db"
    result = run(measured, model=ScriptedModel(["half a pair: \ud800"]), db=db, run_id="r")
    assert result.status == "failed"
    message = str(result.error)
    assert "the result of infer at address 1 cannot be recorded" in message, message
    assert "lone surrogate" in message, message
    assert SqliteJournal(db).run("r").status == "failed"  # ended, not left running
    code, out, _ = opdsl(capsys, "show", "r", "--db", str(db))
    assert code == 0 and "lone surrogate" in out


def test_a_programs_own_text_holding_one_ends_the_run_at_its_effect(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    sink = JsonlSink(tmp_path / "events.jsonl")
    result = run(named, db=db, run_id="emitted", on_event=sink)
    sink.close()
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    # the sink kept every event, the name as JSON's escape for it
    assert [e["type"] for e in events][-1] == "run_finished"
    assert "bad \udcff name" in [e.get("effect", {}).get("name") for e in events]
    assert result.status == "failed"
    message = str(result.error)
    assert "the emit effect at address 1 cannot be recorded: $.name:" in message, message
    assert SqliteJournal(db).run("emitted").status == "failed"


LONE = b"bad \xff here".decode("utf-8", "surrogateescape")
"""A text as Python reads bytes that are not UTF-8 (a file name, a command's output)."""


def raises_lone() -> Op[None]:
    yield from emit("before")
    raise RuntimeError("the program says " + LONE)


class Names(CRDTModel):
    names: GSet[str] = GSet()


def names_lone() -> Op[str]:
    yield from update(names=Add(LONE))
    return "done"


def test_an_error_or_a_final_state_holding_one_ends_the_run_failed(tmp_path: Path) -> None:
    """An error's message is a diagnostic: kept with the surrogate escaped. A final state is
    data: the run fails on it, naming the path. Neither leaves the run running."""
    db = tmp_path / "runs.db"
    raised = run(raises_lone, db=db, run_id="raised")
    assert raised.status == "failed"
    held = SqliteJournal(db).run("raised")
    assert held.status == "failed"
    assert json.loads(held.error_json or "{}")["message"] == "the program says bad \\udcff here"
    named = run(names_lone, db=db, run_id="named", state=Names())
    assert named.status == "failed"
    assert "run named: its final state cannot be recorded: $.names.items[0]:" in str(named.error)
    assert SqliteJournal(db).run("named").status == "failed"
    # a model's refusal whose message holds one (JSON's escape in an error body)
    with ScriptedServer([status(400, "no \ud800 thanks")]) as server:
        model = OpenAIModel(
            "gpt-4.1-mini", base_url=f"{server.url}/v1", api_key="sk-test", stream=False
        )
        refused = run(one_call, model=model, db=db, run_id="refused")
    assert refused.status == "failed"
    record = SqliteJournal(db).run("refused")
    assert record.status == "failed"
    assert "HTTP 400: no \\ud800 thanks" in json.loads(record.error_json or "{}")["message"]


def listed() -> str:
    """A tool that answers with a file name as Python reads one that is not UTF-8."""
    return "files: " + LONE


def asks_the_tool() -> Op[str]:
    result = yield from tool("listed")
    return result.output


def test_a_tools_answer_holding_one_ends_the_run_naming_where(tmp_path: Path) -> None:
    result = run(asks_the_tool, db=tmp_path / "runs.db", tools=[listed], run_id="t")
    assert result.status == "failed"
    message = str(result.error)
    assert "the result of tool at address 1 cannot be recorded: $.output holds a lone" in message
    assert SqliteJournal(tmp_path / "runs.db").run("t").status == "failed"


def test_tool_call_arguments_are_made_whole_too(tmp_path: Path) -> None:
    """The arguments of a tool call are JSON inside the answer's JSON: their escapes are read
    when they are parsed, and made whole then."""
    arguments = json.dumps({"text": "a\ud800b \U0001f600"})  # "a\\ud800b \\ud83d\\ude00"
    calls = [("call-1", "echo", arguments)]
    with ScriptedServer([openai(tool_calls=calls)]) as server:
        model = OpenAIModel(
            "gpt-4.1-mini", base_url=f"{server.url}/v1", api_key="sk-test", stream=False
        )
        result = run(first_call_arguments, model=model, db=tmp_path / "runs.db")
    assert result.status == "completed", result.error
    assert result.value == {"text": "a\ufffdb \U0001f600"}


def first_call_arguments() -> Op[dict[str, Any]]:
    reply = yield from infer("call echo")
    return dict(reply.tool_calls[0].arguments)


def test_a_journal_path_that_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match=r"journal path '.*\\xff\.db' is not UTF-8 text"):
        SqliteJournal(tmp_path / b"\xff.db".decode("utf-8", "surrogateescape"))


def test_an_argument_or_run_id_holding_one_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    with pytest.raises(NotSerializable, match=r"argument 1 cannot be recorded: \$: the text"):
        run(chat, "a\udcff", db=db, model=ScriptedModel(["x"]))
    with pytest.raises(JournalError, match=r"\('r\\udcff'\) holds a lone surrogate"):
        run(measured, db=db, model=ScriptedModel(["x"]), run_id="r\udcff")
    journal = SqliteJournal(db)
    assert journal.runs() == []
    with pytest.raises(JournalError, match="lone surrogate"):
        journal.run("r\udcff")
    asked = run(chat, "tea", db=db, run_id="asked")
    assert asked.status == "waiting"
    with pytest.raises(OpdslError, match="the answer to run asked holds a lone surrogate"):
        resume("asked", db=db, answer="me\udcff")
    assert SqliteJournal(db).run("asked").status == "waiting"  # still asking


def test_a_command_line_that_is_not_utf8_is_refused_naming_the_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "runs.db")
    # what Python hands on for the bytes b"a\xff" of a command line (surrogateescape)
    code, _, err = opdsl(capsys, "show", "a\udcff", "--db", db)
    assert code == 2
    assert err == (
        "opdsl: error: argument 2 ('a\\xff') is not UTF-8 text: opdsl reads its command line "
        "(run ids, --arg values, paths) as UTF-8\n"
    )
    argv = ["run", "tests.fixtures.durable_programs:chat", "--arg", "topic=\udcfe", "--db", db]
    code, _, err = opdsl(capsys, *argv)
    assert code == 2 and "argument 4 ('topic=\\xfe') is not UTF-8 text" in err, err
    assert not Path(db).exists()


def test_a_journal_from_before_holding_one_shows_reports_replays_and_forks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lone-surrogate.db``: ``measured`` and ``conversed`` run by the version before this
    refusal, with scripted models whose answers held a lone surrogate (kept, compressed, as it
    was)."""
    db = tmp_path / "runs.db"
    shutil.copy(FIXTURES / "lone-surrogate.db", db)
    code, out, _ = opdsl(capsys, "show", "lone", "--db", str(db), "--json")
    assert code == 0 and "\\ud800" in out
    shown = json.loads(out)
    answer = shown["entries"][0]["result"]["text"]
    assert "\ud800 and after it" in answer  # the text as recorded, escaped on the way
    code, out, _ = opdsl(capsys, "show", "lone", "--db", str(db))
    assert code == 0 and "result: 213" in out
    page = tmp_path / "lone.html"
    code, _, err = opdsl(capsys, "report", "lone", "--db", str(db), "-o", str(page))
    assert code == 0, err
    assert "\\ud800" in page.read_text(encoding="utf-8")
    # another key sealed it: the program is named, as for any run handed over
    assert replay("lone", db=db, program=measured).value == 213
    fork = resume("lone", from_checkpoint="answered", db=db, program=measured)
    assert fork.status == "completed" and fork.value == 213


def test_a_conversation_from_before_carrying_one_replays_and_goes_on(tmp_path: Path) -> None:
    """``conversed`` in the same file: its second call's conversation carries the first
    answer, lone surrogate and all, as a piece of content the record holds. It replays, and a
    fork makes that call again live: the piece is the record's, not new text."""
    db = tmp_path / "runs.db"
    shutil.copy(FIXTURES / "lone-surrogate.db", db)
    assert replay("conversed", db=db, program=conversed).value == 194
    fork = resume(
        "conversed",
        from_checkpoint="answered",
        db=db,
        program=conversed,
        model=ScriptedModel(["(the first call is the record's)", "then else"]),
    )
    assert fork.status == "completed", fork.error
    assert fork.value == 194 - len("then more") + len("then else")
    assert replay(fork.run_id, db=db, program=conversed).value == fork.value
