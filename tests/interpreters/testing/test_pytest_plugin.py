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
