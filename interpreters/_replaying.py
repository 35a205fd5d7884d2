"""Replaying a run: the program runs again against its journal only, performs nothing and
writes nothing, and must end as the record did, byte for byte.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from typing import Any, final

from interpreters._loading import declared_state, initial_state, named_again, program_of
from interpreters.journal import Entry, Journal, JournalError, RunRecord, open_journal
from interpreters.journal._base import recorded_call
from interpreters.journal._seal import config_of
from interpreters.observe._otel import export_journal, trace_sinks
from interpreters.runtime._clock import VirtualClock
from interpreters.runtime._driver import RunResult, execute
from interpreters.runtime._frame import Call, Handlers
from interpreters.runtime._redact import Redactor
from interpreters.runtime._replay import Divergence, ReplayLog, divergence, nearest_checkpoint
from interpreters.runtime._services import Services
from interpreters.runtime._sync import blocking
from op.effects import LeafEffect
from state import CRDTModel, canonical_json

__all__ = ["ReplayInterpreter", "areplay", "replay"]


@final
class _Unreachable(Handlers):
    """Handlers for a replay: every effect must come from the journal."""

    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        raise Divergence(f"replay tried to perform the {effect.kind} effect at {call.address} live")


@final
class ReplayInterpreter:
    """Replays one recorded run against its journal only, and checks it ends the same, byte
    for byte.

    Nothing is written and nothing is performed. A program that no longer does what the
    journal recorded raises :class:`Divergence`, naming the address, the source line, the
    nearest earlier checkpoint and the recorded and new effects as a diff.

    ``state_type``: the type of the state the run started with (default: the one its journal
    names, imported from the file the run was recorded with, unless that file has changed:
    ``accept_changed_code``). ``redactor``: what replaces secrets, as when the run was
    recorded (default: the secrets of this process's environment; one made once serves a
    replay of many runs).
    """

    def __init__(
        self,
        run_id: str,
        *,
        db: str | Journal | None = None,
        state_type: type[CRDTModel] | None = None,
        accept_changed_code: bool = False,
        redactor: Redactor | None = None,
    ) -> None:
        self.run_id = run_id
        self.journal = open_journal(db, read_only=True)
        self.state_type = state_type
        self.accept_changed_code = accept_changed_code
        self.redactor = redactor
        #: the record the last replay was fed from, as it used it (``ReplayLog.old_code``: the
        #: patches it took the old code at)
        self.log: ReplayLog | None = None

    async def arun(
        self, program: Callable[..., Any] | None = None, /, *args: Any, **kwargs: Any
    ) -> RunResult[Any]:
        """Replay the run with ``program`` (None: the one its journal names). ``args`` and
        ``kwargs``, when given, call it with other arguments than the recorded ones (a test
        replaying its cassette): whatever they change in what it asks for is a divergence."""
        given = bool(args or kwargs)
        return await self.replayed(program, args if given else None, kwargs if given else None)

    def run(
        self, program: Callable[..., Any] | None = None, /, *args: Any, **kwargs: Any
    ) -> RunResult[Any]:
        """:meth:`arun` from synchronous code."""
        return blocking(functools.partial(self.arun, program, *args, **kwargs))

    async def replayed(
        self,
        program: Callable[..., Any] | None,
        args: tuple[Any, ...] | None,
        kwargs: Mapping[str, Any] | None,
    ) -> RunResult[Any]:
        """Replay the run; ``args``/``kwargs`` None: the recorded ones."""
        journal, run_id, accept = self.journal, self.run_id, self.accept_changed_code
        record = journal.run(run_id)
        config = config_of(record)
        state_type = self.state_type or declared_state(program, config)
        named_again(record, config, {"program": program, "state_type": state_type})
        program = program_of(record, config, program, accept)
        recorded_args, recorded_kwargs = recorded_call(record)
        entries = journal.entries(run_id)
        self.log = ReplayLog({e.address: e for e in entries}, strict=True, content=journal.content)
        result = await execute(
            program,
            recorded_args if args is None and kwargs is None else tuple(args or ()),
            recorded_kwargs if args is None and kwargs is None else dict(kwargs or {}),
            run_id=run_id,
            services=Services(
                handlers=_Unreachable(), clock=VirtualClock(), redactor=self.redactor
            ),
            state=initial_state(record, config, state_type, accept),
            log=self.log,
        )
        if isinstance(result.error, Divergence | JournalError):  # a record that cannot be read
            raise result.error
        _compare(record, result, entries)
        if os.environ.get("OPDSL_OTEL_REPLAY", "").lower() in ("1", "true") and trace_sinks():
            export_journal(record, entries)  # asked for: the replayed run's trace, from its journal
        return result


async def areplay(
    run_id: str,
    *,
    db: str | Journal | None = None,
    program: Callable[..., Any] | None = None,
    args: tuple[Any, ...] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    state_type: type[CRDTModel] | None = None,
    accept_changed_code: bool = False,
) -> RunResult[Any]:
    """Replay run ``run_id`` (:class:`ReplayInterpreter`); ``args`` and ``kwargs`` (either
    given) call the program with other arguments than the recorded ones."""
    interpreter = ReplayInterpreter(
        run_id, db=db, state_type=state_type, accept_changed_code=accept_changed_code
    )
    return await interpreter.replayed(program, args, kwargs)


def _compare(record: RunRecord, result: RunResult[Any], entries: list[Entry]) -> None:
    last = nearest_checkpoint(entries, len(entries) + max((e.seq for e in entries), default=0) + 1)

    def fail(what: str, recorded: str | None, now: str | None) -> Divergence:
        return divergence(
            program=record.program,
            address="end",
            where="the end of the run",
            checkpoint=last,
            recorded=recorded,
            now=now,
            reason=what,
        )

    if record.status in ("running", "cancelled"):
        return  # an unfinished record: the replay reached its end, which is all it can check
    if result.status != record.status:
        raise fail(
            f"the record ended {record.status}, the replay {result.status}",
            record.status,
            result.status,
        )
    if record.status == "completed":
        now = canonical_json(result._value)
        if now != record.result_json:
            raise fail("the program returned something else", record.result_json, now)
    state_now = None if result.state is None else result.state.canonical()
    if record.final_state_json is not None and not (
        result.state is not None and result.state.matches(json.loads(record.final_state_json))
    ):
        raise fail("the final state differs", record.final_state_json, state_now)


def replay(run_id: str, **kwargs: Any) -> RunResult[Any]:
    """:func:`areplay` from synchronous code."""

    return blocking(functools.partial(areplay, run_id, **kwargs))
