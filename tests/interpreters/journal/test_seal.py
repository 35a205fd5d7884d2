"""A journal file handed over whole chooses no code, no model URL and no folder: only runs
sealed under the user's own key are resumed and replayed with what they name; every other
run (another user's or machine's, an earlier opdsl's, one edited since) names it all again,
or is vouched for with ``opdsl trust``."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from interpreters import (
    MemoryJournal,
    ScriptedModel,
    SqliteJournal,
    export_run,
    replay,
    resume,
    run,
)
from interpreters.cli._main import main
from interpreters.journal import JournalError
from interpreters.journal._seal import SealKeyError, foreign, key_path, seal_key, vouch_for
from op import OpdslError
from tests.fixtures.durable_programs import TOOLS, Counted, appender, chat
from tests.servers import ScriptedServer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "journals"
PLANTED = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")

def evil():
    yield
"""


@pytest.fixture
def other_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on the test is another user: a key of their own."""
    monkeypatch.setenv("OPDSL_SEAL_KEY", str(tmp_path / "other" / "seal.key"))


def opdsl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_handed_journal_imports_no_code_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "marker"
    (tmp_path / "planted_by_file.py").write_text(PLANTED.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    db = tmp_path / "handed.db"
    shutil.copy(FIXTURES / "v0.3.0.db", db)  # a journal of the current format, run and all
    journal = SqliteJournal(db)
    journal._db.execute("UPDATE runs SET program='planted_by_file:evil'")
    journal.close()
    for argv in (
        ["replay", "conversation"],
        ["resume", "conversation"],
        ["answer", "conversation", "yes"],
        ["check"],
    ):
        code, out, err = opdsl(capsys, *argv, "--db", str(db))
        assert code != 0 and "not sealed as yours" in out + err, (argv, out, err)
        assert "planted_by_file" not in sys.modules and not marker.exists(), argv
    with pytest.raises(OpdslError, match="--program planted_by_file:evil"):
        replay("conversation", db=str(db))
    assert not marker.exists()


def test_a_handed_journal_sends_no_key_to_the_model_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "handed.db"
    shutil.copy(FIXTURES / "v0.1.0.db", db)  # "chat" waits on its ask; then it calls a model
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-users-own-key-1234")
    with ScriptedServer() as srv:  # answers nothing: no request may come
        journal = SqliteJournal(db)
        config = json.loads(journal.run("chat").config_json)
        config["model"] = f"openai-compatible:m@{srv.url}/v1"
        journal.set_config("chat", json.dumps(config))
        journal.close()
        with pytest.raises(OpdslError, match="--model openai-compatible:m@"):
            resume("chat", db=str(db), program=chat, answer="friends")
        assert srv.requests == []
        answered = resume(
            "chat", db=str(db), program=chat, answer="friends", model=ScriptedModel(["a poem"])
        )
        assert answered.value == "friends: a poem" and srv.requests == []


def test_a_sealed_run_edited_or_its_seal_moved_is_foreign(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "runs.db")
    one = run(appender, str(tmp_path / "a.txt"), 1, tools=TOOLS, state=Counted(), db=journal)
    two = run(appender, str(tmp_path / "b.txt"), 2, tools=TOOLS, state=Counted(), db=journal)
    first, second = journal.run(one.run_id), journal.run(two.run_id)
    assert foreign(first) is None and foreign(second) is None
    config = json.loads(first.config_json)
    assert isinstance(config["seal"], str) and len(config["seal"]) == 64
    edited = {**config, "tools": ["planted:tool"]}
    seal_of_second = json.loads(second.config_json)["seal"]
    for changed in (
        first.model_copy(update={"config_json": json.dumps(edited)}),
        first.model_copy(update={"program": "tests.fixtures.durable_programs:budgeted"}),
        first.model_copy(update={"args_json": second.args_json}),
        first.model_copy(update={"run_id": second.run_id}),  # gc would act on its snapshots
        first.model_copy(update={"state_json": second.final_state_json}),
        first.model_copy(update={"config_json": json.dumps({**config, "seal": seal_of_second})}),
        first.model_copy(update={"config_json": json.dumps({**config, "seal": "é" * 64})}),
        first.model_copy(update={"config_json": json.dumps({**config, "seal": 7})}),
        # a "foreign" of its own, which config_of sets: not taken at its word, and no seal
        first.model_copy(update={"config_json": json.dumps({**config, "foreign": None})}),
        first.model_copy(update={"args_json": "[" * 100_000}),
    ):
        assert "not sealed as yours" in str(foreign(changed))
    with pytest.raises(JournalError, match="recorded config is a JSON list"):
        foreign(first.model_copy(update={"config_json": "[]"}))
    # the file that leaves this machine carries no seal
    assert '\\"seal\\"' not in export_run(journal, one.run_id)


def test_a_fork_keeps_its_parents_seal_or_its_lack_of_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "runs.db")
    mine = run(appender, str(tmp_path / "a.txt"), 3, tools=TOOLS, state=Counted(), db=db)
    fork = resume(mine.run_id, from_checkpoint="line-0", db=db)  # all by the names it holds
    assert fork.status == "completed" and foreign(SqliteJournal(db).run(fork.run_id)) is None
    monkeypatch.setenv("OPDSL_SEAL_KEY", str(tmp_path / "other" / "seal.key"))
    with pytest.raises(OpdslError, match="not sealed as yours"):
        resume(mine.run_id, from_checkpoint="line-0", db=db)
    theirs = resume(
        mine.run_id, from_checkpoint="line-0", db=db, program=appender, tools=TOOLS
    )  # named again: it runs, and its fork is as foreign as its parent
    assert theirs.status == "completed"
    assert "not sealed as yours" in str(foreign(SqliteJournal(db).run(theirs.run_id)))


def test_opdsl_trust_vouches_for_runs_saying_what_they_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "v0.1.0.db", db)
    journal = SqliteJournal(db)
    journal._db.execute("UPDATE runs SET program=? WHERE run_id='budgeted'", ("m:\x1b]0;x\x07p",))
    # the MCP servers a run would start, as its file records them (the shapes a hand makes)
    mcp: dict[str, Any] = {
        "git": {"server": {"argv": ["uvx", "mcp-server-git", "\x1b[2J"]}},
        "web": {"server": {"url": "http://127.0.0.1:9/mcp"}},
        "odd": {"server": ["not", "an", "object"]},
        "worse": "a text",
        # a command shown, a URL started: what is shown is what starts
        "both": {"server": {"argv": ["docs-server"], "url": "http://127.0.0.1:8/mcp"}},
        "keyed": {"server": {"argv": ["docs-server"], "env": ["ANTHROPIC_API_KEY"]}},
    }
    journal.set_config("chat", json.dumps({"mcp": mcp}))
    journal.close()
    code, out, _ = opdsl(capsys, "trust", "--db", str(db))  # says what each names, seals none
    assert code == 0 and "3 run(s) of this journal are not sealed as yours" in out
    assert "run appender names --program tests.fixtures.durable_programs:appender" in out
    assert "--mcp 'git=uvx mcp-server-git '\"'\"'\\x1b[2J" in out and "\x1b" not in out, out
    assert "--mcp web=http://127.0.0.1:9/mcp (no MCP server is started from the record: " in out
    assert "MCP server 'odd': the run's record of it is not an object)" in out, out
    assert "--mcp both=http://127.0.0.1:8/mcp" in out and "docs-server --mcp" not in out, out
    assert "--mcp 'keyed[env=ANTHROPIC_API_KEY]=docs-server'" in out, out
    # what it shows is an option opdsl takes, naming the server a resume would start
    from interpreters.tools._mcp import MCPServer, parse_mcp

    for name in ("keyed", "both", "web"):
        shown = re.search(rf"--mcp '?({name}[^ ']*)'?", out)
        assert shown is not None, out
        assert parse_mcp(shown.group(1)) == (name, MCPServer.from_json(name, mcp[name]["server"]))
    code, _, err = opdsl(capsys, "trust", "appender", "--all", "--db", str(db))
    assert code == 2 and "not both" in err
    code, _, err = opdsl(capsys, "trust", "appender", "nope", "--db", str(db))
    assert code == 2 and "no run 'nope'" in err
    assert "not sealed" in str(foreign(SqliteJournal(db).run("appender")))  # none sealed
    code, out, _ = opdsl(capsys, "trust", "appender", "--db", str(db))
    assert code == 0 and out.startswith("sealed run appender as yours; it runs with --program ")
    assert "--tools tests.fixtures.durable_programs:append_line" in out
    assert replay("appender", db=str(db)).value["n"] == 4  # by the names it holds
    code, out, _ = opdsl(capsys, "trust", "--all", "--db", str(db))
    assert code == 0 and "sealed run chat as yours" in out and "\x1b" not in out
    assert "appender" not in out  # sealed already: not among --all's
    code, out, _ = opdsl(capsys, "trust", "appender", "--db", str(db))
    assert out == "run appender is sealed as yours already\n"
    code, out, _ = opdsl(capsys, "trust", "--all", "--db", str(db))
    assert out == "every run of this journal is sealed as yours already\n"


def test_a_key_that_is_not_the_users_alone_is_refused_and_the_run_goes_on_unsealed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "keys" / "seal.key"
    monkeypatch.setenv("OPDSL_SEAL_KEY", str(key))
    made = seal_key()
    assert len(made) == 32 and oct(key.stat().st_mode)[-3:] == "600"
    assert oct(key.parent.stat().st_mode)[-3:] == "700"
    monkeypatch.setattr("interpreters.journal._seal._KEYS", {})
    key.chmod(0o644)
    with pytest.raises(SealKeyError, match="not yours alone.*chmod 600"):
        seal_key()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done = run(
            appender, str(tmp_path / "a"), 1, tools=TOOLS, state=Counted(), db=MemoryJournal()
        )
    assert done.status == "completed"
    assert any("run not sealed as yours" in str(w.message) for w in caught)
    key.chmod(0o600)  # as the message says: the same key again
    assert seal_key() == made
    monkeypatch.setattr("interpreters.journal._seal._KEYS", {})
    key.write_text("not hex\n")
    with pytest.raises(SealKeyError, match="is not 32 bytes in hex; remove it and a new one"):
        seal_key()
    key.unlink()  # as the message says: a new one is made
    assert len(seal_key()) == 32 and seal_key() != made
    monkeypatch.setattr("interpreters.journal._seal._KEYS", {})
    key.unlink()
    key.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SealKeyError, match="cannot be read or made .it is a symbolic link"):
        seal_key()
    for odd in (tmp_path / "a-folder", tmp_path / "a-fifo"):  # read as nothing, never waited on
        if odd.name == "a-folder":
            odd.mkdir()
        else:
            os.mkfifo(odd)
        monkeypatch.setenv("OPDSL_SEAL_KEY", str(odd))
        with pytest.raises(SealKeyError, match="is not a regular file"):
            seal_key()
    monkeypatch.setenv("OPDSL_SEAL_KEY", "seal.key")  # a key of each folder: none
    with pytest.raises(SealKeyError, match="OPDSL_SEAL_KEY is a relative path"):
        seal_key()
    monkeypatch.setenv("OPDSL_SEAL_KEY", str(tmp_path / "a-file" / "seal.key"))
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SealKeyError, match="a folder on its path is a file"):
        seal_key()


def test_the_key_is_in_the_users_config_folder_a_relative_one_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPDSL_SEAL_KEY")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert key_path() == tmp_path / "cfg" / "opdsl" / "seal.key"
    for relative in ("cfg", ""):  # relative: ignored, as the XDG spec says (none: the default)
        monkeypatch.setenv("XDG_CONFIG_HOME", relative)
        assert key_path() == tmp_path / ".config" / "opdsl" / "seal.key"


def test_a_foreign_runs_record_is_read_and_shown_as_it_is(
    tmp_path: Path, other_user: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reading is not trusting: show, runs and export work on any run."""
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "v0.1.0.db", db)
    for argv in (["runs"], ["show", "appender"], ["export", "appender"]):
        code, out, err = opdsl(capsys, *argv, "--db", str(db))
        assert code == 0 and "appender" in out, (argv, err)
    code, out, _ = opdsl(capsys, "show", "appender", "--db", str(db))
    assert "this run is not sealed as yours (written by another user" in out
    code, out, _ = opdsl(capsys, "show", "appender", "--db", str(db), "--json")
    assert json.loads(out)["foreign"].startswith("is not sealed as yours")
    vouch_for(SqliteJournal(db), ["appender"])
    code, out, _ = opdsl(capsys, "show", "appender", "--db", str(db))
    assert code == 0 and "sealed" not in out
    assert (
        json.loads(opdsl(capsys, "show", "appender", "--db", str(db), "--json")[1])["foreign"]
        is None
    )
    # any journal can be vouched for: one in memory, its run sealed in place
    memory = MemoryJournal()
    memory.create_run(SqliteJournal(db).run("appender").model_copy(update={"config_json": "{}"}))
    assert "not sealed as yours" in str(foreign(memory.run("appender")))
    assert [r.run_id for r in vouch_for(memory, ["appender"])] == ["appender"]
    assert foreign(memory.run("appender")) is None


