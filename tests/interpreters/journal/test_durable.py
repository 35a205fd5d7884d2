"""Durable runs: the SQLite journal, resume in place, fork, replay, divergence, ask, dry-run."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interpreters import (
    CallInfo,
    Divergence,
    JournalError,
    MemoryJournal,
    RunLocked,
    ScriptedModel,
    SqliteJournal,
    check_integrity,
    dry_run,
    export_run,
    import_run,
    read_only,
    replay,
    resume,
    run,
)
from op import (
    Budget,
    Op,
    OpdslError,
    checkpoint,
    emit,
    infer,
    limit,
    now,
    par,
    sleep,
    timeout,
    tool,
)
from tests.fixtures.durable_programs import (
    TOOLS,
    Counted,
    appender,
    budgeted,
    chat,
    lines_of,
    stamped,
)
from tests.helpers import RawJournal

ROOT = Path(__file__).resolve().parents[3]


def test_journal_is_plain_sqlite_in_wal_mode_with_canonical_json(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    result = run(appender, str(tmp_path / "out.txt"), 2, tools=TOOLS, state=Counted(), db=str(db))
    assert result.status == "completed"
    con = RawJournal(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    rows = con.execute(
        "SELECT address, kind, status, effect_json FROM entries ORDER BY seq"
    ).fetchall()
    assert rows[0][:3] == ("1", "checkpoint", "completed")
    tool_row = next(r for r in rows if r[1] == "tool")
    assert json.loads(tool_row[3])["name"] == "append_line"
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "3"
    program, status = con.execute("SELECT program, status FROM runs").fetchone()
    assert (program, status) == ("tests.fixtures.durable_programs:appender", "completed")
    assert check_integrity(SqliteJournal(db), result.run_id) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"hello, I am a text file", r"is not an opdsl journal \(not a SQLite database\)"),
        (b"SQLite format 3\x00" + b"\x00" * 200, "corrupt or not an opdsl journal"),
    ],
)
def test_bad_journal_files_are_refused_and_left_alone(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "runs.db"
    path.write_bytes(content)
    with pytest.raises(JournalError, match=message):
        SqliteJournal(path)
    assert path.read_bytes() == content


def test_newer_schema_and_foreign_databases_are_refused(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    SqliteJournal(newer).close()
    con = RawJournal(newer)
    con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    con.close()
    with pytest.raises(JournalError, match="written by a newer opdsl \\(schema 99"):
        SqliteJournal(newer)
    other = tmp_path / "other.db"
    con = RawJournal(other)
    con.execute("CREATE TABLE invoices (id INTEGER)")
    con.close()
    with pytest.raises(
        JournalError, match="SQLite database of something else \\(tables: invoices\\)"
    ):
        SqliteJournal(other)


def test_a_second_writer_is_refused_naming_the_holder(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    journal = SqliteJournal(db)
    journal.acquire("run-1")
    code = textwrap.dedent(
        f"""
        from interpreters import SqliteJournal, RunLocked
        try:
            SqliteJournal({str(db)!r}).acquire("run-1")
        except RunLocked as exc:
            print(exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    import os

    assert f"run run-1 is being written by pid {os.getpid()}" in out.stdout, out.stderr
    journal.release("run-1")
    with pytest.raises(RunLocked, match="already being written by this process"):
        journal.acquire("run-2")
        journal.acquire("run-2")


def test_a_dead_holder_is_taken_over(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    dead = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from interpreters import SqliteJournal; SqliteJournal({str(db)!r}).acquire('r')",
        ],
        cwd=ROOT,
        check=True,
    )
    assert dead.returncode == 0
    SqliteJournal(db).acquire("r")  # the holder's process is gone: no error


HOLDS = """
import sys, time
from interpreters import SqliteJournal
journal = SqliteJournal(sys.argv[1])
journal.acquire("r")
print("holding", flush=True)
time.sleep(60)
"""


@contextlib.contextmanager
def holding(db: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process that holds run ``r`` of ``db`` (killed at the end)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDS, str(db)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _acquire_elsewhere(db: Path) -> subprocess.CompletedProcess[str]:
    code = f"from interpreters import SqliteJournal; SqliteJournal({str(db)!r}).acquire('r')"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)


