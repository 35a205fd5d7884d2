"""The journal: an append-only record of runs and of every recorded effect.

Rules:

- an entry is written ``started`` before its handler runs and ``completed``, ``failed`` or
  ``cancelled`` after, so a result is in the journal before the program sees it;
- entries are keyed by (run id, address); a ``started`` entry may be begun again (a resumed
  run performs an effect the crash left open once more), a finished one may not;
- effects, results and errors are canonical JSON text, readable without opdsl.

``MemoryJournal`` keeps all of it in memory (tests, benchmarks); other stores implement the
same :class:`Journal` interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Literal, final

from pydantic import BaseModel, ConfigDict

__all__ = ["Entry", "Journal", "JournalError", "MemoryJournal", "RunRecord"]

EntryStatus = Literal["started", "completed", "failed", "cancelled"]
RunStatus = Literal["running", "completed", "failed", "waiting", "cancelled"]


class JournalError(Exception):
    """The journal was asked for something its records do not allow."""


class RunRecord(BaseModel):
    """One run: what program with what arguments, and how it ended."""

    model_config = ConfigDict(extra="forbid")
    run_id: str
    program: str
    args_json: str = "[]"
    status: RunStatus = "running"
    parent_run: str | None = None
    fork_checkpoint: str | None = None
    created_at: float = 0.0
    finished_at: float | None = None
    result_json: str | None = None
    error_json: str | None = None


class Entry(BaseModel):
    """One recorded effect at one address of one run."""

    model_config = ConfigDict(extra="forbid")
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


class Journal(ABC):
    """Where runs and entries are kept."""

    @abstractmethod
    def create_run(self, run: RunRecord) -> None: ...

    @abstractmethod
    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        *,
        at: float,
        result_json: str | None = None,
        error_json: str | None = None,
    ) -> None: ...

    @abstractmethod
    def begin(self, run_id: str, address: str, kind: str, effect_json: str, at: float) -> None: ...

    @abstractmethod
    def finish(
        self,
        run_id: str,
        address: str,
        status: Literal["completed", "failed", "cancelled"],
        *,
        at: float,
        result_json: str | None = None,
        error_json: str | None = None,
        usage_json: str | None = None,
    ) -> None: ...

    @abstractmethod
    def run(self, run_id: str) -> RunRecord: ...

    @abstractmethod
    def runs(self) -> list[RunRecord]: ...

    @abstractmethod
    def entries(self, run_id: str) -> list[Entry]: ...


@final
class MemoryJournal(Journal):
    """A journal held in memory."""

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._entries: dict[str, dict[str, Entry]] = {}

    def create_run(self, run: RunRecord) -> None:
        if run.run_id in self._runs:
            raise JournalError(f"run {run.run_id} already exists")
        self._runs[run.run_id] = run.model_copy()
        self._entries[run.run_id] = {}

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        *,
        at: float,
        result_json: str | None = None,
        error_json: str | None = None,
    ) -> None:
        run = self.run(run_id)
        self._runs[run_id] = run.model_copy(
            update={
                "status": status,
                "finished_at": at,
                "result_json": result_json,
                "error_json": error_json,
            }
        )

    def _run_entries(self, run_id: str) -> dict[str, Entry]:
        try:
            return self._entries[run_id]
        except KeyError:
            raise JournalError(f"no run {run_id!r} in this journal") from None

    def begin(self, run_id: str, address: str, kind: str, effect_json: str, at: float) -> None:
        entries = self._run_entries(run_id)
        old = entries.get(address)
        if old is not None and old.status != "started":
            raise JournalError(
                f"run {run_id}: address {address} is already {old.status}; entries are append-only"
            )
        seq = old.seq if old is not None else len(entries)
        entries[address] = Entry(
            run_id=run_id, seq=seq, address=address, kind=kind, effect_json=effect_json, started_at=at
        )

    def finish(
        self,
        run_id: str,
        address: str,
        status: Literal["completed", "failed", "cancelled"],
        *,
        at: float,
        result_json: str | None = None,
        error_json: str | None = None,
        usage_json: str | None = None,
    ) -> None:
        entries = self._run_entries(run_id)
        old = entries.get(address)
        if old is None or old.status != "started":
            state = "missing" if old is None else old.status
            raise JournalError(f"run {run_id}: cannot finish address {address}: it is {state}")
        old.status = status
        old.result_json = result_json
        old.error_json = error_json
        old.usage_json = usage_json
        old.finished_at = at

    def run(self, run_id: str) -> RunRecord:
        try:
            return self._runs[run_id]
        except KeyError:
            raise JournalError(f"no run {run_id!r} in this journal") from None

    def runs(self) -> list[RunRecord]:
        return list(self._runs.values())

    def entries(self, run_id: str) -> list[Entry]:
        return [e.model_copy() for e in sorted(self._run_entries(run_id).values(), key=lambda e: e.seq)]
