"""The journal: an append-only record of runs and of every recorded effect.

Rules:

- an entry is written ``started`` before its handler runs and ``completed``, ``failed`` or
  ``cancelled`` after, so a result is in the journal before the program sees it;
- entries are keyed by (run id, address) and numbered by ``seq`` in the order they began; a
  ``started`` or ``cancelled`` entry may be begun again (a resumed run performs an effect a
  crash or a stop left unfinished once more), a completed or failed one never changes;
- effects, results and errors are canonical JSON text, readable with any SQLite client;
- one writer per run: :meth:`Journal.acquire` refuses a second writer, naming the holder.

``MemoryJournal`` keeps everything in memory (tests, benchmarks); ``SqliteJournal`` is the
embedded default (``.opdsl/runs.db``, WAL mode).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter

__all__ = [
    "Attempt",
    "DEFAULT_DB",
    "Entry",
    "EntryStatus",
    "Journal",
    "JournalError",
    "RunLocked",
    "RunRecord",
    "RunStatus",
]

from interpreters.journal._status import ENTRY_STATUSES, EntryEnd, EntryStatus, RunStatus
from op import Fatal, Tool

DEFAULT_DB = Path(".opdsl") / "runs.db"


class JournalError(Exception, Fatal):
    """The journal was asked for something its records do not allow, or cannot be read or
    written. Never thrown into a program: a run whose journal fails ends there (failed, and
    resumable once the cause is gone), so no run is recorded as finished with effects missing."""


class RunLocked(JournalError):
    """Another live process is writing this run."""


class RunRecord(BaseModel):
    """One run: what program with what arguments, where it came from, and how it ended."""

    model_config = ConfigDict(extra="forbid")
    run_id: str
    program: str
    args_json: str = '{"args":[],"kwargs":{}}'
    config_json: str = "{}"
    state_json: str | None = None
    status: RunStatus = "running"
    parent_run: str | None = None
    fork_checkpoint: str | None = None
    created_at: float = 0.0
    finished_at: float | None = None
    result_json: str | None = None
    error_json: str | None = None
    final_state_json: str | None = None


def recorded_call(record: RunRecord) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments ``record``'s program was called with, as ``(args, kwargs)``; a record
    that does not hold them as ``{"args": [...], "kwargs": {...}}`` is a :class:`JournalError`
    naming the run."""
    try:
        called = json.loads(record.args_json)
    except (ValueError, RecursionError):
        called = None
    args = called.get("args", []) if isinstance(called, dict) else None
    kwargs = called.get("kwargs", {}) if isinstance(called, dict) else None
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise JournalError(
            f"run {record.run_id}: its recorded arguments are not "
            '{"args": [...], "kwargs": {...}} (or are nested too deep to read)'
        )
    return tuple(args), kwargs


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the stack
        return None


def json_object(raw: str | None) -> dict[str, Any]:
    """Recorded JSON text as an object (anything else, or text that is not JSON, or JSON
    nested deeper than the stack: empty). For readers of a journal that may have been
    changed outside opdsl, which show what they can."""
    value = _json_or_none(raw) if raw else None
    return value if isinstance(value, dict) else {}


def checkpoint_name(entry: Entry) -> str | None:
    """The name a checkpoint entry records (one that is not text, from a file made by hand,
    as text), or None when its effect names none (changed outside opdsl)."""
    effect = json_object(entry.effect_json)
    return str(effect["name"]) if "name" in effect else None


def error_line(error_json: str | None) -> str | None:
    """A recorded error (an entry's or a run's) as one line, ``Type: message``."""
    if not error_json:
        return None
    err = _json_or_none(error_json)
    if isinstance(err, dict):
        return f"{err.get('type')}: {err.get('message')}"
    return error_json