def test_a_holder_that_looks_dead_from_here_but_lives_keeps_its_run(tmp_path: Path) -> None:
    """A holder in another PID namespace under the same host name (a container sharing the
    host's name) has a pid that means nothing here: the kernel's lock it holds says it lives."""
    db = tmp_path / "runs.db"
    with holding(db):
        journal = SqliteJournal(db)
        holder = str(
            journal._db.execute("SELECT holder FROM locks WHERE run_id='r'").fetchall()[0][0]
        )
        assert "\x1fkernel " in holder
        # its pid as seen from its own namespace: no process of this one has it
        journal._db.execute(
            "UPDATE locks SET pid=4194303, holder=? WHERE run_id='r'",
            (
                holder.replace(
                    holder.partition("\x1f")[0], "pid 4194303 on " + socket.gethostname()
                ),
            ),
        )
        assert journal.writer_alive("r") is True
        refused = _acquire_elsewhere(db)
        assert refused.returncode != 0
        assert "run r is being written by pid 4194303 on " in refused.stderr
        with pytest.raises(RunLocked, match="being written by pid 4194303"):
            journal.acquire("r")


def test_a_crashed_holder_of_a_container_that_is_gone_is_taken_over(tmp_path: Path) -> None:
    """A holder under another host name (a container, since removed, writing a journal on a
    volume of this machine: SQLite's WAL needs every writer on one machine) that crashed: the
    kernel let go of its lock, so its run is taken over (its pid could not be asked)."""
    db = tmp_path / "runs.db"
    with holding(db) as proc:
        journal = SqliteJournal(db)
        journal._db.execute("UPDATE locks SET host='gone-container' WHERE run_id='r'")
        assert journal.writer_alive("r") is True  # alive, whatever its host name
        proc.kill()
        proc.wait()
        assert journal.writer_alive("r") is False
        assert _acquire_elsewhere(db).returncode == 0  # taken over
    rows = SqliteJournal(db)._db.execute("SELECT host FROM locks WHERE run_id='r'").fetchall()
    assert rows == [(socket.gethostname(),)]  # named for the process that took it


def test_the_kernel_lock_holds_through_a_link_a_refusal_a_fork_and_a_new_lock_file(
    tmp_path: Path,
) -> None:
    """What another writer sees stays true: the journal named through a link is the same
    journal (one lock file, by its real path); a refused second acquire, or a child made by
    ``fork`` that releases, does not let go of the holder's lock; a lock file deleted under a
    holder does not make the holder look gone (its row names the file it locked in)."""
    db = tmp_path / "real" / "runs.db"
    db.parent.mkdir()
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "runs.db").symlink_to(db)
    with holding(db):
        refused = _acquire_elsewhere(tmp_path / "link" / "runs.db")
        assert "run r is being written by pid " in refused.stderr, refused.stderr
        (Path(str(db) + "-runlocks")).unlink()  # deleted under the holder
        refused = _acquire_elsewhere(db)
        assert "run r is being written by pid " in refused.stderr, refused.stderr
    journal = SqliteJournal(db)
    journal.acquire("r")  # the holder is gone: taken over by its pid, as rows without a lock
    with pytest.raises(RunLocked, match="already being written by this process"):
        journal.acquire("r")
    assert "being written by pid " in _acquire_elsewhere(db).stderr  # still held
    child = os.fork()
    if child == 0:  # the child shares the lock file's description: it lets go of its copy
        journal.release("r")
        os._exit(0)
    os.waitpid(child, 0)
    assert "being written by pid " in _acquire_elsewhere(db).stderr  # still held


def test_the_lock_file_takes_the_journals_mode_and_is_hidden_from_commands(
    tmp_path: Path,
) -> None:
    """Made as the journal is opened to be written, before any command starts, with read and
    write for the classes that may write the journal and nothing for the rest, whatever the
    umask (a reader's lock on it would stop every writer); a workspace command gets a
    stand-in, never it, wherever in the workspace the journal lies."""
    from interpreters.tools._sandbox import _read_only

    db = tmp_path / "runs.db"
    locks = Path(str(db) + "-runlocks")
    for given, made in ((0o664, 0o660), (0o644, 0o600)):  # no rights for who only reads
        SqliteJournal(db).close()
        locks.unlink()
        db.chmod(given)
        old = os.umask(0o077)
        try:
            SqliteJournal(db).close()  # made as the journal is opened to be written
        finally:
            os.umask(old)
        assert oct(locks.stat().st_mode & 0o777) == oct(made)
    argv = _read_only(tmp_path, db)
    assert argv[argv.index(str(locks)) - 1] == "/dev/null"
    assert argv[argv.index(str(db)) + 1] == str(db)  # the journal itself, read-only
    # a journal in a folder of the workspace (.opdsl/runs.db): the folder, the lock file hidden
    folder = tmp_path / ".opdsl"
    folder.mkdir()
    SqliteJournal(folder / "runs.db").close()
    for place in (folder, folder / "runs.db"):
        argv = _read_only(tmp_path, place)
        assert argv[:3] == ["--ro-bind", str(folder), str(folder)]
        assert argv[argv.index(str(folder / "runs.db-runlocks")) - 1] == "/dev/null"


