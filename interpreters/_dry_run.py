"""The dry run: a program walked with no side effects, into a :class:`Plan` of what it would
do and an estimate of what it would cost.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, assert_never, final

from interpreters._live import LiveHandlers, as_workspace
from interpreters.models._base import Model, ScriptedModel, example_of, resolve_model
from interpreters.models._remote import Prices, default_model_spec
from interpreters.runtime._clock import VirtualClock
from interpreters.runtime._driver import execute, new_run_id, program_name
from interpreters.runtime._events import EventBus
from interpreters.runtime._frame import Call, RunHandlers
from interpreters.runtime._services import Services
from interpreters.runtime._sync import blocking
from interpreters.tools._bound import ToolLike, ToolRegistry
from interpreters.tools._workspace import Workspace
from op import (
    Agent,
    Ask,
    Checkpoint,
    Emit,
    Infer,
    Limit,
    Now,
    Par,
    Patched,
    Random,
    Response,
    Sleep,
    Timeout,
    ToolResult,
    TurnRecord,
    Usage,
    Uuid,
    workspace_of,
)
from op import Tool as ToolEffect
from op.effects import LeafEffect, ModelRequest
from op.events import EffectFinished, EffectStarted, Event, RunFinished
from state import CRDTModel, canonical_json

__all__ = [
    "GUESSED_OUTPUT_TOKENS",
    "DryRunHandlers",
    "DryRunInterpreter",
    "Plan",
    "PlanStep",
    "adry_run",
    "dry_run",
]


@dataclass
class PlanStep:
    address: str
    kind: str
    what: str
    note: str = ""


@dataclass
class Plan:
    """What a program would do: its effects in order, the checkpoints it passes, and an
    estimate of the usage (from the stub or script answers)."""

    program: str
    status: str
    steps: list[PlanStep] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    would_run: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    #: model calls whose cost could not be estimated (no known price)
    unpriced: int = 0
    value: Any = None
    error: str | None = None

    def collect(self, event: Event) -> None:
        """Take in what the walk tells the bus: each effect a step, how it ended, the end."""
        if isinstance(event, EffectStarted):
            self.steps.append(PlanStep(event.address, event.kind, _what(event.effect)))
            if event.kind == Checkpoint.kind and isinstance(event.effect, dict):
                self.checkpoints.append(str(event.effect.get("name")))
        elif isinstance(event, EffectFinished) and event.status != "completed":
            for step in reversed(self.steps):
                if step.address == event.address:
                    step.note = (step.note + "; " if step.note else "") + event.status
                    break
        elif isinstance(event, RunFinished):
            self.status = event.status
            self.error = event.error

    def render(self) -> str:
        lines = [f"dry run of {self.program}: {self.status}"]
        for s in self.steps:
            note = f"  [{s.note}]" if s.note else ""
            lines.append(f"  {s.address:>8}  {s.kind:<10} {s.what}{note}")
        lines.append(f"checkpoints: {', '.join(self.checkpoints) or 'none'}")
        lines.append(f"tools called: {', '.join(self.tools) or 'none'}")
        if self.would_run:
            lines.append(f"would run (side effects, skipped): {', '.join(self.would_run)}")
        cost = "no model call" if not self.usage.total_tokens else "cost unknown"
        if self.usage.cost_usd is not None:
            cost = f"about ${self.usage.cost_usd:.4f}"
        if self.unpriced and self.usage.total_tokens:
            cost += f" (no price known for {self.unpriced} call(s): cost unknown)"
        lines.append(
            f"estimated usage: {self.usage.input_tokens} input + {self.usage.output_tokens} output tokens "
            f"(output: each call's max_tokens cap, else a guess of {GUESSED_OUTPUT_TOKENS} a call); {cost}"
        )
        if self.error:
            lines.append(f"error: {self.error}")
        return "\n".join(lines)


GUESSED_OUTPUT_TOKENS = 500
"""A dry run's guess of a model call's output when neither the call nor its model has a
``max_tokens`` cap (a custom model object)."""


def _default_model() -> Model | None:
    """The model a live run given none would ask (:func:`default_model_spec`), as the dry run
    estimates it; None if its spec is wrong (the live run says so)."""
    try:
        return resolve_model(default_model_spec())
    except ValueError:
        return None


def _estimate(messages: Iterable[Any]) -> int:
    return max(1, sum(len(getattr(m, "content", "")) for m in messages) // 4)


@final
class DryRunHandlers(RunHandlers):
    """No side effects: models answer from a script or a stub, read-only tools run, every other
    tool is recorded as "would run" and answered with a placeholder."""

    def __init__(self, *, model: Model | None, tools: ToolRegistry, plan: Plan) -> None:
        super().__init__(seed=0)
        self.model = model
        self.tools = tools
        self.plan = plan
        self.live = LiveHandlers(model=model, tools=tools, seed=0)

    @functools.cached_property
    def asked(self) -> Model | None:
        """The model a live call would ask: the one given, else the default
        (``$OPDSL_MODEL``), made at the first model call (a program that asks none does not
        wait for the default's provider to load)."""
        return self.model if self.model is not None else _default_model()

    @functools.cached_property
    def prices(self) -> Prices:
        """The price table, read once, not at every stubbed call."""
        prices = getattr(self.asked, "prices", None)
        return prices if isinstance(prices, Prices) else Prices()

    def _cap(self, effect: Infer) -> int:
        """The output tokens a call is estimated at: the cap the live call would send (the
        call's ``max_tokens``, else the model's: ``?max_tokens=`` in its spec, else
        ``$OPDSL_MAX_TOKENS``, else its default), or :data:`GUESSED_OUTPUT_TOKENS` for a model
        that declares no cap."""
        asked = effect.params.get("max_tokens")
        cap_of = getattr(self.asked, "max_tokens_of", None)
        if callable(cap_of):
            try:
                cap = cap_of(ModelRequest(messages=effect.messages, params=dict(effect.params)))
            except ValueError:
                cap = None
            if isinstance(cap, int) and cap > 0:
                return cap
        return asked if isinstance(asked, int) and asked > 0 else GUESSED_OUTPUT_TOKENS

    def _stub(self, effect: Infer) -> Response:
        """An estimated answer: input tokens from the prompt, output tokens the cap the live
        call would have (:meth:`_cap`), priced where the model's price is known."""
        declared = getattr(self.asked, "model", None)
        name = effect.model or (declared if isinstance(declared, str) and declared else None)
        usage = Usage(input_tokens=_estimate(effect.messages), output_tokens=self._cap(effect))
        # priced as the live call would be: a local server's model is not an API's
        provider = getattr(self.asked, "provider", None)
        base_url = getattr(self.asked, "base_url", None)
        cost = (
            None
            if name is None
            else self.prices.cost(
                name,
                usage,
                provider=provider if isinstance(provider, str) else None,
                base_url=base_url if isinstance(base_url, str) else None,
            )
        )
        text = "(dry run: no model call)"
        if effect.output is not None and not effect.output.calls:  # a typed answer: one that fits
            text = json.dumps(example_of(effect.output.json_schema))
        return Response(
            text=text,
            usage=usage.model_copy(update={"cost_usd": cost}),
            model=name or "no model",
        )

    def _note(self, address: str, note: str) -> None:
        for step in reversed(self.plan.steps):
            if step.address == address:
                step.note = note
                return

    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        match effect:
            case Infer():
                if isinstance(self.model, ScriptedModel):  # offline by nature: it answers
                    reply = await self.live.perform(effect, call)
                    self._note(call.address, "scripted")
                else:  # a real model is never called in a dry run: its usage is estimated
                    reply = self._stub(effect)
                    self._note(call.address, f"stub, not sent to {reply.model}")
                self.plan.usage = self.plan.usage + reply.usage
                self.plan.unpriced += reply.usage.cost_usd is None
                return reply
            case ToolEffect():
                if effect.name not in self.plan.tools:
                    self.plan.tools.append(effect.name)
                bound = self.tools.get(effect.name)
                if bound is not None and bound.read_only:
                    self._note(call.address, "ran: read-only")
                    return await bound.call(effect.args)
                if bound is None:
                    return self.tools.unknown(effect.name)
                self.plan.would_run.append(f"{effect.name} at {call.address}")
                self._note(call.address, "would run")
                return ToolResult(output=f"(dry run: {effect.name} would run here)")
            case Agent():
                self._note(call.address, "would run")
                self.plan.would_run.append(f"agent {effect.backend} at {call.address}")
                return TurnRecord(backend=effect.backend, text="(dry run)")
            case Ask():
                self._note(call.address, "stub answer")
                return "(dry run answer)"
            case Checkpoint():
                return await self.live.perform(effect, call)
            case Emit() | Now() | Random() | Uuid() | Sleep() | Patched():
                return await self.local(effect, call)
            case _:
                assert_never(effect)


@final
class DryRunInterpreter:
    """Walks programs with no side effects into their :class:`Plan`: models answer from a
    script or a stub, read-only tools run, every other tool is "would run" (see
    :class:`DryRunHandlers`); time is virtual."""

    def __init__(
        self,
        *,
        model: str | Model | None = None,
        tools: Iterable[ToolLike] = (),
        workspace: str | Workspace | None = None,
    ) -> None:
        self.model = resolve_model(model)
        self.tools = list(tools)
        self.workspace = workspace

    async def arun(
        self,
        program: Callable[..., Any],
        /,
        *args: Any,
        state: CRDTModel | None = None,
        **kwargs: Any,
    ) -> Plan:
        """The plan of ``program(*args, **kwargs)``."""
        workspace = self.workspace
        if workspace is None:
            workspace = workspace_of(program, args, kwargs)
        ws = as_workspace(workspace)
        tools = [
            *self.tools,
            *(ws.tools() if ws is not None else ()),
            *(ws.program_tools() if ws is not None else ()),
        ]
        plan = Plan(program=program_name(program), status="running")
        handlers = DryRunHandlers(model=self.model, tools=ToolRegistry(tools), plan=plan)
        result = await execute(
            program,
            args,
            kwargs,
            run_id=new_run_id(),
            services=Services(
                handlers=handlers, clock=VirtualClock(), bus=EventBus([plan.collect])
            ),
            state=state,
        )
        plan.value = result._value
        return plan

    def run(
        self,
        program: Callable[..., Any],
        /,
        *args: Any,
        state: CRDTModel | None = None,
        **kwargs: Any,
    ) -> Plan:
        """:meth:`arun` from synchronous code."""
        return blocking(functools.partial(self.arun, program, *args, state=state, **kwargs))


async def adry_run(
    program: Callable[..., Any],
    *args: Any,
    model: str | Model | None = None,
    tools: Iterable[ToolLike] = (),
    state: CRDTModel | None = None,
    kwargs: Mapping[str, Any] | None = None,
    workspace: str | Workspace | None = None,
) -> Plan:
    """Walk ``program`` with no side effects and return its :class:`Plan`
    (:class:`DryRunInterpreter`)."""
    interpreter = DryRunInterpreter(model=model, tools=tools, workspace=workspace)
    return await interpreter.arun(program, *args, state=state, **dict(kwargs or {}))


def dry_run(program: Callable[..., Any], *args: Any, **kwargs: Any) -> Plan:
    """:func:`adry_run` from synchronous code.

    Example:
        >>> from op import Op, tool, checkpoint
        >>> def deploy() -> Op[str]:
        ...     yield from checkpoint("start")
        ...     r = yield from tool("push", {"branch": "main"})
        ...     return r.output
        >>> def push(branch: str) -> str:
        ...     raise RuntimeError("never called in a dry run")
        >>> plan = dry_run(deploy, tools=[push])
        >>> plan.would_run, plan.checkpoints
        (['push at 2'], ['start'])
    """

    return blocking(functools.partial(adry_run, program, *args, **kwargs))


def _what(effect: Any) -> str:
    """A step's one-line summary, from the effect as the events give it."""
    if not isinstance(effect, dict):
        return ""
    match effect.get("kind"):
        case ToolEffect.kind:
            return f"{effect.get('name')} {canonical_json(effect.get('args'))[:60]}"
        case Infer.kind:
            msgs = effect.get("messages") or []
            text = " ".join(str(msgs[-1].get("content", "")).split()) if msgs else ""
            return text[:60]
        case Checkpoint.kind | Emit.kind:
            return str(effect.get("name"))
        case Ask.kind:
            return str(effect.get("question"))[:60]
        case Limit.kind:
            budget = effect.get("budget") or {}
            return canonical_json({k: v for k, v in budget.items() if v is not None})
        case Timeout.kind:
            return f"{effect.get('seconds')}s"
        case Par.kind:
            return f"{effect.get('branches')} branches"
        case _:
            return ""
