"""No effect kind is compared as a string where runs are watched, traced and shown, nor in the
handlers' rooms: each is spelled by its effect class (``Infer.kind``) or a set made from them,
so renaming or adding an effect is seen by the type checker (the rule of
``tests/interpreters/runtime/test_kinds.py``, over these modules)."""

from __future__ import annotations

from pathlib import Path

from tests.interpreters.runtime.test_kinds import _kinds_as_strings

ROOT = Path(__file__).resolve().parents[3]
CHECKED = [
    ROOT / "interpreters" / name
    for name in (
        "observe/_otel.py",
        "observe/_follow.py",
        "observe/_diff.py",
        "_sinks.py",
        "_shown.py",
    )
] + [
    path
    for room in ("interpreters/models", "interpreters/agents", "interpreters/tools", "programs")
    for path in sorted((ROOT / room).glob("*.py"))
]


def test_no_effect_kind_is_compared_as_a_string_in_the_observers_and_handlers() -> None:
    found = [hit for path in CHECKED for hit in _kinds_as_strings(path)]
    assert found == []
