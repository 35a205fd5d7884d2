"""Cassettes cover a program that asks, uses a workspace and an agent: ``opdsl_cassette.run``
takes what ``run`` takes, a run that ends waiting is saved and its answer recorded, and a
replay that diverges fails with the divergence alone."""

from __future__ import annotations

import pytest

from interpreters import Divergence, MemoryJournal, ScriptedModel, replay, run
from tests.fixtures import scripted_runs

TEST_FILE = """
from pathlib import Path

import pytest

from interpreters import ScriptedModel
from op import Op, TurnRecord, agent, ask, checkpoint, infer, tool

MODEL = ["bug", "perf"]


async def echo(effect, call):
    if not MODEL:
        raise AssertionError("a replay never calls the agent")
    return TurnRecord(backend="echo", text="looked at " + effect.prompt)


def triage(title: str) -> Op[str]:
    yield from checkpoint("start")
    files = yield from tool("list_files", {"path": "."})
    who = yield from ask("Who triages it?")
    reply = yield from infer(f"Label {title} for {who}: {files.output}")
    turn = yield from agent("echo", title)
    return f"{who}: {reply.text} / {turn.text}"


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "notes.txt").write_text("slow start")
    return tmp_path


def test_answered(opdsl_cassette, repo):
    result = opdsl_cassette.run(
        triage, "crash", model=ScriptedModel(MODEL[:1]), workspace=repo,
        agents={"echo": echo}, answer=lambda question: "Ada",
    )
    assert result.value == "Ada: bug / looked at crash"


def test_waiting(opdsl_cassette, repo):
    waiting = opdsl_cassette.run(
        triage, "slow", model=ScriptedModel(MODEL[1:]), workspace=repo, agents={"echo": echo}
    )
    assert waiting.status == "waiting"
    done = opdsl_cassette.answer(waiting, "Bo")
    assert done.value == "Bo: perf / looked at slow"
"""


def test_a_cassette_records_answers_workspaces_agents_and_a_waiting_run(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_triage=TEST_FILE)
    recorded = pytester.runpytest_subprocess("--opdsl-record")
    recorded.assert_outcomes(passed=2)
    names = sorted(p.name for p in (pytester.path / "cassettes").iterdir())
    assert names == ["test_answered.jsonl", "test_waiting-answer-1.jsonl", "test_waiting.jsonl"]
    # replayed: no model, no agent, the answers from the cassettes
    pytester.makepyfile(test_triage=TEST_FILE.replace('MODEL = ["bug", "perf"]', "MODEL = []"))
    pytester.runpytest_subprocess().assert_outcomes(passed=2)
    # the program changed before its end: each test fails with the divergence, alone
    pytester.makepyfile(test_triage=TEST_FILE.replace('f"Label {title}', 'f"Tag {title}'))
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*diverged from its journal at address 4*", "*--opdsl-record*"])
    text = result.stdout.str()
    assert "no running event loop" not in text and "During handling" not in text
    assert "Traceback" not in text and "pytest_plugin.py" not in text


def test_a_replay_that_diverges_raises_the_divergence_with_nothing_chained() -> None:
    journal = MemoryJournal()
    first = run(scripted_runs.label, "crash", model=ScriptedModel(["bug"]), db=journal)
    with pytest.raises(Divergence) as caught:
        replay(first.run_id, db=journal, program=scripted_runs.label, args=("hang",))
    # the traceback a test shows starts with the divergence, not "no running event loop"
    assert caught.value.__context__ is None and caught.value.__cause__ is None
