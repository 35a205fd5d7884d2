"""The public names: ``op`` holds what a program is written with, ``interpreters`` what runs it;
plug-in kits and the engine's internals live in their rooms. Each list is written once, and a
name that moved still works, with a DeprecationWarning that says where it went, until 0.5.0."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import interpreters
import op

ROOT = Path(__file__).resolve().parent.parent


def _typing_imports(path: Path) -> list[str]:
    """The names ``path`` imports for the type checkers (``if TYPE_CHECKING:`` blocks)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        alias.asname or alias.name
        for block in tree.body
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]


@pytest.mark.parametrize(
    ("package", "old", "new"),
    [
        *((op, name, where) for name, where in op._MOVED.items()),
        *((interpreters, name, where) for name, (where, _) in interpreters._MOVED.items()),
    ],
)
def test_a_moved_name_still_works_and_says_where_it_went(
    package: object, old: str, new: str
) -> None:
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: .*{new}"):
        value = getattr(package, old)
    moved_to = interpreters._MOVED[old][1] if package is interpreters else old
    assert value is getattr(importlib.import_module(new), moved_to)
    assert old not in package.__all__  # type: ignore[attr-defined]


def test_call_and_callinfo_are_one_class_by_one_name() -> None:
    from interpreters.models.kit import CallInfo
    from interpreters.runtime import Call
    from op.effects import LeafEffect

    assert "CallInfo" in interpreters.__all__ and "Call" not in interpreters.__all__
    assert interpreters.CallInfo is CallInfo is Call
    with pytest.warns(DeprecationWarning, match="use interpreters.models.kit.CallInfo"):
        assert interpreters.Call is CallInfo
    with pytest.warns(DeprecationWarning, match="use op.effects.LeafEffect"):
        assert interpreters.RecordedEffect is LeafEffect


def test_every_public_name_is_there_and_none_of_them_warns() -> None:
    code = (
        "import warnings\n"
        "warnings.simplefilter('error')\n"
        "import op, interpreters\n"
        "for m in (op, interpreters):\n"
        "    for name in m.__all__:\n"
        "        getattr(m, name)\n"
        "from op import *\n"
        "from interpreters import *\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_lazy_map_is_the_one_list_of_interpreters_names() -> None:
    assert interpreters.__all__ == sorted(interpreters._WHERE)
    assert dir(interpreters) == interpreters.__all__
    seen = _typing_imports(ROOT / "interpreters" / "__init__.py")
    # what the type checkers see is what runs: every name once, the old ``Tool`` besides
    assert sorted(seen) == sorted([*interpreters._WHERE, *interpreters._MOVED])


def test_ops_names_are_its_imports_and_its_moved_names_are_typed_as_they_were() -> None:
    own = {n for n, v in vars(op).items() if not n.startswith("_") and not isinstance(v, type(op))}
    assert sorted(own) == sorted(op.__all__)
    assert sorted(_typing_imports(ROOT / "op" / "__init__.py")) == sorted(op._MOVED)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from op.effects import LEAF_KINDS  # noqa: F401 - the new homes do not warn
        from op.events import EffectStarted  # noqa: F401


def test_no_module_of_opdsl_uses_a_moved_name() -> None:
    moved = {"op": set(op._MOVED), "interpreters": set(interpreters._MOVED)}
    bad = []
    for package in ("op", "state", "interpreters", "programs", "tests", "bench"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in moved:
                    names = {a.name for a in node.names} & moved[node.module]
                    bad += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in sorted(names)]
    assert not bad, "\n".join(bad)