@pytest.mark.parametrize("model", ["scripted:{path}", {"not": "a spec"}])
def test_a_foreign_runs_model_is_not_opened_before_the_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: object
) -> None:
    """``answer`` and ``resume`` checked the model a run recorded before going on, and a
    foreign run's file chose it: ``scripted:PATH`` read that file (a FIFO hung, /dev/zero
    ran out of memory) and a spec that is no text was an internal error."""
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "v0.1.0.db", db)
    private = tmp_path / "private.txt"
    private.write_text("not a script\n")
    spec = model.format(path=private) if isinstance(model, str) else model
    journal = SqliteJournal(db)
    journal.set_config("chat", json.dumps({"model": spec}))
    journal.close()
    for argv in (["answer", "chat", "hi"], ["resume", "chat"]):
        code, _, err = opdsl(capsys, *argv, "--db", str(db))
        assert code == 2, err
        # refused for what it names, the model among it; the file never opened
        assert err.startswith("opdsl: error: run chat is not sealed as yours"), err
        assert "cannot read" not in err and "Expecting value" not in err, err


def test_a_seal_checked_before_is_checked_again_against_what_the_record_holds_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the seals a process made and checked are kept by what they were made of: a record
    # changed since, or a key changed since, is judged afresh
    from interpreters.journal import RunRecord
    from interpreters.journal._seal import seal_record

    monkeypatch.setenv("OPDSL_SEAL_KEY", str(tmp_path / "one.key"))
    sealed = seal_record(RunRecord(run_id="r1", program="p", args_json='{"n": 1}'))
    assert foreign(sealed) is None and foreign(sealed) is None  # made, then kept
    for changed in (
        {"args_json": '{"n": 2}'},
        {"run_id": "r2"},
        {"program": "q"},
        {"state_json": "{}"},
        {"parent_run": "r0"},
        {"config_json": sealed.config_json.replace("}", ',"model":"x"}', 1)},
    ):
        assert "not sealed as yours" in str(foreign(sealed.model_copy(update=changed)))
    monkeypatch.setenv("OPDSL_SEAL_KEY", str(tmp_path / "two.key"))  # another user's key
    assert "not sealed as yours" in str(foreign(sealed))
    monkeypatch.setenv("OPDSL_SEAL_KEY", str(tmp_path / "one.key"))
    assert foreign(sealed) is None
    # one vouched for (its FOREIGN and imported_from dropped) is sealed over what is left
    imported = sealed.model_copy(
        update={"config_json": json.dumps({"imported_from": "x.jsonl", "foreign": "why"})}
    )
    assert foreign(imported) is not None
    assert foreign(seal_record(imported)) is None
    # with the seal of the vouched-for record pasted in, the record as it was stays foreign
    pasted = json.loads(seal_record(imported).config_json)
    pasted.update({"imported_from": "x.jsonl"})
    assert foreign(imported.model_copy(update={"config_json": json.dumps(pasted)})) is not None
