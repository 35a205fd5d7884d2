"""An effect's kind is met through its class (``Checkpoint.kind``, ``SCOPE_KINDS``, a
``match`` on the effect), never spelled as a string: a new kind, or a renamed one, is then
found by the type checker and the kind sets, not missed where a string was written."""

from __future__ import annotations

import ast
from pathlib import Path

from op.effects import EFFECT_TYPES, LEAF_KINDS, SCOPE_KINDS, STATE_KINDS

ROOT = Path(__file__).resolve().parents[3] / "interpreters"
KINDS = {t.kind for t in EFFECT_TYPES}
CHECKED = [
    *sorted((ROOT / "runtime").glob("*.py")),
    *(
        ROOT / name
        for name in (
            "_live.py",
            "_api.py",
            "_durable.py",
            "_loading.py",
            "_resume.py",
            "_answer.py",
            "_replaying.py",
            "_dry_run.py",
            "temporal/_workflow.py",
            "testing/_scripted.py",
            "journal/_status.py",
        )
    ),
]


def _spelled(node: ast.expr) -> list[str]:
    """The effect kinds ``node`` spells as string literals (alone, or in a tuple, list, set)."""
    if isinstance(node, ast.Constant) and node.value in KINDS:
        return [str(node.value)]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [k for e in node.elts for k in _spelled(e)]
    return []


def _is_kind(node: ast.expr) -> bool:
    """``x.kind``, ``kind``, or ``x.get("kind")``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Name):
        return node.id == "kind"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "kind"
    )


def _kinds_as_strings(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_kind(s) for s in sides):
                found += [f"{path.name}:{node.lineno} {k!r}" for s in sides for k in _spelled(s)]
        elif isinstance(node, ast.Match) and _is_kind(node.subject):
            for case in node.cases:
                for sub in ast.walk(case.pattern):
                    if isinstance(sub, ast.MatchValue):
                        found += [f"{path.name}:{sub.lineno} {k!r}" for k in _spelled(sub.value)]
    return found


def test_no_effect_kind_is_compared_as_a_string() -> None:
    found = [hit for path in CHECKED for hit in _kinds_as_strings(path)]
    assert found == []


def test_the_kind_sets_cover_every_effect_once() -> None:
    assert LEAF_KINDS | SCOPE_KINDS | STATE_KINDS == KINDS
    assert not (LEAF_KINDS & SCOPE_KINDS or LEAF_KINDS & STATE_KINDS or SCOPE_KINDS & STATE_KINDS)


def test_the_check_sees_a_kind_spelled_as_a_string(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(e, d):\n"
        "    if e.kind == 'infer' or e.kind in ('limit', 'par'):\n"
        "        pass\n"
        "    match d.get('kind'):\n"
        "        case 'tool':\n"
        "            pass\n"
        "    return e.kind == Checkpoint.kind or e.status == 'completed'\n"
    )
    assert sorted(_kinds_as_strings(sample)) == [
        "sample.py:2 'infer'",
        "sample.py:2 'limit'",
        "sample.py:2 'par'",
        "sample.py:5 'tool'",
    ]
