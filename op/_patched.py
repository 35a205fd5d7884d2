"""Changing a program while runs of it are in flight: ``patched`` and ``deprecate_patched``.

A run is replayed from its journal whenever it is resumed, forked or checked, so the code
before its resume point must ask for what the run recorded. ``patched(name)`` lets new code go
out anyway: it is True for a run that reaches this point under the new code, and False for
one that had already passed it without the marker, which then goes on down the old code::

    if (yield from patched("ask-twice")):
        answer = yield from ask("Sure?")      # the new code
    else:
        answer = "yes"                        # the old code, for runs that passed here

The decision is journaled as an entry of its own (kind ``patched``), so a run that took the
new code is fed True again on every later resume and replay. A run that passed this point
before the marker existed has no such entry, and its effects after the point keep the
addresses they had: the marker takes an address only in a run that recorded it.

The life of a change, as on Temporal (whose ``workflow.patched`` and
``workflow.deprecate_patch`` these map onto there):

1. ``if (yield from patched(name)): new else: old`` while runs that passed the point without
   the marker may still be resumed, forked or replayed.
2. Once ``opdsl check`` says no stored run takes the old code (none diverges when the old code
   is removed), ``yield from deprecate_patched(name)`` in its place, with the new code alone
   after it: runs that recorded the marker still replay, and a run that passed the point
   without it stops there with a divergence that names the patch.
3. Once no stored run holds the marker (``opdsl check`` again), remove the call.
"""

from __future__ import annotations

from op._effects import Op, Patched

__all__ = ["deprecate_patched", "patched"]


def _checked(fn: str, name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{fn}() needs a non-empty name, got {name!r}")
    return name


def patched(name: str) -> Op[bool]:
    """True where the run takes the new code of the change ``name``; False for a run that
    had already passed this point without the marker (it goes on down the old code).

    When to use: a change to what a program does before the resume point of runs in flight
    (waiting on an ``ask``, crashed, kept to be forked or replayed).

    Details: a new run, or one that had not reached this point, takes the new code and the
    journal records the decision at this address; resumes, forks and replays of it are fed
    that decision. A run recorded without the marker is fed False, and the marker takes no
    address in it. The scripted interpreter answers True unless its script expects a
    ``patched`` effect here (``(expect("patched", name=...), False)``).

    Gotchas: a name is one change; two changes at one point need two names. Keep the old
    code as it was: it is what the old runs replay.

    Example:
        >>> from op import Op, ask
        >>> def confirm() -> Op[str]:
        ...     if (yield from patched("ask-twice")):
        ...         return (yield from ask("Sure?"))
        ...     return "yes"
    """
    taken: bool = yield Patched(name=_checked("patched", name))
    return taken


def deprecate_patched(name: str) -> Op[None]:
    """The change ``name`` is done: the old code is gone, and this marks where it was.

    When to use: in place of ``if (yield from patched(name)): new else: old``, once no stored
    run takes the old code (``opdsl check``), with the new code alone after it.

    Details: a run that recorded the marker replays through it; a new run records it as
    ``patched`` would (so its addresses are those of a run under the ``patched`` code); a run
    that passed this point without the marker cannot go on (it took the old code): it stops
    with a divergence naming the patch. Remove the call once no stored run holds the marker.

    Example:
        >>> from op import Op, ask
        >>> def confirm() -> Op[str]:
        ...     yield from deprecate_patched("ask-twice")
        ...     return (yield from ask("Sure?"))
    """
    yield Patched(name=_checked("deprecate_patched", name), deprecated=True)
