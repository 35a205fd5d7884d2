"""The journal held in memory (tests, benchmarks)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import final

from interpreters.journal._base import (
    Attempt,
    Entry,
    Journal,
    JournalError,
    RunLocked,
    RunRecord,
    RunStatus,
)
from interpreters.journal._content import SHORT_MIN, kept_body, stored_body
from interpreters.journal._status import BEGIN_FROM, FINISH_FROM, GOES_ON, EntryEnd, EntryStatus


def _stored(text: str | None) -> str | bytes | None:
    return None if text is None else stored_body(text)


def _text(kept: str | bytes | None, what: str) -> str | None:
    return None if kept is None else kept_body(kept, what)


@dataclass(slots=True)
class _Kept:
    """An entry as the journal holds it: its texts kept compressed when long enough (as the
    SQLite journal keeps its results and pieces), so a long run costs what it adds."""

    seq: int
    kind: str
    effect: str | bytes
    started_at: float
    status: EntryStatus = "started"
    result: str | bytes | None = None
    error: str | bytes | None = None
    usage: str | bytes | None = None
    finished_at: float | None = None

    @classmethod
    def of(cls, e: Entry) -> _Kept:
        return cls(
            e.seq,
            e.kind,
            stored_body(e.effect_json),
            e.started_at,
            e.status,
            _stored(e.result_json),
            _stored(e.error_json),
            _stored(e.usage_json),
            e.finished_at,
        )

    def entry(self, run_id: str, address: str) -> Entry:
        return Entry(
            run_id=run_id,
            seq=self.seq,
            address=address,
            kind=self.kind,
            effect_json=kept_body(self.effect, "its effect"),
            status=self.status,
            result_json=_text(self.result, "its result"),
            error_json=_text(self.error, "its error"),
            usage_json=_text(self.usage, "its usage"),
            started_at=self.started_at,
            finished_at=self.finished_at,
        )


@final
class MemoryJournal(Journal):
    """A journal held in memory."""

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._entries: dict[str, dict[str, _Kept]] = {}
        self._locks: set[str] = set()
        self._content: dict[str, str | bytes] = {}
        self._attempts: dict[str, list[Attempt]] = {}
        self._resumes: dict[str, list[float]] = {}

    def create_run(self, run: RunRecord) -> None:
        if run.run_id in self._runs:
            raise JournalError(f"run {run.run_id} already exists")
        self._runs[run.run_id] = run.model_copy()
        self._entries[run.run_id] = {}

    def reopen_run(self, run_id: str, at: float | None = None) -> None:
        self._runs[run_id] = self.run(run_id).model_copy(
            update={"status": "running", "finished_at": None, "error_json": None}
        )
        if at is not None:
            self._resumes.setdefault(run_id, []).append(at)

    def set_config(self, run_id: str, config_json: str) -> None:
        self._runs[run_id] = self.run(run_id).model_copy(update={"config_json": config_json})

    def attempts(self, run_id: str) -> list[Attempt]:
        return list(self._attempts.get(run_id, ()))

    def resumes(self, run_id: str) -> list[float]:
        return list(self._resumes.get(run_id, ()))

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        *,
        at: float,
        result_json: str | None = None,
        error_json: str | None = None,
        final_state_json: str | None = None,
    ) -> None:
        self._runs[run_id] = self.run(run_id).model_copy(
            update={
                "status": status,
                "finished_at": at,
                "result_json": result_json,
                "error_json": error_json,
                "final_state_json": final_state_json,
            }
        )

    def _run_entries(self, run_id: str) -> dict[str, _Kept]:
        try:
            return self._entries[run_id]
        except KeyError:
            raise JournalError(f"no run {run_id!r} in this journal") from None

    def begin(self, run_id: str, address: str, kind: str, effect_json: str, at: float) -> None:
        entries = self._run_entries(run_id)
        old = entries.get(address)
        if old is not None and old.status not in BEGIN_FROM:
            raise JournalError(
                f"run {run_id}: address {address} is already {old.status}; entries are append-only"
            )
        seq = old.seq if old is not None else len(entries)
        # a short text (most are) is kept as it is: no call for it
        effect = effect_json if len(effect_json) < SHORT_MIN else stored_body(effect_json)
        started = at
        if old is not None and kind in GOES_ON:
            started = old.started_at
        elif old is not None:
            self._attempts.setdefault(run_id, []).append(
                Attempt(address, old.kind, old.started_at, old.status, old.finished_at, at)
            )
        entries[address] = _Kept(seq, kind, effect, started)

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
    ) -> None:
        entries = self._run_entries(run_id)
        old = entries.get(address)
        if old is None or old.status not in FINISH_FROM:
            state = "missing" if old is None else old.status
            raise JournalError(f"run {run_id}: cannot finish address {address}: it is {state}")
        old.status = status
        if result_json is not None and len(result_json) >= SHORT_MIN:
            old.result = stored_body(result_json)
        else:
            old.result = result_json
        if error_json is not None or usage_json is not None:
            old.error = _stored(error_json)
            old.usage = _stored(usage_json)
        old.finished_at = at

    def add_entries(self, entries: Iterable[Entry]) -> None:
        for e in entries:
            self._run_entries(e.run_id)[e.address] = _Kept.of(e)

    def put_content(self, pieces: Mapping[str, str]) -> None:
        found = self._content
        for h, body in pieces.items():
            if h not in found:
                found[h] = stored_body(body)  # kept as the SQLite journal keeps it

    def content(self, hashes: Iterable[str]) -> dict[str, str]:
        found = self._content
        return {h: kept_body(found[h], f"piece {h}") for h in hashes if h in found}

    def content_hashes(self) -> set[str]:
        return set(self._content)

    def delete_content(self, hashes: Iterable[str]) -> int:
        gone = 0
        for h in hashes:
            if self._content.pop(h, None) is not None:
                gone += 1
        return gone

    def run(self, run_id: str) -> RunRecord:
        try:
            return self._runs[run_id]
        except KeyError:
            raise JournalError(f"no run {run_id!r} in this journal") from None

    def runs(self) -> list[RunRecord]:
        return list(self._runs.values())

    def entries(self, run_id: str) -> list[Entry]:
        kept = sorted(self._run_entries(run_id).items(), key=lambda item: item[1].seq)
        return [e.entry(run_id, address) for address, e in kept]

    def delete_run(self, run_id: str) -> None:
        self.run(run_id)
        del self._runs[run_id]
        self._entries.pop(run_id, None)
        self._attempts.pop(run_id, None)
        self._resumes.pop(run_id, None)

    def acquire(self, run_id: str) -> None:
        if run_id in self._locks:
            raise RunLocked(f"run {run_id} is already being written by this process")
        self._locks.add(run_id)

    def release(self, run_id: str) -> None:
        self._locks.discard(run_id)
