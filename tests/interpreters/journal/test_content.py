"""Each piece of content journaled once: a long conversation's journal grows with what
happens, and replay, resume, forks, exports, readers and gc see every effect whole."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interpreters import (
    Divergence,
    MemoryJournal,
    SqliteJournal,
    export_run,
    import_run,
    replay,
    resume,
    run,
)
from interpreters.journal import JournalError, drop_unreferenced
from interpreters.journal._content import (
    COMPRESS_MIN,
    DICTIONARY,
    PIECE_MIN,
    SHORT_MIN,
    Packer,
    digest,
    kept_body,
    lookup,
    unpack_effect,
    unpack_result,
)
from interpreters.journal._seal import vouch_for
from interpreters.observe import report_data
from op import Infer, Message, Response, Tool, ToolCall, ToolResult
from op import infer as infer_hash
from op import tool as tool_call
from state import canonical_json
from tests.fixtures.conversation_programs import (
    TOOLS,
    ReadingModel,
    editor,
    reader,
    two_part_reader,
)

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "journals"


def conversation_bytes(messages: list[Message]) -> int:
    return sum(len(canonical_json(m).encode()) for m in messages)


def pieces_of(db: str | Path) -> dict[str, str]:
    journal = SqliteJournal(db, read_only=True)
    try:
        return journal.content(journal.content_hashes())
    finally:
        journal.close()


def file_bytes(db: Path) -> int:
    journal = SqliteJournal(db)
    journal._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    journal.close()
    return db.stat().st_size


# -- the packed form -------------------------------------------------------------------------

texts = st.text(max_size=400) | st.text(min_size=PIECE_MIN, max_size=700)
arguments = st.dictionaries(st.sampled_from(["path", "text", "i"]), texts | st.integers())
calls = st.lists(
    st.builds(ToolCall, id=st.text(max_size=5), name=st.just("f"), arguments=arguments),
    max_size=2,
)
messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "system", "tool"]),
    content=texts,
    tool_calls=calls.map(tuple),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(messages, max_size=4), min_size=1, max_size=5), texts, arguments)
def test_packed_texts_unpack_to_the_canonical_text(
    turns: list[list[Message]], text: str, args: dict[str, Any]
) -> None:
    packer = Packer(keep=True)
    store: dict[str, str] = {}
    history: list[Message] = []
    for new in turns:
        history += new
        effect = Infer(messages=tuple(history), tools=("f",))
        packed = packer.effect(effect)
        store.update(packer.take())
        assert unpack_effect(packed.text, lookup(store)) == canonical_json(effect)
    for value in (
        ToolResult(output=text),
        Response(text=text, tool_calls=(ToolCall(id="c", name="f", arguments=args),)),
    ):
        whole = canonical_json(value)
        kind = "tool" if isinstance(value, ToolResult) else "infer"
        packed = packer.result(value, whole)
        store.update(packer.take())
        assert unpack_result(kind, packed.text, lookup(store)) == whole
    call = Tool(name="f", args=args)
    packed = packer.effect(call)
    store.update(packer.take())
    assert unpack_effect(packed.text, lookup(store)) == canonical_json(call)
    assert all(digest(body) == h for h, body in store.items())


def test_an_infer_costs_what_it_adds() -> None:
    packer = Packer(keep=True)
    history = [Message.system("s"), Message.user("u" * 2000)]
    first = packer.effect(Infer(messages=tuple(history)))
    assert len(packer.take()) == 3  # two nodes, the long text
    for k in range(300):
        history += [Message(role="assistant", content=f"a{k}"), Message.user("x" * 1000 + str(k))]
        packed = packer.effect(Infer(messages=tuple(history)))
        assert len(packed.text) < 200 and len(packer.take()) == 3  # two nodes, one text
    assert len(first.text) == len(packed.text) - 2  # only the count grew


def test_interleaved_conversations_each_extend_their_own_chain() -> None:
    packer = Packer(keep=True)
    a = [Message.user("a")]
    b = [Message.user("b")]
    for k in range(20):
        a.append(Message.user(f"a{k}"))
        b.append(Message.user(f"b{k}"))
        packer.effect(Infer(messages=tuple(a)))
        assert packer.earlier == len(a) - 1 if k else True
        packer.effect(Infer(messages=tuple(b)))
        assert packer.earlier == len(b) - 1 if k else True


def test_one_off_calls_keep_two_conversations_and_never_push_out_those_that_go_on() -> None:
    """A conversation no call has gone on from yet (a one-off question, as in a map over
    items) is one of at most two kept, so a run asking many keeps few alive; conversations
    that go on are still found however many one-offs come between (eight were kept in all,
    and ten one-offs pushed every one out)."""
    packer = Packer(keep=True)
    talks = [[Message.user(f"talk {t}")] for t in range(6)]
    for talk in talks:  # each begun and gone on from once
        packer.effect(Infer(messages=tuple(talk)))
        talk.append(Message(role="assistant", content="ok"))
        packer.effect(Infer(messages=tuple(talk)))
        assert packer.earlier == 1
    items = [Message.user(f"item {i}") for i in range(10)]
    for item in items:
        packer.effect(Infer(messages=(item,)))
        assert packer.earlier == 0
    for talk in talks:  # each found: only its new message is packed
        talk.append(Message.user("again"))
        packer.effect(Infer(messages=tuple(talk)))
        assert packer.earlier == len(talk) - 1
    packer.take()
    # the last two one-offs are known still, the one before them is not (packed whole again)
    packer.effect(Infer(messages=(items[-1], Message.user("then"))))
    assert packer.earlier == 1 and len(packer.take()) == 1
    packer.effect(Infer(messages=(items[-3], Message.user("then"))))
    assert packer.earlier == 0 and len(packer.take()) == 2


@pytest.mark.parametrize("other", [True, 1.0])
def test_a_conversation_is_not_taken_for_one_whose_arguments_are_only_equal(other: Any) -> None:
    """``1 == 1.0 == True``, and so are two messages whose tool calls' arguments differ only
    so; the journal writes them apart. A call whose history holds the one must not be packed
    on the chain of the other (it journaled arguments the program never sent)."""
    packer = Packer(keep=True)
    store: dict[str, str] = {}

    def asked(x: Any) -> Message:
        return Message(
            role="assistant", tool_calls=(ToolCall(id="c", name="t", arguments={"x": x}),)
        )

    first = (Message.user("q"), asked(1))
    packer.effect(Infer(messages=first))
    store.update(packer.take())
    second = Infer(messages=(Message.user("q"), asked(other), Message.user("go")))
    packed = packer.effect(second)
    store.update(packer.take())
    assert unpack_effect(packed.text, lookup(store)) == canonical_json(second)
    assert packer.earlier == 1  # the first message is still shared


def test_a_secret_is_replaced_before_its_piece_is_hashed() -> None:
    secret = "hunter2-very-secret"
    packer = Packer(lambda t: t.replace(secret, "[redacted]"), keep=True)
    result = ToolResult(output=f"the password is {secret} " + "x" * 500)
    packed = packer.result(result, canonical_json(result))
    store = packer.take()
    assert secret not in packed.text and all(secret not in b for b in store.values())
    assert all(digest(body) == h for h, body in store.items())
    assert "[redacted]" in (unpack_result("tool", packed.text, lookup(store)) or "")


# -- a long conversation, end to end ------------------------------------------------------------


def test_a_400_turn_conversation_crashed_resumed_and_replayed(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from interpreters import run\n"
            "from tests.fixtures.conversation_programs import TOOLS, ReadingModel, reader\n"
            f"run(reader, 400, model=ReadingModel(400), tools=TOOLS, db={str(db)!r}, "
            "run_id='long')\n",
        ],
        cwd=ROOT,
        env={**os.environ, "OPDSL_TEST_PAUSE": "0.003", "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if db.exists():
                # read through opdsl's own SQLite: two copies of SQLite in one process must
                # never hold one file open together (their POSIX locks clobber each other's)
                try:
                    seen = SqliteJournal(db, read_only=True)
                    n = len(seen.entries("long"))
                    seen.close()
                except JournalError:
                    continue
                if n >= 300:
                    break
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    crashed = SqliteJournal(db)
    assert crashed.run("long").status == "running"
    cut = len(crashed.entries("long"))
    assert 300 <= cut < 801, "the crash came too late to test a resume"
    crashed.close()

    resumed = resume("long", db=str(db), model=ReadingModel(400), tools=TOOLS)
    assert resumed.status == "completed" and resumed.value == "read 400 chunks in 803 messages"
    again = replay("long", db=str(db))
    assert again.value == resumed.value

    # the same run without a crash journals the same texts, entry for entry
    clean_db = tmp_path / "clean.db"
    clean = run(reader, 400, model=ReadingModel(400), tools=TOOLS, db=str(clean_db))
    left, right = SqliteJournal(db).entries("long"), SqliteJournal(clean_db).entries(clean.run_id)
    assert [(e.address, e.effect_json, e.result_json) for e in left] == [
        (e.address, e.effect_json, e.result_json) for e in right
    ]
    assert [e.seq for e in left] == list(range(len(left)))

    # what the journal holds grows with the conversation, not with its square
    _, history = _conversation(400)
    content = conversation_bytes(history)
    assert file_bytes(db) < 3 * content
    assert max(len(e.effect_json) for e in left) < 300
    whole = sum(len(unpack_effect(e.effect_json, _getter(db))) for e in left)
    assert whole > 100 * content  # what each infer stands for: the whole conversation


def _getter(db: Path) -> Any:
    pieces = pieces_of(db)
    return lookup(pieces)


def _conversation(turns: int) -> tuple[Response, list[Message]]:
    """The conversation ``reader(turns)`` ends with, built directly."""
    from tests.fixtures.conversation_programs import answer, read_chunk

    history = [Message.system("You read files."), Message.user("Read the file.")]
    while True:
        reply = answer(history, turns)
        history.append(reply.as_message())
        if not reply.tool_calls:
            return reply, history
        for call in reply.tool_calls:
            history.append(
                Message.tool_result(call, ToolResult(output=read_chunk(**call.arguments)))
            )


def test_a_program_that_edits_its_history_diverges_where_it_does(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    recorded = run(editor, 8, 0, model=ReadingModel(8), tools=TOOLS, db=db)
    assert recorded.status == "completed"
    assert replay(recorded.run_id, db=db).value == recorded.value
    with pytest.raises(Divergence) as caught:
        replay(recorded.run_id, db=db, args=(8, 5))
    text = str(caught.value)
    assert "at address 9" in text  # the fifth model call
    assert '-      "content": "Read the file."' in text
    assert '+      "content": "Read the other file."' in text


def test_equal_messages_that_are_new_objects_are_the_same_effect(tmp_path: Path) -> None:
    packer = Packer(keep=True)
    history = [Message.user("a" * 300), Message.user("b")]
    one = packer.effect(Infer(messages=tuple(history)))
    copied = [Message.model_validate(m.model_dump()) for m in history]
    assert packer.effect(Infer(messages=tuple(copied))).text == one.text


# -- old journals, exports, readers, gc -------------------------------------------------------------


def test_a_0_3_0_journal_of_a_conversation_answers_forks_and_replays(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    shutil.copy(FIXTURES / "v0.3.0.db", db)
    old = SqliteJournal(db, read_only=True)
    assert old.run("conversation").status == "waiting"
    before = old.entries("conversation")
    assert all('"$chain"' not in e.effect_json for e in before)  # written whole
    old.close()
    vouch_for(SqliteJournal(db), ["conversation"])  # opdsl trust: the user's own, from 0.3.0

    fork_db = tmp_path / "fork.db"
    shutil.copy(db, fork_db)
    answered = resume("conversation", db=str(db), answer="yes", model=ReadingModel(4), tools=TOOLS)
    assert answered.value == "read 8 chunks in 21 messages"
    journal = SqliteJournal(db)
    after = journal.entries("conversation")
    assert [e.effect_json for e in after[: len(before) - 1]] == [e.effect_json for e in before[:-1]]
    assert any('"$chain"' in e.effect_json for e in after[len(before) :])  # new ones packed
    assert replay("conversation", db=str(db)).value == answered.value
    version = journal._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchall()
    assert version == [("3",)]

    fork = resume("conversation", from_checkpoint="half", db=str(fork_db), tools=TOOLS)
    assert fork.status == "waiting"
    done = resume(fork.run_id, db=str(fork_db), answer="sure", model=ReadingModel(4), tools=TOOLS)
    assert done.value == "read 8 chunks in 21 messages"
    assert replay(fork.run_id, db=str(fork_db)).value == done.value


def _exported(tmp_path: Path) -> str:
    journal = MemoryJournal()
    result = run(reader, 30, model=ReadingModel(30), tools=TOOLS, db=journal)
    return export_run(journal, result.run_id)


def test_an_export_carries_each_piece_once_and_imports_whole(tmp_path: Path) -> None:
    text = _exported(tmp_path)
    _, history = _conversation(30)
    assert len(text.encode()) < 3 * conversation_bytes(history)
    target = SqliteJournal(tmp_path / "runs.db")
    record = import_run(target, text, source="long.jsonl")
    again = replay(record.run_id, db=target, program=reader)  # an import names no code
    assert again.value == "read 30 chunks in 63 messages"


@pytest.mark.parametrize(
    ("tamper", "says"),
    [
        ("drop", "which the file does not hold"),
        ("change", "its text does not have that hash"),
        ("reorder", "comes later or not at all"),
        ("count", "its chain does not hold"),
    ],
)
def test_a_hostile_import_is_refused_whole_naming_the_bad_reference(
    tmp_path: Path, tamper: str, says: str
) -> None:
    lines = _exported(tmp_path).splitlines()
    pieces = [i for i, line in enumerate(lines) if line.startswith('{"piece"')]
    text_piece = next(i for i in pieces if "lorem" in lines[i])
    if tamper == "drop":
        name = json.loads(lines[pieces[-1]])["piece"][0]
        del lines[pieces[-1]]
        says = f"{name}, {says}"
    elif tamper == "change":
        h, body = json.loads(lines[text_piece])["piece"]
        lines[text_piece] = json.dumps({"piece": [h, body.replace("lorem", "LOREM")]})
    elif tamper == "reorder":
        lines.insert(pieces[0], lines.pop(pieces[-1]))
    else:
        entry = next(i for i, line in enumerate(lines) if '\\"$chain\\"' in line)
        lines[entry] = lines[entry].replace('\\"n\\":', '\\"n\\":1', 1)
    target = SqliteJournal(tmp_path / "runs.db")
    with pytest.raises(JournalError, match=says) as caught:
        import_run(target, "\n".join(lines) + "\n", source="hostile.jsonl")
    assert "hostile.jsonl" in str(caught.value)
    assert target.runs() == [] and target.content_hashes() == set()  # nothing written


def test_readers_show_each_message_once(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    result = run(reader, 50, model=ReadingModel(50), tools=TOOLS, db=str(db))
    journal = SqliteJournal(db, read_only=True)
    data = report_data(journal.run(result.run_id), journal.entries(result.run_id), journal.content)
    infers = [e for e in data["entries"] if e["kind"] == "infer"]
    assert [len(e["effect"]["messages"]) for e in infers] == [2] * 51
    assert infers[-1]["effect"]["earlier"] == 100
    tools = [e for e in data["entries"] if e["kind"] == "tool"]
    assert tools[0]["result"]["output"].startswith("chunk 1: lorem")
    shown = subprocess.run(
        [sys.executable, "-m", "interpreters", "show", result.run_id, "--json", "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert shown.returncode == 0, shown.stderr
    entries = json.loads(shown.stdout)["entries"]
    seen = [
        json.dumps(m, sort_keys=True)
        for e in entries
        if e["kind"] == "infer"
        for m in e["effect"]["messages"]
    ]
    assert len(seen) == len(set(seen)) == 102  # every message the model was sent, once
    assert len(shown.stdout.encode()) < 3 * file_bytes(db)


def test_gc_removes_content_only_removed_runs_held(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    first = run(two_part_reader, 3, model=ReadingModel(3), tools=TOOLS, db=str(db))
    assert first.status == "waiting"
    done = resume(first.run_id, db=str(db), answer="yes", model=ReadingModel(3), tools=TOOLS)
    fork = resume(first.run_id, from_checkpoint="half", db=str(db), tools=TOOLS)
    assert done.status == "completed" and fork.status == "waiting"
    journal = SqliteJournal(db)
    everything = journal.content_hashes()
    assert drop_unreferenced(journal) == 0  # every piece is someone's
    journal.delete_run(first.run_id)
    gone = drop_unreferenced(journal)
    assert 0 < gone < len(everything)  # the fork keeps what it shares with its parent
    answered = resume(fork.run_id, db=str(db), answer="again", model=ReadingModel(3), tools=TOOLS)
    assert replay(fork.run_id, db=str(db)).value == answered.value
    journal.delete_run(fork.run_id)
    drop_unreferenced(journal)
    assert journal.content_hashes() == set()


def test_a_text_that_looks_like_a_hash_is_content_not_a_reference(tmp_path: Path) -> None:
    looks = "0123456789abcdef" * 4

    def sha(path: str) -> str:
        """A tool whose output is a hash, as `sha256sum` prints one."""
        return f"{looks}  {path}"

    def hashing() -> Any:
        reply = yield from infer_hash(looks)
        result = yield from tool_call("sha", {"path": looks})
        return reply, result.output

    journal = MemoryJournal()
    done = run(hashing, model=ReadingModel(1), tools=[sha], db=journal)
    assert done.status == "completed", done.error
    text = export_run(journal, done.run_id)
    again = MemoryJournal()
    record = import_run(again, text, source="hashes.jsonl")
    assert replay(record.run_id, db=again, program=hashing).value == done.value
    assert drop_unreferenced(again) == 0


@pytest.mark.parametrize("kept", ["text", "compressed"])
def test_a_piece_changed_in_the_file_is_refused_not_fed_to_the_program(
    tmp_path: Path, kept: str
) -> None:
    db = tmp_path / "runs.db"
    done = run(reader, 3, model=ReadingModel(3), tools=TOOLS, db=str(db))
    journal = SqliteJournal(db)
    (h,) = [h for h, body in journal.content(journal.content_hashes()).items() if "chunk 2" in body]
    forged = journal.content([h])[h].replace("lorem", "FORGED")
    body = forged if kept == "text" else zlib.compress(forged.encode())
    journal._db.execute("UPDATE content SET body=? WHERE hash=?", (body, bytes.fromhex(h)))
    journal.close()
    with pytest.raises(JournalError, match=f"piece {h} does not hold the text its hash names"):
        replay(done.run_id, db=str(db))


_FDICT = 0x20  # the bit of a zlib stream's second byte that says it needs a dictionary


def _pieces_as_kept(db: Path) -> dict[str, str | bytes]:
    """The content table as the file holds it (read through the journal's own SQLite)."""
    journal = SqliteJournal(db, read_only=True)
    rows = journal._db.execute("SELECT hash, body FROM content").fetchall()
    journal.close()
    kept: dict[str, str | bytes] = {}
    for key, body in rows:
        assert isinstance(key, bytes) and isinstance(body, str | bytes)
        kept[key.hex()] = body
    return kept


def test_texts_are_kept_compressed_and_pieces_named_by_their_text(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    done = run(reader, 3, model=ReadingModel(3), tools=TOOLS, db=str(db))
    kept = _pieces_as_kept(db)
    journal = SqliteJournal(db, read_only=True)
    texts = journal.content(kept)
    assert all(digest(texts[h]) == h for h in kept)  # named by the text, however kept
    for h, body in kept.items():
        if len(texts[h]) >= COMPRESS_MIN:  # the three tool results: zlib's whole window
            assert isinstance(body, bytes) and not body[1] & _FDICT and len(body) < 200
        elif len(texts[h]) >= SHORT_MIN:  # chain nodes: a stream that names the dictionary
            assert isinstance(body, bytes) and body[1] & _FDICT and len(body) < len(texts[h])
            assert zlib.decompressobj(zdict=DICTIONARY).decompress(body) == texts[h].encode()
        else:
            assert isinstance(body, str)
    # an entry's result too (its effect stays canonical JSON, for SQLite's own tools)
    rows = journal._db.execute("SELECT kind, effect_json, result_json FROM entries").fetchall()
    results = {
        (type(result), len(kept_body(result, "a result")) >= SHORT_MIN)
        for kind, _, result in rows
        if kind == "infer"
    }
    assert (bytes, True) in results and results <= {(bytes, True), (str, False)}
    assert {type(effect) for _, effect, _ in rows} == {str}
    entries = journal.entries(done.run_id)
    assert all(isinstance(e.effect_json, str) for e in entries)
    assert journal._db.pragma("page_size") == 8192  # a new file's
    journal.close()
    assert replay(done.run_id, db=str(db)).value == done.value
    # the in-memory journal keeps them the same way, and gives back the same texts
    memory = MemoryJournal()
    memory.put_content(texts)
    assert {type(b) for b in memory._content.values()} == {type(b) for b in kept.values()}
    assert memory.content(texts) == texts
    again = run(reader, 3, model=ReadingModel(3), tools=TOOLS, db=memory)
    assert [e.effect_json for e in memory.entries(again.run_id)] == [e.effect_json for e in entries]


def test_a_0_3_0_file_keeps_its_page_size_when_upgraded(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "v0.3.0.db", db)
    journal = SqliteJournal(db)
    assert journal._db.pragma("page_size") == 4096
    run_id = journal.runs()[0].run_id
    journal.close()
    assert replay(run_id, db=str(db), program=two_part_reader).status == "waiting"  # its ask


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (zlib.compress(b"x" * (64 * 2**20 + 1)), "unpacks to more than 64 MiB"),
        (b"\x78\x9c not zlib at all", "is not a compressed text"),
        (zlib.compress(b"{}" * 400)[:-6], "is a compressed text that was cut short"),
        (zlib.compress(b"\xff\xfe" * 400), "does not unpack to UTF-8 text"),
        (12345, "does not hold the text its hash names"),  # TEXT affinity: "12345"
    ],
    ids=["bomb", "corrupt", "cut", "not-utf8", "a-number"],
)
def test_a_hostile_compressed_piece_is_refused_naming_it(
    tmp_path: Path, body: bytes | int, error: str
) -> None:
    db = tmp_path / "runs.db"
    done = run(reader, 3, model=ReadingModel(3), tools=TOOLS, db=str(db))
    journal = SqliteJournal(db)
    (h,) = [h for h, text in journal.content(journal.content_hashes()).items() if "chunk 1" in text]
    journal._db.execute("UPDATE content SET body=? WHERE hash=?", (body, bytes.fromhex(h)))
    journal.close()
    for reader_of in (
        lambda: replay(done.run_id, db=str(db)),
        lambda: SqliteJournal(db, read_only=True).content([h]),
    ):
        with pytest.raises(JournalError, match=f"journal {db}: piece {h} {error}"):
            reader_of()
    # nothing else was touched: the other pieces still read
    journal = SqliteJournal(db, read_only=True)
    others = journal.content_hashes() - {h}
    assert len(journal.content(others)) == len(others)
    assert journal.content(["not a hash", "ab" * 40]) == {}
    journal.close()


def test_an_entry_whose_kept_result_is_hostile_is_refused_naming_it(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    done = run(reader, 3, model=ReadingModel(3), tools=TOOLS, db=str(db))
    journal = SqliteJournal(db)
    infers = [e.address for e in journal.entries(done.run_id) if e.kind == Infer.kind]
    address = infers[1]
    journal._db.execute(
        "UPDATE entries SET result_json=? WHERE address=?",
        (zlib.compress(b"x" * (64 * 2**20 + 1)), address),
    )
    journal.close()
    error = f"entry {address} of run {done.run_id}: its result unpacks to more than 64 MiB"
    with pytest.raises(JournalError, match=error):
        SqliteJournal(db, read_only=True).entries(done.run_id)
    with pytest.raises(JournalError, match=error):
        replay(done.run_id, db=str(db))
