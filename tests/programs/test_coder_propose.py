"""The Coder's ``propose`` work: the functions a failure is about shown with their line numbers,
the model's fixed code placed where it belongs, each answer tried against the real tests and
put back when they fail. Scripted models, real git repositories, real pytest runs."""

from __future__ import annotations

import json
import time
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

import git
import pytest

from interpreters import MemoryJournal, ScriptedModel, replay, run
from op import Response, ToolCall, Usage
from programs._propose import Change, Focus, focus, read_change
from programs.coder import PROPOSE_ASK, CoderConfig, CodeState, coder
from tests.helpers import sample_repo

CALC = (Path(__file__).parents[2] / "interpreters/cli/demo/sample_repo/calc.py").read_text()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return sample_repo(tmp_path)


def say(text: str) -> Response:
    return Response(text=text, usage=Usage(input_tokens=50, output_tokens=10))


RIGHT = say("Line 6: add subtracts.\n```python\nreturn a + b\n```")
WRONG = say("Line 6: it should multiply.\n```python\n    return a * b\n```")
MESSAGE = say("Fix add\n\nIt subtracted.")


def config(repo: Path, **kw: Any) -> CoderConfig:
    return CoderConfig(task="`add` gives the wrong sum.", repo=str(repo), work_mode="propose", **kw)


def tools_called(journal: MemoryJournal, run_id: str) -> list[str]:
    entries = sorted(journal.entries(run_id), key=lambda e: [int(p) for p in e.address.split(".")])
    return [
        "run pytest" if "pytest" in e.effect_json else json.loads(e.effect_json)["name"]
        for e in entries
        if e.kind == "tool"
    ]


def test_the_fixed_line_is_placed_indented_tried_kept_and_committed(repo: Path) -> None:
    journal = MemoryJournal()
    model = ScriptedModel([RIGHT, MESSAGE])
    result = run(coder, config(repo), model=model, state=CodeState(), db=journal)
    assert result.value.ok, result.value
    asked = model.requests[0].messages[-1].content
    # the function the task names, with its line numbers; the failure; no tools offered
    assert "   6|     return a - b" in asked and "   4| def add(a: int, b: int) -> int:" in asked
    assert "mul" not in asked.split("line numbers on the left")[1]
    assert "AssertionError: -1 != 5" in asked and asked.endswith(PROPOSE_ASK)
    assert model.requests[0].tools == ()
    assert "    return a + b\n" in (repo / "calc.py").read_text()  # the file's own indentation
    assert str(git.Repo(repo).head.commit.message).startswith("Fix add")
    assert result.value.files == ["calc.py"]
    # offline, the journal gives the same run back
    assert replay(result.run_id, db=journal, program=coder).value == result.value


def test_a_fix_the_tests_refuse_is_put_back_and_told_to_the_model(repo: Path) -> None:
    journal = MemoryJournal()
    model = ScriptedModel([WRONG, RIGHT, MESSAGE])
    cfg = config(repo, max_tokens=300, propose_params={"temperature": 0.7})
    result = run(coder, cfg, model=model, state=CodeState(), db=journal)
    assert result.value.ok, result.value
    # the first answer as the model would give it, the next drawn with propose_params
    assert model.requests[0].params == {"max_tokens": 300}
    assert model.requests[1].params == {"max_tokens": 300, "temperature": 0.7}
    second = model.requests[1].messages[-1].content
    assert "Tried already, and the tests still fail" in second
    assert "- line 6 `return a - b` changed to `return a * b`: AssertionError: 6 != 5" in second
    # the wrong fix was written, tested and put back before the model was asked again
    assert tools_called(journal, result.run_id).count("write_file") == 3
    assert "   6|     return a - b" in second
    diff = git.Repo(repo).git.diff("HEAD~1", "HEAD")
    assert "+    return a + b" in diff and "a * b" not in diff.split("def mul")[0]


