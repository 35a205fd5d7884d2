"""The client side: start a run on Temporal, wait for it, answer it, fork it, and read it back
as an opdsl journal (:class:`TemporalJournal`), so ``show``, ``checkpoints``, ``export``,
``report`` and ``replay`` work on a Temporal run unchanged. The run id is the workflow id.

A client made by :func:`connect` carries opdsl's payload codec (``_store``): the content of runs
travels by reference, kept in the content store ``OPDSL_TEMPORAL_CONTENT`` names, which must be
the store the workers use."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, final

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from interpreters.journal._base import Entry, Journal, JournalError, RunRecord, RunStatus
from interpreters.journal._portable import Exported, read_export
from interpreters.journal._status import EntryEnd
from interpreters.runtime._driver import new_run_id, program_name
from interpreters.runtime._sync import blocking
from interpreters.temporal._carry import split, whole
from interpreters.temporal._store import (
    DEFAULT_PAYLOAD_LIMIT,
    ContentCodec,
    ContentMissing,
    ContentStore,
    content_store,
)
from interpreters.temporal._types import WORKFLOW, RunInput, RunOutcome
from op import OpdslError
from state import CRDTModel, canonical_json, to_jsonable

__all__ = [
    "TemporalError",
    "TemporalJournal",
    "Waiting",
    "answer",
    "connect",
    "export",
    "fork",
    "outcome",
    "outcome_or_waiting",
    "start_run",
]

TASK_TIMEOUT = timedelta(seconds=4)
"""How long a workflow task may take before Temporal gives it to another worker (its default
is 10 s; a shorter one is a faster failover when a worker dies holding one)."""


class TemporalError(OpdslError):
    """Temporal cannot be reached, or refused what was asked (a run that is not there, an
    answer to a run that is not waiting)."""


ContentSpec = ContentStore | str | os.PathLike[str] | None
"""Where the content of runs is kept: a store, a folder, ``"inline"`` (nowhere: it travels in
the payloads, under Temporal's payload limit), or None (``OPDSL_TEMPORAL_CONTENT``, else the
user's data folder; see ``_store.content_store``)."""


async def connect(
    target: str, namespace: str = "default", *, content: ContentSpec = None
) -> Client:
    """A client of the Temporal server at ``HOST:PORT``, with opdsl's payload codec: content
    by reference, in the store ``content`` names (every worker and client of a run must name
    the same one). The server's payload limit is read once, here."""
    try:
        store = content_store(content)
    except ContentMissing as exc:
        raise TemporalError(str(exc)) from None
    try:
        client = await Client.connect(target, namespace=namespace)
    except Exception as exc:
        raise TemporalError(f"cannot reach Temporal at {target}: {exc}") from None
    limit = await _payload_limit(client, namespace)
    config = client.config()
    config["data_converter"] = dataclasses.replace(
        config["data_converter"], payload_codec=ContentCodec(store, payload_limit=limit)
    )
    return Client(**config)


async def _payload_limit(client: Client, namespace: str) -> int:
    """The server's ``limit.blobSize.error`` for ``namespace`` (its default if it says none)."""
    try:
        described = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace)
        )
    except RPCError:
        return DEFAULT_PAYLOAD_LIMIT
    return described.namespace_info.limits.blob_size_limit_error or DEFAULT_PAYLOAD_LIMIT


def codec_of(client: Client) -> ContentCodec | None:
    """The client's opdsl codec, if :func:`connect` made it."""
    codec = client.data_converter.payload_codec
    return codec if isinstance(codec, ContentCodec) else None


