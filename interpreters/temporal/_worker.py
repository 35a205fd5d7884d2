"""A worker: the workflow and the activities on one task queue, with the tools, models and
workspace resolved once, here (keys stay on the worker, never in a history)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from interpreters._live import AgentBackend
from interpreters.models._base import Model
from interpreters.temporal._activities import Activities
from interpreters.temporal._client import codec_of
from interpreters.temporal._store import DEFAULT_PAYLOAD_LIMIT
from interpreters.temporal._workflow import OpdslRun
from interpreters.tools._bound import ToolLike
from interpreters.tools._workspace import Workspace

__all__ = ["PASSED_THROUGH", "make_worker", "sandbox_runner"]

PASSED_THROUGH = ("op", "state", "interpreters", "returns", "anyio", "sniffio")
"""Modules the workflow sandbox shares with the worker instead of importing them again for
every run: opdsl's own (the driver is deterministic and does no I/O in a workflow) and the
pure libraries its values are made of. A program's own module is imported in the sandbox,
where a call that is not deterministic (``time.time()``, ``open``) is refused."""


def sandbox_runner(passthrough: Iterable[str] = ()) -> SandboxedWorkflowRunner:
    """Temporal's default sandbox, with opdsl's modules (and ``passthrough``) passed through."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            *PASSED_THROUGH, *passthrough
        )
    )


def make_worker(
    client: Client,
    *,
    task_queue: str,
    programs: Iterable[str],
    tools: Iterable[ToolLike] = (),
    model: Model | None = None,
    agents: Mapping[str, AgentBackend] | None = None,
    workspace: Workspace | None = None,
    heartbeat_seconds: float = 2.0,
    sticky_seconds: float = 2.0,
    passthrough: Iterable[str] = (),
) -> Worker:
    """A worker for opdsl runs on ``task_queue``. A workspace-bound program needs a task queue
    of its own per workspace: a repository is a folder on one machine.

    ``heartbeat_seconds``: an activity on a worker that died is retried elsewhere after this;
    ``sticky_seconds``: a workflow cached on a worker that died moves after this;
    ``passthrough``: more modules the sandbox shares instead of importing them again (only
    modules known to be deterministic: the sandbox's checks do not apply to them).

    The content store and the server's payload limit are the client's (:func:`connect`): a
    client made otherwise has neither, and content travels inline, under Temporal's limit.
    """
    codec = codec_of(client)
    activities = Activities(
        programs=programs,
        tools=tools,
        model=model,
        agents=agents,
        workspace=workspace,
        heartbeat_seconds=heartbeat_seconds,
        store=None if codec is None else codec.store,
        payload_limit=DEFAULT_PAYLOAD_LIMIT if codec is None else codec.payload_limit,
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[OpdslRun],
        activities=activities.all(),
        workflow_runner=sandbox_runner(passthrough),
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_seconds),
        max_heartbeat_throttle_interval=timedelta(seconds=heartbeat_seconds / 2),
        default_heartbeat_throttle_interval=timedelta(seconds=heartbeat_seconds / 2),
    )