def test_answers_that_cannot_be_placed_are_answered_and_nothing_is_written(repo: Path) -> None:
    journal = MemoryJournal()
    answers = [
        say("The code looks right to me."),
        say("```python\nimport os, sys, json, re\n```"),
        say("Line 6:\n```python\n    return a - b\n```"),
        RIGHT,
        MESSAGE,
    ]
    model = ScriptedModel(answers)
    result = run(coder, config(repo), model=model, state=CodeState(), db=journal)
    assert result.value.ok, result.value
    last = model.requests[3].messages[-1].content
    assert "- an answer in which your answer held no ```python block" in last
    assert "- an answer in which the code in your answer is not like any lines" in last
    assert "- an answer in which the code in your answer is the same as the code shown" in last
    assert tools_called(journal, result.run_id).count("write_file") == 1


def test_the_same_answer_again_is_counted_not_tried_again(repo: Path) -> None:
    journal = MemoryJournal()
    model = ScriptedModel([WRONG, WRONG, RIGHT, MESSAGE])
    result = run(coder, config(repo), model=model, state=CodeState(), db=journal)
    assert result.value.ok, result.value
    assert "changed to `return a * b`: AssertionError: 6 != 5 (answered 2 times)" in (
        model.requests[2].messages[-1].content
    )
    # the tests ran before the work, for the one wrong try, the right one, and in verify
    assert tools_called(journal, result.run_id).count("run pytest") == 4


def test_no_answer_that_passes_gives_up_and_leaves_the_repository_as_it_was(repo: Path) -> None:
    journal = MemoryJournal()
    model = ScriptedModel([WRONG, say("```python\nreturn b - a\n```")])
    out = run(
        coder, config(repo, max_work_iterations=2), model=model, state=CodeState(), db=journal
    ).value
    assert not out.ok and out.phase == "work", out
    assert "none of the 2 answers made the tests pass" in (out.reason or "")
    assert "changed to `return b - a`" in (out.reason or "")
    assert (repo / "calc.py").read_text() == CALC and out.files == []
    assert not git.Repo(repo).is_dirty()


def test_without_a_failing_test_the_work_is_the_tool_loop(repo: Path) -> None:
    (repo / "calc.py").write_text(CALC.replace("a - b", "a + b"))
    git.Repo(repo).git.commit("-qam", "fixed")
    call = Response(
        tool_calls=(
            ToolCall(
                id="c1",
                name="edit_file",
                arguments={
                    "path": "calc.py",
                    "old": '"""A tiny calculator."""',
                    "new": '"""Sums."""',
                },
            ),
        ),
        usage=Usage(input_tokens=100, output_tokens=20),
    )
    events: list[Any] = []
    model = ScriptedModel([call, say("Done."), MESSAGE])
    result = run(
        coder,
        config(repo),
        model=model,
        state=CodeState(),
        db=MemoryJournal(),
        on_event=events.append,
    )
    assert result.value.ok, result.value
    assert model.requests[0].tools, "the tool loop offers tools"
    warned = [e for e in events if getattr(e, "name", None) == "warning"]
    assert any("the tool loop instead" in json.dumps(getattr(e, "data", {})) for e in warned)


# -- where an answer goes ----------------------------------------------------------------------------

SOURCE = """def first(xs):
    for x in xs:
        if x > 0:
            return x
    return None


def last(xs):
    for x in reversed(xs):
        if x > 0:
            return x
    return None
"""


def shown(words: str = "first last") -> list[Focus]:
    found = focus("lib/m.py", SOURCE, words, 10_000)
    assert found is not None
    return [found]


def test_focus_takes_named_functions_their_callees_and_names_made_of_named_words() -> None:
    text = (
        "class R:\n    def repr(self, x):\n        return self.repr1(x)\n"
        "    def repr1(self, x):\n        return getattr(self, 'repr_' + type(x).__name__)(x)\n"
        "    def repr_list(self, x):\n        return self._iterable(x)\n"
        "    def repr_set(self, x):\n        return ''\n"
        "    def _iterable(self, x):\n        return '...'\n"
    )
    found = focus("r.py", text, "`repr` of a list adds ...", 10_000)
    assert found is not None
    assert [name for name, _, _ in found.spans] == ["repr", "repr1", "repr_list", "_iterable"]
    assert focus("r.py", text, "nothing named here", 10_000) is None
    assert focus("r.py", "def broken(:\n", "broken", 10_000) is None
    # what does not fit is left out
    small = focus("r.py", text, "repr repr1", 80)
    assert small is not None and [n for n, _, _ in small.spans] == ["repr"]