@dataclass(slots=True)
class Entry:
    """One recorded effect at one address of one run."""

    run_id: str
    seq: int
    address: str
    kind: str
    effect_json: str
    status: EntryStatus = "started"
    result_json: str | None = None
    error_json: str | None = None
    usage_json: str | None = None
    started_at: float = 0.0
    finished_at: float | None = None

    def replace(self, **changes: Any) -> Entry:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in _ENTRY_COLS}

    def tool_failure(self) -> str | None:
        """The error of a tool that failed as a tool (the effect completed; its result is
        ``ok=false``), or None."""
        if self.kind != Tool.kind or self.status != "completed" or not self.result_json:
            return None
        result = _json_or_none(self.result_json)
        if isinstance(result, dict) and result.get("ok") is False:
            return str(result.get("error") or "failed")
        return None

    def error_line(self) -> str | None:
        """The effect's recorded error as one line, ``Type: message``, or None."""
        return error_line(self.error_json)

    @classmethod
    def from_dict(cls, data: Any) -> Entry:
        """Build and check an entry from untrusted data (an imported file)."""
        if not isinstance(data, dict):
            raise ValueError("an entry must be a JSON object")
        extra = set(data) - set(_ENTRY_COLS)
        if extra:
            raise ValueError(f"unknown entry fields: {', '.join(sorted(extra))}")
        entry: Entry = _ENTRY_ADAPTER.validate_python(data)
        if not _ADDRESS.fullmatch(entry.address):
            # every reader (resume, replay, show, report, diff) orders and nests by it
            raise ValueError(f"address {entry.address[:40]!r} is not an address like 3 or 3.2.1")
        return entry


_ENTRY_COLS = [f.name for f in dataclasses.fields(Entry)]
_ADDRESS = re.compile(r"[1-9][0-9]{0,8}(\.[1-9][0-9]{0,8}){0,255}")
_ENTRY_ADAPTER = TypeAdapter(Entry)
_STATUSES = ENTRY_STATUSES


_HELD: set[tuple[str, str]] = set()
"""(journal file, run) pairs this process is writing now."""


def _holder() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


@dataclass(frozen=True, slots=True)
class Attempt:
    """An earlier attempt of an entry, which a resume began again: when it started, how the
    journal last had it (``started``: cut off by a crash or a stop; ``cancelled``), when it
    finished if it did, and when it was begun again (``again_at``)."""

    address: str
    kind: str
    started_at: float
    status: str
    finished_at: float | None
    again_at: float


