"""The report meets an effect by the kind sets derived from the effect unions, never by a
list of kind names: every scope effect is drawn as a scope, with its totals and lanes."""

from __future__ import annotations

import json

import pytest

from interpreters.journal._base import Entry, RunRecord
from interpreters.observe import _report as report
from interpreters.observe import report_data
from op.effects import LEAF_KINDS, SCOPE_KINDS


def _entries(scope_kind: str) -> list[Entry]:
    usage = json.dumps({"input_tokens": 3, "output_tokens": 4})
    return [
        Entry(
            run_id="r", seq=1, address="1", kind=scope_kind, effect_json="{}", status="completed"
        ),
        Entry(
            run_id="r",
            seq=2,
            address="1.1.1",
            kind="infer",
            effect_json="{}",
            status="completed",
            usage_json=usage,
        ),
        Entry(run_id="r", seq=3, address="1.2.1", kind="tool", effect_json='{"name": "t"}'),
    ]


@pytest.mark.parametrize("kind", sorted(SCOPE_KINDS))
def test_every_scope_kind_is_drawn_as_a_scope_with_what_was_spent_inside(kind: str) -> None:
    items = report_data(RunRecord(run_id="r", program="m:f"), _entries(kind))["entries"]
    scope, inner, tool = items
    assert scope["scope"] is True and not inner["scope"] and not tool["scope"]
    assert scope["totals"]["tokens"] == 7 and scope["totals"]["model_calls"] == 1
    assert scope["totals"]["tool_calls"] == 1
    # the branches of a par are its lanes; no other scope makes lanes
    lanes = (inner["lane"], tool["lane"])
    assert lanes == (("branch 1", "branch 2") if kind == "par" else (None, None))


def test_a_new_scope_kind_is_a_scope_in_the_report_without_naming_it_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(report, "SCOPE_KINDS", SCOPE_KINDS | {"retry"})
    (scope, *_) = report_data(RunRecord(run_id="r", program="m:f"), _entries("retry"))["entries"]
    assert scope["scope"] is True and scope["totals"]["model_calls"] == 1


@pytest.mark.parametrize("kind", sorted(LEAF_KINDS))
def test_no_leaf_kind_is_drawn_as_a_scope(kind: str) -> None:
    entry = Entry(run_id="r", seq=1, address="1", kind=kind, effect_json="{}")
    (item,) = report_data(RunRecord(run_id="r", program="m:f"), [entry])["entries"]
    assert item["scope"] is False and "totals" not in item
