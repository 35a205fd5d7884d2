"""Every rule about entry and run statuses, in one table that the journals, resume, fork,
answer, replay, ``gc`` and the integrity check consult.

Entries::

    (new) --begin--> started --finish--> completed | failed | cancelled
    started, cancelled --begin again (a resume performs it once more)--> started
        an effect's earlier attempt is kept (``attempts``); a scope or a question that a
        resume reaches again goes on, and keeps its first start (:data:`GOES_ON`)
    completed, failed: final (append-only)

Runs::

    (new) --create--> running --finish--> completed | failed | waiting | cancelled
    failed, waiting, cancelled, running (a crash) --resume in place--> running
    completed: final (it can be replayed, or forked into a new run)

How a run that ends is written back (:func:`closing`): with how it ended; left as it stands
when the journal itself failed; put back as it was when a resume found the program changed.
"""

from __future__ import annotations

from typing import Literal, get_args

from op import Ask
from op.effects import SCOPE_KINDS

__all__ = [
    "BEGIN_FROM",
    "ENTRY_STATUSES",
    "EndStatus",
    "EntryEnd",
    "FINISH_FROM",
    "FINISHED",
    "GOES_ON",
    "REMOVABLE",
    "RESUMABLE",
    "RUN_STATUSES",
    "EntryStatus",
    "RunStatus",
    "can_begin",
    "can_finish",
    "can_resume",
    "can_remove",
    "RunClose",
    "closing",
]

EntryStatus = Literal["started", "completed", "failed", "cancelled"]
EntryEnd = Literal["completed", "failed", "cancelled"]
"""How a started entry can finish."""
EndStatus = Literal["completed", "failed", "waiting", "cancelled"]
"""How a run ends (the statuses a run goes to from ``running``)."""
RunStatus = Literal["running", EndStatus]
ENTRY_STATUSES: frozenset[str] = frozenset(get_args(EntryStatus))
RUN_STATUSES: frozenset[str] = frozenset({"running", *get_args(EndStatus)})

#: an entry may be begun (again) from these: never yet, or left unfinished by a crash or a stop
BEGIN_FROM: frozenset[str] = frozenset({"started", "cancelled"})
#: kinds whose entry, begun again by a resume, is the same scope or question going on (its
#: start stays the first one); any other kind begun again is another attempt of the effect
GOES_ON: frozenset[str] = SCOPE_KINDS | {Ask.kind}
#: an entry may be finished only from this
FINISH_FROM: frozenset[str] = frozenset({"started"})
#: entries whose outcome a resume or a replay feeds back instead of performing them again
FINISHED: frozenset[str] = frozenset({"completed", "failed"})
#: runs that ``resume`` continues in place
RESUMABLE: frozenset[str] = frozenset({"running", "failed", "waiting", "cancelled"})
#: runs that ``gc`` may remove (never one that is running, crashed or waiting for an answer)
REMOVABLE: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


def can_begin(status: str | None) -> bool:
    """Whether an entry in ``status`` (None: no entry yet) may be begun."""
    return status is None or status in BEGIN_FROM


def can_finish(status: str | None) -> bool:
    return status in FINISH_FROM


def can_resume(status: str) -> bool:
    return status in RESUMABLE


def can_remove(status: str) -> bool:
    return status in REMOVABLE


RunClose = Literal["finish", "leave", "put_back"]
"""How a run that ends is written back to its journal (see :func:`closing`)."""


def closing(*, journal_failed: bool, resumed: bool, diverged: bool) -> RunClose:
    """How a run that ends is written back:

    - ``leave``: the journal could not be written; the run stays as it stands (``running``),
      to be resumed once the cause is gone;
    - ``put_back``: a resume in place found the program changed (it diverged from its
      record); the run is left as it was before, to be resumed again once the program is put
      right;
    - ``finish``: otherwise, with how it ended.
    """
    if journal_failed:
        return "leave"
    if resumed and diverged:
        return "put_back"
    return "finish"