@pytest.mark.parametrize("planted", ["fifo", "link", "folder"])
def test_a_lock_file_planted_beside_a_handed_journal_is_not_used(
    tmp_path: Path, planted: str
) -> None:
    """A journal someone hands over may come with anything at ``runs.db-runlocks``: a FIFO
    (an open must not hang), a link (never followed: what it names is not touched), a folder.
    None is used; the lock rows decide, as where kernel locks cannot be had."""
    db = tmp_path / "runs.db"
    SqliteJournal(db).close()
    locks = Path(str(db) + "-runlocks")
    locks.unlink()
    target = tmp_path / "elsewhere"
    target.write_text("kept")
    if planted == "fifo":
        os.mkfifo(locks)
    elif planted == "link":
        locks.symlink_to(target)
    else:
        locks.mkdir()
    journal = SqliteJournal(db)
    journal.acquire("r")
    holder = str(journal._db.execute("SELECT holder FROM locks").fetchall()[0][0])
    assert "\x1fkernel" not in holder  # no kernel lock was had: the row alone holds
    assert "run r is being written by pid " in _acquire_elsewhere(db).stderr
    journal.release("r")
    journal.close()
    assert target.read_text() == "kept"


def test_an_old_holders_row_is_judged_by_its_pid_as_before(tmp_path: Path) -> None:
    """A row written by an opdsl before kernel locks: no kernel lock stands for it, so a live
    pid of this machine still holds, and another host name is not taken over."""
    db = tmp_path / "runs.db"
    journal = SqliteJournal(db)
    journal._db.execute(
        "INSERT INTO locks (run_id, holder, pid, host) VALUES ('r', ?, ?, ?)",
        (f"pid {os.getpid()} on {socket.gethostname()}", os.getpid(), socket.gethostname()),
    )
    refused = _acquire_elsewhere(db)
    assert "run r is being written by pid " in refused.stderr
    journal._db.execute("UPDATE locks SET host='elsewhere', holder='pid 1 on elsewhere'")
    assert "being written by pid 1 on elsewhere" in _acquire_elsewhere(db).stderr


def test_a_dead_holders_pid_taken_by_another_process_is_taken_over(tmp_path: Path) -> None:
    """A crashed holder's pid that a live process of this machine has taken since: the lock
    names when its holder started, and that process started at another time, so it is not the
    holder (the run was held until that process ended). The holder itself still holds."""
    from interpreters.journal._sqlite import _lock_holder, _started

    db = tmp_path / "runs.db"
    SqliteJournal(db).acquire("r")  # this process holds it: its lock is a live one
    other = subprocess.Popen(["sleep", "60"])
    try:
        started = _started(other.pid)
        assert started is not None
        journal = SqliteJournal(db)
        # the lock as the holder wrote it, its pid since taken by `sleep`
        journal._db.execute(
            "UPDATE locks SET pid=?, holder=? WHERE run_id='r'",
            (other.pid, f"pid {other.pid} on {socket.gethostname()}\x1fstarted {int(started) - 1}"),
        )
        assert journal.writer_alive("r") is False
        code = f"from interpreters import SqliteJournal; SqliteJournal({str(db)!r}).acquire('r')"
        taken = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
        )
        assert taken.returncode == 0, taken.stderr  # taken over, not "being written by"
        # the holder as it is: its start time matches, and it holds
        holder = _lock_holder(kernel=None)  # as an opdsl before kernel locks wrote it
        journal._db.execute(
            "UPDATE locks SET pid=?, holder=? WHERE run_id='r'", (os.getpid(), holder)
        )
        assert journal.writer_alive("r") is True
        refused = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
        )
        assert refused.returncode != 0
        assert f"run r is being written by pid {os.getpid()} on " in refused.stderr
        assert "started" not in refused.stderr.splitlines()[-1]
    finally:
        other.kill()
        other.wait()


