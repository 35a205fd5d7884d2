"""Every conformance program runs live, is replayed, is resumed from every checkpoint, and
is dry-run; the results agree where the semantics say they must."""

from __future__ import annotations

import json
from typing import Any

import pytest

from interpreters import MemoryJournal, VirtualClock, dry_run, replay, resume, run
from interpreters.runtime._driver import RunResult
from tests.conformance.programs import AGENTS, CASES, TOOLS, Case, model


def _live(case: Case, journal: MemoryJournal) -> RunResult[Any]:
    return run(
        case.program,
        *case.args,
        model=model(),
        tools=TOOLS,
        agents=AGENTS,
        db=journal,
        state=case.state() if case.state else None,
        clock=VirtualClock(),
        seed=7,
        answer=case.answers.get,
    )


def _same(a: RunResult[Any], b: RunResult[Any]) -> None:
    assert a.status == b.status
    if a.status == "completed":
        assert json.dumps(a.value, sort_keys=True, default=str) == json.dumps(
            b.value, sort_keys=True, default=str
        )
    else:
        assert type(a.error).__name__ == type(b.error).__name__ and str(a.error) == str(b.error)
    assert (a.state.canonical() if a.state else None) == (b.state.canonical() if b.state else None)


def _checkpoint_names(journal: MemoryJournal, run_id: str) -> list[str]:
    seen: dict[str, int] = {}
    names = []
    for e in journal.entries(run_id):
        if e.kind == "checkpoint" and e.status == "completed":
            name = json.loads(e.effect_json)["name"]
            seen[name] = seen.get(name, 0) + 1
            names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return names


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_live_replay_resume_dry_run_agree(case: Case) -> None:
    journal = MemoryJournal()
    live = _live(case, journal)
    assert live.status in ("completed", "failed")
    if case.name == "uncaught":
        assert live.status == "failed" and live.address == "2"
    else:
        assert live.status == "completed", live.describe()

    _same(live, replay(live.run_id, db=journal, program=case.program))

    names = _checkpoint_names(journal, live.run_id)
    assert names, "every conformance program passes a checkpoint"
    for name in names:
        fork = resume(
            live.run_id,
            db=journal,
            program=case.program,
            from_checkpoint=name,
            model=model(),
            tools=TOOLS,
            agents=AGENTS,
            clock=VirtualClock(),
        )
        _same(live, fork)
        assert journal.run(fork.run_id).parent_run == live.run_id
        _same(live, replay(fork.run_id, db=journal, program=case.program))

    plan = dry_run(
        case.program,
        *case.args,
        model=model(),
        tools=TOOLS,
        state=case.state() if case.state else None,
    )
    assert plan.status == live.status
    if case.dry_same and live.status == "completed":
        assert json.dumps(plan.value, sort_keys=True, default=str) == json.dumps(
            live.value, sort_keys=True, default=str
        )


def test_the_suite_is_big_enough_and_covers_every_effect() -> None:
    assert len(CASES) >= 15
    journal = MemoryJournal()
    kinds: set[str] = set()
    for case in CASES:
        result = _live(case, journal)
        kinds |= {e.kind for e in journal.entries(result.run_id)}
    assert kinds >= {
        "infer",
        "tool",
        "agent",
        "emit",
        "checkpoint",
        "limit",
        "timeout",
        "par",
        "now",
        "random",
        "uuid",
        "sleep",
        "ask",
    }