def test_a_line_goes_where_it_is_most_alike_the_stated_number_breaking_ties() -> None:
    change = read_change("Line 10:\n```python\nif x >= 0:\n```", shown())
    assert change == Change("lib/m.py", 10, 10, ("        if x >= 0:",))
    other = read_change("Line 3:\n```\n        if x >= 0:\n```", shown())
    assert isinstance(other, Change) and other.start == 3
    assert other.applied(SOURCE).splitlines()[2] == "        if x >= 0:"


def test_a_whole_function_replaces_the_function() -> None:
    block = "def last(xs):\n    return next((x for x in reversed(xs) if x > 0), None)"
    change = read_change(f"Here:\n```python\n{block}\n```", shown())
    assert isinstance(change, Change) and (change.start, change.end) == (8, 12)
    assert change.applied(SOURCE).endswith(block + "\n")
    assert "def first(xs):\n    for x in xs:" in change.applied(SOURCE)


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("no code at all", "held no ```python block"),
        ("```python\n\n```", "is empty"),
        ("```python\nimport subprocess; subprocess.run(['rm', '-rf', '/'])\n```", "not like any"),
        ("Line 3:\n```python\n        if x > 0:\n```", "same as the code shown"),
        (
            "```python\ndef first(xs):\n    for x in xs:\n        if x > 0:\n            return x\n    return None\n```",
            "your first is the same",
        ),
    ],
)
def test_an_answer_that_cannot_be_placed_says_why(reply: str, why: str) -> None:
    problem = read_change(reply, shown())
    assert isinstance(problem, str) and why in problem


def test_with_no_block_the_last_inline_statement_is_the_answer() -> None:
    reply = "In `last`, line 10 `if x > 0:` is wrong: it should be `if x >= 0:`, keeping `xs`."
    change = read_change(reply, shown())
    assert change == Change("lib/m.py", 10, 10, ("        if x >= 0:",))
    # names and values in backticks are not code to place
    assert "held no" in str(read_change("`first` and `last` and `0` look right", shown()))


def test_a_change_that_would_not_parse_or_means_the_same_is_not_tried() -> None:
    broken = read_change("```python\n        if x > 0\n```", shown())
    assert isinstance(broken, str) and "would not parse with your change" in broken
    spacing = read_change("Line 3:\n```python\n        if x>0:  # positive\n```", shown())
    assert isinstance(spacing, str) and "changes only spacing or comments" in spacing


def test_code_nested_too_deep_for_the_parser_is_refused_not_raised() -> None:
    deep = "x" + "+x" * 20_000  # ast.parse raises RecursionError, not SyntaxError
    assert focus("m.py", f"def f(x):\n    return {deep}\n", "f", 10**6) is None
    problem = read_change(f"```python\ndef first(x):\n    return {deep}\n```", shown())
    assert isinstance(problem, str) and "nests too deep" in problem
    assert "held no" in str(read_change(f"it should be `y = {deep}`", shown()))


def test_only_the_changed_lines_change_line_endings_and_a_missing_final_newline_kept() -> None:
    crlf = SOURCE.replace("\n", "\r\n")
    found = focus("lib/m.py", crlf, "last", 10_000)
    assert found is not None and found.lines[9] == "        if x > 0:"
    change = read_change("Line 10:\n```python\nif x >= 0:\n```", [found])
    assert isinstance(change, Change)
    assert change.applied(crlf) == crlf.replace(
        "x in reversed(xs):\r\n        if x > 0", "x in reversed(xs):\r\n        if x >= 0"
    )
    two = Change("lib/m.py", 12, 12, ("    y = None", "    return y"))
    assert two.applied(SOURCE.rstrip("\n")).endswith(
        "if x > 0:\n            return x\n    y = None\n    return y"
    )
    assert two.applied(crlf).endswith("    y = None\r\n    return y\r\n")


