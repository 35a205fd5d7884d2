"""The live interpreter: handlers that do the work, and a journal that records it."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import sys
import warnings
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar, assert_never, final

from interpreters.agents._base import backends
from interpreters.agents._bridge import ToolHost
from interpreters.journal import Journal, RunRecord
from interpreters.journal._checkpoint import WorkspaceSnapshot
from interpreters.journal._seal import sealed_if_can
from interpreters.models._base import Model, calls_schema, redact_spec, resolve_model
from interpreters.models._prices import price_advice
from interpreters.models._remote import ProviderError, RemoteModel, RetryPolicy, default_model_spec
from interpreters.observe._otel import trace_sinks
from interpreters.runtime._clock import Clock, SystemClock
from interpreters.runtime._driver import RunResult, execute, new_run_id, program_name
from interpreters.runtime._events import EventBus, Sink
from interpreters.runtime._frame import Call, RunHandlers, WaitingForAnswer
from interpreters.runtime._services import Services
from interpreters.runtime._sync import blocking
from interpreters.tools._bound import PREFIX_HINT, ToolLike, ToolRegistry
from interpreters.tools._workspace import Workspace, say_once
from op import (
    Agent,
    Ask,
    Checkpoint,
    DuplicateTool,
    Emit,
    Infer,
    ModelError,
    Now,
    Patched,
    Random,
    Response,
    Sleep,
    Tool,
    ToolResult,
    TurnRecord,
    Uuid,
)
from op.effects import LeafEffect, ModelRequest
from state import CRDTModel

T = TypeVar("T")

__all__ = ["AgentBackend", "Answer", "LiveHandlers", "LiveInterpreter", "as_workspace"]


def as_workspace(workspace: str | Path | Workspace | None) -> Workspace | None:
    """A :class:`Workspace` from a path (or as given)."""
    if workspace is None or isinstance(workspace, Workspace):
        return workspace
    return Workspace(workspace)


AgentBackend = Callable[[Agent, Call], Awaitable[TurnRecord]]
Answer = Callable[[str], str | None]


@final
class LiveHandlers(RunHandlers):
    """Performs effects for real: the model, the bound tools, agents, the clock, a seeded RNG."""

    def __init__(
        self,
        *,
        model: Model | None = None,
        tools: ToolRegistry | None = None,
        agents: Mapping[str, AgentBackend] | None = None,
        answer: Answer | None = None,
        seed: int | str | None = None,
        workspace: Workspace | None = None,
        answers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(seed=seed)
        self.model = model
        #: answers to questions by the address they were asked at (a resumed waiting run)
        self.answers = dict(answers or {})
        self.workspace = workspace
        self.tools = tools or ToolRegistry()
        #: the workspace's own tools among them (a tool of the same name given is not one;
        #: an MCP server's of the same name is refused: it would pass by the workspace's guards)
        self.workspace_tools: set[str] = set()
        if workspace is not None:
            for t in (*workspace.tools(), *workspace.program_tools()):
                given = self.tools.get(t.name)
                if given is None:
                    self.tools.add(t)
                    self.workspace_tools.add(t.name)
                elif (server := given.server) is not None:
                    raise DuplicateTool(
                        f"MCP server {server!r} offers {t.name!r}, the name of a workspace tool; "
                        f"give the server a prefix of its own {PREFIX_HINT}"
                    )
        self.agents = {**backends(), **dict(agents or {})}
        self.answer = answer

    async def restore(self, snapshot: Any) -> None:
        files = WorkspaceSnapshot.from_world(snapshot)
        if files is not None and self.workspace is not None:
            self.workspace.save_before_restore(files.tree)  # the user's own work is never lost
            self.workspace.restore(files.tree)

    def replayed(self, effect: LeafEffect, result: Any) -> None:
        # a resumed run has read what it read before the crash: the workspace's guards see it
        if (
            self.workspace is not None
            and isinstance(effect, Tool)
            and effect.name in self.workspace_tools
            and isinstance(result, ToolResult)
        ):
            self.workspace.replayed(effect.name, effect.args, result)

    async def _default_model(self, request: ModelRequest, call: Call) -> Response:
        """No model was given: ``$OPDSL_MODEL``, else Ollama's ``qwen3:8b`` on this machine."""
        spec = default_model_spec()
        model = resolve_model(spec)
        assert model is not None
        if isinstance(model, RemoteModel):
            model.retry = RetryPolicy(max_retries=0)
        try:
            return await model.complete(request, call)
        except ProviderError as exc:
            if exc.status is not None:
                raise
            where = f" at {model.base_url}" if isinstance(model, RemoteModel) else ""
            shown = redact_spec(spec)
            raise ModelError(
                f"no model was given and the default, {shown}{where}, is unreachable; start it, or "
                "set OPDSL_MODEL (for example OPDSL_MODEL=openai:gpt-4.1-mini with OPENAI_API_KEY)"
            ) from None

    def unpriced(self, effect: Infer | Agent) -> str | None:
        if isinstance(effect, Agent):
            # a capability the backend declares (``reports_cost``), not known here by name
            if getattr(self.agents.get(effect.backend), "reports_cost", True):
                return None
            return f"the {effect.backend} backend reports no cost, so a usd budget cannot be kept for it"
        model = self.model
        if not isinstance(model, RemoteModel):
            return None  # a scripted or custom model: its answers say their cost, if they know it
        name = effect.model or model.model
        if model.prices.price(name, provider=model.provider, base_url=model.base_url):
            return None
        return (
            f"no price is known for model {name!r} ({model.provider}), so a usd budget cannot be kept; "
            f"{price_advice(name)}"
        )

    def _host(self, effect: Agent, served: Any, call: Call) -> ToolHost:
        """The bound tools ``agent(..., tools=[...])`` serves its agent, performed here."""
        backend = self.agents[effect.backend]
        if not getattr(backend, "serves_tools", False):
            raise ModelError(f"the agent backend {effect.backend!r} cannot be given opdsl's tools")
        if isinstance(served, str) or not all(isinstance(n, str) for n in served):
            raise ModelError(f"agent(tools=...) takes a list of tool names, not {served!r}")
        try:
            specs = self.tools.specs(list(served))
        except KeyError as exc:
            raise ModelError(str(exc.args[0]).replace("infer()", "agent()", 1)) from None
        # the agent's calls run beside its process: a blocking tool works in a thread
        inner = dataclasses.replace(call, off_loop=True)

        async def perform(name: str, arguments: Mapping[str, Any]) -> ToolResult:
            bound = self.tools.get(name)
            assert bound is not None
            return await bound.call(arguments, inner)

        return ToolHost(specs, perform)

    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        match effect:
            case Tool():
                bound = self.tools.get(effect.name)
                return (
                    self.tools.unknown(effect.name)
                    if bound is None
                    else await bound.call(effect.args, call)
                )
            case Infer():
                return await self._infer(effect, call)
            case Agent():
                return await self._agent(effect, call)
            case Checkpoint():
                return self._checkpoint(call)
            case Emit() | Now() | Random() | Uuid() | Sleep() | Patched():
                return await self.local(effect, call)
            case Ask():
                reply = self.answers.get(call.address)
                if reply is None and self.answer is not None:
                    reply = self.answer(effect.question)
                if reply is None:
                    raise WaitingForAnswer(effect.question)
                return reply
            case _:
                assert_never(effect)

    def _infer(self, effect: Infer, call: Call) -> Awaitable[Response]:
        """Ask the model, offering the tools the effect names (the model's own awaitable: no
        frame of this method's is held while the model works)."""
        try:
            specs = self.tools.specs(effect.tools)
        except KeyError as exc:
            raise ModelError(str(exc.args[0])) from None
        output = effect.output
        if output is not None and output.calls:
            output = output.model_copy(update={"json_schema": calls_schema(specs)})
        request = ModelRequest(
            messages=effect.messages,
            model=effect.model,
            tools=specs,
            params=dict(effect.params),
            output=output,
        )
        if self.model is None:
            return self._default_model(request, call)
        return self.model.complete(request, call)

    async def _agent(self, effect: Agent, call: Call) -> Any:
        """A turn of the bound agent backend (in the workspace, when there is one)."""
        backend = self.agents.get(effect.backend)
        if backend is None:
            known = ", ".join(sorted(self.agents)) or "none"
            raise ModelError(f"no agent backend {effect.backend!r} is bound (bound: {known})")
        if self.workspace is not None:
            # with a workspace, the agent works in it (a relative cwd is inside it)
            cwd = self.workspace.root / str(effect.options.get("cwd") or ".")
            effect = dataclasses.replace(effect, options={**effect.options, "cwd": str(cwd)})
        served = effect.options.get("tools")
        if served is None:
            return await backend(effect, call)
        return await backend(effect, call, self._host(effect, served, call))

    def _checkpoint(self, call: Call) -> dict[str, str] | None:
        """The world's snapshot a checkpoint journals: the workspace's tree, if it is a repo."""
        if self.workspace is None:
            return None
        if self.workspace.repo() is not None:
            tree = self.workspace.snapshot(f"{call.run_id}/{call.address}")
            return WorkspaceSnapshot(workspace=str(self.workspace.root), tree=tree).to_json()
        say_once(
            f"opdsl: warning: workspace {self.workspace.root} is not a git repository: "
            "checkpoints keep no snapshot of its files, and a fork cannot put them back"
        )
        return None


