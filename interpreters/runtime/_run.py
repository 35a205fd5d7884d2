"""A run's life in its journal: opened (locked, then created, or reopened when it is resumed
in place), closed (finished as ``journal._status.closing`` says, then unlocked).

The rules about which runs may be reopened and how one that ends is written back live in
``journal/_status.py``; this module only carries them out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, assert_never, final

from interpreters.journal._base import Entry, Journal, JournalError, RunRecord
from interpreters.journal._seal import SealKeyError, foreign, seal_record, unsealed
from interpreters.journal._status import EndStatus, can_resume, closing
from interpreters.runtime._replay import Divergence, error_json
from state import CRDTModel, NotSerializable, canonical_json, to_jsonable

__all__ = ["RunEnd", "RunLife"]


@dataclass(slots=True)
class RunEnd:
    """How a run ended, filled in as it ends (``failed`` until it says otherwise)."""

    status: EndStatus = "failed"
    value: Any = None
    error: BaseException | None = None
    address: str | None = None
    question: str | None = None
    #: the return value as journaled (computed only when there is a journal)
    result_json: str | None = None
    state: CRDTModel | None = None

    @property
    def message(self) -> str | None:
        """The error as one line, ``Type: message``."""
        return None if self.error is None else f"{type(self.error).__name__}: {self.error}"


def _unwritten(end: RunEnd, failed: JournalError) -> bool:
    """The run's end could not be written (a commit of its last entries failed, a full
    disk): it ends failed, and stays running in the journal, to be resumed from what was
    kept. The error it ended with, if any, stays the one said, with the journal's noted on
    it; else the journal's is. Returns True (the journal is failing)."""
    end.status = "failed"
    if end.error is None:
        end.error = failed
    else:
        end.error.add_note(f"and its end could not be journaled: {failed}")
    return True


def _existing(
    journal: Journal, run_id: str, record: RunRecord | None, in_place: bool
) -> RunRecord | None:
    """The run as it is now, when ``record`` names a run the journal holds (it is resumed in
    place); None when it is a new one. Asked with the run's lock held: a run resumed
    ``in_place`` that was removed since the caller read it (``opdsl gc`` in another process)
    is refused, never made again without its start. Only the journal's own refusal (no such
    run) means new: anything else is a defect and propagates."""
    if record is None or record.run_id != run_id:
        return None
    try:
        return journal.run(run_id)
    except JournalError:
        if in_place:
            raise JournalError(
                f"run {run_id} is no longer in the journal: it was removed while it was being "
                "resumed (opdsl gc?); nothing was done"
            ) from None
        return None


def _created_config(config_json: str, state: CRDTModel | None, journal: Journal) -> str:
    """``config_json`` with the state's type, and the file of the journal that makes the run
    when it snapshots a workspace: ``opdsl gc`` on a copy of that file leaves the snapshots
    the file still names (:func:`interpreters._gc.held_elsewhere`)."""
    config = json.loads(config_json or "{}")
    if state is not None:
        config["state_type"] = to_jsonable(type(state))
    path = getattr(journal, "path", None)
    if config.get("workspace") and isinstance(path, Path):
        config["journal"] = str(path.resolve())
    else:
        config.pop("journal", None)  # a fork into another journal: not the parent's file
    return canonical_json(config)


def _config(base: RunRecord | None, created: RunRecord) -> str:
    """The config the run ``created`` records: sealed as the user's own when it is made from
    a sealed record (a run the caller started, a fork of one), else without a seal (a fork of
    a foreign run stays foreign; a run made from no record, as the Temporal workflow makes
    them, where no key can be read, is sealed by nothing)."""
    try:
        if base is not None and foreign(base) is None:
            return seal_record(created).config_json
    except SealKeyError:
        pass  # a key that went away since the base was sealed: as foreign
    return unsealed(created.config_json)


@final
class RunLife:
    """One run, open in its journal (and locked) from :meth:`open` to :meth:`close`."""

    __slots__ = ("journal", "prior", "run_id")

    def __init__(self, journal: Journal, run_id: str, prior: RunRecord | None) -> None:
        self.journal = journal
        self.run_id = run_id
        #: the run as it was before, when it is resumed in place
        self.prior = prior

    @classmethod
    def open(
        cls,
        journal: Journal,
        *,
        run_id: str,
        program: str,
        record: RunRecord | None,
        args_json: str,
        state: CRDTModel | None,
        at: float,
        entries: Iterable[Entry] = (),
        in_place: bool = False,
    ) -> RunLife:
        """Lock the run, then reopen it (``record`` names a run the journal holds) or create
        it from ``record`` (its config, parent and fork point) with ``entries`` written right
        after it (a fork's prefix)."""
        journal.acquire(run_id)
        try:
            prior = _existing(journal, run_id, record, in_place)
            if prior is not None:
                if not can_resume(prior.status):
                    raise JournalError(
                        f"run {run_id} is {prior.status}: it cannot be resumed in place"
                    )
                journal.reopen_run(run_id, at)
            else:
                base = record or RunRecord(run_id=run_id, program=program)
                created = base.model_copy(
                    update={
                        "run_id": run_id,
                        "program": program,
                        "args_json": args_json,
                        "state_json": None if state is None else state.canonical(),
                        "created_at": at,
                        "config_json": _created_config(base.config_json, state, journal),
                    }
                )
                journal.create_run(
                    created.model_copy(update={"config_json": _config(record, created)})
                )
                prefix = list(entries)
                if prefix:
                    journal.add_entries(prefix)
        except BaseException:
            journal.release(run_id)
            raise
        return cls(journal, run_id, prior)

    def close(self, end: RunEnd, *, at: float, clean: Callable[[str | None], str | None]) -> None:
        """Write how the run ended, as ``closing`` says, then unlock it. ``clean`` replaces
        secrets in what is written."""
        journal_failed = isinstance(end.error, JournalError)
        try:
            match closing(
                journal_failed=journal_failed,
                resumed=self.prior is not None,
                diverged=isinstance(end.error, Divergence),
            ):
                case "leave":
                    pass
                case "put_back":
                    try:
                        self._put_back(at)
                    except JournalError as exc:
                        journal_failed = _unwritten(end, exc)
                case "finish":
                    try:
                        self._finish(end, at, clean)
                    except JournalError as exc:
                        journal_failed = _unwritten(end, exc)
                case never:
                    assert_never(never)
        finally:
            try:
                self.journal.release(self.run_id)
            except JournalError:
                if not journal_failed:
                    raise
                # the journal is failing: the lock is left, and taken over on resume

    def _finish(self, end: RunEnd, at: float, clean: Callable[[str | None], str | None]) -> None:
        try:
            state = None if end.state is None else end.state.canonical()
        except NotSerializable as exc:
            # a final state no journal holds (a lone surrogate in a text): the run fails on
            # it, saying where, rather than staying "running" with no end written
            end.status, end.result_json, state = "failed", None, None
            if end.error is None:  # else the error that ended it stays the one said
                end.error = NotSerializable(
                    f"run {self.run_id}: its final state cannot be recorded: {exc}", path=exc.path
                )
        err = None if end.error is None else error_json(end.error, end.address)
        self.journal.finish_run(
            self.run_id,
            end.status,
            at=at,
            result_json=clean(end.result_json),
            error_json=clean(err),
            final_state_json=state,
        )

    def _put_back(self, at: float) -> None:
        prior = self.prior
        assert prior is not None
        self.journal.finish_run(
            self.run_id,
            prior.status,
            at=prior.finished_at or at,
            result_json=prior.result_json,
            error_json=prior.error_json,
            final_state_json=prior.final_state_json,
        )