def test_lines_are_numbered_as_python_numbers_them() -> None:
    # a form feed (a page break) and a \x1c in a string: str.splitlines splits at both
    text = 'X = 1\n\x0c\nS = "a\x1cb"\ndef f(x):\n    return x - 1\n'
    found = focus("m.py", text, "f", 10_000)
    assert found is not None and found.spans == (("f", 4, 5),)
    assert "   5|     return x - 1" in found.shown()
    change = read_change("```python\nreturn x + 1\n```", [found])
    assert isinstance(change, Change)
    assert change.applied(text) == text.replace("x - 1", "x + 1")


def _compared_with_every_window(reply: str, found: Focus) -> tuple[int, int] | None:
    """Where the block goes when every window is compared, as read_change first did."""
    block = [b.strip() for b in reply.split("```python\n")[1].split("\n```")[0].splitlines()]
    k = len(block)
    best: tuple[float, int] | None = None
    for _, first, last in found.spans:
        for start in range(first, last - k + 2):
            was = [line.strip() for line in found.lines[start - 1 : start - 1 + k]]
            if was == block:
                continue
            likeness = (
                sum(SequenceMatcher(None, a, b).ratio() for a, b in zip(was, block, strict=True))
                / k
            )
            if best is None or likeness > best[0]:
                best = (likeness, start)
    return (best[1], best[1] + k - 1) if best and best[0] >= 0.5 else None


def test_the_place_found_is_the_one_comparing_every_window_finds() -> None:
    found = focus("calc.py", CALC + SOURCE, "add mul first last", 100_000)
    assert found is not None
    lines = found.lines
    for start in range(1, len(lines)):
        for k in (1, 2, 3):
            old = lines[start - 1 : start - 1 + k]
            for edit in (str.upper, lambda s: s.replace("x", "y"), lambda s: s + " + 1"):
                reply = "```python\n" + "\n".join(edit(line) for line in old) + "\n```"
                if not old[0].strip() or old[0].startswith("def "):
                    continue  # blank lines first are dropped; a def is placed by its name
                change = read_change(reply, [found])
                where = (change.start, change.end) if isinstance(change, Change) else None
                expected = _compared_with_every_window(reply, found)
                if where is not None or "not like any" in str(change):
                    assert where == expected, (reply, change)


def test_a_long_answer_or_a_long_function_costs_a_bounded_time() -> None:
    body = "".join(f"    v{i} = xs[{i}] + {i} * 2\n" for i in range(5000))
    huge = focus("m.py", f"def big(xs):\n{body}    return v0\n", "big", 10**7)
    assert huge is not None
    many = "".join(f"    v{i} = xs[{i}] + {i} * 3\n" for i in range(300, 500))
    began = time.perf_counter()
    # 200 lines against a 5,000-line function: 72 s when every window was compared
    assert "too long to place" in str(read_change(f"```python\n{many}```", [huge]))
    # a 16 KB line: 11 s
    assert "not like any" in str(read_change("```python\n" + "x" * 16_000 + "\n```", [huge]))
    # lines all alike: the comparisons stop at their budget
    alike = "".join(f"    w{i} = xs[{i}] + {i} * 3\n" for i in range(300, 312))
    assert isinstance(read_change(f"```python\n{alike}```", [huge]), str)
    assert "held no" in str(read_change("`" * 16_000, [huge]))
    assert "Line 7" not in str(
        read_change("Line " + "9" * 5000 + ":\n```python\nv1 = 0\n```", [huge])
    )
    assert time.perf_counter() - began < 5


