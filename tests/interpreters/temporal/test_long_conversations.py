"""A long conversation on Temporal: content travels by reference (the content store), so a run
whose conversation is far over the server's payload limit completes, continues as new by the
bytes of its history with its journal's pieces carried along, survives the worker that held it
and reads back whole; where content travels inline, passing a limit is an error that says which
limit, where, and what to change, never a run left retrying."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message as ProtoMessage
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowExecutionStatus

from interpreters import MemoryJournal, import_run, replay
from interpreters.journal._content import Reader
from interpreters.temporal import (
    ContentCodec,
    ContentMissing,
    DirectoryStore,
    RunOutcome,
    TemporalJournal,
    connect,
    export,
    make_worker,
    outcome,
    read_export,
    start_run,
)
from interpreters.temporal import _workflow as workflow_module
from op import Infer, Message, Tool, ToolResult
from state import canonical_json
from tests.fixtures.conversation_programs import TOOLS, ReadingModel, answer, read_chunk, reader
from tests.interpreters.temporal import programs
from tests.interpreters.temporal import tools as test_tools
from tests.interpreters.temporal.conftest import PAYLOAD_LIMIT, Server, stop_workers

ROOT = Path(__file__).resolve().parents[3]
READER = "tests.fixtures.conversation_programs:reader"
CHUNK = 10_000


@asynccontextmanager
async def reading(
    server: Server, queue: str, turns: int, *, content: Any = None
) -> AsyncIterator[Client]:
    """A worker in this process for the reading program (``content``: as for ``connect``)."""
    client = await connect(server.target, content=content)
    worker = make_worker(
        client,
        task_queue=queue,
        programs=[READER, f"{programs.__name__}:scoped_steps"],
        tools=[*TOOLS, test_tools.slow],
        model=ReadingModel(turns),
        passthrough=("tests", "programs"),
    )
    async with worker:
        yield client


def _whole_infer(text: str) -> Infer:
    """The last ``infer`` effect of an export, whole (its messages rebuilt from its pieces)."""
    exported = read_export(text)
    last = [e for e in exported.entries if e.kind == "infer"][-1]
    from interpreters.journal._content import lookup, unpack_effect

    whole = json.loads(unpack_effect(last.effect_json, lookup(exported.pieces)))
    return Infer(messages=tuple(Message.model_validate(m) for m in whole["messages"]))


def _payload_sizes(history: Any) -> list[int]:
    """The size of every payload an event of ``history`` holds."""
    sizes: list[int] = []

    def walk(message: Any) -> None:
        if isinstance(message, Payload):
            sizes.append(message.ByteSize())
            return
        for field, value in message.ListFields():
            if field.type != field.TYPE_MESSAGE:
                continue
            if isinstance(value, ProtoMessage):
                walk(value)
                continue
            for item in value.values() if hasattr(value, "values") else value:
                if isinstance(item, ProtoMessage):
                    walk(item)

    for event in history.events:
        walk(event)
    return sizes


def test_a_conversation_over_the_payload_limit_completes_and_reads_back_whole(
    temporal: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = 40  # 400 KB of tool results: the last model call alone is over the server's limit
    monkeypatch.setenv("OPDSL_TEST_CHUNK", str(CHUNK))
    whole = canonical_json(_last_call(turns))
    assert len(whole) > PAYLOAD_LIMIT  # sent whole, as before, Temporal refuses it

    async def main() -> tuple[RunOutcome, str, list[Any], list[int]]:
        async with reading(temporal, "long-talk", turns) as client:
            handle = await start_run(
                client,
                READER,
                task_queue="long-talk",
                args=(turns,),
                run_id="long-talk-1",
                history_bytes=64 * 1024,  # continue as new by bytes, several times
            )
            got = await asyncio.wait_for(outcome(handle), 120)
            text = await export(client, "long-talk-1")
            runs = [wf async for wf in client.list_workflows('WorkflowId="long-talk-1"')]
            sizes: list[int] = []
            for wf in runs:
                history = await client.get_workflow_handle(
                    "long-talk-1", run_id=wf.run_id
                ).fetch_history()
                sizes += _payload_sizes(history)
            return got, text, runs, sizes

    got, text, runs, sizes = asyncio.run(main())
    assert got.status == "completed", got
    assert json.loads(got.result_json or "null") == (
        f"read {turns} chunks in {2 + 2 * turns + 1} messages"
    )
    # it continued as new by the bytes of its history, carrying the journal's pieces along
    assert len(runs) >= 2
    assert (
        sum(wf.status == WorkflowExecutionStatus.CONTINUED_AS_NEW for wf in runs) == len(runs) - 1
    )
    # no payload of any run of it holds the conversation: each piece travelled by reference
    assert max(sizes) <= 16 * 1024, max(sizes)  # the larger ones are stored whole
    assert sum(sizes) < turns * CHUNK, sum(sizes)

    # the journal read back is whole: every entry, the conversation and each tool result in it
    exported = read_export(text)
    assert len(exported.entries) == 2 * turns + 1
    assert _whole_infer(text).messages == _last_call(turns).messages
    assert len(text) < 3 * turns * CHUNK  # each tool result once, not once a model call

    # read through the Temporal journal, as show and report do: each message once
    remote = TemporalJournal(temporal.target)
    entries = remote.entries("long-talk-1")
    shown = Reader(remote.content)
    fresh = [shown.effect(e.kind, e.effect_json) for e in entries if e.kind == "infer"]
    assert sum(len(f["messages"]) for f in fresh) == 2 + 2 * turns
    assert fresh[-1]["messages"][-1]["content"] == read_chunk(turns)

    # and the command line, in another process, finds the content in the same store
    shown_cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "interpreters",
            "show",
            "long-talk-1",
            "--temporal",
            temporal.target,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown_cli.returncode == 0, shown_cli.stderr
    assert f"read {turns} chunks" in shown_cli.stdout

    # a local replay of the export agrees with the run
    local = MemoryJournal()
    import_run(local, text, source="long-talk-1.jsonl")
    again = replay("long-talk-1", db=local, program=reader)
    assert again.status == "completed" and again.value == json.loads(got.result_json or "null")


def _last_call(turns: int) -> Infer:
    """The model call after ``turns`` tool results, as the reading program makes it."""
    messages = [Message.system("You read files."), Message.user("Read the file.")]
    for i in range(1, turns + 1):
        response = answer(messages, turns)
        messages.append(response.as_message())
        result = ToolResult(ok=True, output=read_chunk(i))
        messages.append(Message.tool_result(response.tool_calls[0], result))
    return Infer(messages=tuple(messages), tools=("read_chunk",))


@pytest.fixture
def two_workers(temporal: Server, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    stop_workers(procs)


def _conversation_worker(
    server: Server, queue: str, turns: int, log: Path
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OPDSL_TEST_CHUNK": str(CHUNK),
        "OPDSL_TEST_PAUSE": "0.05",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.interpreters.temporal.conversation_worker"]
        + [server.target, queue, str(turns)],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while b"serving" not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the worker did not start: {log.read_text()}")
        time.sleep(0.1)
    return process


def test_a_worker_killed_mid_conversation_the_run_ends_on_another_from_the_store(
    temporal: Server,
    tmp_path: Path,
    two_workers: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker that ran the first turns (and holds the conversation in memory) is killed;
    a worker that saw none of it takes the run over, with only the content store to read the
    conversation from, and the run ends as it would have."""
    turns = 24
    monkeypatch.setenv("OPDSL_TEST_CHUNK", str(CHUNK))
    first = _conversation_worker(temporal, "talk-kill", turns, tmp_path / "first.log")
    two_workers.append(first)

    async def main() -> tuple[RunOutcome, str]:
        client = await connect(temporal.target)
        handle = await start_run(
            client, READER, task_queue="talk-kill", args=(turns,), run_id="talk-kill-1"
        )
        while (await handle.describe()).history_length < 12 * 8:  # eight turns or so
            await asyncio.sleep(0.05)
        second = _conversation_worker(temporal, "talk-kill", turns, tmp_path / "second.log")
        two_workers.append(second)
        first.send_signal(signal.SIGKILL)
        got = await asyncio.wait_for(outcome(handle), 120)
        return got, await export(client, "talk-kill-1")

    got, text = asyncio.run(main())
    assert first.poll() == -signal.SIGKILL
    assert got.status == "completed", got
    assert json.loads(got.result_json or "null") == (
        f"read {turns} chunks in {2 + 2 * turns + 1} messages"
    )
    entries = read_export(text).entries
    assert [e.address for e in entries] == [str(i) for i in range(1, 2 * turns + 2)]
    assert all(e.status == "completed" for e in entries)
    assert _whole_infer(text).messages[-1].content == read_chunk(turns)
    assert "missing" not in (tmp_path / "second.log").read_text()


