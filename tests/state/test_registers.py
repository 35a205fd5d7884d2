"""A state's registers found in its JSON, as ``opdsl show`` reads them without the class."""

from __future__ import annotations

import json

from state import (
    CRDTModel,
    GCounter,
    GSet,
    LWWRegister,
    MVRegister,
    PNCounter,
    Stamp,
)
from state._registers import register_values


class Task(CRDTModel):
    step: LWWRegister[str] = LWWRegister[str]()
    tries: LWWRegister[int] = LWWRegister[int]()
    unset: LWWRegister[str] = LWWRegister[str]()
    done: GCounter = GCounter()
    balance: PNCounter = PNCounter()
    seen: GSet[str] = GSet()
    votes: MVRegister[str] = MVRegister[str]()


def test_every_register_of_a_state_and_nothing_else_is_found_in_its_json() -> None:
    stamp = Stamp("1", 1)
    task = Task(
        step=LWWRegister[str]().assign("verify", stamp),
        tries=LWWRegister[int]().assign(2, stamp),
        done=GCounter().inc(stamp, 3),
    )
    data = json.loads(task.canonical())
    assert register_values(data) == {"step": "verify", "tries": 2, "unset": None}
    assert list(register_values(data)) == ["step", "tries", "unset"]


def test_json_that_is_not_a_states_has_no_registers() -> None:
    for data in (None, 1, "text", [{"value": 1, "lamport": 0}], {"f": {"value": 1}}):
        assert register_values(data) == {}