@pytest.mark.parametrize(
    "reply",
    [
        "Line 10:\n```python3\nif x >= 0:\n```\nDone.",
        "Line 10:\n```py\nif x >= 0:\n```",
        "Line 10:\n``` python {.numberLines}\nif x >= 0:\n```",
        "Line 10:\n```text\nif x >= 0:\n```",
        "Line 10:\r\n```python\r\nif x >= 0:\r\n```\r\n",
        "Line 10:\n```python\n\n   \nif x >= 0:\n```",
        "Line 10:\n```python\nif x >= 0:",  # the answer cut off before its closing fence
        "Line 10:\n```python\nif x >= 0:\n```\nThen run:\n```bash\npytest -q\n```",
    ],
)
def test_a_block_is_read_whatever_its_fence_says(reply: str) -> None:
    assert read_change(reply, shown()) == Change("lib/m.py", 10, 10, ("        if x >= 0:",))


CLASSES = """import functools


class A:
    @functools.cache
    def size(self, xs):
        return len(xs)


class B:
    def size(self, xs):
        def count(ys):
            return sum(1 for _ in ys)

        return count(xs) - 1


async def fetch(x):
    return x
"""


def test_a_whole_function_goes_in_place_of_the_function_of_its_name_most_like_it() -> None:
    found = focus("m.py", CLASSES, "size fetch", 10_000)
    assert found is not None
    # the method of B, not the first 'size' shown; A's decorator is not B's
    fixed = "def size(self, xs):\n    def count(ys):\n        return sum(1 for _ in ys)\n\n    return count(xs)"
    change = read_change(f"```python\n{fixed}\n```", [found])
    assert isinstance(change, Change) and (change.start, change.end) == (11, 15)
    assert "        return count(xs)\n\n\nasync def" in change.applied(CLASSES)
    # a decorated function given without its decorator keeps it; given with one, it is replaced
    plain = read_change("```python\ndef size(self, xs):\n    return len(xs) + 0\n```", [found])
    assert isinstance(plain, Change) and (plain.start, plain.end) == (6, 7)
    assert (
        "    @functools.cache\n    def size(self, xs):\n        return len(xs) + 0"
        in plain.applied(CLASSES)
    )
    own = read_change(
        "```python\n@functools.lru_cache\ndef size(self, xs):\n    return len(xs)\n```", [found]
    )
    assert isinstance(own, Change) and (own.start, own.end) == (5, 7)
    # a nested function, and an async one
    nested = read_change("```python\ndef count(ys):\n    return len(list(ys))\n```", [found])
    assert isinstance(nested, Change) and (nested.start, nested.end) == (12, 13)
    assert nested.new == ("        def count(ys):", "            return len(list(ys))")
    coro = read_change("```python\nasync def fetch(x):\n    return x * 2\n```", [found])
    assert isinstance(coro, Change) and (coro.start, coro.end) == (18, 19)
    # a function not shown is not placed over lines of one that is
    other = read_change("```python\ndef helper(xs):\n    return len(xs)\n```", [found])
    assert isinstance(other, str) and "defines helper, which is not a function shown" in other


def test_a_block_takes_the_files_kind_of_indentation() -> None:
    tabbed = "def f(xs):\n\tfor x in xs:\n\t\tif x:\n\t\t\treturn x\n\treturn None\n"
    found = focus("t.py", tabbed, "f", 10_000)
    assert found is not None
    change = read_change("```python\nfor x in xs:\n    if x > 0:\n        return x\n```", [found])
    assert isinstance(change, Change)
    assert change.new == ("\tfor x in xs:", "\t\tif x > 0:", "\t\t\treturn x")
    spaced = read_change("```python\nfor x in xs:\n\tif x >= 0:\n\t\treturn x\n```", shown())
    assert isinstance(spaced, Change) and spaced.new[1] == "        if x >= 0:"


