"""``patched`` is a ``bool`` to both checkers, and ``deprecate_patched`` gives nothing."""

from __future__ import annotations

from typing import assert_type

from op import Op, ask, deprecate_patched, patched


def confirm() -> Op[str]:
    taken = yield from patched("ask-twice")
    assert_type(taken, bool)
    if taken:
        return (yield from ask("Sure?"))
    return "yes"


def confirmed() -> Op[str]:
    if (yield from patched("ask-twice")):  # used straight in the test, as the README writes it
        return (yield from ask("Sure?"))
    return "yes"


def after_the_change() -> Op[str]:
    yield from deprecate_patched("ask-twice")
    return (yield from ask("Sure?"))
