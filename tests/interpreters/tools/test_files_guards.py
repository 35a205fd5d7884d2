"""The file tools' guards against a model that writes before it reads, in real git repositories:
an edit whose text is not there (or not once) is answered with the nearest passages, and a
tracked file is not shrunk unread."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from interpreters import MemoryJournal, SqliteJournal, Workspace, resume, run
from op import Op, ToolResult, tool

MODULE = (
    '"""Money, in cents."""\n'
    "\n"
    "\n"
    "def total(prices: list[int]) -> int:\n"
    '    """The sum of the prices."""\n'
    "    return sum(prices) - 1\n"
    "\n"
    "\n"
    "def tax(cents: int) -> int:\n"
    '    """A fifth of it."""\n'
    "    return cents // 5\n"
) * 3  # long enough that 38 characters are a small part of it


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "money.py").write_text(MODULE)
    (root / "dup.txt").write_text("a\nx = 1\nb\nc\nx = 1\nd\n")
    git(root, "add", "-A")
    git(root, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "initial")
    return root


def test_an_edit_whose_text_is_absent_is_answered_with_the_nearest_lines(repo: Path) -> None:
    ws = Workspace(repo)
    # the model's guess at the line: another indentation, another operator
    missing = ws.edit_file("money.py", "  return sum(prices) + 1", "    return sum(prices)")
    error = missing.error or ""
    assert not missing.ok and "was not found; nothing was changed" in error
    assert "line 6 (" in error and "\n    return sum(prices) - 1" in error, error
    assert (repo / "money.py").read_text() == MODULE
    lines = ws.edit_file("money.py", "def total(prices):\n    '''The sum.'''", "x")
    assert "lines 4-5 (" in (lines.error or ""), lines.error
    same = ws.edit_file("money.py", "    return cents // 5\n", "    return cents // 5\n")
    assert "old and new are the same" in (same.error or "")
    nothing = ws.edit_file("money.py", "zzzz qqqq wwww", "x")
    assert "Nothing in it is close" in (nothing.error or ""), nothing.error


def test_the_nearest_passage_of_a_long_file_is_found_in_time_about_its_length(
    repo: Path,
) -> None:
    # every window of the file was compared in full with difflib: 3,000 lines and a 150-line
    # old text took minutes; the windows are now narrowed by the pieces they share first
    body = [
        f"def step_{i}(value: int) -> int:\n    return value * {i % 7} + {i}\n"
        for i in range(1_500)
    ]
    (repo / "long.py").write_text("".join(body))
    lines = "".join(body).splitlines()
    # the model's copy of lines 1201-1350: another indentation, every third line changed
    guess = [
        "  " + (line.replace("value", "v") if i % 3 == 0 else line)
        for i, line in enumerate(lines[1_200:1_350])
    ]
    began = time.monotonic()
    missing = Workspace(repo).edit_file("long.py", "\n".join(guess), "x")
    took = time.monotonic() - began
    error = missing.error or ""
    assert not missing.ok and "was not found; nothing was changed" in error
    assert "lines 1201-1350 (" in error, error[:300]
    assert "\n" + "\n".join(lines[1_200:1_350]) in error
    assert took < 30, f"{took:.1f}s"  # a tenth of a second of CPU; it took over two minutes


def test_an_edit_whose_text_occurs_twice_shows_each_place_with_its_lines(repo: Path) -> None:
    twice = Workspace(repo).edit_file("dup.txt", "x = 1", "x = 2")
    assert twice.error == (
        "dup.txt: the text to replace occurs 2 times (lines 2, 5); include more context so it "
        "occurs once:\nlines 1-3:\na\nx = 1\nb\nlines 4-6:\nc\nx = 1\nd"
    )


def test_write_file_shrinks_a_tracked_file_only_once_it_was_read(repo: Path) -> None:
    ws = Workspace(repo)
    small = "def total(p):\n    return sum(p)\n"  # 38 characters over the whole module
    refused = ws.write_file("money.py", small)
    assert not refused.ok and "use edit_file" in (refused.error or "")
    assert "read it with read_file first" in (refused.error or ""), refused.error
    assert (repo / "money.py").read_text() == MODULE, "nothing written"
    # the tools' own reads (an edit, a search) are not the model's reading
    assert ws.search("tax").ok and not ws.edit_file("money.py", "nope nope", "x").ok
    assert not ws.write_file("./money.py", small).ok
    assert ws.read_file("money.py", 1, 3).ok  # a part of it is a reading too
    assert ws.write_file("./money.py", small).ok
    assert (repo / "money.py").read_text() == small
    # a file git does not track, or one that keeps half its size, is written as asked
    (repo / "scratch.py").write_text(MODULE)
    assert ws.write_file("scratch.py", "x = 1\n").ok
    assert Workspace(repo).write_file("dup.txt", "a\nx = 1\nb\n").ok
    # a file written here may be shrunk again: its content is what the model gave
    fresh = Workspace(repo)
    assert fresh.write_file("new.py", MODULE).ok
    git(repo, "add", "new.py")
    assert fresh.write_file("new.py", "x = 1\n").ok


def _read_then_write(read: bool) -> Op[ToolResult]:
    if read:
        yield from tool("read_file", {"path": "money.py"})
    return (yield from tool("write_file", {"path": "money.py", "content": "x = 1\n"}))


def test_what_was_read_is_the_runs_own(repo: Path) -> None:
    first = run(_read_then_write, True, workspace=repo, db=MemoryJournal()).value
    assert first.ok, first
    git(repo, "checkout", "-q", "--", "money.py")
    second = run(_read_then_write, False, workspace=repo, db=MemoryJournal()).value
    assert not second.ok and "refused" in (second.error or ""), "a new run has read nothing"


def stop_once(flag: str) -> str:
    """Stops the process (KeyboardInterrupt) the first time, as a crash would; then goes on."""
    if not Path(flag).exists():
        Path(flag).write_text("stopped")
        raise KeyboardInterrupt
    return "went on"


def _read_stop_write(flag: str) -> Op[ToolResult]:
    yield from tool("read_file", {"path": "money.py"})
    yield from tool("stop_once", {"flag": flag})
    return (yield from tool("write_file", {"path": "money.py", "content": "x = 1\n"}))


def test_what_was_read_before_a_crash_counts_as_read_when_the_run_is_resumed(
    repo: Path, tmp_path: Path
) -> None:
    db, flag = tmp_path / "runs.db", str(tmp_path / "stopped")
    with pytest.raises(KeyboardInterrupt):
        run(_read_stop_write, flag, workspace=repo, tools=[stop_once], db=str(db), run_id="r")
    assert SqliteJournal(db).run("r").status == "cancelled"
    assert (repo / "money.py").read_text() == MODULE
    # the read is fed from the journal, not performed again: the workspace learns of it there
    resumed = resume("r", db=str(db), tools=[stop_once])
    assert resumed.status == "completed" and resumed.value.ok, resumed.value
    assert (repo / "money.py").read_text() == "x = 1\n"


LATIN_1 = "# -*- coding: latin-1 -*-\nNAME = 'Café'\n\n\ndef price():\n    return 3 - 1\n"


def test_a_file_that_is_not_utf8_keeps_the_bytes_an_edit_does_not_touch(repo: Path) -> None:
    """A Latin-1 file: read_file shows its é as U+FFFD; an edit elsewhere writes every other
    byte back as it was (it used to write U+FFFD in their place), and writing back what was
    read is refused, naming the byte and its line."""
    path = repo / "shop.py"
    path.write_bytes(LATIN_1.encode("latin-1"))
    git(repo, "add", "shop.py")
    ws = Workspace(repo)
    shown = ws.read_file("shop.py")
    assert shown.ok and "Caf\ufffd" in shown.output
    assert ws.edit_file("shop.py", "    return 3 - 1\n", "    return 3\n").ok
    assert path.read_bytes() == LATIN_1.replace("3 - 1", "3").encode("latin-1")
    before = path.read_bytes()
    back = ws.write_file("shop.py", shown.output.replace("3 - 1", "4"))
    assert not back.ok and "byte 0xe9 on line 2" in (back.error or ""), back.error
    assert "nothing was written" in (back.error or "") and path.read_bytes() == before
    # an old text copied with U+FFFD in it is not found, and the answer says why
    missed = ws.edit_file("shop.py", "NAME = 'Caf\ufffd'\n", "NAME = 'Shop'\n")
    assert not missed.ok and "stands for a byte that is not UTF-8" in (missed.error or "")
    assert "\udce9" not in (missed.error or ""), (
        "the nearest lines are shown as read_file shows them"
    )
    assert path.read_bytes() == before
    # the same content without U+FFFD, or a file that is UTF-8, is written as asked
    assert ws.write_file("shop.py", "NAME = 'Shop'\n").ok
    assert Workspace(repo).write_file("money.py", MODULE + "# \ufffd\n").ok


@pytest.mark.parametrize("tracked", [True, False])
def test_a_file_name_that_is_not_utf8_is_listed_and_searched_as_text(
    repo: Path, tracked: bool
) -> None:
    """A name the file system holds in bytes that are not UTF-8 is shown as ``read_file``
    shows such text (U+FFFD), so the run can journal what the tool answered; a model cannot
    name a new file with a lone surrogate."""
    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    (repo / name).write_text("hello\n")
    if tracked:
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    else:
        subprocess.run(["rm", "-rf", ".git"], cwd=repo, check=True)
    ws = Workspace(repo)
    listed = ws.list_files()
    assert listed.ok and "caf\ufffd.txt" in listed.output.splitlines(), listed
    found = ws.search("hello")
    assert found.ok and "caf\ufffd.txt:1: hello" in found.output.splitlines(), found
    made = ws.write_file("new\udcff.txt", "x")
    assert not made.ok and "holds a lone surrogate" in (made.error or ""), made
    assert not any(p.name.startswith("new") for p in repo.iterdir())


def test_a_lone_surrogate_in_an_argument_is_refused_not_written_as_a_byte(repo: Path) -> None:
    """An edit keeps a file's undecodable bytes by reading it with ``surrogateescape``; a
    model's ``"\\udcff"`` (a lone surrogate, from JSON) must not ride that back as a raw
    byte, nor end the call with an exception."""
    one = repo / "one.py"
    one.write_text("def tax(cents):\n    return cents // 5\n")
    before = one.read_bytes()
    ws = Workspace(repo)
    edit = ws.edit_file("one.py", "    return cents // 5\n", "    return cents // 5  # \udcff\n")
    assert not edit.ok and "'\\udcff' at character" in (edit.error or ""), edit.error
    old = ws.edit_file("one.py", "\ud800", "x")
    assert not old.ok and "old holds '\\ud800'" in (old.error or ""), old.error
    written = ws.write_file("one.py", "x = '\ud800'\n")
    assert not written.ok and "content holds" in (written.error or ""), written.error
    assert one.read_bytes() == before