def _in_event_loop() -> bool:
    """Whether this thread is inside a running asyncio or trio loop."""
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


@final
class LiveInterpreter:
    """Runs programs for real, journaling every recorded effect.

    Example:
        >>> from op import Op, tool
        >>> def shout(text: str) -> str:
        ...     return text.upper()
        >>> def program() -> Op[str]:
        ...     r = yield from tool("shout", {"text": "hi"})
        ...     return r.output
        >>> LiveInterpreter(tools=[shout]).run_sync(program).value
        'HI'
    """

    def __init__(
        self,
        *,
        model: str | Model | None = None,
        tools: Iterable[ToolLike] = (),
        agents: Mapping[str, AgentBackend] | None = None,
        answer: Answer | None = None,
        journal: Journal | None = None,
        sinks: Iterable[Sink] = (),
        clock: Clock | None = None,
        seed: int | str | None = None,
        workspace: str | Path | Workspace | None = None,
    ) -> None:
        self.handlers = LiveHandlers(
            model=resolve_model(model),
            tools=ToolRegistry(tools),
            agents=agents,
            answer=answer,
            seed=seed,
            workspace=as_workspace(workspace),
        )
        self.journal = journal
        # with an OTLP endpoint set (and opdsl[otel] installed), every run exports its trace
        self.bus = EventBus([*sinks, *trace_sinks(model)])
        self.clock = clock or SystemClock()
        self.services = Services(
            handlers=self.handlers, clock=self.clock, bus=self.bus, journal=journal
        )

    async def arun(
        self,
        program: Callable[..., Generator[Any, Any, T]],
        /,
        *args: Any,
        state: CRDTModel | None = None,
        run_id: str | None = None,
        record: RunRecord | None = None,
        **kwargs: Any,
    ) -> RunResult[T]:
        """Run ``program(*args, **kwargs)`` to its end (or until it waits); journaled, it is
        sealed as the user's own (``journal/_seal.py``) unless ``record`` says otherwise."""
        if record is None and self.services.journal is not None:
            record = sealed_if_can(RunRecord(run_id="-", program=program_name(program)))
        return await execute(
            program,
            args,
            kwargs,
            run_id=run_id or new_run_id(),
            services=self.services,
            state=state,
            record=record,
        )

    def run(
        self,
        program: Callable[..., Generator[Any, Any, T]],
        /,
        *args: Any,
        state: CRDTModel | None = None,
        run_id: str | None = None,
        **kwargs: Any,
    ) -> RunResult[T]:
        """:meth:`arun` from synchronous code, as every interpreter's ``run`` is.

        Before 0.4.0 ``run`` was :meth:`arun`'s name. Called where an event loop runs (the
        old ``await interpreter.run(...)``), it still gives :meth:`arun`'s awaitable, with a
        ``DeprecationWarning``, until 0.5.0."""
        if _in_event_loop():
            warnings.warn(
                "await LiveInterpreter.run(...) is deprecated: await arun(...) instead "
                "(run() is synchronous, as every interpreter's; the old form goes in 0.5.0)",
                DeprecationWarning,
                stacklevel=2,
            )
            later = self.arun(program, *args, state=state, run_id=run_id, **kwargs)
            return later  # type: ignore[return-value]  # the old form, for one release
        return self.run_sync(program, *args, state=state, run_id=run_id, **kwargs)

    def run_sync(
        self,
        program: Callable[..., Generator[Any, Any, T]],
        *args: Any,
        state: CRDTModel | None = None,
        run_id: str | None = None,
        backend: str = "asyncio",
        **kwargs: Any,
    ) -> RunResult[T]:
        """:meth:`arun` from synchronous code, on ``backend`` (``asyncio`` or ``trio``)."""
        return blocking(
            functools.partial(self.arun, program, *args, state=state, run_id=run_id, **kwargs),
            backend=backend,
        )