def test_with_content_inline_a_limit_is_an_error_that_says_which_and_where(
    temporal: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No content store: a conversation grows past the payload limit (the model call cannot
    be sent) and a tool result is over it (it cannot come back); each run ends at once, failed,
    saying which limit, at which address, and what to do."""
    monkeypatch.setenv("OPDSL_TEST_CHUNK", str(PAYLOAD_LIMIT // 3))

    async def main() -> tuple[RunOutcome, RunOutcome, float]:
        async with reading(temporal, "inline", 20, content="inline") as client:
            started = time.monotonic()
            grows = await asyncio.wait_for(
                outcome(
                    await start_run(
                        client, READER, task_queue="inline", args=(20,), run_id="inline-1"
                    )
                ),
                60,
            )
            took = time.monotonic() - started
        monkeypatch.setenv("OPDSL_TEST_CHUNK", str(PAYLOAD_LIMIT + 1000))
        async with reading(temporal, "inline2", 20, content="inline") as client:
            big = await asyncio.wait_for(
                outcome(
                    await start_run(
                        client, READER, task_queue="inline2", args=(20,), run_id="inline-2"
                    )
                ),
                60,
            )
        return grows, big, took

    grows, big, took = asyncio.run(main())
    assert took < 30
    assert grows.status == "failed", grows
    assert "the infer effect at address 7 is" in (grows.error or ""), grows.error
    assert "over Temporal's payload limit of 256 KiB (limit.blobSize.error)" in (grows.error or "")
    assert "OPDSL_TEMPORAL_CONTENT=FOLDER" in (grows.error or "")
    assert big.status == "failed", big
    assert "the result of the tool effect at address 2 is" in (big.error or ""), big.error
    assert "limit.blobSize.error" in (big.error or "") and "return less" in (big.error or "")


def test_with_content_inline_a_journal_too_large_to_carry_ends_the_run_saying_so(
    temporal: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No content store, and a history long enough to continue as new often: once the journal
    it would carry is over the payload limit, the run ends there, saying so."""
    monkeypatch.setenv("OPDSL_TEST_CHUNK", str(PAYLOAD_LIMIT // 5))

    async def main() -> RunOutcome:
        async with reading(temporal, "inline3", 20, content="inline") as client:
            handle = await start_run(
                client,
                READER,
                task_queue="inline3",
                args=(20,),
                run_id="inline-3",
                history_bytes=64 * 1024,
            )
            return await asyncio.wait_for(outcome(handle), 60)

    got = asyncio.run(main())
    assert got.status == "failed", got
    error = got.error or ""
    assert "TemporalLimit" in error and "cannot be carried into the new run" in error, error
    assert "payload limit is 256 KiB (limit.blobSize.error)" in error
    assert "OPDSL_TEMPORAL_CONTENT=FOLDER" in error


def test_a_history_near_its_hard_limit_inside_a_scope_ends_the_run_saying_so(
    temporal: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a scope a run cannot continue as new: near Temporal's hard limit on events (made
    small here) it ends with the limit, the address and what to change."""
    monkeypatch.setattr(workflow_module, "HARD_EVENTS", 60)

    async def main() -> RunOutcome:
        async with reading(temporal, "scoped", 1) as client:
            handle = await start_run(
                client, programs.scoped_steps, task_queue="scoped", args=(40,), run_id="scoped-1"
            )
            return await asyncio.wait_for(outcome(handle), 60)

    got = asyncio.run(main())
    assert got.status == "failed", got
    error = got.error or ""
    assert "TemporalLimit" in error and "limit.historyCount.error" in error, error
    assert "inside the scope at address 1" in error and "split that scope's work" in error


def test_the_store_and_the_codec_keep_each_piece_once_and_refuse_what_is_wrong(
    tmp_path: Path,
) -> None:
    from temporalio.converter import DataConverter

    from interpreters.journal._content import digest
    from interpreters.temporal import EffectReader
    from interpreters.temporal._types import EffectCall

    store = DirectoryStore(tmp_path / "store")
    assert DirectoryStore(tmp_path / "store").ident == store.ident  # one store, one id
    codec = ContentCodec(store, payload_limit=PAYLOAD_LIMIT)
    converter = DataConverter(payload_codec=codec)
    long = "x" * 5000
    body = json.dumps(long)
    call = EffectCall("r", "1", '{"kind":"checkpoint","name":"a"}', {digest(body): body})
    big = EffectCall("r", "2", json.dumps({"kind": "checkpoint", "name": "y" * 300_000}))

    async def round_trip() -> tuple[list[Payload], list[Any]]:
        encoded = await converter.encode([call, big])
        return encoded, await converter.decode(encoded, [EffectCall, EffectCall])

    encoded, decoded = asyncio.run(round_trip())
    assert decoded == [call, big]
    assert all(p.ByteSize() < 1024 for p in encoded)  # hashes, not content
    assert len([p for p in (tmp_path / "store").rglob("*") if p.is_file()]) == 3  # id + 2
    again = asyncio.run(converter.encode([call]))
    assert again[0] == encoded[0]  # the same bytes: named by content

    # another process with the same store reads it; one with another store is told why not
    other = DataConverter(payload_codec=ContentCodec(DirectoryStore(tmp_path / "store")))
    assert asyncio.run(other.decode(encoded, [EffectCall, EffectCall])) == [call, big]
    elsewhere = DataConverter(payload_codec=ContentCodec(DirectoryStore(tmp_path / "other")))
    with pytest.raises(ContentMissing, match="not in the content store at .*other.*every worker"):
        asyncio.run(elsewhere.decode(encoded, [EffectCall, EffectCall]))
    inline = DataConverter(payload_codec=ContentCodec(None))
    with pytest.raises(ContentMissing, match="this process has none"):
        asyncio.run(inline.decode(encoded, [EffectCall, EffectCall]))

    # a worker rebuilds a packed conversation from the call's pieces and the store, and a tool
    # call's long arguments from theirs
    from interpreters.journal._content import Packer

    packer = Packer(keep=False)
    messages = (Message.system("s"), Message.user(long), Message.user("more " * 100))
    first = packer.effect(Infer(messages=messages[:2]))
    second = packer.effect(Infer(messages=messages))
    assert len(second.pieces) < len(first.pieces) + 2
    store.put({h: t.encode() for h, t in first.pieces.items()})
    worker = EffectReader(store)
    rebuilt = worker.read(EffectCall("r", "3", second.text, dict(second.pieces)))
    assert isinstance(rebuilt, Infer) and rebuilt.messages == messages
    args = {"text": long}
    packed_tool = packer.effect(Tool(name="t", args=args))
    tool_call = worker.read(EffectCall("r", "4", packed_tool.text, dict(packed_tool.pieces)))
    assert isinstance(tool_call, Tool) and tool_call.args == args

    # a file changed in the store is refused, naming it, and the next write of it mends it
    name = next(
        p for p in (tmp_path / "store").rglob("*") if p.is_file() and p.stat().st_size > 400
    )
    name.write_bytes(name.read_bytes()[:-1] + b"!")
    fresh = DataConverter(payload_codec=ContentCodec(DirectoryStore(tmp_path / "store")))
    with pytest.raises(ContentMissing, match=f"holds {name.name} with other bytes"):
        asyncio.run(fresh.decode(encoded, [EffectCall, EffectCall]))
    asyncio.run(DataConverter(payload_codec=ContentCodec(store)).encode([call, big]))
    assert asyncio.run(fresh.decode(encoded, [EffectCall, EffectCall])) == [call, big]


def _opdsl_gc(target: str, content: Path) -> str:
    """``opdsl gc --temporal`` in a process of its own, with the tests' content store."""
    done = subprocess.run(
        [sys.executable, "-m", "interpreters", "gc", "--temporal", target, "--grace", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OPDSL_TEMPORAL_CONTENT": str(content)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_content_no_history_names_is_collected_and_what_one_names_is_kept(
    temporal: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two conversations share their first messages; once one run's history is gone, the
    content only it named is removed (not before, nor within the grace time) and the other
    reads back whole."""
    from interpreters.temporal import collect_garbage
    from interpreters.temporal._gc import KEPT

    content = tmp_path / "content"

    def files() -> set[str]:
        return {p.name for p in content.rglob("*") if p.is_file() and len(p.name) == 64}

    async def main() -> tuple[set[str], set[str], set[str], tuple[int, int], str]:
        async with reading(temporal, "gc", 3, content=content) as client:
            monkeypatch.setenv("OPDSL_TEST_CHUNK", "3000")
            a = await start_run(client, READER, task_queue="gc", args=(3,), run_id="gc-a")
            assert (await outcome(a)).status == "completed"
            only_a = files()
            monkeypatch.setenv("OPDSL_TEST_CHUNK", "4000")  # other tool results
            b = await start_run(client, READER, task_queue="gc", args=(3,), run_id="gc-b")
            assert (await outcome(b)).status == "completed"
            both = files()
            # nothing goes while a history names it, nor what was stored within the grace
            assert await collect_garbage(client) == (len(both), 0)
            assert await collect_garbage(client, grace_seconds=0) == (len(both), 0)
            said = await asyncio.to_thread(_opdsl_gc, temporal.target, content)
            assert said == (
                f"removed 0 piece(s) of content no run on {temporal.target} names; "
                f"kept {len(both)} (those stored in the last 0 s among them)\n"
            )
            # as once Temporal has removed run A's history (its retention passed): Temporal's
            # dev server takes half a minute to delete a run, so the runs kept are named
            gone = f'{KEPT} AND WorkflowId != "gc-a"'
            collected = await collect_garbage(client, grace_seconds=0, kept=gone)
            return only_a, both, files(), collected, await export(client, "gc-b")

    only_a, both, left, collected, text = asyncio.run(main())
    assert collected == (len(left), len(both) - len(left))
    removed = both - left
    assert removed and removed <= only_a  # only what run A stored went
    assert only_a & left  # what A stored and B shares (its first messages) stayed
    exported = read_export(text)
    assert len(exported.entries) == 7 and _whole_infer(text).messages[-1].content == read_chunk(3)


def test_the_conversation_bench_runs_both_workflows(
    temporal: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bench/temporal.py --conversation``'s measured path, made small: both the opdsl run and
    the plain workflow complete, and their histories are counted."""
    import importlib.util

    bench = ROOT / "bench"
    monkeypatch.syspath_prepend(str(bench))
    spec = importlib.util.spec_from_file_location("bench_temporal", bench / "temporal.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("OPDSL_TEST_CHUNK", "1000")
    got = asyncio.run(module.conversation(temporal.target, temporal.process.pid, 3, 1000))
    assert got["opdsl_runs"] == got["plain_runs"] == 1
    assert got["opdsl_events"] > 3 * 6 and got["plain_events"] > 3 * 6
    assert got["opdsl_bytes"] > 0 and got["plain_bytes"] > 0
    assert got["store_files"] >= 3  # each tool result once, and the chain's nodes