def _crash_after(n_tools: int):  # type: ignore[no-untyped-def]
    """A tool that stops the process (KeyboardInterrupt) on its n-th call."""
    calls = {"n": 0}

    def append_line(path: str, text: str, call: CallInfo) -> str:
        calls["n"] += 1
        if calls["n"] == n_tools:
            raise KeyboardInterrupt
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{call.idempotency_key} {text}\n")
        return f"appended {text}"

    return append_line


def test_resume_in_place_performs_no_completed_effect_twice(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    journal = MemoryJournal()
    with pytest.raises(KeyboardInterrupt):
        run(
            appender, str(out), 5, tools=[_crash_after(4)], state=Counted(), db=journal, run_id="r1"
        )
    assert journal.run("r1").status == "cancelled"
    assert len(lines_of(out)) == 3
    result = resume("r1", db=journal, tools=TOOLS)
    assert result.status == "completed" and result.value["n"] == 5
    texts = [line.split(" ", 1)[1] for line in lines_of(out)]
    assert texts == [f"line {i}" for i in range(5)], "each line once, in order"
    assert check_integrity(journal, "r1") == []
    uninterrupted = run(
        appender, str(tmp_path / "o2.txt"), 5, tools=TOOLS, state=Counted(), db=journal
    )
    assert uninterrupted.value == result.value
    assert uninterrupted.state is not None and result.state is not None
    assert uninterrupted.state.canonical() == result.state.canonical()


def test_an_effect_left_started_is_performed_again_with_the_same_idempotency_key(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    out = tmp_path / "out.txt"
    first = run(appender, str(out), 2, tools=TOOLS, state=Counted(), db=str(db))
    # make the record look like a crash right after the second tool call began
    con = RawJournal(db)
    addr = con.execute(
        "SELECT address FROM entries WHERE kind='tool' ORDER BY seq DESC LIMIT 1"
    ).fetchone()[0]
    con.execute(
        "DELETE FROM entries WHERE seq > (SELECT seq FROM entries WHERE address=?)", (addr,)
    )
    con.execute("UPDATE entries SET status='started', result_json=NULL WHERE address=?", (addr,))
    con.execute("UPDATE runs SET status='running'")
    con.close()
    again = resume(first.run_id, db=str(db))
    assert again.value == first.value
    keys = [line.split(" ")[0] for line in lines_of(out)]
    assert keys == [f"{first.run_id}:3", f"{first.run_id}:5", f"{first.run_id}:5"]


def test_fork_from_a_checkpoint_leaves_the_parent_untouched(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    out = tmp_path / "out.txt"
    parent = run(appender, str(out), 4, tools=TOOLS, state=Counted(), db=db)
    journal = SqliteJournal(db)
    before = export_run(journal, parent.run_id)
    lines_before = len(lines_of(out))
    fork = resume(parent.run_id, db=db, from_checkpoint="line-3")
    assert fork.run_id != parent.run_id and fork.value == parent.value
    assert len(lines_of(out)) == lines_before + 1, "only the effects after the checkpoint ran again"
    assert export_run(journal, parent.run_id) == before
    record = journal.run(fork.run_id)
    assert (record.parent_run, record.fork_checkpoint) == (parent.run_id, "line-3")
    assert check_integrity(journal, fork.run_id) == []
    # the k-th visit of a name, and names that do not exist
    assert resume(parent.run_id, db=db, from_checkpoint="start#1").status == "completed"
    with pytest.raises(
        OpdslError, match="'line-9' was never reached; checkpoints: end, line-0, line-3, start"
    ):
        resume(parent.run_id, db=db, from_checkpoint="line-9")
    with pytest.raises(OpdslError, match="'start' was reached 1 time"):
        resume(parent.run_id, db=db, from_checkpoint="start#2")


def test_replay_returns_the_same_value_and_state_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    original = run(stamped, db=str(db), seed=3)
    size = db.stat().st_size
    wal = (tmp_path / "runs.db-wal").read_bytes() if (tmp_path / "runs.db-wal").exists() else b""
    again = replay(original.run_id, db=str(db))
    assert again.value == original.value
    assert db.stat().st_size == size
    assert (
        (tmp_path / "runs.db-wal").read_bytes() if (tmp_path / "runs.db-wal").exists() else b""
    ) == wal
    forked = resume(original.run_id, db=str(db), from_checkpoint="mid")
    assert forked.value[:2] == original.value[:2], (
        "values before the checkpoint come from the record"
    )


def edited_before(path: str, count: int) -> Op[Any]:
    yield from checkpoint("start")
    yield from checkpoint("line-0")
    yield from tool("append_line", {"path": path + ".changed", "text": "line 0"})
    return None


def test_divergence_names_address_source_line_checkpoint_and_diff(tmp_path: Path) -> None:
    journal = MemoryJournal()
    original = run(appender, str(tmp_path / "o.txt"), 2, tools=TOOLS, state=Counted(), db=journal)
    with pytest.raises(Divergence) as info:
        replay(original.run_id, db=journal, program=_named(edited_before, "appender"))
    text = str(info.value)
    assert "diverged from its journal at address 3" in text
    assert "test_durable.py:" in text and "in edited_before" in text
    assert "nearest checkpoint before it: 'line-0' at address 2" in text
    assert '-    "path": "' in text and '+    "path": "' in text and ".changed" in text


def _named(fn: Any, name: str) -> Any:
    fn.__qualname__ = name
    fn.__module__ = "tests.fixtures.durable_programs"
    return fn


def test_reading_the_clock_directly_is_caught_on_replay(tmp_path: Path) -> None:
    import time

    def sloppy() -> Op[str]:
        yield from checkpoint("start")
        yield from emit("stamp", {"t": time.time()})  # time outside an effect
        return "done"

    journal = MemoryJournal()
    original = run(sloppy, db=journal)
    with pytest.raises(Divergence, match=r"at address 2 .*asks for a different effect"):
        replay(original.run_id, db=journal, program=sloppy)


def test_edits_after_the_resume_point_are_fine(tmp_path: Path) -> None:
    journal = MemoryJournal()
    original = run(appender, str(tmp_path / "o.txt"), 3, tools=TOOLS, state=Counted(), db=journal)

    def appender_v2(path: str, count: int) -> Op[Any]:
        value = yield from appender(path, count)
        yield from emit("new step after the end")
        return {**value, "v": 2}

    fork = resume(
        original.run_id, db=journal, program=_named(appender_v2, "appender"), from_checkpoint="end"
    )
    assert fork.value["v"] == 2 and fork.value["n"] == 3


def test_budgets_survive_a_resume_without_reset_or_double_count(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    journal = MemoryJournal()
    with pytest.raises(KeyboardInterrupt):
        run(budgeted, str(out), tools=[_crash_after(2)], db=journal, run_id="b")
    result = resume("b", db=journal, tools=TOOLS)
    assert result.value == "ran out after 2"
    assert [line.split(" ", 1)[1] for line in lines_of(out)] == ["b0", "b1"]
    forked = resume("b", db=journal, tools=TOOLS, from_checkpoint="b1")
    assert forked.value == "ran out after 2"


def test_replay_never_re_times_a_timeout(tmp_path: Path) -> None:
    def slow() -> Op[Any]:
        first = yield from timeout(0.05, sleep(5))
        second = yield from timeout(5, sleep(0.01))
        t = yield from now()
        return [first.failure().seconds if hasattr(first, "failure") else None, str(second), t > 0]

    journal = MemoryJournal()
    original = run(slow, db=journal)
    again = replay(original.run_id, db=journal, program=slow)
    assert again.value == original.value


def test_ask_waits_durably_and_answer_continues(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    waiting = run(
        chat, "release notes", db=db, model="scripted:" + _script(tmp_path, ["Here they are."])
    )
    assert waiting.status == "waiting"
    assert SqliteJournal(db).run(waiting.run_id).status == "waiting"
    with pytest.raises(KeyboardInterrupt):
        run(budgeted, str(tmp_path / "x"), tools=[_crash_after(1)], db=db, run_id="stopped")
    with pytest.raises(OpdslError, match="run stopped is not waiting for an answer"):
        resume("stopped", db=db, answer="x", tools=TOOLS)
    done = resume(waiting.run_id, db=db, answer="the ops team")
    assert done.value == "the ops team: Here they are."
    assert replay(waiting.run_id, db=db).value == done.value


def _script(tmp_path: Path, texts: list[str]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(texts))
    return str(path)


def test_resume_refuses_completed_runs_and_unknown_ones(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    done = run(stamped, db=db)
    with pytest.raises(OpdslError, match="already completed; replay it"):
        resume(done.run_id, db=db)
    with pytest.raises(JournalError, match="no run 'nope'"):
        resume("nope", db=db)


def test_export_and_import_round_trip_and_bad_files(tmp_path: Path) -> None:
    source = MemoryJournal()
    original = run(appender, str(tmp_path / "o.txt"), 2, tools=TOOLS, state=Counted(), db=source)
    text = export_run(source, original.run_id)
    target = SqliteJournal(tmp_path / "copy.db")
    import_run(target, text)
    assert (
        export_run(target, original.run_id).replace('\\"imported_from\\":\\"the file\\",', "")
        == text
    )
    with pytest.raises(OpdslError, match="was imported from the file"):
        replay(original.run_id, db=target)
    # its state type is code the file names, too: given again, or found in a module the
    # caller's code imported already (here, the program's own), or nothing runs
    assert replay(original.run_id, db=target, program=appender).value == original.value
    planted = MemoryJournal()
    import_run(planted, text.replace("tests.fixtures.durable_programs:Counted", "planted:Counted"))
    with pytest.raises(OpdslError, match="--state planted:Counted"):
        replay(original.run_id, db=planted, program=appender)
    assert "planted" not in sys.modules
    replayed = replay(original.run_id, db=planted, program=appender, state_type=Counted)
    assert replayed.value == original.value
    with pytest.raises(JournalError, match="line 2: expected an entry"):
        import_run(MemoryJournal(), text.splitlines()[0] + "\n{not json}\n", source="bad.jsonl")
    with pytest.raises(JournalError, match="already exists"):
        import_run(target, text)
    lines = text.splitlines()
    with pytest.raises(JournalError, match="entry numbers are not"):
        import_run(MemoryJournal(), "\n".join([lines[0], *lines[2:]]))
    # a hand-made address that no program could have: refused whole, and named
    for bad in ("x", "1..2", "0", "../1", "1.2 ", "9" * 30):
        line = json.loads(lines[1])
        line["entry"]["address"] = bad
        hostile = json.dumps(line)
        empty = MemoryJournal()
        with pytest.raises(JournalError, match="is not an address like 3 or 3.2.1"):
            import_run(empty, "\n".join([lines[0], hostile, *lines[2:]]))
        assert empty.runs() == []


def test_dry_run_runs_read_only_tools_and_records_the_rest() -> None:
    writes: list[str] = []

    @read_only
    def read_file(path: str) -> str:
        return f"contents of {path}"

    def write_file(path: str, content: str) -> str:
        writes.append(path)
        return "written"

    def program() -> Op[str]:
        yield from checkpoint("start")
        src = yield from tool("read_file", {"path": "a.py"})
        yield from limit(Budget(model_calls=3), infer(src.output))
        yield from tool("write_file", {"path": "a.py", "content": "x"})
        yield from par(tool("read_file", {"path": "b.py"}), timeout(5, sleep(1)))
        yield from checkpoint("done")
        return "ok"

    plan = dry_run(program, tools=[read_file, write_file])
    assert writes == []
    assert plan.status == "completed" and plan.value == "ok"
    assert plan.checkpoints == ["start", "done"]
    assert plan.would_run == ["write_file at 4"]
    assert plan.tools == ["read_file", "write_file"]
    assert plan.usage.input_tokens > 0
    text = plan.render()
    assert "ran: read-only" in text and "would run" in text and "stub" in text
    scripted = dry_run(program, tools=[read_file, write_file], model=ScriptedModel(["fine"]))
    assert "scripted" in scripted.render()


def test_events_of_the_replayed_prefix_are_not_sent_again(tmp_path: Path) -> None:
    from op.events import EffectStarted, Emitted
    from tests.helpers import Recorder

    out = tmp_path / "out.txt"
    journal = MemoryJournal()
    first = Recorder()
    with pytest.raises(KeyboardInterrupt):
        run(
            appender,
            str(out),
            4,
            tools=[_crash_after(3)],
            state=Counted(),
            db=journal,
            run_id="ev",
            on_event=first,
        )
    done = {e.address for e in journal.entries("ev") if e.status == "completed"}
    second = Recorder()
    resume("ev", db=journal, tools=TOOLS, on_event=second)
    again = {e.address for e in second.of(EffectStarted)}
    assert again and not (again & done), "no completed effect is announced twice"
    assert not second.of(Emitted) or all(e.address not in done for e in second.of(Emitted))
    second.check_protocol()
