"""The workflow that drives any opdsl program on Temporal.

The program runs inside the workflow, through opdsl's own driver (addresses, scopes, budgets,
state replicas, the journal), on Temporal's deterministic event loop:

- ``tool``, ``infer`` and ``agent`` are activities on the workers, which hold the tools, the
  models and their keys; a tool the worker declares quick and read-only is a local activity.
  Each activity's id carries a hash of its effect, so a program that asks for a changed effect
  is a non-determinism error on replay, and each heartbeats, so a cancelled one really stops.
- ``checkpoint`` snapshots the workspace in a local activity; ``now``, ``random``, ``uuid``,
  ``sleep``, ``emit`` and state are the workflow's own (``random`` and ``uuid`` draw what a
  local run with the same run id would).
- ``patched`` and ``deprecate_patched`` are Temporal's ``workflow.patched`` and
  ``workflow.deprecate_patch`` (fed from the carried journal before a continue-as-new's
  resume point, like every effect).
- ``ask`` waits for the ``answer`` update, which is refused unless the run waits there and
  the question is not answered yet (of two answers sent at once, the second is refused).
- Deadlines (``timeout``, a budget's ``seconds``) are workflow timers that cancel once.
- The journal is kept in the workflow (the ``journal`` query exports it as ``opdsl export``
  would) and carried into a continue-as-new before the history grows past ``history_limit``
  events or ``history_bytes`` bytes, or when Temporal suggests it.
- Content travels by reference (``_store``): an activity is sent its effect packed as the
  journal packs it (an ``infer``'s messages: the head of their chain) with the pieces of content
  it has not been sent before, and a result comes back packed; the payload codec keeps every
  piece in the content store, once, and the history holds their hashes. The journal carried
  into a continue-as-new and returned at the end travels the same way. Where no content store
  is configured (``OPDSL_TEMPORAL_CONTENT=inline``), effects travel whole, and an input, a
  result or a carried journal over Temporal's payload limit ends the run with an error that
  says so, before Temporal would refuse it.
- Inside a scope (a ``par``, ``limit`` or ``timeout``) a run cannot continue as new: one whose
  history nears Temporal's hard limits there ends with an error that says which and where.

The input is checked whole before anything runs (``_input``): malformed input fails the
workflow at once with a one-line reason, never its task.

Errors: what an effect raised is thrown into the program, as locally. What the environment
raised (the sandbox refusing a call, a non-determinism) fails the workflow task, which
Temporal retries once a fixed worker is deployed; it never reaches the program. A program that
fails ends the workflow failed, with the run's outcome in the failure's details.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, NoReturn, assert_never, final

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from interpreters._loading import ProgramNotFound, as_program, as_state_type, resolve
    from interpreters.journal._base import RunRecord
    from interpreters.journal._content import Packer, lookup, unpack_result
    from interpreters.journal._memory import MemoryJournal
    from interpreters.runtime._clock import AsyncioDeadline, Clock, asyncio_deadline
    from interpreters.runtime._driver import RunResult, execute
    from interpreters.runtime._events import EventBus
    from interpreters.runtime._frame import Call, RunHandlers
    from interpreters.runtime._replay import ReplayLog, decode_error, decode_result
    from interpreters.runtime._schedule import AsyncioScheduler
    from interpreters.runtime._services import Services
    from interpreters.temporal._carry import carry
    from interpreters.temporal._input import (
        CheckedInput,
        check_arguments,
        checked_input,
        listing_problem,
        refused,
    )
    from interpreters.temporal._store import NO_STORE_HINT as _NO_STORE
    from interpreters.temporal._store import TemporalLimit
    from interpreters.temporal._store import size_text as _size
    from interpreters.temporal._tools import RunTools
    from interpreters.temporal._types import (
        ACTIVITY,
        WORKFLOW,
        Admission,
        AdmitRequest,
        Carried,
        EffectCall,
        Outcome,
        RunInput,
        RunOutcome,
        activity_id,
    )
    from op import (
        Agent,
        Ask,
        Checkpoint,
        Emit,
        Fatal,
        Infer,
        Now,
        OpdslError,
        Patched,
        Random,
        Sleep,
        Tool,
        Uuid,
    )
    from op.effects import LeafEffect
    from state import CRDTModel, canonical_json, dump_jsonable, to_jsonable

__all__ = ["OpdslRun", "TemporalClock"]

HARD_EVENTS = 51_200
"""Temporal ends a run whose history holds this many events (``limit.historyCount.error``)."""

HARD_BYTES = 50 * 1024 * 1024
"""... or this many bytes (``limit.historySize.error``)."""

NEAR = 0.9
"""Inside a scope, a run ends with a reason once its history is this near a hard limit."""


def on_loop(loop: asyncio.AbstractEventLoop | None) -> bool:
    """Whether ``loop`` (a workflow's own, taken when it started) is the one running now.

    A worker that stops without evicting the runs it holds leaves their coroutines to the
    garbage collector, which closes them (``GeneratorExit`` through every ``finally``)
    wherever it happens to run: often inside another workflow's activation. ``workflow``'s
    module functions act on the workflow whose loop runs, so a memo upserted or a clock read
    from such a ``finally`` would reach that other run (an upsert landed in another run's
    history, which then failed to replay). Code that can run while a run is closed checks
    this first."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop runs: closed outside any workflow
        return False


@final
class TemporalClock(Clock):
    """Workflow time: ``now`` and deadlines replay exactly as they first ran. Made on the
    workflow's own loop; read while the run is being closed elsewhere (see :func:`on_loop`),
    it gives the last time it read, not another workflow's."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        self._now = 0.0
        self._monotonic = 0.0

    def now(self) -> float:
        if on_loop(self._loop):
            self._now = workflow.now().timestamp()
        return self._now

    def monotonic(self) -> float:
        if on_loop(self._loop):
            self._monotonic = workflow.time()
        return self._monotonic

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # a durable timer on the workflow's loop

    @contextmanager
    def deadline(self, seconds: float) -> Iterator[AsyncioDeadline]:
        with asyncio_deadline(seconds) as deadline:
            yield deadline


class EngineFault(BaseException):
    """An error of the environment, not of the effect: it must fail the workflow task (and be
    retried), never be thrown into the program. A ``BaseException`` so no program catches it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _ContinueAsNew(BaseException):
    """The history is long: stop here and go on in a new run of the same workflow."""


class EffectFailedOnTemporal(OpdslError):
    """An activity failed in a way of Temporal's (it timed out, it ran out of attempts)."""


class _Fatal(OpdslError, Fatal):
    """A worker-side error that ends the run (an ``op.Fatal`` there)."""


def _carried_size(carried: Carried) -> int:
    return len(carried.text) + sum(len(h) + len(t) + 6 for h, t in carried.pieces.items())


def _effect_json(effect: LeafEffect) -> str:
    return dump_jsonable(to_jsonable(effect))


@final
class _Handlers(RunHandlers):
    """The leaf effects of a program inside the workflow.

    ``replayed`` is the default's, a no-op: the workspace is a worker's, which the workflow
    cannot tell, so a worker that did not perform a run's ``read_file`` (another, or one
    restarted) has not seen it read, and ``write_file`` may refuse to shrink that file until
    the run reads it again."""

    def __init__(
        self, run: OpdslRun, inp: RunInput, admission: Admission, *, by_reference: bool
    ) -> None:
        super().__init__(seed=inp.seed)
        self.run = run
        self.inp = inp
        self.quick = set(admission.quick_tools)
        self.heartbeat = timedelta(seconds=admission.heartbeat_seconds)
        #: effects this run of the workflow performed (not fed from the carried journal)
        self.performed = 0
        #: effects go packed, each piece of content once (the workers keep it in their store)
        self.by_reference = by_reference
        self.payload_limit = admission.payload_limit
        # the packing the activities read: the program's own texts (secrets are the workers'
        # to replace in what they return), and only the pieces not sent before
        self.packer = Packer(keep=False)

    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        try:
            return await self._perform(effect, call)
        except (EngineFault, _ContinueAsNew, asyncio.CancelledError):
            raise
        except workflow.NondeterminismError as exc:
            raise EngineFault(exc) from exc
        except Exception as exc:
            if _is_effect_error(exc):
                raise
            raise EngineFault(exc) from exc

    async def _perform(self, effect: LeafEffect, call: Call) -> Any:
        match effect:
            case Tool() | Infer() | Agent():
                self._maybe_continue(call.address)
                local = isinstance(effect, Tool) and effect.name in self.quick
                return await self._activity(effect, call, local=local)
            case Checkpoint():
                self._maybe_continue(call.address)
                return await self._activity(effect, call, local=True)
            case Emit() | Now() | Random() | Uuid() | Sleep():
                return await self.local(effect, call)
            case Ask():
                return await self.run.wait_for_answer(call.address, effect.question)
            case Patched():
                # Temporal's own marker, so its replayer agrees: a history that passed here
                # without it answers False
                if effect.deprecated:
                    workflow.deprecate_patch(effect.name)
                    return True
                return workflow.patched(effect.name)
            case _:
                assert_never(effect)

    def _maybe_continue(self, address: str) -> None:
        # only between effects at the top (no scope or branch is open), where a new run of the
        # workflow takes over exactly as a resumed run would
        info = workflow.info()
        if "." in address:
            self._near_the_end(address, info)
            return
        self.performed += 1
        if self.performed == 1:  # each run of the workflow does some work before it goes on
            return
        if (
            info.get_current_history_length() >= self.inp.history_limit
            or info.get_current_history_size() >= self.inp.history_bytes
            or info.is_continue_as_new_suggested()
        ):
            if not self.by_reference:
                self.run.check_carried(address, self.payload_limit)
            raise _ContinueAsNew()

    def _near_the_end(self, address: str, info: workflow.Info) -> None:
        events, size = info.get_current_history_length(), info.get_current_history_size()
        if events >= NEAR * HARD_EVENTS or size >= NEAR * HARD_BYTES:
            which = (
                f"{events:,} events (Temporal ends a run at {HARD_EVENTS:,}: "
                "limit.historyCount.error)"
                if events >= NEAR * HARD_EVENTS
                else f"{_size(size)} (Temporal ends a run at {_size(HARD_BYTES)}: "
                "limit.historySize.error)"
            )
            scope = address.split(".", 1)[0]
            raise TemporalLimit(
                f"run {self.inp.run_id}: its history holds {which} at address {address}, inside "
                f"the scope at address {scope} (a par, limit or timeout), where a run cannot "
                "continue as new: split that scope's work into smaller scopes one after "
                "another, or into runs of their own"
            )

    def _call(self, effect: LeafEffect, address: str, run_id: str) -> EffectCall:
        """The activity's input: packed, or whole (no content store: checked against the
        payload limit before it is sent)."""
        if self.by_reference:
            packed = self.packer.effect(effect)
            return EffectCall(run_id, address, packed.text, dict(packed.pieces))
        effect_json = _effect_json(effect)
        size = len(effect_json.encode()) + len(run_id) + len(address) + 64
        if size > self.payload_limit:
            more = (
                f", a conversation of {len(effect.messages)} messages"
                if isinstance(effect, Infer)
                else ""
            )
            raise TemporalLimit(
                f"run {run_id}: the {effect.kind} effect at address {address} is {_size(size)}"
                f"{more}, over Temporal's payload limit of {_size(self.payload_limit)} "
                f"(limit.blobSize.error), so no worker can be sent it: {_NO_STORE}"
            )
        return EffectCall(run_id, address, effect_json)

    async def _activity(self, effect: LeafEffect, call: Call, *, local: bool) -> Any:
        arg = self._call(effect, call.address, call.run_id)
        aid = activity_id(call.address, arg.effect_json)
        # sent and read as plain JSON objects: the SDK's conversion of a dataclass reads its
        # type hints each time, which in the sandbox costs more than the rest of the effect
        sent: dict[str, Any] = {
            "run_id": arg.run_id,
            "address": arg.address,
            "effect_json": arg.effect_json,
            "pieces": arg.pieces,
            "model_calls": call.model_calls,
        }
        tools = self.run.tools if not isinstance(effect, Checkpoint) else None
        if tools is None:
            outcome = await self._once(effect, call, sent, aid, local=local)
        else:
            # a worker that offers other MCP tools than the run goes with performs nothing
            # and says what it offers (``_tools``); the effect is sent again, under another
            # id, once the run has taken that in
            # a quick tool (a local activity) is no MCP tool, and runs where the workflow's
            # task does: it is sent none (in a history of before, where it was, what its
            # outcome says is met still, so the same commands follow)
            met = 0
            while True:
                if not local:
                    sent["tools"] = tools.sent()
                at = aid if met == 0 else f"{aid}~{met}"
                outcome = await self._once(effect, call, sent, at, local=local)
                if outcome.tools_now is None:
                    break
                before = [e for e in self.run.journal_entries() if e.address != call.address]
                tools.meet(
                    call.run_id,
                    outcome.tools_now,
                    before,
                    workflow.logger.warning,
                    accept=outcome.tools_accepted,
                )
                met += 1
            if not local:
                tools.performed()
        return self._result(effect, outcome)

    async def _once(
        self, effect: LeafEffect, call: Call, sent: dict[str, Any], aid: str, *, local: bool
    ) -> Outcome:
        """The activity that performs ``effect``, once, and what it did."""
        name = ACTIVITY[effect.kind]
        try:
            if local:
                got = await workflow.execute_local_activity(
                    name,
                    sent,
                    activity_id=aid,
                    start_to_close_timeout=timedelta(minutes=2),
                    retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
                )
            else:
                got = await workflow.execute_activity(
                    name,
                    sent,
                    activity_id=aid,
                    start_to_close_timeout=timedelta(days=1),
                    heartbeat_timeout=self.heartbeat,
                    retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
                    summary=f"{effect.kind} at {call.address}",
                )
        except ActivityError as exc:
            cause = exc.cause if exc.cause is not None else exc
            if isinstance(cause, CancelledError):
                # the workflow cancelled it (a deadline, a failing sibling): Temporal reports
                # that as the activity's error; the driver needs the cancellation itself
                raise asyncio.CancelledError() from None
            raise EffectFailedOnTemporal(
                f"the {effect.kind} effect at address {call.address} failed on Temporal: {cause}"
            ) from None
        return _outcome(got)

    def _result(self, effect: LeafEffect, outcome: Outcome) -> Any:
        """What the program gets of an activity's outcome."""
        if outcome.error_json is not None:
            err = decode_error(outcome.error_json)
            if outcome.fatal and not isinstance(err, Fatal):
                raise _Fatal(str(err))
            raise err
        text = outcome.result_json
        if outcome.pieces:
            text = unpack_result(effect.kind, text, lookup(outcome.pieces))
        return decode_result(effect, text)

    async def restore(self, snapshot: Any) -> None:
        await workflow.execute_local_activity(
            ACTIVITY["restore"],
            canonical_json(snapshot),
            start_to_close_timeout=timedelta(minutes=2),
        )


def _outcome(data: Any) -> Outcome:
    """An activity's outcome from its JSON object (fields a newer worker adds are left out)."""
    if not isinstance(data, dict):
        raise EffectFailedOnTemporal(f"an activity returned {type(data).__name__}, not an outcome")
    pieces = data.get("pieces")
    tools_now = data.get("tools_now")
    return Outcome(
        result_json=data.get("result_json"),
        error_json=data.get("error_json"),
        fatal=data.get("fatal") is True,
        pieces=pieces if isinstance(pieces, dict) else {},
        tools_now=tools_now if isinstance(tools_now, dict) else None,
        tools_accepted=data.get("tools_accepted") is True,
    )


def _is_effect_error(exc: Exception) -> bool:
    """Errors the program may see: those an activity reported, and opdsl's own (a program or
    record defect the driver turns into a failed run)."""
    module = type(exc).__module__
    return not module.startswith("temporalio")


def _load_program(ref: str) -> Callable[..., Any]:
    """The program ``ref`` names (the worker admitted it: see ``admit``). An import that fails
    here fails the workflow task, to be retried (the sandbox refusing what a worker imported);
    an object that is not a program fails the run."""
    try:
        return as_program(resolve(ref), ref)
    except ProgramNotFound as exc:
        raise ApplicationError(str(exc), non_retryable=True) from None


def _state(inp: RunInput) -> CRDTModel | None:
    if inp.state_json is None or inp.state_type is None:
        return None
    try:
        cls = as_state_type(resolve(inp.state_type), inp.state_type)
    except ProgramNotFound as exc:
        raise ApplicationError(str(exc), non_retryable=True) from None
    try:
        return cls.model_validate_json(inp.state_json)
    except ValueError as exc:  # pydantic's ValidationError among them
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise refused(f"state_json is not a {inp.state_type}: {first}") from None


def _decoded(raw: RawValue) -> CheckedInput:
    """The run's input, decoded here, not by the SDK: input it cannot decode fails the
    workflow (with the reason) instead of its task, which would be retried for ever."""
    try:
        value = workflow.payload_converter().from_payload(raw.payload)
    except Exception as exc:  # the converter says why in the error's cause
        why = exc.__cause__ or exc
        raise refused(f"a run's input cannot be decoded: {type(why).__name__}: {why}") from None
    return checked_input(value, workflow.info().workflow_id)


async def _admit(inp: RunInput) -> Admission:
    """A worker's admission of the run (its program and state type), or the run fails."""
    try:
        admission: Admission = await workflow.execute_local_activity(
            ACTIVITY["admit"],
            AdmitRequest(program=inp.program, state_type=inp.state_type),
            result_type=Admission,
            start_to_close_timeout=timedelta(seconds=30),
        )
    except ActivityError as exc:
        raise ApplicationError(
            f"run {inp.run_id}: {exc.cause or exc}", non_retryable=True
        ) from None
    return admission


def _run_tools(checked: CheckedInput, admission: Admission) -> RunTools | None:
    """The MCP tools the run goes with: those of the run it continues (a continue-as-new,
    else the carried record's, a fork's), else those the admitting worker offers; a worker
    that offers others is met at once (``_tools``). None: the admission does not say (a run
    begun by an opdsl before this, which compares nothing and replays as it ran)."""
    if admission.mcp is None:
        return None
    inp = checked.inp
    before: Any = None
    if inp.tools_json is not None:
        before = json.loads(inp.tools_json)  # checked with the input
    elif checked.carried is not None:
        before = _config(checked.carried.run.config_json).get("mcp")
        problem = None if before is None else listing_problem(before)
        if problem is not None:
            raise refused(f"the carried record's MCP tools are not a listing: {problem}")
    if before is None:
        return RunTools(admission.mcp)
    tools = RunTools(before)
    if tools.digest != RunTools(admission.mcp).digest:
        entries = [] if checked.carried is None else checked.carried.entries
        tools.meet(inp.run_id, admission.mcp, entries, workflow.logger.warning)
    return tools


def _config(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


@workflow.defn(name=WORKFLOW, sandboxed=True)
class OpdslRun:
    """Drives one opdsl run; its workflow id is the run id."""

    def __init__(self) -> None:
        self._journal = MemoryJournal()
        self._run_id = ""
        self._waiting: dict[str, str] = {}
        self._keeps_waiting_memo = False
        self._answers: dict[str, str] = {}
        self._loop: asyncio.AbstractEventLoop | None = None  # the workflow's own, once it runs
        self._limit: int | None = None  # the payload limit, when content travels inline
        #: the MCP tools the run goes with (None: admitted by an opdsl that did not say)
        self.tools: RunTools | None = None

    @workflow.run
    async def run(self, raw: RawValue) -> RunOutcome:
        self._loop = asyncio.get_running_loop()
        checked = _decoded(raw)
        inp = checked.inp
        self._run_id = inp.run_id
        admission = await _admit(inp)
        self._keeps_waiting_memo = admission.waiting_memo
        program = _load_program(inp.program)
        check_arguments(program, checked.args, checked.kwargs, inp.program)
        state = _state(inp)
        self.tools = _run_tools(checked, admission)
        record, log = self._opened(checked)
        # a run admitted by a worker with a content store sends effects packed (one begun by an
        # opdsl before, whose admission says nothing of a store, replays as it ran: whole)
        by_reference = admission.stored
        self._limit = None if by_reference else admission.payload_limit
        try:
            result = await execute(
                program,
                checked.args,
                checked.kwargs,
                run_id=inp.run_id,
                services=Services(
                    handlers=_Handlers(self, inp, admission, by_reference=by_reference),
                    clock=TemporalClock(),
                    bus=EventBus([]),
                    journal=self._journal,
                    scheduler=AsyncioScheduler(),
                    interruptible=False,
                ),
                state=state,
                log=log,
                record=record,
            )
        except EngineFault as fault:
            raise fault.cause from None
        except _ContinueAsNew:
            self._continue_as_new(inp)
        error = result.error
        if error is not None and type(error).__module__.startswith("temporalio"):
            # the sandbox refused what the program did: a defect of the program under
            # Temporal, retried once a fixed worker is deployed
            raise error
        outcome = self._outcome(inp, result)
        if result.status == "failed":
            raise ApplicationError(result.describe(), outcome, type="RunFailed", non_retryable=True)
        return outcome

    def _opened(self, checked: CheckedInput) -> tuple[RunRecord, ReplayLog | None]:
        """The run's record, and the record it is fed from: the journal carried from the
        workflow's run before (written into this one's journal), else none."""
        inp = checked.inp
        if checked.carried is None:
            config: dict[str, Any] = {"engine": "temporal", "seed": inp.seed}
            if self.tools is not None and self.tools.listing:
                config["mcp"] = self.tools.listing  # as a live run records its servers
            record = RunRecord(
                run_id=inp.run_id,
                program=inp.program,
                parent_run=inp.parent_run,
                fork_checkpoint=inp.fork_checkpoint,
                config_json=canonical_json(config),
            )
            return record, None
        record, entries = checked.carried.run, checked.carried.entries
        self._journal.put_content(checked.carried.pieces)
        self._journal.create_run(record)
        self._journal.add_entries(entries)
        log = ReplayLog(
            {e.address: e for e in entries},
            restore_at=inp.restore_at,
            content=self._journal.content,
        )
        return record, log

    def _continue_as_new(self, inp: RunInput) -> NoReturn:
        going = carry(self._journal, inp.run_id, redact=False)
        workflow.continue_as_new(
            RunInput(
                run_id=inp.run_id,
                program=inp.program,
                args_json=inp.args_json,
                state_json=inp.state_json,
                state_type=inp.state_type,
                seed=inp.seed,
                record=going.text,
                pieces=going.pieces,
                history_limit=inp.history_limit,
                history_bytes=inp.history_bytes,
                generation=inp.generation + 1,
                tools_json=None if self.tools is None else self.tools.as_json(),
            )
        )

    def journal_entries(self) -> list[Any]:
        """The run's entries so far."""
        return self._journal.entries(self._run_id)

    def _outcome(self, inp: RunInput, result: RunResult[Any]) -> RunOutcome:
        """How the run ended, with its journal (left out, saying why, where it would not fit
        in the outcome)."""
        error = result.error
        ended = self._journal.run(inp.run_id)
        carried: Carried | None = carry(self._journal, inp.run_id)
        said = None if error is None else f"{type(error).__name__}: {error}"
        if self._limit is not None and carried is not None:
            size = _carried_size(carried)
            if size > self._limit - 64 * 1024 - len(ended.result_json or ""):
                # it would not fit in the outcome: the run ends as it did, without it
                carried = None
                said = (said + "; " if said else "") + (
                    f"the run's journal ({_size(size)}) is not kept: it is over Temporal's "
                    f"payload limit of {_size(self._limit)} (limit.blobSize.error); " + _NO_STORE
                )
        return RunOutcome(
            run_id=inp.run_id,
            program=inp.program,
            status=result.status,
            result_json=ended.result_json,
            error=said,
            address=result.address,
            state_json=ended.final_state_json,
            journal=None if carried is None else carried.text,
            pieces={} if carried is None else carried.pieces,
        )

    async def wait_for_answer(self, address: str, question: str) -> str:
        self._waiting[address] = question
        self._say_waiting()
        try:
            await workflow.wait_condition(lambda: address in self._answers)
        finally:
            self._waiting.pop(address, None)
            self._say_waiting()
        return self._answers[address]

    def _say_waiting(self) -> None:
        """Keep the questions the run waits on in its memo (``waiting``: address to question),
        which listing the runs reads without a worker. A run admitted before the memo was kept
        replays without it: its recorded admission says so (a patch marker here would upsert
        Temporal's change-version search attribute too, and a replay that answers the question
        from its record met that marker where the code asked nothing). Nothing is upserted
        while the run is closed outside its own loop (see :func:`on_loop`)."""
        if self._keeps_waiting_memo and on_loop(self._loop):
            workflow.upsert_memo({"waiting": dict(self._waiting) or None})

    @workflow.update(name="answer")
    async def answer(self, address: str, text: str) -> str:
        """Answer the question the run waits on (at ``address``; empty: the only one)."""
        # checked again here: two answers sent at once can both pass the validator before
        # either handler runs, and the second must be refused, not silently replace the first
        at = address or next(iter(self._waiting), "")
        problem = self._answer_problem(at)
        if problem is not None:
            raise ApplicationError(problem, type="AnswerRefused", non_retryable=True)
        self._answers[at] = text
        return at

    def _answer_problem(self, at: str) -> str | None:
        if at in self._answers:
            return f"run {self._run_id}: the question at address {at} is answered already"
        if at not in self._waiting:
            return f"run {self._run_id} is not waiting for an answer"
        return None

    @answer.validator
    def _check_answer(self, address: str, text: str) -> None:
        if not self._waiting:
            raise ValueError(f"run {self._run_id} is not waiting for an answer")
        if address and address not in self._waiting:
            raise ValueError(
                f"run {self._run_id} is not waiting at address {address}; it waits at "
                f"{', '.join(sorted(self._waiting))}"
            )
        if not address and len(self._waiting) > 1:
            raise ValueError(
                f"run {self._run_id} waits on {len(self._waiting)} questions (at "
                f"{', '.join(sorted(self._waiting))}); say which with --at ADDRESS"
            )
        problem = self._answer_problem(address or next(iter(self._waiting)))
        if problem is not None:
            raise ValueError(problem)

    def check_carried(self, address: str, limit: int) -> None:
        """:class:`TemporalLimit` unless the journal fits in a continue-as-new's input."""
        size = _carried_size(carry(self._journal, self._run_id, redact=False))
        if size > limit - 64 * 1024:
            raise TemporalLimit(
                f"run {self._run_id}: its journal is {_size(size)} at address {address}, where "
                "its history is long enough to continue as new, and it cannot be carried into "
                f"the new run: Temporal's payload limit is {_size(limit)} "
                f"(limit.blobSize.error); {_NO_STORE}"
            )

    @workflow.query(name="journal")
    def journal(self) -> Carried:
        """The run as ``opdsl export`` writes it (JSONL), as far as it has gone, its pieces of
        content apart (see ``_carry``)."""
        return carry(self._journal, self._run_id)

    @workflow.query(name="waiting")
    def waiting(self) -> dict[str, str]:
        """The questions the run waits on, by address."""
        return dict(self._waiting)