async def start_run(
    client: Client,
    program: Callable[..., Any] | str,
    *,
    task_queue: str,
    args: Iterable[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    state: CRDTModel | None = None,
    seed: int | str | None = None,
    run_id: str | None = None,
    history_limit: int = 10_000,
    history_bytes: int = 10 * 1024 * 1024,
) -> WorkflowHandle[Any, RunOutcome]:
    """Start a run of ``program`` (a function, or its ``module:function`` name). It continues
    as new once its history holds ``history_limit`` events or ``history_bytes`` bytes, or
    when Temporal suggests it (at 4,096 events or 4 MiB by default)."""
    name = program if isinstance(program, str) else program_name(program)
    args_json = canonical_json({"args": list(args), "kwargs": dict(kwargs or {})})
    inp = RunInput(
        run_id=run_id or new_run_id(),
        program=name,
        args_json=args_json,
        state_json=None if state is None else state.canonical(),
        state_type=None if state is None else str(to_jsonable(type(state))),
        seed=None if seed is None else str(seed),
        history_limit=history_limit,
        history_bytes=history_bytes,
    )
    return await _start(client, inp, task_queue)


async def _start(client: Client, inp: RunInput, task_queue: str) -> WorkflowHandle[Any, RunOutcome]:
    try:
        return await client.start_workflow(
            WORKFLOW,
            inp,
            id=inp.run_id,
            task_queue=task_queue,
            result_type=RunOutcome,
            task_timeout=TASK_TIMEOUT,
            memo={
                "program": inp.program,
                "parent_run": inp.parent_run,
                "fork_checkpoint": inp.fork_checkpoint,
            },
        )
    except RPCError as exc:
        raise TemporalError(f"cannot start run {inp.run_id}: {exc}") from None


async def outcome(handle: WorkflowHandle[Any, RunOutcome]) -> RunOutcome:
    """Wait for the run to end and say how (a failed program is an outcome, not an error).
    Its ``journal`` is the whole export, its pieces of content in it."""
    try:
        return _whole(await handle.result())
    except WorkflowFailureError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == "RunFailed" and cause.details:
            data = cause.details[0]
            if isinstance(data, dict):
                return _whole(RunOutcome(**data))
        message = str(cause.message if isinstance(cause, ApplicationError) else cause)
        return RunOutcome(
            run_id=handle.id, program="?", status="failed", error=f"TemporalFailure: {message}"
        )
    except ContentMissing as exc:
        raise TemporalError(f"run {handle.id}: {exc}") from None


@dataclasses.dataclass(frozen=True)
class Waiting:
    """A run on Temporal that waits for answers: ``questions`` maps each open question's
    address to its text (the run's memo, which its workflow keeps)."""

    run_id: str
    program: str
    questions: dict[str, str]


async def outcome_or_waiting(
    handle: WorkflowHandle[Any, RunOutcome],
    *,
    answered: str | None = None,
    on_task_failure: Callable[[str], None] | None = None,
    poll: float = 0.5,
) -> RunOutcome | Waiting:
    """Wait until the run ends (its :class:`RunOutcome`, as :func:`outcome` gives it) or waits
    on a question (:class:`Waiting`; ``answered``: the address just answered, which does not
    count). While it waits, a workflow task that keeps failing (the sandbox refused what the
    program did, a worker's bug) is told to ``on_task_failure``, once per distinct error: its
    message, which otherwise only the worker's log has."""
    import asyncio
    import contextlib

    ended = asyncio.ensure_future(outcome(handle))
    told: set[str] = set()
    attempt = 0
    try:
        while True:
            done, _ = await asyncio.wait({ended}, timeout=poll)
            if done:
                return ended.result()
            try:
                described = await handle.describe()
                memo = await described.memo()
            except RPCError:
                continue  # the server is busy or restarting: asked again at the next poll
            waiting = memo.get("waiting")
            if isinstance(waiting, dict) and waiting and answered not in waiting:
                questions = {str(k): str(v) for k, v in sorted(waiting.items())}
                return Waiting(handle.id, str(memo.get("program") or "?"), questions)
            pending = described.raw_description.pending_workflow_task
            if on_task_failure is not None and pending.attempt > max(attempt, 1):
                attempt = pending.attempt
                message = await _task_failure(handle)
                if message is not None and message not in told:
                    told.add(message)
                    times = "once" if attempt == 2 else f"{attempt - 1} times"
                    on_task_failure(f"its workflow task failed {times}, and is retried: {message}")
    finally:
        if not ended.done():
            ended.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await ended


async def _task_failure(handle: WorkflowHandle[Any, RunOutcome]) -> str | None:
    """The last workflow task failure the run's history records, in one line."""
    message = None
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_task_failed_event_attributes"):
            message = event.workflow_task_failed_event_attributes.failure.message
    return None if message is None else " ".join(message.split())


def _whole(ended: RunOutcome) -> RunOutcome:
    if ended.journal is None or not ended.pieces:
        return ended
    return dataclasses.replace(ended, journal=whole(ended.journal, ended.pieces), pieces={})


async def answer(client: Client, run_id: str, text: str, at: str | None = None) -> str:
    """Answer the question run ``run_id`` waits on; returns the question's address. Refused
    (:class:`TemporalError`) unless the run waits there."""
    handle = client.get_workflow_handle(run_id)
    try:
        result = await handle.execute_update("answer", args=[at or "", text], result_type=str)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause)
        raise TemporalError(message) from None
    except RPCError as exc:
        if "already completed" in str(exc):
            raise TemporalError(
                f"run {run_id} is not waiting for an answer: it has ended"
            ) from None
        raise TemporalError(f"cannot answer run {run_id}: {exc}") from None
    return str(result)