class Journal(ABC):
    """Where runs and entries are kept.

    ``grouped``: ``begin`` and ``finish`` are written but not yet committed; the journal commits
    them soon after (one transaction for every run sharing it), and the driver awaits
    :meth:`durable` after the ``begin`` of an effect that acts on the world, before its
    handler runs.
    """

    @property
    def grouped(self) -> bool:
        """Whether writes wait for :meth:`durable` to be committed (default: never)."""
        return False

    async def durable(self) -> None:  # noqa: B027 - a journal that commits every write at once
        """Return once every write made so far is committed (see ``grouped``)."""

    @abstractmethod
    def create_run(self, run: RunRecord) -> None: ...

    @abstractmethod
    def reopen_run(self, run_id: str, at: float | None = None) -> None:
        """Mark a run ``running`` again (it is being resumed, at ``at``: kept, see
        :meth:`resumes`)."""

    def set_config(self, run_id: str, config_json: str) -> None:
        """Replace a run's recorded config (``opdsl trust`` seals it)."""
        raise JournalError(f"{type(self).__name__} cannot change a run's config")

    def attempts(self, run_id: str) -> list[Attempt]:
        """The earlier attempts of the run's entries, in the order they were begun again (a
        journal that keeps none: empty)."""
        return []

    def resumes(self, run_id: str) -> list[float]:
        """When the run was resumed, in order (a journal that keeps none: empty)."""
        return []

    @abstractmethod
    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        *,
        at: float,
        result_json: str | None = None,
        error_json: str | None = None,
        final_state_json: str | None = None,
    ) -> None: ...

    @abstractmethod
    def begin(self, run_id: str, address: str, kind: str, effect_json: str, at: float) -> None: ...

    def begin_unwaited(
        self,
        run_id: str,
        address: str,
        kind: str,
        effect_json: str,
        at: float,
        pieces: Mapping[str, str] | None = None,
    ) -> None:
        """Begin an effect whose handler changes nothing outside the run (a model call, a
        read of the clock or of chance, a wait), with the ``pieces`` of content its text
        refers to (:meth:`put_content`): nothing waits for this begin to be committed, and an
        effect whose begin a crash lost is performed again on resume, as one left ``started``
        is. A journal may hold such a begin back and write the entry whole at its
        :meth:`finish`; this one writes it as any other."""
        if pieces:
            self.put_content(pieces)
        self.begin(run_id, address, kind, effect_json, at)

    @abstractmethod
    def finish(
        self,
        run_id: str,
        address: str,
        status: EntryEnd,
        *,
        at: float,
        result_json: str | None = None,
        error_json: str | None = None,
        usage_json: str | None = None,
    ) -> None: ...

    @abstractmethod
    def add_entries(self, entries: Iterable[Entry]) -> None:
        """Copy finished entries in as they are (forks, imports)."""

    @abstractmethod
    def put_content(self, pieces: Mapping[str, str]) -> None:
        """Store pieces of content (hash: text) that entries about to be written refer to;
        a piece already stored is left as it is (see ``journal._content``)."""

    @abstractmethod
    def content(self, hashes: Iterable[str]) -> dict[str, str]:
        """The stored pieces among ``hashes`` (a missing one is left out)."""

    def whole(self, entry: Entry) -> Entry:
        """``entry`` with its effect and result as their whole canonical text: a journal
        keeps each piece of content once and refers to it (``journal._content``), so an
        ``infer``'s ``effect_json`` names its conversation by a hash; this puts it back.

        Example:
            >>> from interpreters import MemoryJournal, run, ScriptedModel
            >>> from op import infer
            >>> def hello():
            ...     return (yield from infer("hi")).text
            >>> j = MemoryJournal()
            >>> r = run(hello, model=ScriptedModel(["yo"]), db=j)
            >>> '"$chain"' in j.entries(r.run_id)[0].effect_json
            True
            >>> j.whole(j.entries(r.run_id)[0]).effect_json[:40]
            '{"kind":"infer","messages":[{"content":"'
        """
        from interpreters.journal._content import lookup, unpack_texts

        effect, result = unpack_texts(
            entry.kind, entry.effect_json, entry.result_json, lookup({}, self.content)
        )
        return entry.replace(effect_json=effect, result_json=result)

    def content_hashes(self) -> set[str]:
        """Every stored piece's hash (``gc``; a store that cannot list them says none)."""
        return set()

    def delete_content(self, hashes: Iterable[str]) -> int:
        """Remove pieces no run refers to (``gc``); returns how many went."""
        return 0

    def alone(self) -> AbstractContextManager[Journal]:
        """The journal with no other writer until the block ends: what is read in it is what
        is there when it ends (a sweep of content deletes only what nothing refers to, a
        writer's reuse of a piece included). A journal only this process writes is itself."""
        return nullcontext(self)

    @abstractmethod
    def run(self, run_id: str) -> RunRecord: ...

    @abstractmethod
    def runs(self) -> list[RunRecord]: ...

    @abstractmethod
    def entries(self, run_id: str) -> list[Entry]: ...

    @abstractmethod
    def delete_run(self, run_id: str) -> None:
        """Remove a run and its entries."""

    @abstractmethod
    def acquire(self, run_id: str) -> None:
        """Become the run's only writer, or raise :class:`RunLocked`."""

    @abstractmethod
    def release(self, run_id: str) -> None: ...

    def close(self) -> None:  # noqa: B027 - stores without resources need nothing
        """Release what the store holds open."""
