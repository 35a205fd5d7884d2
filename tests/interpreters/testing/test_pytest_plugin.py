"""The pytest plugin: cassettes recorded with --opdsl-record and replayed without it."""

from __future__ import annotations

import json

import pytest

TEST_FILE = """
from interpreters import ScriptedModel
from op import Op, infer, checkpoint

def greet(name: str) -> Op[str]:
    yield from checkpoint("start")
    reply = yield from infer(f"Greet {name}")
    return reply.text

def test_greet(opdsl_cassette):
    result = opdsl_cassette.run(greet, "Ada", model=ScriptedModel(["Hello, Ada!"]))
    assert result.value == "Hello, Ada!"

def test_scripted(opdsl_scripted):
    from interpreters import expect
    assert opdsl_scripted([(expect("infer"), "Hi")]).run(greet, "Bo").value == "Hi"
"""


def test_missing_cassette_fails_with_how_to_record(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_greeting=TEST_FILE)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*no opdsl cassette*test_greet.jsonl*--opdsl-record*"])


def test_record_then_replay_then_catch_a_change(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_greeting=TEST_FILE)
    pytester.runpytest_subprocess("--opdsl-record").assert_outcomes(passed=2)
    cassette = pytester.path / "cassettes" / "test_greet.jsonl"
    lines = [json.loads(line) for line in cassette.read_text().splitlines()[1:]]
    kinds = [line["entry"]["kind"] for line in lines if "entry" in line]  # after any pieces
    assert kinds == ["checkpoint", "infer"]
    # replayed from the cassette: the scripted model is never asked (its script is empty now)
    pytester.makepyfile(
        test_greeting=TEST_FILE.replace('ScriptedModel(["Hello, Ada!"])', "ScriptedModel([])")
    )
    pytester.runpytest_subprocess().assert_outcomes(passed=2)
    # the program changed before its end: the replay diverges
    pytester.makepyfile(
        test_greeting=TEST_FILE.replace('f"Greet {name}"', 'f"Say hello to {name}"')
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*diverged from its journal at address 2*"])


STATEFUL = """
from interpreters import ScriptedModel
from op import Inc, Op, get, infer, program, update
from state import CRDTModel, GCounter

class Count(CRDTModel):
    n: GCounter = GCounter()

@program(state=Count)
def declared() -> Op[int]:
    reply = yield from infer("Count")
    yield from update(n=Inc(len(reply.text)))
    return (yield from get(Count)).n.value

def undeclared() -> Op[int]:
    reply = yield from infer("Count")
    yield from update(n=Inc(len(reply.text)))
    return (yield from get(Count)).n.value

def test_declared(opdsl_cassette):
    assert opdsl_cassette.run(declared, model=ScriptedModel(["abc"])).value == 3

def test_passed(opdsl_cassette):
    assert opdsl_cassette.run(undeclared, model=ScriptedModel(["abcd"]), state=Count()).value == 4
"""


def test_a_cassette_of_a_program_with_state_replays(pytester: pytest.Pytester) -> None:
    # a cassette is a file: the state type it names is not imported from it; the test's
    # program (its declared state) or its state= names it
    pytester.makepyfile(test_counting=STATEFUL)
    pytester.runpytest_subprocess("--opdsl-record").assert_outcomes(passed=2)
    pytester.makepyfile(test_counting=STATEFUL.replace('["abc"]', "[]").replace('["abcd"]', "[]"))
    pytester.runpytest_subprocess().assert_outcomes(passed=2)