async def export(client: Client, run_id: str) -> str:
    """The run as ``opdsl export`` writes it (JSONL): a finished run's from its history, a
    running one's from its workflow (which needs a worker up)."""
    handle = client.get_workflow_handle(run_id, result_type=RunOutcome)
    try:
        status = (await handle.describe()).status
        if status in (WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED):
            ended = await outcome(handle)
            if ended.journal is not None:
                return ended.journal
            if ended.error and "is not kept" in ended.error:
                raise TemporalError(f"run {run_id} on Temporal: {ended.error}")
        value = await handle.query("journal")
    except RPCError as exc:
        raise TemporalError(f"run {run_id} on Temporal: {exc}") from None
    except ContentMissing as exc:
        raise TemporalError(f"run {run_id} on Temporal: {exc}") from None
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        pieces = value.get("pieces")
        return whole(value["text"], pieces if isinstance(pieces, dict) else {})
    return str(value)  # a worker of an opdsl before content by reference


async def fork(
    client: Client, run_id: str, checkpoint: str, *, task_queue: str
) -> WorkflowHandle[Any, RunOutcome]:
    """A new run that replays ``run_id`` up to ``checkpoint`` (``NAME`` or ``NAME#k``) and goes on
    live from there, on Temporal; the parent is untouched."""
    from interpreters._durable import find_checkpoint, fork_prefix

    exported = read_export(await export(client, run_id), source=f"run {run_id}")
    record, entries = exported.run, exported.entries
    cp = find_checkpoint(entries, checkpoint)
    child = new_run_id()
    prefix = fork_prefix(entries, cp, child)
    child_record = record.model_copy(
        update={
            "run_id": child,
            "status": "running",
            "parent_run": run_id,
            "fork_checkpoint": checkpoint,
            "finished_at": None,
            "result_json": None,
            "error_json": None,
            "final_state_json": None,
        }
    )
    lines = [json.dumps({"run": child_record.model_dump()}, sort_keys=True)]
    lines += [json.dumps({"entry": e.as_dict()}, sort_keys=True) for e in prefix]
    config = json.loads(record.config_json or "{}")
    carried = split("\n".join(lines) + "\n")
    inp = RunInput(
        run_id=child,
        program=record.program,
        args_json=record.args_json,
        state_json=record.state_json,
        state_type=config.get("state_type"),
        seed=None if config.get("seed") is None else str(config["seed"]),
        record=carried.text,
        pieces=exported.pieces,
        restore_at=cp.address,
        parent_run=run_id,
        fork_checkpoint=checkpoint,
    )
    return await _start(client, inp, task_queue)


