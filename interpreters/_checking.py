"""Checking stored runs against the code as it is now: the replay gate of ``opdsl check``.

Each run is replayed offline against its journal, effect by effect and by value (the effect's
whole canonical form), and so are its end, its value and its final state:

- a finished run (completed, failed) replays the same, or diverges at its first changed effect
  (address, source line, nearest checkpoint, the recorded and new effects as a diff);
- a run in flight (running, waiting, stopped) is fed its record up to where it stands and
  stops at the first effect that would run live: it *would resume* there, or it *diverges
  before its resume point*.

Nothing is performed and nothing is written: a check never changes a run, waiting or running.
A run read from an exported file runs only code the caller names (``programs``), as an
imported run does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, final

from interpreters._loading import (
    declared_state,
    initial_state,
    load_program,
    named_again,
    program_of,
)
from interpreters._replaying import ReplayInterpreter
from interpreters.journal import Journal, JournalError, MemoryJournal, RunRecord
from interpreters.journal._base import recorded_call
from interpreters.journal._portable import read_export
from interpreters.journal._seal import config_of
from interpreters.runtime._clock import VirtualClock
from interpreters.runtime._driver import execute, program_name
from interpreters.runtime._frame import Call, Handlers, WaitingForAnswer
from interpreters.runtime._redact import Redactor
from interpreters.runtime._replay import Divergence, ReplayLog, marker_name
from interpreters.runtime._services import Services
from interpreters.runtime._sync import blocking
from op import Ask, Infer, OpdslError, Patched, Tool
from op.effects import LeafEffect

__all__ = [
    "IN_FLIGHT",
    "Checked",
    "Verdict",
    "acheck_run",
    "acheck_runs",
    "check_journal",
    "check_runs",
    "exported_runs",
    "journal_runs",
    "patches",
    "summary",
]

Verdict = Literal["same", "diverges", "resumes", "diverges-before-resume", "error"]
"""What a check found: the run replays the same; it diverges; (in flight) it would resume
where it stands; (in flight) it diverges before its resume point; it could not be checked."""

IN_FLIGHT: frozenset[str] = frozenset({"running", "waiting", "cancelled"})
"""The statuses of a run that may still go on where it stands."""


@final
@dataclass(frozen=True)
class Checked:
    """The check of one run. ``address``, ``where``, ``checkpoint``, ``reason``, ``recorded``
    and ``now``: its first divergence; ``resume_at`` and ``resume_with``: where a run in
    flight would go on, and the effect it would perform there."""

    run_id: str
    program: str
    status: str
    verdict: Verdict
    source: str = ""
    address: str | None = None
    where: str | None = None
    checkpoint: tuple[str, str] | None = None
    reason: str | None = None
    recorded: str | None = None
    now: str | None = None
    resume_at: str | None = None
    resume_with: str | None = None
    diff: tuple[str, ...] = ()
    #: the ``patched`` markers the run took the old code at, and those its record holds
    old_code: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the code as it is now agrees with the run."""
        return self.verdict in ("same", "resumes")

    def line(self) -> str:
        """The run in one line."""
        head = f"{self.run_id}  {self.program}"
        match self.verdict:
            case "same":
                return f"{head}  same ({self.status})"
            case "resumes":
                if self.resume_at is None:
                    return f"{head}  {self.status}: would finish on resume, nothing left to run"
                return (
                    f"{head}  {self.status}: would resume at {self.resume_at} ({self.resume_with})"
                )
            case "diverges" | "diverges-before-resume":
                what = (
                    "diverges"
                    if self.verdict == "diverges"
                    else (f"{self.status}: diverges before its resume point")
                )
                cp = (
                    f"nearest checkpoint {self.checkpoint[0]!r} at {self.checkpoint[1]}"
                    if self.checkpoint is not None
                    else "no checkpoint before it"
                )
                return f"{head}  {what} at {self.address} ({self.where}): {self.reason}; {cp}"
            case "error":
                return f"{head}  cannot be checked: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        """The check as JSON data (``opdsl check --json``)."""
        return {
            "run_id": self.run_id,
            "program": self.program,
            "status": self.status,
            "verdict": self.verdict,
            "ok": self.ok,
            "source": self.source,
            "address": self.address,
            "where": self.where,
            "checkpoint": None
            if self.checkpoint is None
            else {"name": self.checkpoint[0], "address": self.checkpoint[1]},
            "reason": self.reason,
            "recorded": self.recorded,
            "now": self.now,
            "diff": list(self.diff),
            "resume_at": self.resume_at,
            "resume_with": self.resume_with,
            "old_code": list(self.old_code),
            "markers": list(self.markers),
        }


def _described(effect: LeafEffect) -> str:
    """An effect in a few words: its kind and what names it."""
    match effect:
        case Tool():
            return f"tool {effect.name}"
        case Ask():
            return f"ask {effect.question[:60]!r}"
        case Patched():
            return f"patched {effect.name!r}"
        case Infer():
            return f"infer ({len(effect.messages)} messages)"
        case _:
            return effect.kind


@final
class _ResumePoint(Handlers):
    """Handlers of a run in flight fed its record: the first effect that would run live is
    where it would resume. Nothing is performed: the run stops there as if it waited."""

    def __init__(self) -> None:
        self.reached: list[tuple[str, str]] = []

    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        self.reached.append((call.address, _described(effect)))
        raise WaitingForAnswer("(the resume point)")


def _from_divergence(base: Checked, verdict: Verdict, found: Divergence) -> Checked:
    # the report's lines: what and where, the checkpoint, recorded, now, then the diff
    diff = tuple(line[2:] for line in str(found).splitlines()[4:])
    return Checked(
        run_id=base.run_id,
        program=base.program,
        status=base.status,
        verdict=verdict,
        source=base.source,
        address=found.address,
        where=found.where,
        checkpoint=found.checkpoint,
        reason=found.reason or str(found).splitlines()[0],
        recorded=found.recorded,
        now=found.now,
        diff=diff,
    )


def _error(base: Checked, exc: BaseException) -> Checked:
    first = (str(exc).splitlines() or [""])[0]
    return Checked(
        run_id=base.run_id,
        program=base.program,
        status=base.status,
        verdict="error",
        source=base.source,
        reason=f"{type(exc).__name__}: {first}" if not isinstance(exc, OpdslError) else first,
    )


async def acheck_run(
    journal: Journal,
    run_id: str,
    *,
    program: Callable[..., Any] | None = None,
    source: str = "",
    redactor: Redactor | None = None,
) -> Checked:
    """Check run ``run_id`` of ``journal`` against the code as it is now (``program``, else
    the one its journal names, imported as its file is now). ``redactor``: what replaces
    secrets, as when the runs were recorded (default: this process's environment's)."""
    redactor = redactor if redactor is not None else Redactor.from_env()
    record = journal.run(run_id)
    base = Checked(run_id, record.program, record.status, "same", source=source)
    logs: list[ReplayLog] = []
    try:
        if record.status in IN_FLIGHT:
            checked = await _in_flight(journal, record, program, base, redactor, logs)
        else:
            replaying = ReplayInterpreter(
                run_id, db=journal, accept_changed_code=True, redactor=redactor
            )
            try:
                await replaying.replayed(program, None, None)
                checked = base
            finally:
                if replaying.log is not None:
                    logs.append(replaying.log)
    except Divergence as found:
        checked = _from_divergence(base, "diverges", found)
    except Exception as exc:
        return _error(base, exc)
    return checked if not logs else _with_patches(checked, logs[0])


def _with_patches(checked: Checked, log: ReplayLog) -> Checked:
    """``checked`` with the patches the run took the old code at and the markers it holds."""
    markers = [name for e in log.entries.values() if (name := marker_name(e)) is not None]
    if not markers and not log.old_code:
        return checked
    return dataclasses.replace(
        checked, old_code=tuple(dict.fromkeys(log.old_code)), markers=tuple(dict.fromkeys(markers))
    )


async def _in_flight(
    journal: Journal,
    record: RunRecord,
    program: Callable[..., Any] | None,
    base: Checked,
    redactor: Redactor,
    logs: list[ReplayLog],
) -> Checked:
    """Feed a run in flight its record, and stop where it would go on live (``logs`` is
    given the record as the run used it)."""
    config = config_of(record)
    state_type = declared_state(program, config)
    named_again(record, config, {"program": program, "state_type": state_type})
    program = program_of(record, config, program, True)
    called_args, called_kwargs = recorded_call(record)
    entries = journal.entries(record.run_id)
    handlers = _ResumePoint()
    log = ReplayLog({e.address: e for e in entries}, content=journal.content)
    logs.append(log)
    result = await execute(
        program,
        called_args,
        called_kwargs,
        run_id=record.run_id,
        services=Services(
            handlers=handlers, clock=VirtualClock(), redactor=redactor, interruptible=False
        ),
        state=initial_state(record, config, state_type, True),
        log=log,
    )
    if isinstance(result.error, Divergence):
        return _from_divergence(base, "diverges-before-resume", result.error)
    if result.status == "failed":
        # the program now fails before it gets to where the run stands
        why = f"the program now raises {type(result.error).__name__}: {result.error}"
        return Checked(
            run_id=base.run_id,
            program=base.program,
            status=base.status,
            verdict="diverges-before-resume",
            source=base.source,
            address=result.address,
            where="the program",
            reason=why.splitlines()[0],
        )
    if not handlers.reached:
        return Checked(base.run_id, base.program, base.status, "resumes", source=base.source)
    first = min(handlers.reached, key=lambda r: tuple(int(p) for p in r[0].split(".")))
    at = ", ".join(a for a, _ in handlers.reached)
    return Checked(
        base.run_id,
        base.program,
        base.status,
        "resumes",
        source=base.source,
        resume_at=at,
        resume_with=first[1]
        if len(handlers.reached) == 1
        else "; ".join(w for _, w in handlers.reached),
    )


@dataclass(frozen=True)
class _Stored:
    """A run to check: where it is kept, and the program it runs (None: its journal's)."""

    journal: Journal
    run_id: str
    program: Callable[..., Any] | None
    source: str
    refused: str | None = None


@dataclass
class _Programs:
    """The programs ``--program`` names, loaded once each."""

    refs: Sequence[str]
    loaded: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for ref in self.refs:
            fn = load_program(ref)
            self.loaded[program_name(fn)] = fn
            self.loaded.setdefault(ref, fn)

    def get(self, name: str) -> Callable[..., Any] | None:
        return self.loaded.get(name)


def journal_runs(journal: Journal, programs: Sequence[str] = ()) -> Iterator[_Stored]:
    """Every run of ``journal`` (only those of ``programs``, when named), in the order they
    were made."""
    named = _Programs(programs)
    for record in journal.runs():
        if programs and named.get(record.program) is None:
            continue
        yield _Stored(journal, record.run_id, named.get(record.program), _where(journal))


def check_journal(
    path: str | None,
    programs: Sequence[str] = (),
    *,
    jobs: int = 1,
    on_checked: Callable[[Checked], None] | None = None,
) -> list[Checked]:
    """Check every run of the journal file at ``path`` (None: the default journal; only the
    runs of ``programs``, when named),
    in ``jobs`` processes, each a share of the runs in the order they were made; the checks
    come back in that order (``on_checked`` is told each as its share is done)."""
    from interpreters.journal import open_journal

    journal = open_journal(path, read_only=True, create=False)
    if jobs <= 1:
        return check_runs(journal_runs(journal, programs), on_checked)
    named = _Programs(programs)  # a wrong --program is said once, here
    run_ids = [r.run_id for r in journal.runs() if not programs or named.get(r.program)]
    shares = [run_ids[i::jobs] for i in range(jobs)]
    order = {run_id: i for i, run_id in enumerate(run_ids)}
    import concurrent.futures
    import multiprocessing

    out: list[Checked] = []
    context = multiprocessing.get_context("spawn")  # nothing of this process's state is shared
    with concurrent.futures.ProcessPoolExecutor(len(shares), mp_context=context) as pool:
        futures = [pool.submit(_check_share, path, share, tuple(programs)) for share in shares]
        for future in concurrent.futures.as_completed(futures):
            for checked in future.result():
                if on_checked is not None:
                    on_checked(checked)
                out.append(checked)
    return sorted(out, key=lambda c: order[c.run_id])


def _check_share(path: str | None, run_ids: list[str], programs: tuple[str, ...]) -> list[Checked]:
    """One process's share of :func:`check_journal`."""
    from interpreters.journal import open_journal

    journal = open_journal(path, read_only=True, create=False)
    named = _Programs(programs)
    where = _where(journal)
    stored = []
    for run_id in run_ids:
        program = named.get(journal.run(run_id).program) if programs else None
        stored.append(_Stored(journal, run_id, program, where))
    return check_runs(stored)


def exported_runs(paths: Iterable[Path], programs: Sequence[str] = ()) -> Iterator[_Stored]:
    """The runs of exported files (``opdsl export``). A file names code someone else chose:
    its run is checked only against a program ``programs`` names."""
    named = _Programs(programs)
    for path in paths:
        try:
            exported = read_export(path.read_text(encoding="utf-8"), source=str(path))
        except (OSError, UnicodeDecodeError) as exc:
            raise JournalError(f"{path}: cannot be read: {exc}") from None
        journal = MemoryJournal()
        journal.put_content(exported.pieces)
        journal.create_run(exported.run)
        journal.add_entries(exported.entries)
        fn = named.get(exported.run.program)
        refused = None
        if fn is None:
            refused = (
                f"the file names the program {exported.run.program}; pass --program "
                f"{exported.run.program} to check it against that code"
            )
        yield _Stored(journal, exported.run.run_id, fn, str(path), refused)


def _where(journal: Journal) -> str:
    path = getattr(journal, "path", None)
    return str(path) if path is not None else type(journal).__name__


async def _check_stored(stored: _Stored, redactor: Redactor) -> Checked:
    if stored.refused is not None:
        record = stored.journal.run(stored.run_id)
        return Checked(
            stored.run_id,
            record.program,
            record.status,
            "error",
            source=stored.source,
            reason=stored.refused,
        )
    return await acheck_run(
        stored.journal,
        stored.run_id,
        program=stored.program,
        source=stored.source,
        redactor=redactor,
    )


async def acheck_runs(
    stored: Iterable[_Stored], on_checked: Callable[[Checked], None] | None = None
) -> list[Checked]:
    """Check each run, one after another; ``on_checked`` is told each as it is done."""
    out = []
    redactor = Redactor.from_env()  # once for every run
    for s in stored:
        checked = await _check_stored(s, redactor)
        if on_checked is not None:
            on_checked(checked)
        out.append(checked)
    return out


def check_runs(
    stored: Iterable[_Stored], on_checked: Callable[[Checked], None] | None = None
) -> list[Checked]:
    """:func:`acheck_runs` from synchronous code."""
    return blocking(lambda: acheck_runs(stored, on_checked))


VERDICTS: tuple[Verdict, ...] = ("same", "diverges", "resumes", "diverges-before-resume", "error")


def patches(checked: Sequence[Checked]) -> dict[str, dict[str, int]]:
    """For each patch name: how many runs took its old code, and how many hold its marker
    (``deprecate_patched`` is safe once the first is 0; removing the call, the second)."""
    out: dict[str, dict[str, int]] = {}
    for c in checked:
        for name in c.old_code:
            out.setdefault(name, {"old_code": 0, "marker": 0})["old_code"] += 1
        for name in c.markers:
            out.setdefault(name, {"old_code": 0, "marker": 0})["marker"] += 1
    return dict(sorted(out.items()))


def summary(checked: Sequence[Checked]) -> dict[str, int]:
    """How many runs had each verdict."""
    counts: dict[str, int] = dict.fromkeys(VERDICTS, 0)
    for c in checked:
        counts[c.verdict] += 1
    return counts
