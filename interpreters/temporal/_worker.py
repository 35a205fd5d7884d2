"""A worker: the workflow and the activities on one task queue, with the tools, models and
workspace resolved once, here (keys stay on the worker, never in a history)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

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
from op import OpdslError

if TYPE_CHECKING:
    from interpreters.tools._mcp import MCPTools

__all__ = ["PASSED_THROUGH", "ProgramRefused", "check_in_sandbox", "make_worker", "sandbox_runner"]

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


class ProgramRefused(OpdslError):
    """A program's module does, as it is imported, what Temporal's workflow sandbox refuses:
    its runs could never start, so the worker does not."""


def check_in_sandbox(ref: str, runner: SandboxedWorkflowRunner) -> None:
    """Import the module of the program ``ref`` (``module:function``) as a run imports it, in
    the workflow sandbox, once a workflow task runs; :class:`ProgramRefused` names the line and
    what the sandbox refused. Other import errors are the worker's admission's to report.

    temporalio has no public call for this: the sandbox's own importer is used as its runner
    uses it (``workflow_sandbox._runner._Instance``), with the runtime restrictions applied."""
    import logging

    from temporalio import workflow
    from temporalio.worker.workflow_sandbox import RestrictedWorkflowAccessError
    from temporalio.worker.workflow_sandbox._importer import Importer
    from temporalio.worker.workflow_sandbox._restrictions import RestrictionContext

    module = ref.partition(":")[0]
    if not module.replace(".", "").replace("_", "").isalnum():
        return  # not a module name: admission refuses it, naming it
    context = RestrictionContext()
    context.is_runtime = True
    scope: dict[str, object] = {
        "__file__": "workflow_sandbox.py",
        "_importer": Importer(runner.restrictions, context),
    }
    # the sandbox also logs each refusal as a warning; here the error says it, once
    quiet = logging.getLogger("temporalio.worker.workflow_sandbox._restrictions")
    was_disabled, quiet.disabled = quiet.disabled, True
    workflow.unsafe._set_in_sandbox(True)
    try:
        exec(f"with _importer.applied():\n    import {module}\n", scope, scope)
    except RestrictedWorkflowAccessError as refused:
        raise ProgramRefused(
            f"program {ref} cannot run on Temporal: its module is imported inside the workflow "
            f"sandbox, which refused {_where(refused)}: {refused}; read such values in a tool "
            "or pass them as arguments (or, for a module known to be deterministic, pass it "
            "through: make_worker(passthrough=...))"
        ) from None
    except Exception:
        return
    finally:
        workflow.unsafe._set_in_sandbox(False)
        quiet.disabled = was_disabled


def _where(exc: BaseException) -> str:
    """``file, line N (the line)`` of the user's code that did what was refused: the deepest
    frame outside Python's import machinery and temporalio."""
    import traceback

    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<") and "/temporalio/" not in f.filename
    ]
    if not frames:
        return "what its module does"
    last = frames[-1]
    return f"{last.filename}, line {last.lineno} ({(last.line or '').strip()})"


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
    mcp: MCPTools | None = None,
    accept_changed_code: bool = False,
) -> Worker:
    """A worker for opdsl runs on ``task_queue``. A workspace-bound program needs a task queue
    of its own per workspace: a repository is a folder on one machine.

    ``heartbeat_seconds``: an activity on a worker that died is retried elsewhere after this;
    ``sticky_seconds``: a workflow cached on a worker that died moves after this;
    ``passthrough``: more modules the sandbox shares instead of importing them again (only
    modules known to be deterministic: the sandbox's checks do not apply to them);
    ``mcp``: MCP servers' tools (:func:`interpreters.tools.open_mcp`, open as long as the
    worker runs), performed as activities: a run records the tools the worker that admitted
    it offers, and a worker that offers them otherwise does not perform its effects as if
    nothing had changed (see ``_tools``: a change the run depends on makes it wait for a
    worker that offers them as it knew them; any other is a warning);
    ``accept_changed_code``: such a run goes on here, with this worker's tools, as a live
    resume with ``--accept-changed-code`` does.

    The content store and the server's payload limit are the client's (:func:`connect`): a
    client made otherwise has neither, and content travels inline, under Temporal's limit.

    Each program's module is imported in the workflow sandbox first: one the sandbox refuses
    is :class:`ProgramRefused`, and there is no worker (its runs would fail every task).
    """
    programs = list(programs)
    runner = sandbox_runner(passthrough)
    for ref in programs:
        check_in_sandbox(ref, runner)
    codec = codec_of(client)
    activities = Activities(
        programs=programs,
        tools=[*tools, *(mcp.tools if mcp is not None else ())],
        model=model,
        agents=agents,
        workspace=workspace,
        heartbeat_seconds=heartbeat_seconds,
        store=None if codec is None else codec.store,
        payload_limit=DEFAULT_PAYLOAD_LIMIT if codec is None else codec.payload_limit,
        mcp=None if mcp is None else mcp.recorded,
        accept_changed_code=accept_changed_code,
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[OpdslRun],
        activities=activities.all(),
        workflow_runner=runner,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_seconds),
        max_heartbeat_throttle_interval=timedelta(seconds=heartbeat_seconds / 2),
        default_heartbeat_throttle_interval=timedelta(seconds=heartbeat_seconds / 2),
    )