def test_an_outer_function_shown_takes_the_place_of_the_inner_ones_shown_before_it() -> None:
    text = "def outer():\n    def inner():\n        return 1\n\n    return inner()\n\n\ndef other():\n    return outer()\n"
    found = focus("m.py", text, "inner other", 10_000)
    assert found is not None and found.spans == (("outer", 1, 5), ("other", 8, 9))
    # many functions, each calling the next: every one is reached, in the file's order
    chain = (
        "".join(f"def f{i}(x):\n    return f{i + 1}(x)\n" for i in range(2000))
        + "def f2000(x):\n    return x\n"
    )
    many = focus("m.py", chain, "f0", 10**7)
    assert many is not None and [n for n, _, _ in many.spans] == [f"f{i}" for i in range(2001)]


def test_a_file_that_is_not_utf8_is_not_shown_so_never_written_back_damaged(repo: Path) -> None:
    latin = "# -*- coding: latin-1 -*-\n" + CALC.replace("tiny calculator", "calculator, caf\xe9")
    (repo / "calc.py").write_bytes(latin.encode("latin-1"))
    git.Repo(repo).git.commit("-qam", "latin-1")
    model = ScriptedModel([say("Done."), MESSAGE])
    out = run(coder, config(repo), model=model, state=CodeState(), db=MemoryJournal()).value
    # no function could be shown: the tool loop had the work, and the file is byte for byte
    assert model.requests[0].tools, out
    assert (repo / "calc.py").read_bytes() == latin.encode("latin-1")


def test_a_block_copied_as_the_file_has_it_keeps_its_indentation_where_it_ends_less_indented() -> (
    None
):
    # the last line of an ``if`` and the line after it, as the file indents them: the first
    # goes where the line it replaces is, not the block's least indented line
    change = read_change("Line 4:\n```python\n            return x\n    return 0\n```", shown())
    assert change == Change("lib/m.py", 4, 5, ("            return x", "    return 0"))
    # a method given whole, as indented in its class, with a string's lines at the margin:
    # the def at the method's place, the string's lines where they were
    text = (
        'class Q:\n    def sql(self, table):\n        return """\nSELECT *\nFROM %s\n""" % tabel\n'
    )
    found = focus("q.py", text, "sql", 10_000)
    assert found is not None
    fixed = text.split("\n", 1)[1].replace("tabel", "table")
    method = read_change(f"```python\n{fixed}```", [found])
    assert isinstance(method, Change) and (method.start, method.end) == (2, 6)
    assert method.applied(text) == text.replace("tabel", "table")


def test_a_tree_too_deep_for_ast_dump_is_tried_not_raised() -> None:
    # the parser takes 1,500 additions; ast.dump's recursion does not: the change is tried
    deep = " + 1" * 1_500
    text = f"def f(x):\n    return x - 1\n\n\nTABLE = 0{deep}\n"
    found = focus("m.py", text, "f", 10_000)
    assert found is not None
    assert read_change("```python\nreturn x + 1\n```", [found]) == Change(
        "m.py", 2, 2, ("    return x + 1",)
    )
    change = read_change(f"```python\ndef last(xs):\n    return 0{deep}\n```", shown())
    assert isinstance(change, Change) and (change.start, change.end) == (8, 12)


def test_a_fence_line_without_an_end_costs_its_length_not_its_square() -> None:
    began = time.perf_counter()
    # each of these took 9 s or more when the fence's tag and spaces were given back a
    # character at a time
    for reply in ("``` " + "x" * 40_000, "```" + " " * 40_000, "```" + "\t" * 40_000 + "y"):
        assert "held no" in str(read_change(reply, shown()))
    assert time.perf_counter() - began < 2


def test_a_file_that_begins_with_a_byte_order_mark_is_shown_and_changed() -> None:
    """Python reads a module that begins with a UTF-8 byte order mark; read as text, the mark
    is its first character, which ``ast.parse`` refused, so such a file was never shown."""
    text = "\ufeffdef add(a, b):\n    return a - b\n"
    found = focus("calc.py", text, "add returns the difference", 10_000)
    assert found is not None and [n for n, _, _ in found.spans] == ["add"]
    change = read_change("```python\n    return a + b\n```", [found])
    assert isinstance(change, Change), change
    assert change.applied(text) == "\ufeffdef add(a, b):\n    return a + b\n"