_STATUS: dict[WorkflowExecutionStatus, RunStatus] = {
    WorkflowExecutionStatus.RUNNING: "running",
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "cancelled",
    WorkflowExecutionStatus.TIMED_OUT: "failed",
}


@final
class TemporalJournal(Journal):
    """The runs on a Temporal server, read as an opdsl journal (read-only): each run's record,
    entries and pieces of content come from its outcome or its workflow's ``journal`` query
    (``content``: the content store the workers use, as for :func:`connect`)."""

    def __init__(
        self, target: str, namespace: str = "default", *, content: ContentSpec = None
    ) -> None:
        self.target = target
        self.namespace = namespace
        self.content_spec = content
        self._cache: dict[str, Exported] = {}

    def _read(self, run_id: str) -> Exported:
        if run_id not in self._cache:

            async def fetch() -> tuple[str, bool]:
                client = await connect(self.target, self.namespace, content=self.content_spec)
                text = await export(client, run_id)
                memo = await (await client.get_workflow_handle(run_id).describe()).memo()
                return text, bool(memo.get("waiting"))

            try:
                text, waiting = blocking(fetch)
            except TemporalError as exc:
                if "not found" in str(exc).lower():
                    raise JournalError(f"no run {run_id!r} on Temporal at {self.target}") from None
                raise JournalError(str(exc)) from None
            exported = read_export(text, source=f"run {run_id} on {self.target}")
            if waiting and exported.run.status == "running":  # at an ask, as runs() says
                record = exported.run.model_copy(update={"status": "waiting"})
                exported = dataclasses.replace(exported, run=record)
            self._cache[run_id] = exported
        return self._cache[run_id]

    def run(self, run_id: str) -> RunRecord:
        return self._read(run_id).run

    def entries(self, run_id: str) -> list[Entry]:
        return list(self._read(run_id).entries)

    def content(self, hashes: Iterable[str]) -> dict[str, str]:
        """The pieces among ``hashes`` of the runs read so far."""
        out: dict[str, str] = {}
        for h in hashes:
            for exported in self._cache.values():
                body = exported.pieces.get(h)
                if body is not None:
                    out[h] = body
                    break
        return out

    def put_content(self, pieces: Mapping[str, str]) -> None:
        raise self._read_only()

    def runs(self) -> list[RunRecord]:
        async def listed() -> list[RunRecord]:
            client = await connect(self.target, self.namespace, content=self.content_spec)
            out = []
            query = f'WorkflowType="{WORKFLOW}" AND ExecutionStatus!="ContinuedAsNew"'
            async for wf in client.list_workflows(query):
                memo = await wf.memo()
                status = _STATUS.get(wf.status or WorkflowExecutionStatus.RUNNING, "running")
                out.append(
                    RunRecord(
                        run_id=wf.id,
                        program=str(memo.get("program") or "?"),
                        status="waiting" if status == "running" and memo.get("waiting") else status,
                        created_at=wf.start_time.timestamp(),
                        finished_at=None if wf.close_time is None else wf.close_time.timestamp(),
                        parent_run=memo.get("parent_run"),
                        fork_checkpoint=memo.get("fork_checkpoint"),
                    )
                )
            return sorted(out, key=lambda r: r.created_at)

        return blocking(listed)

    def _read_only(self) -> JournalError:
        return JournalError(f"the runs on Temporal at {self.target} are read here, not written")

    def create_run(self, run: RunRecord) -> None:
        raise self._read_only()

    def reopen_run(self, run_id: str, at: float | None = None) -> None:
        raise self._read_only()

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
        raise self._read_only()

    def begin(self, run_id: str, address: str, kind: str, effect_json: str, at: float) -> None:
        raise self._read_only()

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
        raise self._read_only()

    def add_entries(self, entries: Iterable[Entry]) -> None:
        raise self._read_only()

    def delete_run(self, run_id: str) -> None:
        raise self._read_only()

    def acquire(self, run_id: str) -> None:
        raise self._read_only()

    def release(self, run_id: str) -> None:
        return None
